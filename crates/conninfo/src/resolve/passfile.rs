//! The password file (`~/.pgpass`), as libpq's `passwordFromFile` and `pwdfMatchesString`
//! read it.
//!
//! Lines are `host:port:database:username:password`; `\` escapes the next byte; a field that is
//! exactly `*` matches anything; the first matching line wins. libpq consults the file in
//! phase 3 once per host slot when no (or an empty) password was given; the key for a slot
//! comes from [`slot_key`].

use nom::branch::alt;
use nom::bytes::complete::{tag, take};
use nom::combinator::{map, opt, verify};
use nom::multi::fold_many0;
use nom::sequence::preceded;
use nom::{IResult, Parser};

use super::{cstr, fgets, join_path, Environment, FileKind, FileSource, FileStatus};
use crate::error::lossy;

/// The password file's name under the home directory.
pub const PASSFILE_NAME: &str = ".pgpass";

/// libpq's `INITIAL_EXPBUFFER_SIZE`: the first capacity of the line buffer.
const INITIAL_BUFFER: usize = 256;

/// Why a password file was ignored with a warning (libpq prints it to stderr).
///
/// `Display` is libpq's line without its trailing newline.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PassfileWarning {
    /// The path is a directory, device or other non-regular file.
    #[error("WARNING: password file \"{}\" is not a plain file", lossy(.path))]
    NotPlainFile {
        /// The password file path.
        path: Vec<u8>,
    },
    /// Some group or other permission bit is set.
    #[error("WARNING: password file \"{}\" has group or world access; permissions should be u=rw (0600) or less", lossy(.path))]
    GroupOrWorldAccess {
        /// The password file path.
        path: Vec<u8>,
    },
}

impl PassfileWarning {
    /// The exact bytes libpq writes to stderr, newline included.
    pub fn libpq_message(&self) -> Vec<u8> {
        let (head, path, tail): (&[u8], &[u8], &[u8]) = match self {
            PassfileWarning::NotPlainFile { path } => (
                b"WARNING: password file \"",
                path,
                b"\" is not a plain file",
            ),
            PassfileWarning::GroupOrWorldAccess { path } => (
                b"WARNING: password file \"",
                path,
                b"\" has group or world access; permissions should be u=rw (0600) or less",
            ),
        };
        let mut out = Vec::with_capacity(head.len() + path.len() + tail.len() + 1);
        out.extend_from_slice(head);
        out.extend_from_slice(path);
        out.extend_from_slice(tail);
        out.push(b'\n');
        out
    }
}

/// What one password-file consultation gave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassfileOutcome {
    /// The password of the first matching line.
    pub password: Option<Vec<u8>>,
    /// Set when the file was ignored for its type or permissions.
    pub warning: Option<PassfileWarning>,
}

/// The host and port a slot is looked up under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassfileKey<'a> {
    /// The host field to match.
    pub host: &'a [u8],
    /// The port field to match (the raw text; `5432` when empty).
    pub port: &'a [u8],
}

/// Whether libpq reads the password file: only when the password is unset or empty.
pub fn wants_passfile(password: Option<&[u8]>) -> bool {
    !matches!(password, Some(p) if !p.is_empty())
}

/// The password file path: the resolved `passfile` value if non-empty (`PGPASSFILE` arrives
/// there in phase 2), else `<home>/.pgpass`; `None` without a home directory.
pub fn passfile_path(passfile: Option<&[u8]>, env: &Environment) -> Option<Vec<u8>> {
    match passfile.map(cstr) {
        Some(p) if !p.is_empty() => Some(p.to_vec()),
        _ => Some(join_path(env.home_directory()?, PASSFILE_NAME.as_bytes())),
    }
}

/// The password-file key of one host slot, from the slot's `host`, `hostaddr` and raw port
/// (empty = not given).
///
/// Host: `host` if non-empty, else `hostaddr`; empty, or a socket path equal to
/// `default_socket_dir`, becomes `localhost`. Port: the raw text, or `5432` when empty. Names
/// are compared textually, never resolved.
pub fn slot_key<'a>(
    host: &'a [u8],
    hostaddr: &'a [u8],
    port: &'a [u8],
    default_socket_dir: &[u8],
) -> PassfileKey<'a> {
    let host = if host.is_empty() { hostaddr } else { host };
    let is_socket_path = matches!(host.first(), Some(b'/' | b'@'));
    let host: &'a [u8] = if host.is_empty() || (is_socket_path && host == default_socket_dir) {
        b"localhost"
    } else {
        host
    };
    let port: &'a [u8] = if port.is_empty() {
        super::DEFAULT_PORT.as_bytes()
    } else {
        port
    };
    PassfileKey { host, port }
}

/// `passwordFromFile`: checks and searches the file at `path` for the slot `key`.
///
/// Nothing is read when `dbname` or `user` is empty. A file that cannot be opened gives no
/// password and no warning; a non-regular file or one with group/other permission bits gives
/// a warning and is ignored. libpq repeats this (and prints the warning) for every host slot.
pub fn password_from_file(
    files: &impl FileSource,
    path: &[u8],
    key: PassfileKey<'_>,
    dbname: &[u8],
    user: &[u8],
) -> PassfileOutcome {
    let mut out = PassfileOutcome::default();
    if cstr(dbname).is_empty() || cstr(user).is_empty() {
        return out;
    }
    let file = match files.open(path) {
        FileStatus::Missing | FileStatus::Unreadable => return out,
        FileStatus::Open(f) => f,
    };
    if file.kind != FileKind::Regular {
        out.warning = Some(PassfileWarning::NotPlainFile {
            path: path.to_vec(),
        });
        return out;
    }
    if file.mode & 0o077 != 0 {
        out.warning = Some(PassfileWarning::GroupOrWorldAccess {
            path: path.to_vec(),
        });
        return out;
    }
    out.password = lookup(file.contents, key.host, key.port, dbname, user);
    out
}

/// Searches password-file `contents` for the first line matching the four fields and returns
/// its de-escaped password.
///
/// `host` empty means `localhost`, `port` empty means `5432`; `dbname` or `user` empty never
/// matches. The values are compared as C strings (up to any NUL byte). This does not apply the
/// default-socket-directory rule; see [`slot_key`].
pub fn lookup(
    contents: &[u8],
    host: &[u8],
    port: &[u8],
    dbname: &[u8],
    user: &[u8],
) -> Option<Vec<u8>> {
    let (host, port, dbname, user) = (cstr(host), cstr(port), cstr(dbname), cstr(user));
    if dbname.is_empty() || user.is_empty() {
        return None;
    }
    let host: &[u8] = if host.is_empty() { b"localhost" } else { host };
    let port: &[u8] = if port.is_empty() {
        super::DEFAULT_PORT.as_bytes()
    } else {
        port
    };
    let mut found = None;
    for_each_line(contents, |line| {
        if line.first() == Some(&b'#') {
            return false;
        }
        let line = strip_crlf(line);
        if line.is_empty() {
            return false;
        }
        let rest = match_field(line, host)
            .and_then(|r| match_field(r, port))
            .and_then(|r| match_field(r, dbname))
            .and_then(|r| match_field(r, user));
        match rest {
            Some(rest) => {
                found = Some(unescape_password(rest));
                true
            }
            None => false,
        }
    });
    found
}

/// Escapes one field for a password-file line (`\` before `:` and `\`, and before a leading
/// `*` or `#`), or `None` if it holds a byte no line can carry (`\n`, `\r`, NUL).
pub fn escape_field(field: &[u8]) -> Option<Vec<u8>> {
    if field.iter().any(|&b| matches!(b, b'\n' | b'\r' | 0)) {
        return None;
    }
    let mut out = Vec::with_capacity(field.len() + 2);
    for (i, &b) in field.iter().enumerate() {
        if b == b':' || b == b'\\' || (i == 0 && (b == b'*' || b == b'#')) {
            out.push(b'\\');
        }
        out.push(b);
    }
    Some(out)
}

/// One password-file line (without newline) that [`lookup`] matches exactly for these values,
/// or `None` if a value cannot be written (see [`escape_field`]).
pub fn format_line(
    host: &[u8],
    port: &[u8],
    dbname: &[u8],
    user: &[u8],
    password: &[u8],
) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for (i, field) in [host, port, dbname, user, password].into_iter().enumerate() {
        if i > 0 {
            out.push(b':');
        }
        out.extend_from_slice(&escape_field(field)?);
    }
    Some(out)
}

/// Calls `f` with each logical line libpq's read loop assembles, until `f` returns `true`.
///
/// libpq appends `fgets` chunks to a growing buffer and measures them with `strlen`, so a NUL
/// byte drops the rest of its chunk and the line continues with the next chunk; a line counts
/// as complete when the buffer ends with a newline or the read hit the end of the file. The
/// buffer growth is simulated (as a number only) so chunk boundaries match.
fn for_each_line(contents: &[u8], mut f: impl FnMut(&[u8]) -> bool) {
    let mut buf: Vec<u8> = Vec::new();
    let mut capacity = INITIAL_BUFFER;
    let mut input = contents;
    while !input.is_empty() {
        // enlargePQExpBuffer(&buf, 128): room for 128 more bytes and the terminator.
        let needed = buf.len() + 128 + 1;
        if needed >= i32::MAX as usize {
            return;
        }
        while needed > capacity {
            capacity = capacity.saturating_mul(2);
        }
        // fgets(buf + len, capacity - len): at most capacity - len - 1 bytes, through '\n'.
        let max = capacity - buf.len() - 1;
        let Ok((rest, chunk)) = fgets(input, max) else {
            return;
        };
        input = rest;
        let hit_eof = input.is_empty() && chunk.last() != Some(&b'\n') && chunk.len() < max;
        buf.extend_from_slice(cstr(chunk));
        let complete = buf.last() == Some(&b'\n');
        if !complete && !hit_eof {
            continue;
        }
        if f(&buf) {
            return;
        }
        buf.clear();
        if hit_eof {
            return;
        }
    }
}

/// `pg_strip_crlf`: drops every trailing `\r` and `\n`.
fn strip_crlf(mut s: &[u8]) -> &[u8] {
    while let [rest @ .., b'\r' | b'\n'] = s {
        s = rest;
    }
    s
}

/// `pwdfMatchesString`: if the field at the start of `buf` matches `token`, the text after its
/// terminating `:`.
///
/// The token is compared byte by byte with `\x` read as `x`, so an unescaped `:` still matches
/// a `:` of the token; only the `:` after the whole token must be unescaped.
fn match_field<'a>(buf: &'a [u8], token: &[u8]) -> Option<&'a [u8]> {
    let wildcard: IResult<_, _, ()> = tag(&b"*:"[..]).parse(buf);
    if let Ok((rest, _)) = wildcard {
        return Some(rest);
    }
    let mut input = buf;
    for &want in token {
        let (rest, got) = field_byte(input).ok()?;
        if got != want {
            return None;
        }
        input = rest;
    }
    let end: IResult<_, _, ()> = tag(&b":"[..]).parse(input);
    end.ok().map(|(rest, _)| rest)
}

/// One byte of a field, after an optional escaping `\` (a lone trailing `\` is no byte).
fn field_byte(input: &[u8]) -> IResult<&[u8], u8, ()> {
    map(
        preceded(opt(tag(&b"\\"[..])), take(1usize)),
        |b: &[u8]| b[0],
    )
    .parse(input)
}

/// The password field: bytes up to the first unescaped `:`, with `\x` read as `x` (a lone
/// trailing backslash is kept).
fn unescape_password(rest: &[u8]) -> Vec<u8> {
    let escaped = preceded(tag(&b"\\"[..]), take(1usize));
    let plain = verify(take(1usize), |b: &[u8]| b[0] != b':');
    let mut password = fold_many0(
        alt((escaped, plain)),
        || Vec::with_capacity(rest.len()),
        |mut out, b: &[u8]| {
            out.push(b[0]);
            out
        },
    );
    let parsed: IResult<_, _, ()> = password.parse(rest);
    parsed.map(|(_, out)| out).unwrap_or_default()
}

#[cfg(test)]
mod grammar_tests {
    use super::*;

    #[test]
    fn a_token_colon_matches_an_unescaped_colon() {
        // pwdfMatchesString compares bytes until the token ends: `a:b` matches `a:b` as well as
        // `a\:b`, and the field ends only at a `:` after the whole token.
        let file = b"a:b:1:d:u:plain\n";
        assert_eq!(
            lookup(file, b"a:b", b"1", b"d", b"u"),
            Some(b"plain".to_vec())
        );
        assert_eq!(
            lookup(b"a\\:b:1:d:u:esc\n", b"a:b", b"1", b"d", b"u"),
            Some(b"esc".to_vec())
        );
        assert_eq!(
            lookup(file, b"a", b"b", b"1", b"d"),
            Some(b"u".to_vec()),
            "the same line also splits at every colon"
        );
    }

    #[test]
    fn a_field_never_ends_in_a_lone_backslash() {
        assert_eq!(match_field(b"ab\\", b"ab\\"), None);
        assert_eq!(match_field(b"ab\\\\:rest", b"ab\\"), Some(&b"rest"[..]));
        assert_eq!(match_field(b"ab\\:", b"ab"), None, "escaped terminator");
        assert_eq!(match_field(b"*:x", b"anything"), Some(&b"x"[..]));
        assert_eq!(
            match_field(b"\\*:x", b"*"),
            Some(&b"x"[..]),
            "escaped star is literal"
        );
        assert_eq!(
            match_field(b"*x:y", b"*x"),
            Some(&b"y"[..]),
            "star only alone"
        );
    }

    #[test]
    fn comment_lines_are_recognised_before_crlf_stripping() {
        assert_eq!(lookup(b"#h:1:d:u:x\r\n", b"#h", b"1", b"d", b"u"), None);
        assert_eq!(
            lookup(b"\r\nh:1:d:u:x\r\n", b"h", b"1", b"d", b"u"),
            Some(b"x".to_vec())
        );
    }

    #[test]
    fn the_password_stops_at_the_first_unescaped_colon() {
        assert_eq!(unescape_password(b"p\\:w:x"), b"p:w");
        assert_eq!(unescape_password(b":x"), b"");
        assert_eq!(unescape_password(b"\\\\\\"), b"\\\\");
        assert_eq!(unescape_password(b""), b"");
    }

    #[test]
    fn lines_are_assembled_across_fgets_chunks() {
        let mut lines = Vec::new();
        let long = [&[b'y'; 700][..], b"\nz"].concat();
        for_each_line(&long, |l| {
            lines.push(l.len());
            false
        });
        assert_eq!(lines, [701, 1]);
        // A NUL drops the rest of its chunk only; the line goes on with the next chunk.
        let nul = [&b"ab\0"[..], &[b'q'; 300], b"cd\n"].concat();
        let mut got = Vec::new();
        for_each_line(&nul, |l| {
            got.push(l.to_vec());
            true
        });
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with(b"ab") && got[0].ends_with(b"cd\n"));
    }
}
