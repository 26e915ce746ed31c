//! A StartupMessage's `options`: the server's own command-line switches for one session
//! (libpq's `options`, `PGOPTIONS`; Django's `'options': '-c search_path=app'`). A server
//! splits the text into words on white space, a backslash taking the character after it as
//! it is, and reads them with the C library's `getopt` over its switch list. glibc's
//! `getopt` moves words that are not switches to the end, so switches after such a word are
//! still read, and the first such word is then refused.
//!
//! Two switches name a setting, `-c name=value` and `--name=value` (dashes in the name read
//! as underscores, names in any case), and `-e` sets `DateStyle` to `euro`. The proxy takes
//! those of the settings it tracks (see `params`), which follow the client from server to
//! server; every other switch and setting is written out again ([`server_text`]) for the
//! servers of the client's own pool to log in with, so the server applies or refuses them as
//! it would on a direct login. Text a server would refuse before it looks at a setting's name
//! is refused with the server's words.

/// The switches of PostgreSQL's `getopt` string that take an argument (`-` is `--name`).
const WITH_ARGUMENT: &[u8] = b"BCcDdfhkNprStvW-";

/// The switches that take none.
const WITHOUT_ARGUMENT: &[u8] = b"bEeFijlnOPsT";

/// How a server ends a login whose `options` (or a StartupMessage setting) it cannot read:
/// FATAL with these fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionsError {
    /// The SQLSTATE.
    pub code: &'static [u8],
    /// The server's message.
    pub message: String,
    /// The server's detail, where it gives one.
    pub detail: Option<&'static str>,
    /// The server's hint, where it gives one.
    pub hint: Option<&'static str>,
}

impl OptionsError {
    /// An error with a code and a message only.
    fn plain(code: &'static [u8], message: String) -> Self {
        OptionsError {
            code,
            message,
            detail: None,
            hint: None,
        }
    }

    /// How a server refuses a setting named `name`, empty or with `=` in it (no
    /// `-c name=value` can carry such a name to a server): as a custom name that is not one
    /// (two or more identifiers joined by dots) when it has a dot, else as a name it does
    /// not know.
    pub fn setting_name(name: &str) -> Self {
        if name.contains('.') {
            OptionsError {
                detail: Some(
                    "Custom parameter names must be two or more simple identifiers \
                     separated by dots.",
                ),
                ..Self::plain(
                    b"42602",
                    format!("invalid configuration parameter name \"{name}\""),
                )
            }
        } else {
            Self::plain(
                b"42704",
                format!("unrecognized configuration parameter \"{name}\""),
            )
        }
    }
}

/// A word the server's switch reader refuses.
fn invalid(word: &str) -> OptionsError {
    OptionsError {
        hint: Some("Try \"postgres --help\" for more information."),
        ..OptionsError::plain(
            b"42601",
            format!("invalid command-line argument for server process: {word}"),
        )
    }
}

/// The words of `text` as the server splits them.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut chars = text.chars();
    let mut open = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                // A backslash at the very end takes nothing.
                if let Some(next) = chars.next() {
                    word.push(next);
                }
                open = true;
            }
            c if is_space(c) => {
                if open {
                    out.push(std::mem::take(&mut word));
                    open = false;
                }
            }
            _ => {
                word.push(c);
                open = true;
            }
        }
    }
    if open {
        out.push(word);
    }
    out
}

/// One switch of `options`, as a server reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Switch {
    /// A setting: `-c name=value` or `--name=value` (the name's dashes read as underscores),
    /// or `-e` (`DateStyle` `euro`).
    Setting(String, String),
    /// Any other switch, with its argument where it takes one.
    Other(char, Option<String>),
}

/// The switches `options` gives, in order (a later setting of a name wins); or the error the
/// server would end the login with.
pub fn parse(text: &str) -> Result<Vec<Switch>, OptionsError> {
    let words = words(text);
    let mut found = Vec::new();
    let mut first_operand: Option<usize> = None;
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        if word == "--" {
            // The end of the switches: whatever follows is an operand.
            if i + 1 < words.len() {
                first_operand.get_or_insert(i + 1);
            }
            break;
        }
        if !word.starts_with('-') || word == "-" {
            first_operand.get_or_insert(i);
            i += 1;
            continue;
        }
        i += 1 + usize::from(switches(&words, i, &mut found)?);
    }
    match first_operand {
        Some(k) => Err(invalid(&words[k])),
        None => Ok(found),
    }
}

/// Reads the switches of word `i` into `found`; whether it took the next word as an argument.
fn switches(words: &[String], i: usize, found: &mut Vec<Switch>) -> Result<bool, OptionsError> {
    let word = &words[i];
    let bytes = word.as_bytes();
    for (j, &c) in bytes.iter().enumerate().skip(1) {
        let last = j + 1 == bytes.len();
        if WITH_ARGUMENT.contains(&c) {
            // The switch is ASCII, so the rest of the word starts on a character boundary.
            let (arg, took_next) = match word.get(j + 1..) {
                Some(rest) if !rest.is_empty() => (rest, false),
                _ => match words.get(i + 1) {
                    Some(next) => (next.as_str(), true),
                    None => return Err(invalid(word)),
                },
            };
            if c == b'c' || c == b'-' {
                let (name, value) = named(c, arg)?;
                found.push(Switch::Setting(name, value));
            } else {
                found.push(Switch::Other(char::from(c), Some(arg.to_owned())));
            }
            return Ok(took_next);
        }
        if !WITHOUT_ARGUMENT.contains(&c) {
            // getopt has not moved past a word it stopped inside, so the server names the
            // word before it (its own name before the first).
            let named = if last {
                word.as_str()
            } else {
                i.checked_sub(1)
                    .and_then(|p| words.get(p))
                    .map_or("postgres", String::as_str)
            };
            return Err(invalid(named));
        }
        found.push(if c == b'e' {
            Switch::Setting("DateStyle".to_owned(), "euro".to_owned())
        } else {
            Switch::Other(char::from(c), None)
        });
    }
    Ok(false)
}

/// `switches` written out as `options` text that a server reads back as the same switches,
/// in the same order: each setting as `-c name=value`, each other switch as itself followed
/// by its argument, every white-space character and backslash escaped by a backslash. An
/// empty argument (only a backslash at the very end of a client's text makes one) can only
/// be written at the very end, so a switch with one is written last.
pub fn server_text<'a>(switches: impl IntoIterator<Item = &'a Switch>) -> String {
    let (last, rest): (Vec<&Switch>, Vec<&Switch>) = switches
        .into_iter()
        .partition(|s| matches!(s, Switch::Other(_, Some(a)) if a.is_empty()));
    let mut out = String::new();
    for s in rest.into_iter().chain(last.into_iter().take(1)) {
        match s {
            Switch::Setting(name, value) => {
                push_word(&mut out, "-c");
                push_word(&mut out, &format!("{name}={value}"));
            }
            Switch::Other(c, arg) => {
                push_word(&mut out, &format!("-{c}"));
                if let Some(a) = arg {
                    push_word(&mut out, a);
                }
            }
        }
    }
    out
}

/// Appends `w` to `out` as one word of `options` text.
fn push_word(out: &mut String, w: &str) {
    if !out.is_empty() {
        out.push(' ');
    }
    if w.is_empty() {
        // A lone backslash at the end: `server_text` writes an empty word only there.
        out.push('\\');
    }
    for c in w.chars() {
        if c == '\\' || is_space(c) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// The characters a server splits `options` on.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

/// `-c name=value` (`flag` `c`) or `--name=value` (`flag` `-`).
fn named(flag: u8, arg: &str) -> Result<(String, String), OptionsError> {
    let Some((name, value)) = arg.split_once('=') else {
        let shown = if flag == b'c' { "-c " } else { "--" };
        return Err(OptionsError::plain(
            b"42601",
            format!("{shown}{arg} requires a value"),
        ));
    };
    if name.is_empty() {
        return Err(OptionsError::setting_name(""));
    }
    Ok((name.replace('-', "_"), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Vec<(String, String)> {
        let found = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e:?}"));
        found
            .into_iter()
            .filter_map(|s| match s {
                Switch::Setting(n, v) => Some((n, v)),
                Switch::Other(..) => None,
            })
            .collect()
    }

    fn refused(text: &str) -> (String, String) {
        let e = parse(text).expect_err(text);
        (String::from_utf8_lossy(e.code).into_owned(), e.message)
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn words_split_on_white_space_with_backslash_escapes() {
        assert_eq!(words(r"  -c   a=my\ app  "), ["-c", "a=my app"]);
        assert_eq!(words(r"a\\b x\"), [r"a\b", "x"]);
        assert_eq!(words("\t\n"), Vec::<String>::new());
        assert_eq!(words(r"\ "), [" "]);
    }

    #[test]
    fn settings_come_from_c_long_and_e_switches_as_the_server_reads_them() {
        assert_eq!(
            ok(r"-c search_path=s1 -c application_name=my\ app --DateStyle=German"),
            pairs(&[
                ("search_path", "s1"),
                ("application_name", "my app"),
                ("DateStyle", "German")
            ])
        );
        assert_eq!(ok("-csearch_path=x"), pairs(&[("search_path", "x")]));
        assert_eq!(
            ok("--default-transaction-read-only=on -c a-b=1=2"),
            pairs(&[("default_transaction_read_only", "on"), ("a_b", "1=2")])
        );
        assert_eq!(
            ok("-ec application_name=g -E -j -d 5 --"),
            pairs(&[("DateStyle", "euro"), ("application_name", "g")])
        );
        assert_eq!(ok("-c -x=1"), pairs(&[("_x", "1")]));
        assert_eq!(ok(""), pairs(&[]));
    }

    #[test]
    fn refusals_carry_the_servers_words() {
        let invalid = |w: &str| {
            (
                "42601".to_owned(),
                format!("invalid command-line argument for server process: {w}"),
            )
        };
        let requires = |w: &str| ("42601".to_owned(), format!("{w} requires a value"));
        assert_eq!(refused("-c foo"), requires("-c foo"));
        assert_eq!(refused("--foo"), requires("--foo"));
        assert_eq!(refused("-cE"), requires("-c E"));
        assert_eq!(refused("abc -c foo"), requires("-c foo"));
        assert_eq!(refused("-c"), invalid("-c"));
        assert_eq!(refused("-c application_name=1 -c"), invalid("-c"));
        assert_eq!(refused("-z -c foo"), invalid("-z"));
        assert_eq!(refused("-ez"), invalid("-ez"));
        assert_eq!(refused("-zc foo"), invalid("postgres"));
        assert_eq!(refused("x -zc"), invalid("x"));
        assert_eq!(refused("abc -c application_name=zz"), invalid("abc"));
        assert_eq!(refused("-- -c application_name=q"), invalid("-c"));
        assert_eq!(refused("abc -- def"), invalid("abc"));
        assert_eq!(refused("-"), invalid("-"));
        assert_eq!(refused("- -z"), invalid("-z"));
        assert_eq!(refused(r"x\"), invalid("x"));
        let unnamed = (
            "42704".to_owned(),
            "unrecognized configuration parameter \"\"".to_owned(),
        );
        assert_eq!(refused("-c =x"), unnamed);
        assert_eq!(refused("--=x"), unnamed);
        let hint = parse("-z").expect_err("-z").hint;
        assert_eq!(hint, Some("Try \"postgres --help\" for more information."));
    }

    #[test]
    fn other_switches_are_kept_with_their_arguments() {
        let other = |c: char, a: Option<&str>| Switch::Other(c, a.map(str::to_owned));
        assert_eq!(
            parse("-ec application_name=g -E -j -d 5 -S1MB -fs --").unwrap(),
            [
                Switch::Setting("DateStyle".into(), "euro".into()),
                Switch::Setting("application_name".into(), "g".into()),
                other('E', None),
                other('j', None),
                other('d', Some("5")),
                other('S', Some("1MB")),
                other('f', Some("s")),
            ]
        );
        assert_eq!(parse(r"-B \").unwrap(), [other('B', Some(""))]);
    }

    #[test]
    fn server_text_is_read_back_as_the_same_switches() {
        let texts = [
            r"-c statement_timeout=5s --work-mem=1MB -d 5 -E",
            r"-c app.note=a\ b\\c -c x.y=\	z -fs",
            r"-P -c a=b -B \",
            r"-Wx -S 1MB -c lock_timeout=1",
            "",
        ];
        for text in texts {
            let switches = parse(text).unwrap();
            let written = server_text(&switches);
            assert_eq!(
                parse(&written).unwrap(),
                switches,
                "{text:?} as {written:?}"
            );
        }
        let s = [Switch::Setting("a.b".into(), "x y\\z".into())];
        assert_eq!(server_text(&s), r"-c a.b=x\ y\\z");
        // A StartupMessage's settings come after `options`; an empty argument stays last.
        let s = [
            Switch::Other('d', Some(String::new())),
            Switch::Setting("a".into(), "b".into()),
        ];
        let written = server_text(&s);
        assert_eq!(written, r"-c a=b -d \");
        assert_eq!(parse(&written).unwrap(), [s[1].clone(), s[0].clone()]);
    }

    proptest::proptest! {
        #[test]
        fn any_text_read_is_written_back_to_the_same_switches(text in r"[-a-cEdSj=.\\ \t]{0,40}") {
            if let Ok(switches) = parse(&text) {
                let written = server_text(&switches);
                proptest::prop_assert_eq!(parse(&written).unwrap(), switches);
            }
        }
    }
}
