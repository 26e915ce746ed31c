//! libpq's integer rule for connection options (`pqParseIntParam`, spec §12.1).

use super::ConfigError;

/// Parses `value` as libpq parses integer options: optional leading C-locale whitespace, an
/// optional sign, at least one decimal digit, optional trailing whitespace, nothing else, and
/// the result must fit in a 32-bit `int`.
///
/// On failure the error reads `invalid integer value "<value>" for connection option "<name>"`.
/// A NUL byte (which libpq could never see) counts as an invalid character.
pub fn parse_int_param(name: &str, value: &[u8]) -> Result<i32, ConfigError> {
    parse_c_int(value).ok_or_else(|| ConfigError::InvalidInteger {
        name: name.to_owned(),
        value: value.to_vec(),
    })
}

/// `isspace` in the C locale.
pub(crate) fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The grammar of `strtol(value, &end, 10)` plus libpq's checks on `end` and the range.
fn parse_c_int(value: &[u8]) -> Option<i32> {
    let mut i = 0;
    while i < value.len() && is_c_space(value[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < value.len() && (value[i] == b'+' || value[i] == b'-') {
        negative = value[i] == b'-';
        i += 1;
    }
    let digits_start = i;
    // Accumulate in i64 and stop growing once past the i32 range: strtol's `long` would either
    // hold the value (then the int check fails) or overflow (ERANGE); both are failures.
    let mut magnitude: i64 = 0;
    while i < value.len() && value[i].is_ascii_digit() {
        if magnitude <= i64::from(i32::MAX) + 1 {
            magnitude = magnitude * 10 + i64::from(value[i] - b'0');
        }
        i += 1;
    }
    if i == digits_start {
        // No digits: strtol made no progress.
        return None;
    }
    while i < value.len() && is_c_space(value[i]) {
        i += 1;
    }
    if i != value.len() {
        return None;
    }
    let signed = if negative { -magnitude } else { magnitude };
    i32::try_from(signed).ok()
}
