//! Socket facts both adapters need in the same form: libpq's reading of an errno, the TCP
//! options the machine asks for, and what a Unix socket "path" names.

use std::io;
use std::path::Path;

use pgyard_connect::{AttemptId, Event, IoErrorKind, TcpOptions};

/// libpq's `IoErrorKind` for a socket error (by errno).
pub fn io_kind(e: &io::Error) -> IoErrorKind {
    match e.raw_os_error() {
        Some(111) => IoErrorKind::ConnectionRefused,
        Some(2) => IoErrorKind::NotFound,
        Some(113) => IoErrorKind::HostUnreachable,
        Some(101) => IoErrorKind::NetworkUnreachable,
        Some(110) => IoErrorKind::TimedOut,
        Some(13) => IoErrorKind::PermissionDenied,
        Some(99) => IoErrorKind::AddrNotAvailable,
        Some(104) => IoErrorKind::ConnectionReset,
        _ if e.kind() == io::ErrorKind::TimedOut => IoErrorKind::TimedOut,
        _ => IoErrorKind::Other(strerror(e)),
    }
}

/// An error's text as the C library's `strerror` gives it (Rust's without ` (os error N)`).
pub(crate) fn strerror(e: &io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// The report a worker sends before [`open_event`] when the machine asked for the peer's
/// user (`Action::Open`'s `peer_user`, a Unix socket under `requirepeer`): who owns the
/// server's end of `sock` (`SO_PEERCRED`, the user ID named through `/etc/passwd`), or
/// libpq's text for why that is not known.
pub fn peer_event(attempt: AttemptId, sock: &impl std::os::fd::AsFd) -> Event {
    let user = peer_uid(sock.as_fd())
        .map_err(|e| format!("could not get peer credentials: {}", strerror(&e)))
        .and_then(crate::env::peer_user_name);
    Event::PeerUser { attempt, user }
}

/// The user ID of the process at the other end of a Unix socket.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn peer_uid(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `fd` is a live descriptor for the call; SO_PEERCRED writes at most `len` bytes
    // into `cred`, a `ucred` of exactly that size, and sets `len` to what it wrote.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Elsewhere there is no `SO_PEERCRED`; libpq says the same where `getpeereid` is a stub.
#[cfg(not(target_os = "linux"))]
fn peer_uid(_fd: std::os::fd::BorrowedFd<'_>) -> io::Result<u32> {
    Err(io::Error::other(
        "requirepeer parameter is not supported on this platform",
    ))
}

/// A worker's report on opening its socket: Opened, or OpenFailed as libpq reads the error.
pub fn open_event<S>(attempt: AttemptId, opened: &io::Result<S>) -> Event {
    match opened {
        Ok(_) => Event::Opened { attempt },
        Err(e) => Event::OpenFailed {
            attempt,
            error: io_kind(e),
        },
    }
}

/// Sets the keepalive and `TCP_USER_TIMEOUT` options the machine asked for on a connected TCP
/// socket (std or tokio: anything with a file descriptor).
pub fn set_tcp_options(sock: &impl std::os::fd::AsFd, opts: &TcpOptions) -> io::Result<()> {
    let r = socket2::SockRef::from(sock);
    r.set_keepalive(opts.keepalives)?;
    // Only what was asked for, as libpq: the keepalive timings stay the system's otherwise
    // (and an empty set would only switch SO_KEEPALIVE on a second time).
    let timed = opts.keepalives_idle.is_some()
        || opts.keepalives_interval.is_some()
        || opts.keepalives_count.is_some();
    if opts.keepalives && timed {
        let mut ka = socket2::TcpKeepalive::new();
        if let Some(d) = opts.keepalives_idle {
            ka = ka.with_time(d);
        }
        if let Some(d) = opts.keepalives_interval {
            ka = ka.with_interval(d);
        }
        if let Some(n) = opts.keepalives_count {
            ka = ka.with_retries(n);
        }
        r.set_tcp_keepalive(&ka)?;
    }
    if let Some(d) = opts.tcp_user_timeout {
        r.set_tcp_user_timeout(Some(d))?;
    }
    Ok(())
}

/// Where a Unix-socket target points: libpq reads a leading `@` as Linux's abstract
/// namespace.
#[derive(Debug)]
pub enum UnixAddress<'a> {
    /// An abstract socket name (without the `@`).
    Abstract(std::os::unix::net::SocketAddr),
    /// A path in the file system.
    Path(&'a Path),
}

/// Reads a Unix-socket target as libpq does.
pub fn unix_address(path: &[u8]) -> io::Result<UnixAddress<'_>> {
    use std::os::unix::ffi::OsStrExt;
    match path.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            Ok(UnixAddress::Abstract(
                std::os::unix::net::SocketAddr::from_abstract_name(name)?,
            ))
        }
        None => Ok(UnixAddress::Path(Path::new(std::ffi::OsStr::from_bytes(
            path,
        )))),
    }
}
