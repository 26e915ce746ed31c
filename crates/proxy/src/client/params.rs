//! The session settings that follow a client from server to server in transaction mode:
//! what the client should see (from its StartupMessage and from every ParameterStatus its
//! servers sent it), compared with what a server has, turned into the `SET`s that align them.

use std::collections::BTreeMap;

/// The reported settings a client's view is kept for, with PostgreSQL's spelling.
pub const TRACKED: [&str; 6] = [
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "IntervalStyle",
    "standard_conforming_strings",
    "application_name",
];

/// PostgreSQL's spelling of a tracked name in any case (GUC names are case-insensitive).
pub fn tracked(name: &str) -> Option<&'static str> {
    TRACKED
        .iter()
        .copied()
        .find(|t| t.eq_ignore_ascii_case(name))
}

/// Settings by name.
pub type Settings = BTreeMap<String, String>;

/// One `SET` per tracked setting the client wants and the server has otherwise, as one
/// simple-query string (`None` when they agree).
pub fn alignment(wanted: &Settings, server: &Settings) -> Option<String> {
    let mut sql = String::new();
    for (name, value) in wanted {
        if server.get(name) == Some(value) {
            continue;
        }
        sql.push_str("SET ");
        sql.push_str(name);
        sql.push_str(" TO ");
        push_literal(&mut sql, value);
        sql.push(';');
    }
    (!sql.is_empty()).then_some(sql)
}

/// A standard-conforming string literal (E'' is not needed: quotes double, backslashes are
/// plain under `standard_conforming_strings=on`, which every supported server has).
fn push_literal(sql: &mut String, value: &str) {
    sql.push('\'');
    for c in value.chars() {
        if c == '\'' {
            sql.push('\'');
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
    fn names_are_matched_without_case() {
        assert_eq!(tracked("timezone"), Some("TimeZone"));
        assert_eq!(tracked("DATESTYLE"), Some("DateStyle"));
        assert_eq!(tracked("search_path"), None);
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
