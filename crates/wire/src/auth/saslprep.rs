//! Password normalisation as PostgreSQL does it: SASLprep (RFC 4013) when it applies, the raw
//! bytes when it does not.

use std::borrow::Cow;

/// Normalises `password` the way PostgreSQL's client and server do before SCRAM hashing.
///
/// Pure ASCII passwords are used unchanged (PostgreSQL skips SASLprep for them, even when they
/// hold control characters). Other passwords go through SASLprep; when they are not valid
/// UTF-8, when SASLprep rejects them (prohibited or unassigned code points, bidi rules), or when
/// the mapping step leaves nothing, the raw bytes are used instead, so any byte string can be a
/// password.
pub fn saslprep_password(password: &[u8]) -> Cow<'_, [u8]> {
    if password.is_ascii() {
        return Cow::Borrowed(password);
    }
    let Ok(text) = std::str::from_utf8(password) else {
        return Cow::Borrowed(password);
    };
    match stringprep::saslprep(text) {
        Ok(prepared) if prepared.is_empty() => Cow::Borrowed(password),
        Ok(Cow::Borrowed(same)) => Cow::Borrowed(same.as_bytes()),
        Ok(Cow::Owned(changed)) => Cow::Owned(changed.into_bytes()),
        Err(_) => Cow::Borrowed(password),
    }
}
