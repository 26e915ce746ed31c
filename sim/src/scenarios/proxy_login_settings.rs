//! The settings a client sends in its StartupMessage, as the simulated PostgreSQL 18 behind
//! the proxy takes them when the proxy sets them before the welcome: spelt the server's own
//! way (`ISO` becomes `ISO, MDY`, `utf8` becomes `UTF8`), or refused, as a direct login
//! would refuse them.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use pgyard_types::Rng;
use pgyard_wire::backend::{self, ParameterStatus, TransactionStatus};
use pgyard_wire::error_fields::encode_error_response;

use pgyard_proxy::admin::ClientState;
use pgyard_proxy::ClientOut;

use super::proxy_login::{ends_with_fatal, fail, Conn};
use crate::Violation;
use pgyard_types::uniform_inclusive;

/// Tracked settings a client asks for (any case in the name, as GUC names are), each value
/// spelt as the server spells it, otherwise, or one the server refuses.
pub(super) fn draw_asked(rng: &mut Rng) -> Vec<(&'static str, &'static str)> {
    let choices: [(&str, [&str; 3]); 3] = [
        ("datestyle", ["SQL, DMY", "sql,dmy", "ISO"]),
        ("TimeZone", ["Europe/Paris", "europe/paris", "Not/AZone"]),
        ("client_encoding", ["LATIN1", "latin1", "utf8"]),
    ];
    let mut asked = Vec::new();
    for (name, values) in choices {
        if uniform_inclusive(rng, 2) == 0 {
            // The refused zone is the rarest: one client in eighteen that sends a zone.
            let pick = match uniform_inclusive(rng, 5) {
                0..=2 => 0,
                3 | 4 => 1,
                _ => 2,
            };
            asked.push((name, values[pick]));
        }
    }
    asked
}

/// The server's spelling of `value` for the tracked setting `name` (PostgreSQL's spelling of
/// the name), or the text of its refusal; `have` is what the server has now.
pub(super) fn spell(
    name: &str,
    value: &str,
    have: &BTreeMap<String, String>,
) -> Result<String, String> {
    let refused = || format!("invalid value for parameter \"{name}\": \"{value}\"");
    match name {
        "DateStyle" => {
            let parts: Vec<String> = value.split(',').map(|p| p.trim().to_uppercase()).collect();
            let style = ["ISO", "SQL", "POSTGRES", "GERMAN"];
            let order = ["DMY", "MDY", "YMD"];
            let current = have
                .get(name)
                .and_then(|v| v.split(", ").nth(1))
                .unwrap_or("MDY");
            let s = parts.iter().find(|p| style.contains(&p.as_str()));
            let o = parts.iter().find(|p| order.contains(&p.as_str()));
            let s = s.ok_or_else(refused)?;
            Ok(format!("{s}, {}", o.map_or(current, String::as_str)))
        }
        "TimeZone" => ["Europe/Paris", "UTC"]
            .into_iter()
            .find(|z| z.eq_ignore_ascii_case(value))
            .map(str::to_owned)
            .ok_or_else(refused),
        "client_encoding" => {
            let upper = value.to_uppercase();
            ["UTF8", "LATIN1"]
                .contains(&upper.as_str())
                .then_some(upper)
                .ok_or_else(refused)
        }
        _ => Ok(value.to_owned()),
    }
}

/// What a PostgreSQL 18 server reports at login.
pub(super) const SERVER_LOGIN: [(&str, &str); 8] = [
    ("DateStyle", "ISO, MDY"),
    ("TimeZone", "UTC"),
    ("application_name", ""),
    ("client_encoding", "UTF8"),
    ("in_hot_standby", "off"),
    ("integer_datetimes", "on"),
    ("server_version", "18.1"),
    ("standard_conforming_strings", "on"),
];

/// A freshly opened server's settings record: [`SERVER_LOGIN`], but `in_hot_standby` as
/// given (`on` for a primary demoted since).
pub(super) fn server_settings(hot_standby: &str) -> pgyard_proxy::client::Settings {
    let mut s = pgyard_proxy::client::Settings::new();
    for (n, v) in SERVER_LOGIN {
        let v = if n == "in_hot_standby" {
            hot_standby
        } else {
            v
        };
        s.insert(n.to_owned(), v.to_owned());
    }
    s
}

/// A direct login puts the client's DateStyle (which may name half of one) over the
/// server's login value, never over what an earlier client left: the welcomed server must
/// have what a direct login would.
pub(super) fn direct_date_style(
    asked: &[(&str, &str)],
    login: &BTreeMap<String, String>,
    have: &BTreeMap<String, String>,
) -> Result<(), Violation> {
    let asked = asked
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("DateStyle"));
    let direct = match asked {
        Some((_, v)) => spell("DateStyle", v, login).ok(),
        None => login.get("DateStyle").cloned(),
    };
    if direct.is_some() && have.get("DateStyle") != direct.as_ref() {
        let detail = format!(
            "the welcome left DateStyle {:?} on the server, a direct login {direct:?} \
             (asked {asked:?})",
            have.get("DateStyle")
        );
        return Err(fail("welcome-as-documented", detail));
    }
    Ok(())
}

/// The server's answer to the proxy's alignment, one or two Query messages (the encoding in
/// a query of its own, first) of `SET name TO 'value';` statements: for each query, a `SET`
/// tag a statement, then each setting whose value changed as it spells it, then
/// ReadyForQuery; or, when it refuses a value, ERROR 22023 and ReadyForQuery, with nothing
/// of that query changed (the statements of one query string roll back together). `have` is
/// updated; the first refusal's text is returned with the answer.
pub(super) fn answer(
    bytes: &[u8],
    have: &mut BTreeMap<String, String>,
) -> Result<(Bytes, Option<String>), Violation> {
    let unreadable = || {
        let text = String::from_utf8_lossy(bytes);
        fail(
            "welcome-as-documented",
            format!("an alignment the server cannot read: {text:?}"),
        )
    };
    let mut out = BytesMut::new();
    let mut refused = None;
    for frame in pgyard_wire::frame::frames(bytes, 1 << 20) {
        let frame = frame.map_err(|_| unreadable())?;
        let body = frame.body.strip_suffix(&[0]).filter(|_| frame.tag == b'Q');
        let sql = body
            .and_then(|b| std::str::from_utf8(b).ok())
            .ok_or_else(unreadable)?;
        if let Some(text) = answer_one(sql, have, &mut out).ok_or_else(unreadable)? {
            refused.get_or_insert(text);
        }
    }
    Ok((out.freeze(), refused))
}

/// One query of the alignment answered into `out`: `None` when it cannot be read, else its
/// refusal's text, if any. Each statement reads what the ones before it set (a `DateStyle`
/// naming half of one keeps the other half as it stands), and the server reports each
/// setting whose value at the end differs from before, once, as PostgreSQL reports changes
/// before ReadyForQuery.
fn answer_one(
    sql: &str,
    have: &mut BTreeMap<String, String>,
    out: &mut BytesMut,
) -> Option<Option<String>> {
    let mut statements = Vec::new();
    for statement in sql.split(';').filter(|s| !s.is_empty()) {
        let (name, literal) = statement.strip_prefix("SET ")?.split_once(" TO ")?;
        let value = literal.strip_prefix('\'')?.strip_suffix('\'')?;
        statements.push((name, value));
    }
    let mut scratch = have.clone();
    let mut changed: Vec<&str> = Vec::new();
    for (name, value) in &statements {
        match spell(name, value, &scratch) {
            Ok(v) => {
                scratch.insert((*name).to_owned(), v);
                if !changed.contains(name) {
                    changed.push(name);
                }
            }
            Err(text) => {
                let fields: [(u8, &[u8]); 4] = [
                    (b'S', b"ERROR"),
                    (b'V', b"ERROR"),
                    (b'C', b"22023"),
                    (b'M', text.as_bytes()),
                ];
                let _ = encode_error_response(&fields, out);
                backend::encode_ready_for_query(TransactionStatus::Idle, out);
                return Some(Some(text));
            }
        }
    }
    for _ in &statements {
        let _ = backend::encode_command_complete(b"SET", out);
    }
    for name in changed {
        let value = scratch.get(name).cloned().unwrap_or_default();
        if have.get(name) != Some(&value) {
            let _ = ParameterStatus {
                name: name.as_bytes(),
                value: value.as_bytes(),
            }
            .encode(out);
            have.insert(name.to_owned(), value);
        }
    }
    backend::encode_ready_for_query(TransactionStatus::Idle, out);
    Some(None)
}

/// Whether a server's settings record holds the tracked values `have`.
pub(super) fn has(
    settings: &pgyard_proxy::client::Settings,
    have: &std::collections::BTreeMap<String, String>,
) -> bool {
    [
        "DateStyle",
        "TimeZone",
        "application_name",
        "client_encoding",
    ]
    .into_iter()
    .all(|n| settings.get(n) == have.get(n))
}

/// The server refused a value the client sent: AuthenticationOk, then the server's error as
/// FATAL and the end; the server goes back clean (the failed `SET`s changed nothing).
pub(super) fn refused_at_welcome(c: &mut Conn, text: &str) -> Result<(), Violation> {
    let ok = c.message();
    if ok != Some((b'R', 0u32.to_be_bytes().to_vec())) {
        let detail = format!("a refused startup setting: {ok:?} before the error");
        return Err(fail("login-answered-as-postgresql", detail));
    }
    ends_with_fatal(c, "22023", text)?;
    if c.released.is_none() {
        let detail = "a refused startup setting kept its server".to_owned();
        return Err(fail("welcome-as-documented", detail));
    }
    Ok(())
}

/// Session mode: the client leaves, and the server goes back with the settings it now has —
/// the client's.
pub(super) fn gone(
    c: &mut Conn,
    have: &std::collections::BTreeMap<String, String>,
) -> Result<(), Violation> {
    let state = c.s.activity().state;
    if !c.rx.is_empty() || state != ClientState::Active {
        let detail = format!(
            "after the welcome the client got {} bytes, the session is {state:?}",
            c.rx.len()
        );
        return Err(fail("alignment-is-the-proxys", detail));
    }
    c.s.handle_client_bytes(c.now, b"X\0\0\0\x04");
    let mut back = None;
    while let Some(o) = c.s.poll_output() {
        match o {
            ClientOut::Release { server, .. } => back = Some(server.settings),
            ClientOut::Close => c.closed = true,
            other => return Err(fail("login-outputs", format!("at Terminate: {other:?}"))),
        }
    }
    let settings = back.ok_or_else(|| fail("alignment-is-the-proxys", "no server back".into()))?;
    if !has(&settings, have) || !c.closed {
        let detail = format!("the server went back with {settings:?}, it reported {have:?}");
        return Err(fail("alignment-is-the-proxys", detail));
    }
    Ok(())
}

/// What a logged-in session tells the adapter about itself (SHOW CLIENTS shows it): where it
/// stands, that it logged in, whether it is a console, its `application_name`.
pub(super) fn judge_activity(
    c: &Conn,
    state: ClientState,
    admin: bool,
    app: Option<&str>,
) -> Result<(), Violation> {
    let a = c.s.activity();
    if a.state == state && a.admin == admin && a.logged_in && c.s.application_name() == app {
        return Ok(());
    }
    let detail = format!(
        "after its login a session reports {:?} admin={} logged_in={} application_name={:?}; \
         expected {state:?} admin={admin} application_name {app:?}",
        a.state,
        a.admin,
        a.logged_in,
        c.s.application_name()
    );
    Err(fail("session-reports-itself", detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_spells_values_its_way_and_refuses_unknown_ones() {
        let have: BTreeMap<String, String> = [("DateStyle".to_owned(), "ISO, MDY".to_owned())]
            .into_iter()
            .collect();
        assert_eq!(
            spell("DateStyle", "sql,dmy", &have).as_deref(),
            Ok("SQL, DMY")
        );
        assert_eq!(spell("DateStyle", "ISO", &have).as_deref(), Ok("ISO, MDY"));
        assert_eq!(
            spell("TimeZone", "europe/paris", &have).as_deref(),
            Ok("Europe/Paris")
        );
        assert_eq!(
            spell("client_encoding", "utf8", &have).as_deref(),
            Ok("UTF8")
        );
        assert!(spell("TimeZone", "Not/AZone", &have).is_err());
    }

    #[test]
    fn a_refusal_changes_nothing_and_a_change_is_reported_once() {
        let mut have: BTreeMap<String, String> = [
            ("DateStyle".to_owned(), "ISO, MDY".to_owned()),
            ("TimeZone".to_owned(), "UTC".to_owned()),
        ]
        .into_iter()
        .collect();
        let mut q = BytesMut::new();
        let sql = b"SET DateStyle TO 'ISO';SET TimeZone TO 'Not/AZone';";
        pgyard_wire::frontend::encode_query(sql, &mut q).expect("Q");
        let before = have.clone();
        let (_, refused) = answer(&q, &mut have).expect("readable");
        assert!(refused.is_some_and(|t| t.contains("Not/AZone")));
        assert_eq!(have, before);
        let mut q = BytesMut::new();
        let sql = b"SET DateStyle TO 'ISO';SET TimeZone TO 'europe/paris';";
        pgyard_wire::frontend::encode_query(sql, &mut q).expect("Q");
        let (reply, refused) = answer(&q, &mut have).expect("readable");
        assert!(refused.is_none());
        let text = String::from_utf8_lossy(&reply);
        assert!(text.contains("TimeZone\0Europe/Paris\0"), "{text:?}");
        assert!(
            !text.contains("DateStyle"),
            "unchanged, so not reported: {text:?}"
        );
    }
}
