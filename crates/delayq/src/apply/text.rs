//! Quoting and timestamp text for the statements the applier writes.

use pgyard_types::{PgTimestamp, PG_EPOCH_OFFSET_MICROS};

/// `"name"` with inner quotes doubled.
pub fn quote_ident(name: &str) -> String {
    quoted(name, '"')
}

/// `'text'` with inner quotes doubled (standard-conforming strings, so backslashes stay).
pub fn quote_literal(text: &str) -> String {
    quoted(text, '\'')
}

/// `text` between two `quote`s, inner ones doubled: one allocation (the applier quotes every
/// column name of every relation it is sent).
fn quoted(text: &str, quote: char) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for (i, part) in text.split(quote).enumerate() {
        if i > 0 {
            out.push(quote);
            out.push(quote);
        }
        out.push_str(part);
    }
    out.push(quote);
    out
}

/// A PostgreSQL timestamp as `YYYY-MM-DD HH:MM:SS.ffffff+00` (UTC).
pub fn timestamp_text(ts: PgTimestamp) -> String {
    let unix_micros = ts.0.saturating_add(PG_EPOCH_OFFSET_MICROS);
    let secs = unix_micros.div_euclid(1_000_000);
    let micros = unix_micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{micros:06}+00",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (eras of 400 years).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_render_in_utc() {
        assert_eq!(
            timestamp_text(PgTimestamp(0)),
            "2000-01-01 00:00:00.000000+00"
        );
        // 2024-02-29 12:34:56.789012 UTC
        let unix = 1_709_210_096_789_012i64;
        assert_eq!(
            timestamp_text(PgTimestamp(unix - PG_EPOCH_OFFSET_MICROS)),
            "2024-02-29 12:34:56.789012+00"
        );
        assert_eq!(
            timestamp_text(PgTimestamp(-PG_EPOCH_OFFSET_MICROS - 1)),
            "1969-12-31 23:59:59.999999+00"
        );
    }

    #[test]
    fn quoting() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's \\x"), "'it''s \\x'");
        assert_eq!(quote_ident(""), "\"\"");
        assert_eq!(quote_ident("\"\"a\""), "\"\"\"\"\"a\"\"\"");
        assert_eq!(quote_literal("''"), "''''''");
    }
}
