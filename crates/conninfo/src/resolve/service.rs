//! The connection service file (`pg_service.conf`), as libpq's `parseServiceInfo` and
//! `parseServiceFile` search and read it.
//!
//! Search: `PGSERVICEFILE` (must exist) or else `~/.pg_service.conf` (if it exists); when that
//! file has no group of the name and no error, `$PGSYSCONFDIR/pg_service.conf` (or the compiled
//! `SYSCONFDIR`). Groups are never merged across files. Inside the group the first occurrence of
//! a keyword wins, and explicit values are never overwritten.

use super::{cstr, is_space, join_path, Environment, FileKind, FileSource, FileStatus, MAXPGPATH};
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
    let mut pos = 0;
    let mut line_no = 0usize;
    while pos < contents.len() {
        // One `fgets(buf, 1024, f)`: up to 1023 bytes, ending after a newline.
        let limit = contents.len().min(pos + LINE_BUFFER - 1);
        let end = contents[pos..limit]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(limit, |i| pos + i + 1);
        let chunk = cstr(&contents[pos..end]);
        pos = end;
        line_no += 1;

        if chunk.len() >= LINE_BUFFER - 1 {
            scan.error = Some(ServiceError::LineTooLong {
                path: path.to_vec(),
                line: line_no,
            });
            return scan;
        }
        let line = trim(chunk);
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        if line[0] == b'[' {
            if scan.found {
                break;
            }
            let rest = &line[1..];
            scan.found = rest.starts_with(service) && rest.get(service.len()) == Some(&b']');
            continue;
        }
        if !scan.found {
            continue;
        }
        let Some(eq) = line.iter().position(|&b| b == b'=') else {
            scan.error = Some(ServiceError::Syntax {
                path: path.to_vec(),
                line: line_no,
            });
            return scan;
        };
        let (key, value) = (&line[..eq], &line[eq + 1..]);
        if key == b"service" {
            scan.error = Some(ServiceError::Nested {
                path: path.to_vec(),
                line: line_no,
            });
            return scan;
        }
        match Keyword::from_name(key) {
            Some(kw) => scan.settings.push((kw, value.to_vec())),
            None => {
                scan.error = Some(ServiceError::Syntax {
                    path: path.to_vec(),
                    line: line_no,
                });
                return scan;
            }
        }
    }
    scan
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
