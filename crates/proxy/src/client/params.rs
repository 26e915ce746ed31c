//! The session settings that follow a client from server to server in transaction mode:
//! what the client should see (from its StartupMessage and from every ParameterStatus its
//! servers sent it), compared with what a server has, turned into the `SET`s that align them.
//!
//! Besides the six settings every supported server reports, which a client carries from its
//! welcome on, four more are tracked where the server reports them: `search_path`
//! (PostgreSQL 18 reports it; 17 does not, and there it is neither compared nor set, nor
//! shown to a client that asked for it at startup), `default_transaction_read_only`
//! (reported since PostgreSQL 14), `session_authorization` (always reported) and
//! `scram_iterations` (since 16). A client carries these only once it set them (at startup
//! or by its own `SET`); until then each server gets back its own login value, so one
//! client's change never reaches the next client of that server (a `SET SESSION
//! AUTHORIZATION` would run the next client's queries as another role), and a value one
//! server is configured with (a standby's read-only default) never follows a client to
//! another. `role` is not reported, so a session-level `SET ROLE` is not followed.

use std::collections::BTreeMap;

use crate::pool::ServerId;

/// The reported settings a client's view is kept for, with PostgreSQL's spelling: the first
/// [`CARRIED`] from the welcome on, the others as the module says.
pub const TRACKED: [&str; SLOTS] = [
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "IntervalStyle",
    "standard_conforming_strings",
    "application_name",
    "search_path",
    "default_transaction_read_only",
    "session_authorization",
    "scram_iterations",
];

/// How many settings are tracked.
const SLOTS: usize = 10;

/// How many of [`TRACKED`] a client carries from its welcome on.
pub const CARRIED: usize = 6;

/// `search_path`'s slot (set by `set_config`, being a list).
const SEARCH_PATH: usize = 6;

/// `client_encoding`'s slot (set in a query string of its own, first).
const ENCODING: usize = 0;

/// `DateStyle`'s slot (a value may name half of one).
const DATE_STYLE: usize = 1;

/// PostgreSQL's spelling of a tracked name in any case (GUC names are case-insensitive).
pub fn tracked(name: &str) -> Option<&'static str> {
    TRACKED
        .iter()
        .copied()
        .find(|t| t.eq_ignore_ascii_case(name))
}

/// A tracked name a StartupMessage sets, in PostgreSQL's spelling: any but
/// `session_authorization`, which a direct login sets to the role that logged in whatever
/// the packet says (PostgreSQL 18 shows `postgres` to a packet asking for another role).
pub fn startup_setting(name: &str) -> Option<&'static str> {
    tracked(name).filter(|t| *t != "session_authorization")
}

/// A startup `application_name` as PostgreSQL 16 and later keep it: each byte outside
/// printable ASCII (32 to 126) written `\xHH`, in lower case. A server cleans the packet's
/// raw bytes so; done here before the value becomes text, a value that is not UTF-8 (a
/// LATIN1 `caf\xe9`) reaches the server's `SET` and the welcome as a direct login shows it,
/// where a lossy reading would have made `caf\xef\xbf\xbd` of it.
pub fn clean_application_name(raw: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(raw.len());
    for &b in raw {
        if (32..=126).contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// `TRACKED`'s indices in the order the `SET`s come out: `client_encoding` first (see
/// [`alignment_queries`]), then the others in the order of the names' bytes (as a map of the
/// names would list them).
const ORDER: [usize; SLOTS] = [0, 1, 3, 2, 5, 7, 9, 6, 8, 4];

/// The slot of a tracked name in PostgreSQL's spelling (servers report them so).
fn slot(name: &str) -> Option<usize> {
    TRACKED.iter().position(|t| *t == name)
}

/// Settings by name, with the tracked ones also kept in fixed slots: a transaction's
/// alignment compares ten values instead of looking names up in two maps. (The slots are
/// boxed: a lent server's record moves between the pools and its client every transaction.)
/// Equality is by the current values; the count of changes to the tracked values and the
/// values a server logged in with are history.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    all: BTreeMap<String, String>,
    /// The tracked values as [`Settings::insert`] set them: for a server, what its login
    /// reported, which is what `DISCARD ALL` returns it to and what a direct connection is
    /// shown, whatever an earlier client `SET` since ([`Settings::report`]).
    made_with: Box<[Option<String>; SLOTS]>,
    tracked: Box<[Option<String>; SLOTS]>,
    hot_standby: Option<bool>,
    /// How many times a tracked value changed: a client that found this server aligned
    /// with it knows it still is while the count stands ([`Verified`]).
    changes: u64,
}

impl PartialEq for Settings {
    fn eq(&self, other: &Self) -> bool {
        self.all == other.all
            && self.tracked == other.tracked
            && self.hot_standby == other.hot_standby
    }
}

impl Eq for Settings {}

impl Settings {
    /// No settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` to `value` as a server's login (or its `DISCARD ALL`) reported it, or as a
    /// client asked for it, returning the value it replaces.
    pub fn insert(&mut self, name: String, value: String) -> Option<String> {
        if let Some(i) = slot(&name) {
            self.made_with[i] = Some(value.clone());
        }
        self.report(name, value)
    }

    /// Sets `name` to `value` as a lent server reported it while a client used it (after that
    /// client's `SET`, or a promotion), returning the value it replaces: unlike
    /// [`Settings::insert`], what a new client is shown stays as it was.
    pub fn report(&mut self, name: String, value: String) -> Option<String> {
        if let Some(i) = slot(&name) {
            if self.tracked[i].as_deref() != Some(value.as_str()) {
                self.changes += 1;
            }
            self.tracked[i] = Some(value.clone());
        } else if name == "in_hot_standby" {
            self.hot_standby = Some(value == "on");
        }
        self.all.insert(name, value)
    }

    /// Drops `name` (a client's startup `search_path` where the server does not report it,
    /// so it is neither shown nor set).
    pub fn forget(&mut self, name: &str) {
        if let Some(i) = slot(name) {
            if self.tracked[i].take().is_some() {
                self.changes += 1;
            }
            self.made_with[i] = None;
        }
        self.all.remove(name);
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&String> {
        self.all.get(name)
    }

    /// The value of a tracked setting (one of [`TRACKED`]), read from its slot.
    pub fn tracked(&self, name: &str) -> Option<&String> {
        slot(name).and_then(|i| self.tracked[i].as_ref())
    }

    /// The value of a tracked setting as [`Settings::insert`] last set it: for a server, what
    /// its login reported.
    pub fn login_value(&self, name: &str) -> Option<&String> {
        slot(name).and_then(|i| self.made_with[i].as_ref())
    }

    /// Whether `in_hot_standby` says `on`, when it was reported.
    pub fn in_hot_standby(&self) -> Option<bool> {
        self.hot_standby
    }

    /// What a new client is shown of a server with these settings: the tracked ones as the
    /// server reported them at login, not as an earlier client's `SET` left them (each client
    /// gets its own values of those by alignment, so a direct connection's defaults are what
    /// it starts from), the others as the server reports them now (`in_hot_standby` after a
    /// promotion).
    pub fn shown_to_new_client(&self) -> Settings {
        let untracked = self.all.iter().filter(|(n, _)| slot(n).is_none());
        let untracked = untracked.map(|(n, v)| (n.as_str(), v.as_str()));
        let tracked = TRACKED.iter().zip(self.made_with.iter());
        let tracked = tracked.filter_map(|(n, v)| Some((*n, v.as_deref()?)));
        untracked.chain(tracked).collect()
    }

    /// The same values with no count of changes (a planted bug's view of a server).
    #[cfg(feature = "planted-bugs")]
    pub(super) fn without_history(&self) -> Settings {
        Settings {
            changes: 0,
            ..self.clone()
        }
    }

    /// Every setting, in the order of the names' bytes.
    pub fn iter(&self) -> std::collections::btree_map::Iter<'_, String, String> {
        self.all.iter()
    }

    /// How many settings there are.
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }
}

impl<N: Into<String>, V: Into<String>> FromIterator<(N, V)> for Settings {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let mut settings = Settings::new();
        for (name, value) in iter {
            settings.insert(name.into(), value.into());
        }
        settings
    }
}

impl<'a> IntoIterator for &'a Settings {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;
    fn into_iter(self) -> Self::IntoIter {
        self.all.iter()
    }
}

/// Most servers a client remembers as aligned with it before it starts over.
const VERIFIED_MAX: usize = 64;

/// The servers a client found aligned with what it wants (by [`alignment`]), each with the
/// count of its settings' changes then, for the count of the client's own changes then:
/// while neither count moves, the server is still aligned and the comparisons can be
/// skipped. Server ids are never reused, and a server's record keeps its count for its life.
#[derive(Debug, Default)]
pub(super) struct Verified {
    wanted: u64,
    servers: Vec<(ServerId, u64)>,
}

impl Verified {
    /// Whether `server`, whose settings are `settings`, was found aligned with `wanted` as
    /// both are now.
    pub(super) fn holds(
        &mut self,
        wanted: &Settings,
        server: ServerId,
        settings: &Settings,
    ) -> bool {
        if self.wanted != wanted.changes {
            self.wanted = wanted.changes;
            self.servers.clear();
            return false;
        }
        self.servers.contains(&(server, settings.changes))
    }

    /// `server` was found aligned with what the client wants now.
    pub(super) fn record(&mut self, server: ServerId, settings: &Settings) {
        if self.servers.len() >= VERIFIED_MAX {
            self.servers.clear();
        }
        self.servers.push((server, settings.changes));
    }
}

/// One `SET` per tracked setting the client wants and the server has otherwise, as one
/// simple-query string (`None` when they agree): [`alignment_queries`] joined.
pub fn alignment(wanted: &Settings, server: &Settings) -> Option<String> {
    let sql = alignment_queries(wanted, server).concat();
    (!sql.is_empty()).then_some(sql)
}

/// The alignment as the server must be sent it: no query string when the settings agree,
/// else one, or two when `client_encoding` changes. A server reads a whole query string in
/// the client encoding it has when the string arrives, and the other values are in the
/// client's own encoding (a schema in `search_path` may be any text), so the encoding's
/// `SET` goes in a string of its own, first. Only the tracked settings are compared; those
/// past [`CARRIED`] only on a server that reports them, and where the client never set one,
/// against the server's own login value. `search_path` is set with `set_config`, whose value
/// is read as the list it is (`SET search_path TO '"$user", public'` would name one schema);
/// its row is the proxy's, as every reply to the alignment is.
pub fn alignment_queries(wanted: &Settings, server: &Settings) -> Vec<String> {
    queries(wanted, server, false)
}

/// [`alignment_queries`] for a client's welcome, whose wanted values are its startup ones: a
/// `DateStyle` there may name only half of one (pgJDBC sends `ISO`, `-e` asks for `euro`),
/// which a server puts over its own login value. So on a server another client left with
/// another `DateStyle` the login value is set back first; over `SQL, DMY` a client asking
/// for `ISO` would get `ISO, DMY` and read `01/02/2024` as the first of February.
pub fn welcome_alignment_queries(wanted: &Settings, server: &Settings) -> Vec<String> {
    queries(wanted, server, true)
}

fn queries(wanted: &Settings, server: &Settings, welcome: bool) -> Vec<String> {
    let mut queries = Vec::new();
    let mut sql = String::new();
    for i in ORDER {
        let extra = i >= CARRIED;
        let value = match &wanted.tracked[i] {
            Some(v) => v,
            None if extra => match &server.made_with[i] {
                Some(v) => v,
                None => continue,
            },
            None => continue,
        };
        let theirs = server.tracked[i].as_ref();
        let login = server.made_with[i].as_ref();
        if welcome && i == DATE_STYLE && theirs != login && login != Some(value) {
            if let Some(login) = login {
                push_set(&mut sql, i, login);
            }
        } else if theirs == Some(value) || (extra && theirs.is_none()) {
            continue;
        }
        if i == SEARCH_PATH {
            sql.push_str("SELECT pg_catalog.set_config('search_path', ");
            push_literal(&mut sql, value);
            sql.push_str(", false);");
            continue;
        }
        push_set(&mut sql, i, value);
        if i == ENCODING {
            queries.push(std::mem::take(&mut sql));
        }
    }
    if !sql.is_empty() {
        queries.push(sql);
    }
    queries
}

/// `SET name TO 'value';` for slot `i`.
fn push_set(sql: &mut String, i: usize, value: &str) {
    sql.push_str("SET ");
    sql.push_str(TRACKED[i]);
    sql.push_str(" TO ");
    push_literal(sql, value);
    sql.push(';');
}

/// A string literal read the same whatever the server's `standard_conforming_strings`: a
/// client may have left it `off` on the server, where a backslash in a plain literal starts
/// an escape, so a value with one is written as an escape string (`E'…'`, backslashes
/// doubled); quotes double in both forms.
fn push_literal(sql: &mut String, value: &str) {
    let escape = value.contains('\\');
    if escape {
        sql.push('E');
    }
    sql.push('\'');
    for c in value.chars() {
        if c == '\'' || (escape && c == '\\') {
            sql.push(c);
        }
        sql.push(c);
    }
    sql.push('\'');
}

/// Reads a ParameterStatus body: name and value.
pub fn parameter_status(body: &[u8]) -> Option<(String, String)> {
    let mut parts = body.split(|&b| b == 0);
    let name = std::str::from_utf8(parts.next()?).ok()?;
    let value = std::str::from_utf8(parts.next()?).ok()?;
    Some((name.to_owned(), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// What PostgreSQL 18 showed for these startup values, direct (session 35).
    #[test]
    fn an_application_name_is_cleaned_as_a_server_cleans_it() {
        let cases: [(&[u8], &str); 4] = [
            (b"caf\xe9", "caf\\xe9"),
            (b"caf\xc3\xa9", "caf\\xc3\\xa9"),
            (b"a\x01b\x7f~ z", "a\\x01b\\x7f~ z"),
            (b"psql", "psql"),
        ];
        for (raw, shown) in cases {
            assert_eq!(clean_application_name(raw), shown, "{raw:?}");
        }
        // Plain ASCII, so its SET reads the same in any client encoding.
        let sql = alignment(
            &settings(&[("application_name", &clean_application_name(b"caf\xe9"))]),
            &settings(&[("application_name", "")]),
        );
        assert_eq!(
            sql.as_deref(),
            Some("SET application_name TO E'caf\\\\xe9';")
        );
    }

    #[test]
    fn only_differences_are_set_and_quotes_double() {
        let wanted = settings(&[("TimeZone", "Europe/Paris"), ("application_name", "o'k")]);
        let server = settings(&[("TimeZone", "UTC"), ("application_name", "o'k")]);
        assert_eq!(
            alignment(&wanted, &server).as_deref(),
            Some("SET TimeZone TO 'Europe/Paris';")
        );
        let server = settings(&[("TimeZone", "Europe/Paris")]);
        assert_eq!(
            alignment(&wanted, &server).as_deref(),
            Some("SET application_name TO 'o''k';")
        );
        assert_eq!(alignment(&wanted, &wanted), None);
    }

    #[test]
    fn a_welcome_sets_a_left_date_style_back_before_the_clients_half_of_one() {
        let mut server = settings(&[("DateStyle", "ISO, MDY")]);
        let wanted = settings(&[("DateStyle", "ISO")]);
        assert_eq!(
            welcome_alignment_queries(&wanted, &server),
            ["SET DateStyle TO 'ISO';"],
            "over the login value, the client's value alone"
        );
        server.report("DateStyle".into(), "SQL, DMY".into());
        assert_eq!(
            welcome_alignment_queries(&wanted, &server),
            ["SET DateStyle TO 'ISO, MDY';SET DateStyle TO 'ISO';"]
        );
        assert_eq!(
            alignment_queries(&wanted, &server),
            ["SET DateStyle TO 'ISO';"],
            "later transactions compare whole values, as the server spells them"
        );
        let login = settings(&[("DateStyle", "ISO, MDY")]);
        assert_eq!(
            welcome_alignment_queries(&login, &server),
            ["SET DateStyle TO 'ISO, MDY';"],
            "a client asking for the login value needs one SET"
        );
    }

    #[test]
    fn another_clients_session_authorization_is_undone_and_the_clients_own_carried() {
        let mut server = settings(&[
            ("session_authorization", "postgres"),
            ("scram_iterations", "4096"),
        ]);
        server.report("session_authorization".into(), "bob".into());
        server.report("scram_iterations".into(), "8192".into());
        assert_eq!(
            alignment(&Settings::new(), &server).as_deref(),
            Some("SET scram_iterations TO '4096';SET session_authorization TO 'postgres';")
        );
        assert_eq!(startup_setting("Session_Authorization"), None);
        assert_eq!(
            startup_setting("scram_iterations"),
            Some("scram_iterations")
        );
        let wanted = settings(&[("session_authorization", "bob")]);
        assert_eq!(
            alignment(&wanted, &settings(&[("session_authorization", "postgres")])).as_deref(),
            Some("SET session_authorization TO 'bob';")
        );
        assert_eq!(
            alignment(&wanted, &Settings::new()),
            None,
            "a server that does not report it is not asked"
        );
    }

    #[test]
    fn an_extra_setting_the_client_never_set_goes_back_to_the_servers_login_value() {
        let mut server = settings(&[("default_transaction_read_only", "off")]);
        server.report("default_transaction_read_only".into(), "on".into());
        assert_eq!(
            alignment(&Settings::new(), &server).as_deref(),
            Some("SET default_transaction_read_only TO 'off';")
        );
        let wanted = settings(&[("default_transaction_read_only", "on")]);
        assert_eq!(
            alignment(&wanted, &server),
            None,
            "a client that set it carries it"
        );
        let mut zoned = settings(&[("TimeZone", "UTC")]);
        zoned.report("TimeZone".into(), "Asia/Tokyo".into());
        assert_eq!(
            alignment(&Settings::new(), &zoned),
            None,
            "the six follow the welcome"
        );
    }

    #[test]
    fn search_path_is_set_as_a_list_and_only_where_the_server_reports_it() {
        let wanted = settings(&[("search_path", r#""$user", public"#)]);
        assert_eq!(
            alignment(&wanted, &Settings::new()),
            None,
            "PostgreSQL 17 reports none"
        );
        let server = settings(&[("search_path", "")]);
        assert_eq!(
            alignment(&wanted, &server).as_deref(),
            Some(r#"SELECT pg_catalog.set_config('search_path', '"$user", public', false);"#)
        );
    }

    #[test]
    fn a_backslash_makes_an_escape_string_read_alike_under_either_quoting_rule() {
        let wanted = settings(&[("application_name", r"C:\dir\it's")]);
        assert_eq!(
            alignment(&wanted, &Settings::new()).as_deref(),
            Some(r"SET application_name TO E'C:\\dir\\it''s';")
        );
    }

    #[test]
    fn sets_come_encoding_first_then_in_name_order_and_untracked_names_are_not_set() {
        let mut names: Vec<&str> = TRACKED.to_vec();
        names.sort_unstable();
        let by_name: Vec<&str> = ORDER[1..].iter().map(|&i| TRACKED[i]).collect();
        assert_eq!(TRACKED[ORDER[0]], "client_encoding");
        names.retain(|n| *n != "client_encoding");
        assert_eq!(by_name, names);
        names.insert(0, "client_encoding");
        let all: Vec<(&str, &str)> = TRACKED.iter().map(|&n| (n, "x")).collect();
        let mut wanted = settings(&all);
        wanted.insert("extra_float_digits".into(), "3".into());
        let extras = TRACKED[CARRIED..].iter().map(|&n| (n, "y"));
        let server: Settings = extras.collect();
        let sql = alignment(&wanted, &server).expect("every setting differs");
        let order: Vec<&str> = sql
            .split(';')
            .filter(|s| !s.is_empty())
            .map(|s| match s.strip_prefix("SET ") {
                Some(set) => set.split(' ').next().unwrap_or_default(),
                None => "search_path",
            })
            .collect();
        assert_eq!(order, names);
        assert!(sql.contains("SELECT pg_catalog.set_config('search_path', 'x', false);"));
    }

    #[test]
    fn the_encoding_goes_in_a_string_of_its_own_before_values_read_in_it() {
        let wanted = settings(&[
            ("client_encoding", "LATIN1"),
            ("application_name", "caf\u{e9}"),
        ]);
        assert_eq!(
            alignment_queries(&wanted, &Settings::new()),
            [
                "SET client_encoding TO 'LATIN1';",
                "SET application_name TO 'caf\u{e9}';"
            ]
        );
        // A startup value with a `;` (and a comment after it) stays one literal.
        let wanted = settings(&[
            ("client_encoding", "a;select pg_sleep(9)--"),
            ("application_name", "x"),
        ]);
        assert_eq!(
            alignment_queries(&wanted, &Settings::new()),
            [
                "SET client_encoding TO 'a;select pg_sleep(9)--';",
                "SET application_name TO 'x';"
            ]
        );
        let quoted = settings(&[("client_encoding", r"it's;\"), ("TimeZone", "UTC")]);
        assert_eq!(
            alignment_queries(&quoted, &Settings::new()),
            [
                r"SET client_encoding TO E'it''s;\\';",
                "SET TimeZone TO 'UTC';"
            ]
        );
        let alone = settings(&[("client_encoding", "UTF8")]);
        assert_eq!(
            alignment_queries(&alone, &Settings::new()),
            ["SET client_encoding TO 'UTF8';"]
        );
        let other = settings(&[("TimeZone", "UTC")]);
        assert_eq!(
            alignment_queries(&other, &Settings::new()),
            ["SET TimeZone TO 'UTC';"]
        );
        assert!(alignment_queries(&other, &other).is_empty());
    }

    #[test]
    fn a_replaced_value_replaces_its_slot_too() {
        let mut server = settings(&[("TimeZone", "UTC")]);
        let wanted = settings(&[("TimeZone", "Europe/Paris")]);
        assert!(alignment(&wanted, &server).is_some());
        assert_eq!(
            server
                .insert("TimeZone".into(), "Europe/Paris".into())
                .as_deref(),
            Some("UTC")
        );
        assert_eq!(alignment(&wanted, &server), None);
        assert_eq!(server.len(), 1);
        assert_eq!(
            server.tracked("TimeZone").map(String::as_str),
            Some("Europe/Paris")
        );
        assert_eq!(server.tracked("search_path"), None);
        assert_eq!(server.in_hot_standby(), None);
        server.insert("in_hot_standby".into(), "on".into());
        assert_eq!(server.in_hot_standby(), Some(true));
        server.insert("in_hot_standby".into(), "off".into());
        assert_eq!(server.in_hot_standby(), Some(false));
    }

    #[test]
    fn names_are_matched_without_case() {
        assert_eq!(tracked("timezone"), Some("TimeZone"));
        assert_eq!(tracked("DATESTYLE"), Some("DateStyle"));
        assert_eq!(tracked("Search_Path"), Some("search_path"));
        assert_eq!(tracked("extra_float_digits"), None);
    }

    #[test]
    fn parameter_status_bodies() {
        assert_eq!(
            parameter_status(b"TimeZone\0UTC\0"),
            Some(("TimeZone".into(), "UTC".into()))
        );
        assert_eq!(parameter_status(b"\xff\0x\0"), None);
    }
}
