//! The admin console's command language: one command per Query, PgBouncer's grammar — a
//! command word and at most one argument, each a bare word (letters, digits, `_`) or a
//! double-quoted name, whitespace around them and an optional trailing `;`; words are
//! matched without regard to case.

use super::AdminRequest;

/// What `SHOW` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    /// One row per pool: its clients and servers by state.
    Pools,
    /// One row per client connection.
    Clients,
    /// One row per server connection.
    Servers,
    /// Totals per database.
    Stats,
    /// The configuration in force.
    Config,
    /// Whether the proxy is paused.
    State,
    /// The commands.
    Help,
    /// The proxy's version.
    Version,
    /// One row per database.
    Databases,
    /// The counts of the proxy's lists.
    Lists,
    /// One row per user of the pools.
    Users,
    /// The totals over every database, a row per counter.
    Totals,
    /// SHOW STATS's totals with PgBouncer's shorter names.
    StatsTotals,
}

impl Show {
    /// The SHOW word for this list.
    pub fn word(self) -> &'static str {
        match self {
            Show::Pools => "POOLS",
            Show::Clients => "CLIENTS",
            Show::Servers => "SERVERS",
            Show::Stats => "STATS",
            Show::Config => "CONFIG",
            Show::State => "STATE",
            Show::Help => "HELP",
            Show::Version => "VERSION",
            Show::Databases => "DATABASES",
            Show::Lists => "LISTS",
            Show::Users => "USERS",
            Show::Totals => "TOTALS",
            Show::StatsTotals => "STATS_TOTALS",
        }
    }

    fn parse(word: &str) -> Option<Show> {
        [
            Show::Pools,
            Show::Clients,
            Show::Servers,
            Show::Stats,
            Show::Config,
            Show::State,
            Show::Help,
            Show::Version,
            Show::Databases,
            Show::Lists,
            Show::Users,
            Show::Totals,
            Show::StatsTotals,
        ]
        .into_iter()
        .find(|s| s.word().eq_ignore_ascii_case(word))
    }
}

/// A parsed admin command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Nothing but whitespace and `;`: answered like PostgreSQL, with EmptyQueryResponse.
    Empty,
    /// `SHOW …`.
    Show(Show),
    /// An action of the adapter's (RELOAD, PAUSE, RECONNECT, KILL, …), answered with its
    /// tag once done.
    Act(AdminRequest),
}

impl Command {
    /// What the adapter must do or tell before the command can be answered (`None`: the
    /// session answers alone).
    pub fn request(&self) -> Option<AdminRequest> {
        match self {
            Command::Empty | Command::Show(Show::Help | Show::Version) => None,
            Command::Show(_) => Some(AdminRequest::Snapshot),
            Command::Act(r) => Some(r.clone()),
        }
    }

    /// The tag of the CommandComplete that answers it.
    pub fn tag(&self) -> &'static str {
        match self {
            Command::Empty | Command::Show(_) => "SHOW",
            Command::Act(r) => r.tag(),
        }
    }
}

/// A command the adapter carries out.
fn act(request: AdminRequest) -> Command {
    Command::Act(request)
}

/// PgBouncer's answer to DISABLE, ENABLE and KILL without a database.
pub const DATABASE_REQUIRED: &str = "a database is required";

/// A command naming a database at most: `None` for a bare command, the name (a bare word
/// as written, case kept, or a quoted one) otherwise; the admin console's own database is
/// refused with PgBouncer's text for the command (`verb`: ENABLE shares DISABLE's, as in
/// PgBouncer 1.18).
fn database_arg(arg: Option<&Word>, verb: &str) -> Result<Option<String>, String> {
    match arg {
        None => Ok(None),
        Some(w) if w.text == super::ADMIN_DATABASE => {
            Err(format!("cannot {verb} admin db: {}", super::ADMIN_DATABASE))
        }
        Some(w) => Ok(Some(w.text.clone())),
    }
}

/// The longest part of a refused query echoed back in the error.
const ECHO_MAX: usize = 256;

/// Reads one admin query; the error is the text the client gets (SQLSTATE 08P01).
pub fn parse(query: &str) -> Result<Command, String> {
    let Some(words) = words(query) else {
        return Err(invalid(query));
    };
    let lower = |w: &Word| (!w.quoted).then(|| w.text.to_ascii_lowercase());
    let cmd = words.first().and_then(lower);
    let arg = words.get(1);
    match (cmd.as_deref(), arg, words.len()) {
        (None, None, 0) => Ok(Command::Empty),
        (Some("show"), Some(a), 2) if !a.quoted => Show::parse(&a.text)
            .map(Command::Show)
            .ok_or_else(|| invalid(query)),
        (Some("reload"), None, 1) => Ok(act(AdminRequest::Reload)),
        (Some("pause"), None, 1) => Ok(act(AdminRequest::Pause)),
        (Some("resume"), None, 1) => Ok(act(AdminRequest::Resume)),
        (Some("shutdown"), None, 1) => Ok(act(AdminRequest::Shutdown)),
        (Some("reconnect"), a, 1 | 2) => {
            database_arg(a, "reconnect").map(|d| act(AdminRequest::Reconnect(d)))
        }
        (Some("wait_close"), a, 1 | 2) => {
            database_arg(a, "wait in").map(|d| act(AdminRequest::WaitClose(d)))
        }
        (Some(word @ ("disable" | "enable")), a, 1 | 2) => match database_arg(a, "disable")? {
            None => Err(DATABASE_REQUIRED.into()),
            Some(db) if word == "disable" => Ok(act(AdminRequest::Disable(db))),
            Some(db) => Ok(act(AdminRequest::Enable(db))),
        },
        (Some("pause"), a @ Some(_), 2) => Ok(act(AdminRequest::PauseDatabase(
            database_arg(a, "pause")?.unwrap_or_default(),
        ))),
        // The console's database is never paused: PgBouncer 1.18's answer for any such.
        (Some("resume"), Some(a), 2) if a.text == super::ADMIN_DATABASE => {
            Err(super::not_paused(&a.text))
        }
        (Some("resume"), Some(a), 2) => Ok(act(AdminRequest::ResumeDatabase(a.text.clone()))),
        (Some("kill"), a, 1 | 2) => match database_arg(a, "kill")? {
            None => Err(DATABASE_REQUIRED.into()),
            Some(db) => Ok(act(AdminRequest::Kill(db))),
        },
        _ => Err(invalid(query)),
    }
}

/// PgBouncer's answer to a command it does not know.
fn invalid(query: &str) -> String {
    let mut shown = query;
    if shown.len() > ECHO_MAX {
        let mut end = ECHO_MAX;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown = &shown[..end];
    }
    format!("invalid command '{shown}', use SHOW HELP;")
}

/// A word of a command.
#[derive(Debug, PartialEq, Eq)]
struct Word {
    text: String,
    /// Written in double quotes (its case is kept, `""` stands for `"`).
    quoted: bool,
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// The words of `query` after the optional trailing `;`, or `None` when it is not a list of
/// words (another character, an unterminated quote, two words run together).
fn words(query: &str) -> Option<Vec<Word>> {
    let mut text = query.trim_matches(is_space);
    if let Some(rest) = text.strip_suffix(';') {
        text = rest.trim_end_matches(is_space);
    }
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if is_space(c) {
            chars.next();
            continue;
        }
        let word = if c == '"' {
            chars.next();
            let mut w = String::new();
            loop {
                match chars.next()? {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        w.push('"');
                    }
                    '"' => break,
                    other => w.push(other),
                }
            }
            Word {
                text: w,
                quoted: true,
            }
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let mut w = String::new();
            while let Some(&c) = chars
                .peek()
                .filter(|c| c.is_ascii_alphanumeric() || **c == '_')
            {
                w.push(c);
                chars.next();
            }
            Word {
                text: w,
                quoted: false,
            }
        } else {
            return None;
        };
        // Words are separated by whitespace: `show"x"` is not two words.
        if chars.peek().is_some_and(|c| !is_space(*c)) {
            return None;
        }
        out.push(word);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_ignore_case_whitespace_and_one_trailing_semicolon() {
        assert_eq!(parse("SHOW POOLS"), Ok(Command::Show(Show::Pools)));
        assert_eq!(parse("show pools;"), Ok(Command::Show(Show::Pools)));
        assert_eq!(
            parse("\t Show\n\tClients ;  \r\n"),
            Ok(Command::Show(Show::Clients))
        );
        assert_eq!(parse("show servers"), Ok(Command::Show(Show::Servers)));
        assert_eq!(parse("SHOW stats"), Ok(Command::Show(Show::Stats)));
        assert_eq!(parse("show CONFIG;"), Ok(Command::Show(Show::Config)));
        assert_eq!(parse("show state"), Ok(Command::Show(Show::State)));
        assert_eq!(parse("show help"), Ok(Command::Show(Show::Help)));
        assert_eq!(parse("show version"), Ok(Command::Show(Show::Version)));
        assert_eq!(parse("SHOW Databases;"), Ok(Command::Show(Show::Databases)));
        assert_eq!(parse("show lists"), Ok(Command::Show(Show::Lists)));
        assert_eq!(parse("show users"), Ok(Command::Show(Show::Users)));
        assert_eq!(parse("SHOW totals;"), Ok(Command::Show(Show::Totals)));
        assert_eq!(
            parse("show Stats_Totals"),
            Ok(Command::Show(Show::StatsTotals))
        );
        assert_eq!(parse("reload"), Ok(act(AdminRequest::Reload)));
        assert_eq!(parse("PAUSE;"), Ok(act(AdminRequest::Pause)));
        assert_eq!(parse("Resume"), Ok(act(AdminRequest::Resume)));
        assert_eq!(parse("shutdown;"), Ok(act(AdminRequest::Shutdown)));
        assert_eq!(
            act(AdminRequest::Shutdown).request(),
            Some(AdminRequest::Shutdown)
        );
        assert_eq!(parse(""), Ok(Command::Empty));
        assert_eq!(parse("  ; "), Ok(Command::Empty));
    }

    #[test]
    fn anything_else_gets_pgbouncers_text_with_the_query() {
        for q in [
            "show",
            "show stats_averages",
            "show pools clients",
            "show pools;;",
            "select 1",
            "reload now",
            "show \"pools\"",
            "show\"pools\"",
            "show pools, clients",
            "kill a b",
            "shutdown now",
            "\"reload\"",
            "show \"pools",
        ] {
            assert_eq!(
                parse(q),
                Err(format!("invalid command '{q}', use SHOW HELP;")),
                "{q}"
            );
        }
    }

    #[test]
    fn one_database_is_paused_resumed_and_killed_by_name() {
        assert_eq!(
            parse("PAUSE shop"),
            Ok(act(AdminRequest::PauseDatabase("shop".into())))
        );
        assert_eq!(
            parse("resume \"Shop\";"),
            Ok(act(AdminRequest::ResumeDatabase("Shop".into())))
        );
        assert_eq!(
            parse("Kill shop"),
            Ok(act(AdminRequest::Kill("shop".into())))
        );
        assert_eq!(act(AdminRequest::PauseDatabase("a".into())).tag(), "PAUSE");
        assert_eq!(act(AdminRequest::Kill("a".into())).tag(), "KILL");
        // PgBouncer 1.18's answers about the console's own database.
        assert_eq!(
            parse("pause pgyard"),
            Err("cannot pause admin db: pgyard".into())
        );
        assert_eq!(
            parse("RESUME pgyard"),
            Err("database pgyard is not paused".into())
        );
        assert_eq!(
            parse("kill pgyard"),
            Err("cannot kill admin db: pgyard".into())
        );
        assert_eq!(parse("KILL"), Err(DATABASE_REQUIRED.into()));
    }

    #[test]
    fn database_commands_take_a_name_as_written() {
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(parse("RECONNECT"), Ok(act(AdminRequest::Reconnect(None))));
        assert_eq!(
            parse("reconnect shop;"),
            Ok(act(AdminRequest::Reconnect(some("shop"))))
        );
        // A bare name keeps its case, as PgBouncer's (`DISABLE POSTGRES` names `POSTGRES`).
        assert_eq!(
            parse("Wait_Close Shop"),
            Ok(act(AdminRequest::WaitClose(some("Shop"))))
        );
        assert_eq!(parse("wait_close"), Ok(act(AdminRequest::WaitClose(None))));
        assert_eq!(
            parse("DISABLE \"my db\""),
            Ok(act(AdminRequest::Disable("my db".into())))
        );
        assert_eq!(
            parse("enable _1"),
            Ok(act(AdminRequest::Enable("_1".into())))
        );
        assert_eq!(act(AdminRequest::WaitClose(None)).tag(), "WAIT_CLOSE");
        assert_eq!(
            act(AdminRequest::Disable("a".into())).request(),
            Some(AdminRequest::Disable("a".into()))
        );
    }

    #[test]
    fn database_commands_refuse_what_pgbouncer_refuses() {
        assert_eq!(parse("disable"), Err(DATABASE_REQUIRED.into()));
        assert_eq!(parse("ENABLE ;"), Err(DATABASE_REQUIRED.into()));
        for (q, e) in [
            ("reconnect pgyard", "cannot reconnect admin db: pgyard"),
            ("wait_close \"pgyard\"", "cannot wait in admin db: pgyard"),
            ("disable pgyard", "cannot disable admin db: pgyard"),
            // PgBouncer 1.18 answers ENABLE with DISABLE's words.
            ("enable pgyard", "cannot disable admin db: pgyard"),
        ] {
            assert_eq!(parse(q), Err(e.into()), "{q}");
        }
        // Another case is another database, as for PgBouncer.
        assert_eq!(
            parse("RECONNECT PGYARD"),
            Ok(act(AdminRequest::Reconnect(Some("PGYARD".into()))))
        );
        for q in ["reconnect a b", "disable a b", "wait_close ,", "enable \"a"] {
            assert_eq!(
                parse(q),
                Err(format!("invalid command '{q}', use SHOW HELP;")),
                "{q}"
            );
        }
    }

    #[test]
    fn long_queries_are_echoed_cut_on_a_character_boundary() {
        let q = "é".repeat(300);
        let e = parse(&q).expect_err("not a command");
        assert!(e.len() < ECHO_MAX + 64, "{}", e.len());
        assert!(e.starts_with("invalid command 'é"), "{e}");
    }

    #[test]
    fn quoted_words_keep_their_case_and_doubled_quotes() {
        let w = words("pause \"My\"\"Db\"").expect("words");
        assert_eq!(
            w[1],
            Word {
                text: "My\"Db".into(),
                quoted: true
            }
        );
    }

    #[test]
    fn requests_and_tags() {
        assert_eq!(Command::Show(Show::Help).request(), None);
        assert_eq!(
            Command::Show(Show::Pools).request(),
            Some(AdminRequest::Snapshot)
        );
        assert_eq!(
            act(AdminRequest::Pause).request(),
            Some(AdminRequest::Pause)
        );
        assert_eq!(act(AdminRequest::Resume).tag(), "RESUME");
        assert_eq!(Command::Show(Show::Stats).tag(), "SHOW");
    }
}
