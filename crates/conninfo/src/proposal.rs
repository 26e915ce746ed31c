//! The 2015 multi-host proposal dialect.
//!
//! Victor Wagner's 2015 proposal for failover at the libpq level (see the shared spec, §17)
//! wrote several hosts by repeating keywords and added `readonly` and `loadbalancing`. What
//! PostgreSQL 10 shipped instead is comma lists with last-wins keywords. This module reads the
//! proposal's syntax as an opt-in dialect over the very same grammar ([`crate::parse_into`]);
//! only the handling of the parsed pairs differs. Everything else (quoting, percent-decoding,
//! aliases, unknown keywords, error texts) is libpq's.
//!
//! # Rules
//! - **Accumulation.** `host`, `hostaddr` and `port` append instead of replacing: every
//!   occurrence adds its value (itself possibly a comma list, possibly empty) to the list
//!   gathered so far, joined with `,`. This applies to repeated keywords, repeated URI query
//!   parameters, and the URI authority's host list followed by query parameters
//!   (`postgresql://a:1,b:2/?host=c&port=3` → host `a,b,c`, port `1,2,3`). The three lists are
//!   gathered independently and then paired by libpq's own rule: one port applies to every
//!   host, otherwise there must be one port per host. So `host=a host=b port=5432` → host
//!   `a,b`, port `5432`; `host=a port=1 host=b port=2` → `a,b` / `1,2`; `host=a port=1 host=b`
//!   → `a,b` / `1` (both on port 1). Lists of other lengths are left for libpq's validation to
//!   reject (`could not match 2 port numbers to 3 hosts`), rather than guessed at. An empty
//!   occurrence is an empty element (`host='' host=b` → `,b`: the default socket, then `b`),
//!   just as an empty element of a libpq list.
//! - **`readonly`** (boolean, default false): false → `target_session_attrs=read-write`
//!   (the proposal rejected servers in recovery), true → `target_session_attrs=any`.
//! - **`loadbalancing`** (boolean, default false), spelled `loadBalanceHosts` in URI query
//!   parameters as in pgjdbc (in the keyword/value form that spelling is an unknown keyword,
//!   as the proposal defined it for URIs only): true → `load_balance_hosts=random` and
//!   [`Strategy::Sequential`] (libpq's shuffle, then one host at a time); false →
//!   `load_balance_hosts=disable` and [`Strategy::Race`] when the string names more than one
//!   host, [`Strategy::Sequential`] for a single host.
//! - **Explicit libpq keywords.** `readonly` and `target_session_attrs` are two spellings of
//!   one setting, as are `loadbalancing` and `load_balance_hosts`: whichever comes later in
//!   the string wins (libpq's last-wins rule, applied across the spellings). A winning
//!   `target_session_attrs` or `load_balance_hosts` is kept exactly as written (validated
//!   later by libpq's rules); a winning `load_balance_hosts=random` gives
//!   [`Strategy::Sequential`], any other winning value behaves like `loadbalancing=false`.
//!   The defaults apply only when neither spelling appears, and are then written into the
//!   table explicitly (`read-write`, `disable`), so a proposal string is never reinterpreted
//!   by `PGTARGETSESSIONATTRS`/`PGLOADBALANCEHOSTS`.
//! - **Host count** for the strategy is libpq's: the elements of `hostaddr` if it is non-empty,
//!   else of `host` if non-empty, else one (the default host). Hosts that only defaults or a
//!   service file would add later are not known here.
//! - **Booleans** follow PostgreSQL's `parse_bool` exactly (`parse_bool_with_len` over the
//!   whole value): case-insensitive `true`, `false`, `yes`, `no`, `on`, `off`, `1`, `0`, and
//!   any non-empty prefix of the first four words (`t`, `fa`, `y`, `n`); `on`/`off` need at
//!   least two letters (`o` is ambiguous, `of` is `off`); `1` and `0` only alone. There is **no
//!   whitespace trimming**: `parse_bool` does not trim (only SQL's `boolin` does). In practice
//!   whitespace can only reach the value quoted in the keyword/value form (`readonly=' on'` is
//!   invalid); URI decoding already drops surrounding spaces. Anything else, the empty value
//!   included, is [`ParseError::InvalidBoolean`] naming the spelling used. When that happens,
//!   it is reported even if the grammar fails later in the string (it is the first error), but
//!   a grammar error earlier in the string is reported instead, as in libpq.

use crate::{is_uri, parse_into, ConnInfo, Keyword, ParseError, Sink, Strategy};

/// A connection string read in the proposal dialect: libpq's table plus the walk to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    /// The option table, with the dialect's keywords translated to libpq's.
    pub conninfo: ConnInfo,
    /// How to walk the host list.
    pub strategy: Strategy,
}

/// Parses `input` in the proposal dialect (keyword/value or URI form, as [`crate::parse`]).
pub fn parse(input: impl AsRef<[u8]>) -> Result<Proposal, ParseError> {
    let input = input.as_ref();
    let mut sink = DialectSink {
        uri: is_uri(input),
        conninfo: ConnInfo::new(),
        role: Setting::Absent,
        balance: Setting::Absent,
        error: None,
    };
    let grammar = parse_into(input, &mut sink);
    if let Some(error) = sink.error.take() {
        return Err(error);
    }
    grammar?;
    Ok(sink.finish())
}

/// PostgreSQL's `parse_bool`: a boolean in any of the server's spellings, or `None`.
pub fn parse_bool(value: &[u8]) -> Option<bool> {
    let prefix_of =
        |word: &[u8]| value.len() <= word.len() && value.eq_ignore_ascii_case(&word[..value.len()]);
    match value.first()?.to_ascii_lowercase() {
        b't' => prefix_of(b"true").then_some(true),
        b'f' => prefix_of(b"false").then_some(false),
        b'y' => prefix_of(b"yes").then_some(true),
        b'n' => prefix_of(b"no").then_some(false),
        b'o' if value.len() >= 2 => {
            if prefix_of(b"on") {
                Some(true)
            } else if prefix_of(b"off") {
                Some(false)
            } else {
                None
            }
        }
        b'1' if value.len() == 1 => Some(true),
        b'0' if value.len() == 1 => Some(false),
        _ => None,
    }
}

/// Which spelling of a two-spelling setting came last.
#[derive(Clone, Copy)]
enum Setting {
    /// Neither spelling appeared.
    Absent,
    /// libpq's keyword came last; its value is in the table.
    Libpq,
    /// The dialect's boolean came last.
    Dialect(bool),
}

/// Collects pairs with the dialect's rules; the first invalid boolean is kept, not returned,
/// because the grammar would report `Err(())` as an unknown keyword.
struct DialectSink {
    uri: bool,
    conninfo: ConnInfo,
    role: Setting,
    balance: Setting,
    error: Option<ParseError>,
}

impl Sink for DialectSink {
    fn store(&mut self, keyword: &[u8], value: &[u8]) -> Result<(), ()> {
        let spelling: &'static str = match keyword {
            b"readonly" => "readonly",
            b"loadbalancing" => "loadbalancing",
            b"loadBalanceHosts" if self.uri => "loadBalanceHosts",
            _ => {
                let kw = Keyword::from_name(keyword).ok_or(())?;
                match kw {
                    Keyword::Host | Keyword::Hostaddr | Keyword::Port => {
                        let list = match self.conninfo.take(kw) {
                            Some(mut list) => {
                                list.push(b',');
                                list.extend_from_slice(value);
                                list
                            }
                            None => value.to_vec(),
                        };
                        self.conninfo.set(kw, list);
                    }
                    Keyword::TargetSessionAttrs => {
                        self.role = Setting::Libpq;
                        self.conninfo.set(kw, value);
                    }
                    Keyword::LoadBalanceHosts => {
                        self.balance = Setting::Libpq;
                        self.conninfo.set(kw, value);
                    }
                    _ => self.conninfo.set(kw, value),
                }
                return Ok(());
            }
        };
        match parse_bool(value) {
            Some(b) if spelling == "readonly" => self.role = Setting::Dialect(b),
            Some(b) => self.balance = Setting::Dialect(b),
            None => {
                if self.error.is_none() {
                    self.error = Some(ParseError::InvalidBoolean {
                        keyword: spelling,
                        value: value.to_vec(),
                    });
                }
            }
        }
        Ok(())
    }
}

impl DialectSink {
    fn finish(mut self) -> Proposal {
        let tsa = Keyword::TargetSessionAttrs;
        match self.role {
            Setting::Libpq => {}
            Setting::Dialect(true) => self.conninfo.set(tsa, "any"),
            Setting::Dialect(false) | Setting::Absent => self.conninfo.set(tsa, "read-write"),
        }
        let lbh = Keyword::LoadBalanceHosts;
        let random = match self.balance {
            Setting::Libpq => self.conninfo.get(lbh) == Some(b"random"),
            Setting::Dialect(true) => {
                self.conninfo.set(lbh, "random");
                true
            }
            Setting::Dialect(false) | Setting::Absent => {
                self.conninfo.set(lbh, "disable");
                false
            }
        };
        let strategy = if !random && host_count(&self.conninfo) > 1 {
            Strategy::Race
        } else {
            Strategy::Sequential
        };
        Proposal {
            conninfo: self.conninfo,
            strategy,
        }
    }
}

/// libpq's host slot count: elements of `hostaddr` if non-empty, else of `host`, else one.
fn host_count(info: &ConnInfo) -> usize {
    let list = [Keyword::Hostaddr, Keyword::Host]
        .into_iter()
        .find_map(|kw| info.get(kw).filter(|v| !v.is_empty()));
    list.map_or(1, |l| l.iter().filter(|&&c| c == b',').count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The set keywords as `k="v"` pairs in table order, and the strategy.
    fn render(input: &str) -> String {
        match parse(input) {
            Ok(p) => {
                let pairs: Vec<String> = p
                    .conninfo
                    .iter()
                    .map(|(k, v)| format!("{}={:?}", k.name(), String::from_utf8_lossy(v)))
                    .collect();
                format!("{} {:?}", pairs.join(" "), p.strategy)
            }
            Err(e) => format!("ERROR: {e}"),
        }
    }

    const DEFAULTS: &str = r#"target_session_attrs="read-write" load_balance_hosts="disable""#;

    #[track_caller]
    fn check(input: &str, expected: &str) {
        assert_eq!(render(input), expected, "input {input:?}");
    }

    #[test]
    fn repeated_hosts_accumulate() {
        check(
            "host=a host=b port=5432",
            &format!(r#"host="a,b" port="5432" {DEFAULTS} Race"#),
        );
        check(
            "host=a port=1 host=b port=2",
            &format!(r#"host="a,b" port="1,2" {DEFAULTS} Race"#),
        );
        check(
            "host=a port=1 host=b",
            &format!(r#"host="a,b" port="1" {DEFAULTS} Race"#),
        );
        check(
            "host=a,b host=c hostaddr=1.1.1.1 hostaddr=2.2.2.2",
            &format!(r#"host="a,b,c" hostaddr="1.1.1.1,2.2.2.2" {DEFAULTS} Race"#),
        );
        check(
            "host='' host=b port='' port=1",
            &format!(r#"host=",b" port=",1" {DEFAULTS} Race"#),
        );
    }

    #[test]
    fn other_keywords_stay_last_wins() {
        check(
            "dbname=a dbname=b requiressl=1 sslmode=disable",
            &format!(r#"dbname="b" sslmode="disable" {DEFAULTS} Sequential"#),
        );
    }

    #[test]
    fn single_host_is_sequential() {
        check("host=a", &format!(r#"host="a" {DEFAULTS} Sequential"#));
        check("", &format!("{DEFAULTS} Sequential"));
        // hostaddr decides the count when non-empty, as in libpq.
        check(
            "host=a,b hostaddr=1.1.1.1",
            &format!(r#"host="a,b" hostaddr="1.1.1.1" {DEFAULTS} Sequential"#),
        );
        check(
            "host=a,b hostaddr=''",
            &format!(r#"host="a,b" hostaddr="" {DEFAULTS} Race"#),
        );
    }

    #[test]
    fn uri_authority_and_repeated_parameters_accumulate() {
        check(
            "postgresql://a:1,b:2/db?host=c&port=3",
            &format!(r#"dbname="db" host="a,b,c" port="1,2,3" {DEFAULTS} Race"#),
        );
        check(
            "postgresql:///db?host=a&host=b&port=5432",
            &format!(r#"dbname="db" host="a,b" port="5432" {DEFAULTS} Race"#),
        );
        check(
            "postgresql://a/?hostaddr=1.1.1.1&hostaddr=2.2.2.2",
            &format!(r#"host="a" hostaddr="1.1.1.1,2.2.2.2" {DEFAULTS} Race"#),
        );
    }

    #[test]
    fn readonly_maps_to_target_session_attrs() {
        check(
            "readonly=true",
            r#"target_session_attrs="any" load_balance_hosts="disable" Sequential"#,
        );
        check("readonly=off", &format!("{DEFAULTS} Sequential"));
        check(
            "postgresql://h?readonly=yes",
            r#"host="h" target_session_attrs="any" load_balance_hosts="disable" Sequential"#,
        );
    }

    #[test]
    fn loadbalancing_maps_to_load_balance_hosts_and_strategy() {
        check(
            "host=a,b loadbalancing=1",
            r#"host="a,b" target_session_attrs="read-write" load_balance_hosts="random" Sequential"#,
        );
        check(
            "host=a,b loadbalancing=0",
            &format!(r#"host="a,b" {DEFAULTS} Race"#),
        );
        check(
            "host=a loadbalancing=t",
            r#"host="a" target_session_attrs="read-write" load_balance_hosts="random" Sequential"#,
        );
    }

    #[test]
    fn jdbc_spelling_only_in_uris() {
        check(
            "postgresql://a,b/?loadBalanceHosts=true",
            r#"host="a,b" port="," target_session_attrs="read-write" load_balance_hosts="random" Sequential"#,
        );
        check(
            "postgresql://a,b/?loadBalanceHosts=false",
            &format!(r#"host="a,b" port="," {DEFAULTS} Race"#),
        );
        check(
            "loadBalanceHosts=true",
            r#"ERROR: invalid connection option "loadBalanceHosts""#,
        );
        check(
            "postgresql://h?loadBalanceHosts=maybe",
            r#"ERROR: invalid value for boolean option "loadBalanceHosts": "maybe""#,
        );
        check(
            "postgresql://h?loadbalancehosts=true",
            r#"ERROR: invalid URI query parameter: "loadbalancehosts""#,
        );
    }

    #[test]
    fn later_spelling_wins() {
        check(
            "readonly=true target_session_attrs=primary",
            r#"target_session_attrs="primary" load_balance_hosts="disable" Sequential"#,
        );
        check(
            "target_session_attrs=primary readonly=true",
            r#"target_session_attrs="any" load_balance_hosts="disable" Sequential"#,
        );
        check(
            "target_session_attrs=standby readonly=false",
            &format!("{DEFAULTS} Sequential"),
        );
        check(
            "host=a,b loadbalancing=true load_balance_hosts=disable",
            &format!(r#"host="a,b" {DEFAULTS} Race"#),
        );
        check(
            "host=a,b load_balance_hosts=disable loadbalancing=true",
            r#"host="a,b" target_session_attrs="read-write" load_balance_hosts="random" Sequential"#,
        );
        check(
            "host=a,b load_balance_hosts=random",
            r#"host="a,b" target_session_attrs="read-write" load_balance_hosts="random" Sequential"#,
        );
        check(
            "host=a,b load_balance_hosts=random loadbalancing=no",
            &format!(r#"host="a,b" {DEFAULTS} Race"#),
        );
        // Kept as written; libpq's later validation rejects it.
        check(
            "host=a,b load_balance_hosts=Random target_session_attrs=bogus",
            r#"host="a,b" target_session_attrs="bogus" load_balance_hosts="Random" Race"#,
        );
    }

    #[test]
    fn boolean_spellings() {
        for t in [
            "true", "TRUE", "tRu", "t", "yes", "Y", "ye", "on", "ON", "1",
        ] {
            assert_eq!(parse_bool(t.as_bytes()), Some(true), "{t}");
        }
        for f in [
            "false", "F", "fa", "fals", "no", "N", "off", "of", "OFF", "0",
        ] {
            assert_eq!(parse_bool(f.as_bytes()), Some(false), "{f}");
        }
        for bad in [
            "", "o", "O", "onn", "offf", "truee", "yess", "10", "01", "2", " true", "true ", "x",
            "nope", "\u{e9}", "\t1",
        ] {
            assert_eq!(parse_bool(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse_bool(b"\xff"), None);
    }

    #[test]
    fn invalid_booleans() {
        check(
            "readonly=o",
            r#"ERROR: invalid value for boolean option "readonly": "o""#,
        );
        check(
            "loadbalancing=",
            r#"ERROR: invalid value for boolean option "loadbalancing": """#,
        );
        check(
            "readonly=' on'",
            r#"ERROR: invalid value for boolean option "readonly": " on""#,
        );
        // URI decoding drops the surrounding spaces before the boolean is read.
        check(
            "postgresql://?readonly=%20on%20",
            r#"ERROR: invalid value for boolean option "readonly": " on ""#,
        );
        check(
            "postgresql://?readonly= on ",
            r#"target_session_attrs="any" load_balance_hosts="disable" Sequential"#,
        );
        // The first error in the string is reported, whichever kind it is.
        check(
            "readonly=maybe foo=bar",
            r#"ERROR: invalid value for boolean option "readonly": "maybe""#,
        );
        check(
            "foo=bar readonly=maybe",
            r#"ERROR: invalid connection option "foo""#,
        );
        check(
            "readonly=maybe loadbalancing=never",
            r#"ERROR: invalid value for boolean option "readonly": "maybe""#,
        );
        let err = parse("loadbalancing=2").unwrap_err();
        assert_eq!(
            err,
            ParseError::InvalidBoolean {
                keyword: "loadbalancing",
                value: b"2".to_vec()
            }
        );
    }

    #[test]
    fn libpq_errors_unchanged() {
        for input in [
            "host",
            "Host=a",
            "host='x",
            "postgresql://[::1",
            "postgresql://h/db?x=%",
            "postgresql://h/db?readonly",
            "ReadOnly=true",
            "host=a\0",
        ] {
            assert_eq!(
                parse(input).map(|p| p.conninfo),
                crate::parse(input),
                "{input:?}"
            );
        }
    }
}
