//! MD5 password authentication (`AuthenticationMD5Password`, request code 5), both sides, and
//! the cleartext payload (request code 3).
//!
//! The client answers with `"md5" ‖ hex(MD5(hex(MD5(password ‖ user)) ‖ salt))`; the server
//! stores `"md5" ‖ hex(MD5(password ‖ user))`, so the stored value alone suffices to log in.

use md5::{Digest, Md5};

/// Length of an MD5 password or secret: `"md5"` and 32 lowercase hex digits.
pub const MD5_PASSWORD_LEN: usize = 35;

/// The `md5…` string a client sends for `user`/`password` and the server's 4-byte `salt`.
///
/// This is the text only; [`md5_payload`] adds the NUL that the `'p'` message carries.
pub fn md5_password(user: impl AsRef<[u8]>, password: impl AsRef<[u8]>, salt: [u8; 4]) -> String {
    let secret = md5_secret(user, password);
    salted_response(secret.as_bytes(), salt)
}

/// The body of the `'p'` message answering an MD5 request: [`md5_password`] plus a NUL.
pub fn md5_payload(user: impl AsRef<[u8]>, password: impl AsRef<[u8]>, salt: [u8; 4]) -> Vec<u8> {
    let mut out = md5_password(user, password, salt).into_bytes();
    out.push(0);
    out
}

/// The body of the `'p'` message answering an MD5 request from the stored secret alone
/// (`md5` and 32 hex digits), which is all MD5 authentication needs.
pub fn md5_payload_from_secret(secret: &str, salt: [u8; 4]) -> Vec<u8> {
    let mut out = salted_response(secret.as_bytes(), salt).into_bytes();
    out.push(0);
    out
}

/// The secret PostgreSQL stores for MD5 authentication: `"md5" ‖ hex(MD5(password ‖ user))`.
pub fn md5_secret(user: impl AsRef<[u8]>, password: impl AsRef<[u8]>) -> String {
    let mut hasher = Md5::new();
    hasher.update(password.as_ref());
    hasher.update(user.as_ref());
    let mut out = String::with_capacity(MD5_PASSWORD_LEN);
    out.push_str("md5");
    push_hex(&mut out, &hasher.finalize());
    out
}

/// Server side: whether `response` (the client's `md5…` text, with or without its trailing NUL)
/// proves knowledge of `stored_secret` (an `md5…` secret from `pg_authid`) for `salt`.
///
/// A stored secret that is not an MD5 secret never matches (PostgreSQL cannot do MD5
/// authentication against a SCRAM verifier). The comparison takes the same time wherever the
/// first difference is.
pub fn md5_verify(stored_secret: &str, salt: [u8; 4], response: &[u8]) -> bool {
    if !is_md5_secret(stored_secret) {
        return false;
    }
    let response = response.strip_suffix(&[0]).unwrap_or(response);
    let expected = salted_response(&stored_secret.as_bytes()[3..], salt);
    crate::auth::ct_eq(expected.as_bytes(), response)
}

/// Whether `secret` has the shape of a stored MD5 secret (`md5` and 32 lowercase hex digits).
pub fn is_md5_secret(secret: &str) -> bool {
    secret.len() == MD5_PASSWORD_LEN
        && secret.starts_with("md5")
        && secret.as_bytes()[3..]
            .iter()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The body of the `'p'` message answering a cleartext request: the password and a NUL.
///
/// A password containing NUL cannot be sent this way; the server would read only the part
/// before the first NUL (as libpq, which uses C strings, sends).
pub fn cleartext_payload(password: impl AsRef<[u8]>) -> Vec<u8> {
    let password = password.as_ref();
    let end = password
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(password.len());
    let mut out = Vec::with_capacity(end + 1);
    out.extend_from_slice(&password[..end]);
    out.push(0);
    out
}

/// `"md5" ‖ hex(MD5(inner_hex ‖ salt))`, where `inner_hex` is the 32 hex digits of a secret.
fn salted_response(secret: &[u8], salt: [u8; 4]) -> String {
    let inner_hex = secret.strip_prefix(b"md5").unwrap_or(secret);
    let mut hasher = Md5::new();
    hasher.update(inner_hex);
    hasher.update(salt);
    let mut out = String::with_capacity(MD5_PASSWORD_LEN);
    out.push_str("md5");
    push_hex(&mut out, &hasher.finalize());
    out
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}
