//! The admin console in `proxy-login`: the welcome a console session gets, then commands
//! written the ways PgBouncer's grammar allows (any case, any whitespace, one trailing `;`,
//! double-quoted names) and the ways it does not, sent one or two to a write, each answer
//! judged against `docs/proxy.md` ("Admin console"). The scenario plays the adapter: a
//! command that needs it is answered with the outcome it draws (done, or an error), and
//! SHOW's lists with a snapshot it makes up (`proxy_show.rs`).

use bytes::BytesMut;
use pgyard_proxy::admin::{
    no_such_database, not_paused, AdminError, AdminReply, AdminRequest, ALREADY_PAUSED,
    DATABASE_REQUIRED,
};
use pgyard_proxy::CancelKey;
use pgyard_types::{uniform_inclusive, Rng};
use pgyard_wire::frame::ProtocolVersion;

use super::proxy_login::{ends_with_fatal, fail, field, judge_key, welcome_messages, Conn};
use super::proxy_show as show;
use crate::{trace, Trace, Violation};

/// The proxy's version, as its console shows it.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What a console session is told at login, in order (`docs/proxy.md`).
fn settings() -> [(&'static str, String); 7] {
    [
        ("server_version", format!("{VERSION}/pgyard")),
        ("client_encoding", "UTF8".into()),
        ("server_encoding", "UTF8".into()),
        ("DateStyle", "ISO".into()),
        ("TimeZone", "UTC".into()),
        ("standard_conforming_strings", "on".into()),
        ("is_superuser", "on".into()),
    ]
}

fn bad(detail: String) -> Violation {
    fail("console-answered-as-documented", detail)
}

/// The welcome: AuthenticationOk, the settings, the cancel key the client was given (which
/// is the one the adapter registers), ReadyForQuery.
pub(super) fn welcome(
    c: &mut Conn,
    key: &CancelKey,
    version: ProtocolVersion,
    middleware: bool,
) -> Result<(), Violation> {
    let got = c.messages();
    let shown = settings();
    // A client that asked for middleware messages is told they are on, after the rest.
    let middleware = middleware.then_some(("middleware_messages", "on"));
    let all = shown
        .iter()
        .map(|(n, v)| (*n, v.as_str()))
        .chain(middleware);
    let want = welcome_messages(all, key, version);
    if got != want || c.closed {
        let detail = format!("welcome {got:?} (closed={}), expected {want:?}", c.closed);
        return Err(bad(detail));
    }
    judge_key(c, key, version)
}

/// What a command must get.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Want {
    /// EmptyQueryResponse.
    Empty,
    /// The NOTICE of SHOW HELP.
    Help,
    /// The version row.
    Version,
    /// An adapter request, then what its answer renders to.
    Ask(AdminRequest, &'static str),
    /// SHOW of a list: the adapter's snapshot, rendered.
    Show(&'static str),
    /// ERROR 08P01 with this text.
    Error(String),
    /// Not a command: ERROR 08P01 `invalid command 'QUERY', use SHOW HELP;`.
    Invalid,
}

/// A command as written, with what it must get.
fn draw_command(rng: &mut Rng) -> (String, Want) {
    let lists = [
        "POOLS",
        "CLIENTS",
        "SERVERS",
        "STATS",
        "STATE",
        "CONFIG",
        "DATABASES",
        "LISTS",
        "USERS",
        "TOTALS",
        "STATS_TOTALS",
    ];
    let (words, want): (Vec<String>, Want) = match uniform_inclusive(rng, 15) {
        0 => (vec![], Want::Empty),
        1 => (vec!["show".into(), "help".into()], Want::Help),
        2 => (vec!["show".into(), "version".into()], Want::Version),
        3 => (
            vec!["pause".into()],
            Want::Ask(AdminRequest::Pause, "PAUSE"),
        ),
        4 => (
            vec!["resume".into()],
            Want::Ask(AdminRequest::Resume, "RESUME"),
        ),
        5 => (
            vec!["reload".into()],
            Want::Ask(AdminRequest::Reload, "RELOAD"),
        ),
        6..=8 => {
            let l = lists[uniform_inclusive(rng, lists.len() as u64 - 1) as usize];
            (vec!["show".into(), l.into()], Want::Show(l))
        }
        9 => one_database(rng),
        // Not commands: the query comes back in PgBouncer's error.
        10 => (vec!["show".into()], Want::Invalid),
        11 => (
            vec!["show".into(), "pools".into(), "now".into()],
            Want::Invalid,
        ),
        12 => (vec!["show".into(), "\"POOLS\"".into()], Want::Invalid),
        13 | 14 => database_command(rng),
        _ => (vec!["vacuum".into()], Want::Invalid),
    };
    (decorate(rng, &words), want)
}

/// PAUSE, RESUME or KILL of one database: a name the adapter is asked about, or the
/// console's own, which PgBouncer 1.18 refuses (RESUME of it: never paused); KILL without
/// a name needs one.
fn one_database(rng: &mut Rng) -> (Vec<String>, Want) {
    let verb = ["pause", "resume", "kill"][uniform_inclusive(rng, 2) as usize];
    let (arg, db) = match uniform_inclusive(rng, 3) {
        0 => ("\"app\"", "app"),
        1 => ("_1", "_1"),
        2 => ("\"my db\"", "my db"),
        _ => {
            let refused = match verb {
                "pause" => "cannot pause admin db: pgyard",
                "resume" => "database pgyard is not paused",
                _ => "cannot kill admin db: pgyard",
            };
            return (
                vec![verb.into(), "\"pgyard\"".into()],
                Want::Error(refused.into()),
            );
        }
    };
    if verb == "kill" && uniform_inclusive(rng, 4) == 0 {
        return (vec![verb.into()], Want::Error(DATABASE_REQUIRED.into()));
    }
    let db = db.to_owned();
    let want = match verb {
        "pause" => Want::Ask(AdminRequest::PauseDatabase(db), "PAUSE"),
        "resume" => Want::Ask(AdminRequest::ResumeDatabase(db), "RESUME"),
        _ => Want::Ask(AdminRequest::Kill(db), "KILL"),
    };
    (vec![verb.into(), arg.into()], want)
}

/// RECONNECT, WAIT_CLOSE, DISABLE or ENABLE, with or without a database: a name the adapter
/// is asked about (quoted, or a bare word without letters, since `decorate` changes the case
/// of letters and a bare name keeps its case), the console's own database (refused with
/// PgBouncer 1.18's texts, ENABLE's borrowed from DISABLE), or one word too many.
fn database_command(rng: &mut Rng) -> (Vec<String>, Want) {
    let verb = ["reconnect", "wait_close", "disable", "enable"][uniform_inclusive(rng, 3) as usize];
    let (arg, name) = match uniform_inclusive(rng, 4) {
        0 => (None, None),
        1 => (Some("\"app\""), Some("app")),
        2 => (Some("\"My \"\"db\"\"\""), Some("My \"db\"")),
        3 => (Some("_1"), Some("_1")),
        _ => {
            let refused = match verb {
                "reconnect" => "cannot reconnect admin db: pgyard",
                "wait_close" => "cannot wait in admin db: pgyard",
                _ => "cannot disable admin db: pgyard",
            };
            let words = vec![verb.into(), "\"pgyard\"".into()];
            return (words, Want::Error(refused.into()));
        }
    };
    let mut words: Vec<String> = std::iter::once(verb).chain(arg).map(String::from).collect();
    if arg.is_some() && uniform_inclusive(rng, 5) == 0 {
        words.push("now".into());
        return (words, Want::Invalid);
    }
    let db = name.map(String::from);
    let want = match (verb, db) {
        ("reconnect", db) => Want::Ask(AdminRequest::Reconnect(db), "RECONNECT"),
        ("wait_close", db) => Want::Ask(AdminRequest::WaitClose(db), "WAIT_CLOSE"),
        (_, None) => Want::Error(DATABASE_REQUIRED.into()),
        ("disable", Some(db)) => Want::Ask(AdminRequest::Disable(db), "DISABLE"),
        (_, Some(db)) => Want::Ask(AdminRequest::Enable(db), "ENABLE"),
    };
    (words, want)
}

/// The words in random case, between random whitespace, with or without a `;`.
fn decorate(rng: &mut Rng, words: &[String]) -> String {
    let spaces = [" ", "  ", "\t", "\n", " \r\n "];
    let space = |rng: &mut Rng| spaces[uniform_inclusive(rng, 4) as usize];
    let mut text = String::new();
    if uniform_inclusive(rng, 3) == 0 {
        text.push_str(space(rng));
    }
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            text.push_str(space(rng));
        }
        if w.starts_with('"') {
            text.push_str(w);
            continue;
        }
        for ch in w.chars() {
            let upper = uniform_inclusive(rng, 1) == 0;
            text.push(if upper { ch.to_ascii_uppercase() } else { ch });
        }
    }
    if uniform_inclusive(rng, 1) == 0 {
        if uniform_inclusive(rng, 1) == 0 {
            text.push_str(space(rng));
        }
        text.push(';');
    }
    text
}

fn query(text: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(text.len() + 6);
    b.push(b'Q');
    b.extend_from_slice(&(text.len() as u32 + 5).to_be_bytes());
    b.extend_from_slice(text.as_bytes());
    b.push(0);
    b
}

/// Commands, one or two to a write, then an ending: Terminate, a message the console
/// refuses, or SHUTDOWN.
pub(super) fn commands(rng: &mut Rng, t: &mut Trace, c: &mut Conn) -> Result<(), Violation> {
    let mut paused = false;
    for _ in 0..1 + uniform_inclusive(rng, 5) {
        let batch: Vec<(String, Want)> = (0..1 + uniform_inclusive(rng, 1))
            .map(|_| draw_command(rng))
            .collect();
        let bytes: Vec<u8> = batch.iter().flat_map(|(text, _)| query(text)).collect();
        c.send(&bytes)?;
        for (text, want) in batch {
            trace!(t, "console {text:?} -> {want:?}");
            answer(rng, c, &text, &want, &mut paused)?;
        }
        if !c.asks.is_empty() || !c.rx.is_empty() {
            let detail = format!("after the answers: asks {:?}, {} bytes", c.asks, c.rx.len());
            return Err(bad(detail));
        }
    }
    match uniform_inclusive(rng, 3) {
        // SHUTDOWN: asked of the adapter, which stops the proxy; nothing is answered.
        3 => {
            let text = decorate(rng, &["shutdown".into()]);
            trace!(t, "console {text:?} -> the proxy stops");
            c.send(&query(&text))?;
            if c.asks == [AdminRequest::Shutdown] && c.rx.is_empty() && !c.closed {
                return Ok(());
            }
            let detail = format!("SHUTDOWN asked {:?}, {} bytes back", c.asks, c.rx.len());
            Err(bad(detail))
        }
        0 => {
            c.send(b"X\0\0\0\x04")?;
            if c.closed && c.rx.is_empty() {
                return Ok(());
            }
            Err(bad(format!("Terminate left closed={}", c.closed)))
        }
        1 => {
            c.send(b"P\0\0\0\x08\0\0\0\0")?;
            let text = "extended query protocol not supported by admin console";
            ends_with_fatal(c, "08P01", text)
        }
        _ => {
            c.send(b"F\0\0\0\x04")?;
            ends_with_fatal(c, "08P01", "unsupported packet type for admin console: F")
        }
    }
}

/// Judges the answer to one command (asking the adapter's part first when it needs one).
fn answer(
    rng: &mut Rng,
    c: &mut Conn,
    text: &str,
    want: &Want,
    paused: &mut bool,
) -> Result<(), Violation> {
    // Only a command that needs the adapter takes the oldest request: a later command's
    // may already be there when this one was answered at once.
    let needs = matches!(want, Want::Ask(..) | Want::Show(_));
    let asked = (needs && !c.asks.is_empty()).then(|| c.asks.remove(0));
    let mut expect: Vec<(u8, Option<Vec<u8>>)> = Vec::new();
    match want {
        Want::Ask(request, tag) => {
            if asked.as_ref() != Some(request) {
                return Err(bad(format!("{text:?} asked the adapter {asked:?}")));
            }
            // A PAUSE while paused is the adapter's refusal; RELOAD fails now and then.
            let named = match request {
                AdminRequest::Reconnect(Some(d))
                | AdminRequest::WaitClose(Some(d))
                | AdminRequest::Disable(d)
                | AdminRequest::Enable(d)
                | AdminRequest::PauseDatabase(d)
                | AdminRequest::ResumeDatabase(d)
                | AdminRequest::Kill(d) => Some(d),
                _ => None,
            };
            // A name the adapter does not know, or (RESUME) one not paused by name.
            let unknown = named
                .filter(|_| uniform_inclusive(rng, 1) == 0)
                .map(|d| match request {
                    AdminRequest::ResumeDatabase(_) if uniform_inclusive(rng, 1) == 0 => {
                        not_paused(d)
                    }
                    _ => no_such_database(d),
                });
            let refusal = match request {
                AdminRequest::Pause if *paused => Some(ALREADY_PAUSED.to_owned()),
                AdminRequest::Reload if uniform_inclusive(rng, 1) == 0 => Some("no file".into()),
                _ => unknown,
            };
            *paused = match request {
                AdminRequest::Pause => true,
                AdminRequest::Resume => false,
                _ => *paused,
            };
            match refusal {
                Some(e) => {
                    c.s.handle_admin(AdminReply::Failed(AdminError::pooler(e.clone())));
                    expect.push((b'E', Some(error_fields("ERROR", "08P01", &e))));
                }
                None => {
                    c.s.handle_admin(AdminReply::Done);
                    expect.push((b'C', Some([tag.as_bytes(), b"\0"].concat())));
                }
            }
            c.pump()?;
        }
        Want::Show(list) => {
            if asked != Some(AdminRequest::Snapshot) {
                return Err(bad(format!("{text:?} asked the adapter {asked:?}")));
            }
            return show::judge(rng, c, list, *paused);
        }
        Want::Empty => expect.push((b'I', Some(Vec::new()))),
        Want::Help => {
            match c.message() {
                Some((b'N', body)) if field(&body, b'M').as_deref() == Some("Console usage") => {}
                other => return Err(bad(format!("{text:?}: {other:?} in place of the usage"))),
            }
            expect.push((b'C', Some(b"SHOW\0".to_vec())));
        }
        Want::Version => {
            expect.push((b'T', Some(show::description(&[("version", 25, -1)]))));
            let v = format!("pgyard {VERSION}");
            expect.push((b'D', Some(show::data_row(&[Some(v.as_str())]))));
            expect.push((b'C', Some(b"SHOW\0".to_vec())));
        }
        Want::Error(e) => expect.push((b'E', Some(error_fields("ERROR", "08P01", e)))),
        Want::Invalid => {
            let e = format!("invalid command '{text}', use SHOW HELP;");
            expect.push((b'E', Some(error_fields("ERROR", "08P01", &e))));
        }
    }
    expect.push((b'Z', Some(b"I".to_vec())));
    for (tag, body) in expect {
        let got = c.message();
        let fits = got
            .as_ref()
            .is_some_and(|(t, b)| *t == tag && body.as_ref().is_none_or(|w| w == b));
        if !fits {
            let detail = format!(
                "{text:?}: expected {} {:?}, got {:?}",
                char::from(tag),
                body.map(|b| String::from_utf8_lossy(&b).into_owned()),
                got.map(|(t, b)| (char::from(t), String::from_utf8_lossy(&b).into_owned()))
            );
            return Err(bad(detail));
        }
    }
    Ok(())
}

/// An ErrorResponse body with PgBouncer's fields: severity twice, code, message.
fn error_fields(severity: &str, code: &str, message: &str) -> Vec<u8> {
    let mut b = BytesMut::new();
    for (t, v) in [
        (b'S', severity),
        (b'V', severity),
        (b'C', code),
        (b'M', message),
    ] {
        b.extend_from_slice(&[t]);
        b.extend_from_slice(v.as_bytes());
        b.extend_from_slice(&[0]);
    }
    b.extend_from_slice(&[0]);
    b.to_vec()
}
