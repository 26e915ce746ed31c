//! The connection service file (`pg_service.conf`), as libpq's `parseServiceInfo` and
//! `parseServiceFile` search and read it.
//!
//! Search: `PGSERVICEFILE` (must exist) or else `~/.pg_service.conf` (if it exists); when that
//! file has no group of the name and no error, `$PGSYSCONFDIR/pg_service.conf` (or the compiled
//! `SYSCONFDIR`). Groups are never merged across files. Inside the group the first occurrence of
//! a keyword wins, and explicit values are never overwritten.

use nom::branch::alt;
use nom::bytes::complete::{tag, take_till};
use nom::combinator::{eof, map, opt, rest, value};
use nom::sequence::{preceded, separated_pair};
use nom::{IResult, Parser};

use super::{
    cstr, fgets, is_space, join_path, Environment, FileKind, FileSource, FileStatus, MAXPGPATH,
};
use crate::error::lossy;
use crate::{ConnInfo, Keyword};

/// libpq reads service files with `fgets` into a buffer of this many bytes.
const LINE_BUFFER: usize = 1024;

/// Why the service lookup failed, with libpq 18's texts (without the trailing newline).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// `PGSERVICEFILE` names a file that cannot be opened, or a file that exists cannot be
    /// opened.
    #[error("service file \"{}\" not found", lossy(.path))]
    FileNotFound {
        /// The path as libpq built it.
        path: Vec<u8>,
    },
    /// No searched file has the group.
    #[error("definition of service \"{}\" not found", lossy(.name))]
    ServiceNotFound {
        /// The service name.
        name: Vec<u8>,
    },
    /// A line of the group without `=`, or whose key is not a keyword.
    #[error("syntax error in service file \"{}\", line {line}", lossy(.path))]
    Syntax {
        /// The file.
        path: Vec<u8>,
        /// 1-based line number.
        line: usize,
    },
    /// A `service=` line inside the group.
    #[error("nested service specifications not supported in service file \"{}\", line {line}", lossy(.path))]
    Nested {
        /// The file.
        path: Vec<u8>,
        /// 1-based line number.
        line: usize,
    },
    /// A line of 1023 bytes or more (newline included).
    #[error("line {line} too long in service file \"{}\"", lossy(.path))]
    LineTooLong {
        /// The file.
        path: Vec<u8>,
        /// 1-based line number.
        line: usize,
    },
}

impl ServiceError {
    /// The exact bytes libpq 18 appends to the connection's error message, newline included.
    pub fn libpq_message(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let quoted = |out: &mut Vec<u8>, b: &[u8]| {
            out.push(b'"');
            out.extend_from_slice(b);
            out.push(b'"');
        };
        match self {
            ServiceError::FileNotFound { path } => {
                out.extend_from_slice(b"service file ");
                quoted(&mut out, path);
                out.extend_from_slice(b" not found");
            }
            ServiceError::ServiceNotFound { name } => {
                out.extend_from_slice(b"definition of service ");
                quoted(&mut out, name);
                out.extend_from_slice(b" not found");
            }
            ServiceError::Syntax { path, line } => {
                out.extend_from_slice(b"syntax error in service file ");
                quoted(&mut out, path);
                out.extend_from_slice(format!(", line {line}").as_bytes());
            }
            ServiceError::Nested { path, line } => {
                out.extend_from_slice(
                    b"nested service specifications not supported in service file ",
                );
                quoted(&mut out, path);
                out.extend_from_slice(format!(", line {line}").as_bytes());
            }
            ServiceError::LineTooLong { path, line } => {
                out.extend_from_slice(format!("line {line} too long in service file ").as_bytes());
                quoted(&mut out, path);
            }
        }
        out.push(b'\n');
        out
    }
}

/// The result of reading one service file for one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceScan {
    /// Whether a `[name]` header was seen.
    pub found: bool,
    /// The group's settings in file order (repeats included), up to any error.
    pub settings: Vec<(Keyword, Vec<u8>)>,
    /// The error that stopped reading, if any.
    pub error: Option<ServiceError>,
}

/// Reads `contents` (the file at `path`) for the group `service`, as `parseServiceFile`.
///
/// Only the first `[service]` group counts; lines outside it are not checked. `path` is used
/// in error messages only.
pub fn parse_service_file(contents: &[u8], path: &[u8], service: &[u8]) -> ServiceScan {
    let service = cstr(service);
    let mut scan = ServiceScan::default();
    let mut input = contents;
    let mut line_no = 0usize;
    let error = |make: fn(Vec<u8>, usize) -> ServiceError, line| Some(make(path.to_vec(), line));
    while let Ok((rest, chunk)) = fgets(input, LINE_BUFFER - 1) {
        input = rest;
        line_no += 1;
        // libpq measures the buffer with strlen: a NUL hides the rest of the chunk.
        if cstr(chunk).len() >= LINE_BUFFER - 1 {
            scan.error = error(
                |path, line| ServiceError::LineTooLong { path, line },
                line_no,
            );
            return scan;
        }
        match service_line(trim(cstr(chunk)), service) {
            Line::Blank | Line::Comment => {}
            Line::Group { matches } => {
                if scan.found {
                    break;
                }
                scan.found = matches;
            }
            _ if !scan.found => {}
            Line::Setting { key, value } => {
                if key == b"service" {
                    scan.error = error(|path, line| ServiceError::Nested { path, line }, line_no);
                    return scan;
                }
                let Some(kw) = Keyword::from_name(key) else {
                    scan.error = error(|path, line| ServiceError::Syntax { path, line }, line_no);
                    return scan;
                };
                scan.settings.push((kw, value.to_vec()));
            }
            Line::NoEquals => {
                scan.error = error(|path, line| ServiceError::Syntax { path, line }, line_no);
                return scan;
            }
        }
    }
    scan
}

/// One trimmed line of a service file.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Line<'a> {
    Blank,
    Comment,
    /// A line starting with `[`; libpq only asks whether it starts with `[service]`, so
    /// `[service]junk` opens the group too.
    Group {
        matches: bool,
    },
    /// Split at the first `=`: no trimming around it, so `host = x` has the key `host `.
    Setting {
        key: &'a [u8],
        value: &'a [u8],
    },
    NoEquals,
}

/// Classifies one trimmed line; the group header is matched against `service`.
fn service_line<'a>(line: &'a [u8], service: &[u8]) -> Line<'a> {
    let blank = value(Line::Blank, eof);
    let comment = value(Line::Comment, tag(&b"#"[..]));
    let header = preceded(tag(&b"["[..]), opt((tag(service), tag(&b"]"[..]))));
    let group = map(header, |name| Line::Group {
        matches: name.is_some(),
    });
    let pair = separated_pair(take_till(|b| b == b'='), tag(&b"="[..]), rest);
    let setting = map(pair, |(key, value)| Line::Setting { key, value });
    let parsed: IResult<_, _, ()> = alt((blank, comment, group, setting)).parse(line);
    parsed.map_or(Line::NoEquals, |(_, kind)| kind)
}

/// The service name libpq looks up: the `service` keyword, else `PGSERVICE`.
///
/// An empty name is still a name (it looks for a group `[]`).
pub fn service_name<'a>(info: &'a ConnInfo, env: &'a Environment) -> Option<&'a [u8]> {
    info.get(Keyword::Service)
        .map(cstr)
        .or_else(|| env.var("PGSERVICE"))
}

/// The user service file libpq considers and whether it must exist: `PGSERVICEFILE` (must),
/// else `<home>/.pg_service.conf` (only if present).
pub fn user_service_file(env: &Environment) -> Option<(Vec<u8>, bool)> {
    if let Some(p) = env.var("PGSERVICEFILE") {
        return Some((p[..p.len().min(MAXPGPATH - 1)].to_vec(), true));
    }
    let home = env.home_directory()?;
    Some((join_path(home, b".pg_service.conf"), false))
}

/// The system service file: `$PGSYSCONFDIR/pg_service.conf`, else under the compiled
/// `SYSCONFDIR`.
pub fn system_service_file(env: &Environment) -> Vec<u8> {
    let dir = env.var("PGSYSCONFDIR").unwrap_or(&env.sysconfdir);
    join_path(dir, b"pg_service.conf")
}

/// What applying the service group did.
#[derive(Debug, Default)]
pub(crate) struct ServiceOutcome {
    /// A file had the group.
    pub group_found: bool,
    /// The last file read.
    pub path: Option<Vec<u8>>,
    /// Keywords that took their value from the group.
    pub applied: Vec<Keyword>,
    /// The error, if any.
    pub error: Option<ServiceError>,
}

/// `parseServiceInfo`: finds the group and fills the still-unset keywords of `info` from it.
pub(crate) fn apply_service(
    info: &mut ConnInfo,
    env: &Environment,
    files: &impl FileSource,
) -> ServiceOutcome {
    let mut out = ServiceOutcome::default();
    let Some(name) = service_name(info, env).map(<[u8]>::to_vec) else {
        return out;
    };

    if let Some((path, must_exist)) = user_service_file(env) {
        let status = files.open(&path);
        if must_exist || status != FileStatus::Missing {
            read_into(info, &path, &name, status, &mut out);
            if out.group_found || out.error.is_some() {
                return out;
            }
        }
    }

    let path = system_service_file(env);
    let status = files.open(&path);
    if status != FileStatus::Missing {
        read_into(info, &path, &name, status, &mut out);
        if out.error.is_some() {
            return out;
        }
    }
    if !out.group_found {
        out.error = Some(ServiceError::ServiceNotFound { name });
    }
    out
}

/// Opens and reads one service file, applying its group's settings (first occurrence wins).
fn read_into(
    info: &mut ConnInfo,
    path: &[u8],
    name: &[u8],
    status: FileStatus<'_>,
    out: &mut ServiceOutcome,
) {
    out.path = Some(path.to_vec());
    let contents = match status {
        FileStatus::Missing | FileStatus::Unreadable => {
            out.error = Some(ServiceError::FileNotFound {
                path: path.to_vec(),
            });
            return;
        }
        // A directory opens, and the first read fails: no lines.
        FileStatus::Open(f) if f.kind == FileKind::Directory => &[][..],
        FileStatus::Open(f) => f.contents,
    };
    let scan = parse_service_file(contents, path, name);
    out.group_found = scan.found;
    for (kw, value) in scan.settings {
        if !info.is_set(kw) {
            info.set(kw, value);
            out.applied.push(kw);
        }
    }
    out.error = scan.error;
}

/// Strips C whitespace from both ends.
fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_space(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_space(*last) {
            break;
        }
        s = rest;
    }
    s
}

#[cfg(test)]
mod grammar_tests {
    use super::*;

    #[test]
    fn lines_are_classified_as_libpq_does() {
        let s = |line: &'static [u8]| service_line(line, b"svc");
        assert_eq!(s(b""), Line::Blank);
        assert_eq!(s(b"#[svc]"), Line::Comment);
        assert_eq!(s(b"[svc]"), Line::Group { matches: true });
        assert_eq!(s(b"[svc] more"), Line::Group { matches: true });
        assert_eq!(s(b"[svc"), Line::Group { matches: false });
        assert_eq!(s(b"[svcx]"), Line::Group { matches: false });
        assert_eq!(s(b"[ svc]"), Line::Group { matches: false });
        assert_eq!(
            s(b"host = a=b"),
            Line::Setting {
                key: b"host ",
                value: b" a=b"
            }
        );
        assert_eq!(
            s(b"=x"),
            Line::Setting {
                key: b"",
                value: b"x"
            }
        );
        assert_eq!(s(b"host"), Line::NoEquals);
        assert_eq!(service_line(b"[]", b""), Line::Group { matches: true });
    }

    #[test]
    fn fgets_chunks_stop_at_the_newline_or_the_room() {
        use crate::resolve::fgets;
        assert_eq!(fgets(b"ab\ncd", 10), Ok((&b"cd"[..], &b"ab\n"[..])));
        assert_eq!(fgets(b"\n", 1), Ok((&b""[..], &b"\n"[..])));
        assert_eq!(fgets(b"abc\n", 3), Ok((&b"\n"[..], &b"abc"[..])));
        assert_eq!(fgets(b"ab\n", 3), Ok((&b""[..], &b"ab\n"[..])));
        assert_eq!(fgets(b"abc", 10), Ok((&b""[..], &b"abc"[..])));
        assert!(fgets(b"", 10).is_err());
        assert!(fgets(b"abc", 0).is_err());
    }

    #[test]
    fn a_nul_shortens_an_otherwise_too_long_line() {
        let mut file = b"[s]\nhost=a\0".to_vec();
        file.extend_from_slice(&[b'x'; 1100]);
        let scan = parse_service_file(&file, b"f", b"s");
        // The NUL hides the rest of the 1023-byte chunk; the next chunk is a line of its own.
        assert_eq!(scan.settings, [(Keyword::Host, b"a".to_vec())]);
        assert_eq!(
            scan.error,
            Some(ServiceError::Syntax {
                path: b"f".to_vec(),
                line: 3
            })
        );
    }
}
