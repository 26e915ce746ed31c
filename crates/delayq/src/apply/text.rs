//! Quoting and timestamp text for the statements the applier writes.

use pgyard_types::{Lsn, PgTimestamp, PG_EPOCH_OFFSET_MICROS};

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
    let mut out = String::with_capacity(32);
    push_timestamp(&mut out, ts);
    out
}

/// Appends [`timestamp_text`] to `out`: written digit by digit, as `format!` cost about
/// 2,800 instructions per call in the simulator (one per applied batch).
pub(crate) fn push_timestamp(out: &mut String, ts: PgTimestamp) {
    let unix_micros = ts.0.saturating_add(PG_EPOCH_OFFSET_MICROS);
    let secs = unix_micros.div_euclid(1_000_000);
    let micros = unix_micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    if y < 0 {
        // `{y:04}` pads a negative year to four characters, sign included.
        out.push('-');
        push_padded(out, y.unsigned_abs(), 3);
    } else {
        push_padded(out, y.unsigned_abs(), 4);
    }
    out.push('-');
    push_padded(out, u64::from(m), 2);
    out.push('-');
    push_padded(out, u64::from(d), 2);
    out.push(' ');
    push_padded(out, (sod / 3600) as u64, 2);
    out.push(':');
    push_padded(out, (sod / 60 % 60) as u64, 2);
    out.push(':');
    push_padded(out, (sod % 60) as u64, 2);
    out.push('.');
    push_padded(out, micros as u64, 6);
    out.push_str("+00");
}

/// Appends `lsn` as its `Display` writes it (`X/Y`, upper-case hex halves).
pub(crate) fn push_lsn(out: &mut String, lsn: Lsn) {
    push_hex(out, lsn.0 >> 32);
    out.push('/');
    push_hex(out, lsn.0 & 0xFFFF_FFFF);
}

/// `n` in upper-case hex without leading zeros (as `{n:X}`).
fn push_hex(out: &mut String, n: u64) {
    let digits = (64 - n.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        let d = ((n >> (i * 4)) & 0xF) as u8;
        out.push(char::from(if d < 10 { b'0' + d } else { b'A' + d - 10 }));
    }
}

/// Appends the statement placeholder `$n`.
pub(super) fn push_placeholder(out: &mut String, n: usize) {
    out.push('$');
    push_padded(out, n as u64, 1);
}

/// `n` in decimal, zero-padded to at least `width` digits (as `{n:0width$}`).
fn push_padded(out: &mut String, n: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let start = i.min(buf.len() - width.min(buf.len()));
    for &b in &buf[start..] {
        out.push(char::from(b));
    }
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
    fn timestamps_match_format() {
        let pad = |y: i64| {
            let mut out = String::new();
            push_padded(&mut out, y.unsigned_abs(), 4);
            out
        };
        assert_eq!(pad(7), "0007");
        assert_eq!(pad(12345), "12345");
        for micros in [
            i64::MIN,
            i64::MIN / 2,
            -PG_EPOCH_OFFSET_MICROS - 62_000_000_000_000_000,
            -PG_EPOCH_OFFSET_MICROS - 1,
            0,
            1,
            999_999,
            86_399_999_999,
            i64::MAX / 2,
            i64::MAX,
        ] {
            let ts = PgTimestamp(micros);
            let unix_micros = micros.saturating_add(PG_EPOCH_OFFSET_MICROS);
            let secs = unix_micros.div_euclid(1_000_000);
            let sod = secs.rem_euclid(86_400);
            let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
            let want = format!(
                "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:06}+00",
                sod / 3600,
                sod / 60 % 60,
                sod % 60,
                unix_micros.rem_euclid(1_000_000)
            );
            assert_eq!(timestamp_text(ts), want, "{micros}");
        }
    }

    #[test]
    fn lsns_match_display() {
        for n in [
            0,
            1,
            0xF,
            0x10,
            0xFFFF_FFFF,
            0x1_0000_0000,
            0xABCD_EF01_2345_6789,
            u64::MAX,
        ] {
            let mut out = String::new();
            push_lsn(&mut out, Lsn(n));
            assert_eq!(out, Lsn(n).to_string());
        }
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
