//! The proxy's Unix-domain socket, `DIR/.s.PGSQL.PORT`: the file libpq (and every driver that
//! follows it) connects to for `host=DIR port=PORT`, as PostgreSQL and PgBouncer name theirs.
//!
//! A socket file left behind by a process that died is replaced; a socket another process
//! still accepts on is not (binding over it would take its clients, so starting fails and says
//! so); a file that is not a socket is never touched. The file is readable and writable by
//! everyone (mode 0777, the default of PostgreSQL's `unix_socket_permissions` and PgBouncer's
//! `unix_socket_mode`): who may log in is the auth's business, not the file's. It is removed
//! when the listener goes, unless another process has put a socket of its own there since.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};

/// A listening Unix-domain socket and the file that names it.
#[derive(Debug)]
pub(super) struct UnixSocket {
    listener: UnixListener,
    path: PathBuf,
    port: u16,
    /// The socket file's device and inode, to remove only our own.
    file: (u64, u64),
}

/// The socket file's name for `port` in `dir`.
pub fn socket_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

impl UnixSocket {
    /// Listens on `DIR/.s.PGSQL.PORT` (on a tokio runtime); the error names the path.
    pub(super) fn bind(dir: &Path, port: u16) -> io::Result<UnixSocket> {
        let path = socket_path(dir, port);
        let context = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("cannot listen on {}: {e}", path.display()),
            )
        };
        clear_stale(&path).map_err(context)?;
        let listener = UnixListener::bind(&path).map_err(context)?;
        let meta = std::fs::metadata(&path).map_err(context)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).map_err(context)?;
        Ok(UnixSocket {
            listener,
            file: (meta.dev(), meta.ino()),
            path,
            port,
        })
    }

    /// The socket file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The port its name carries.
    pub(super) fn port(&self) -> u16 {
        self.port
    }

    /// The next client.
    pub(super) async fn accept(&self) -> io::Result<UnixStream> {
        self.listener.accept().await.map(|(s, _)| s)
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let ours =
            std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.file);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Removes a socket file at `path` that nothing accepts on any more; refuses one that is
/// alive, and anything that is not a socket.
fn clear_stale(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the path exists and is not a socket",
        ));
    }
    // A non-blocking connect: a live listener whose backlog is full answers EAGAIN at once
    // rather than holding the start-up, and counts as alive.
    let probe = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    probe.set_nonblocking(true)?;
    match probe.connect(&socket2::SockAddr::unix(path)?) {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .or_else(|e| match e.kind() {
                io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Ok(()) => Err(in_use()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(in_use()),
        Err(e) => Err(e),
    }
}

fn in_use() -> io::Error {
    io::Error::new(
        io::ErrorKind::AddrInUse,
        "another process accepts connections on this socket",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder, removed when dropped.
    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl std::ops::Deref for Dir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    /// A fresh folder per test, short enough for a socket path (at most 107 bytes).
    fn dir() -> Dir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("pgyard-u{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        Dir(d)
    }

    #[tokio::test]
    async fn binds_world_writable_and_removes_its_file_when_dropped() {
        let d = dir();
        let s = UnixSocket::bind(&d, 6432).expect("bind");
        let path = d.join(".s.PGSQL.6432");
        assert_eq!(s.path(), path);
        let mode = std::fs::metadata(&path)
            .expect("socket file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o777);
        let client = tokio::spawn({
            let path = path.clone();
            async move { UnixStream::connect(path).await.expect("connect") }
        });
        s.accept().await.expect("accept");
        client.await.expect("client");
        drop(s);
        assert!(!path.exists(), "the socket file goes with the listener");
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_refused() {
        let d = dir();
        let path = socket_path(&d, 7000);
        // Left behind: a socket file nothing listens on any more.
        drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
        assert!(path.exists());
        let live = UnixSocket::bind(&d, 7000).expect("a stale file is replaced");
        let e = UnixSocket::bind(&d, 7000).expect_err("a live socket is not taken over");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains(".s.PGSQL.7000"), "{e}");
        // The refused second bind did not remove the first one's file.
        assert!(path.exists());
        drop(live);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_socket_is_left_alone() {
        let d = dir();
        let path = socket_path(&d, 7001);
        std::fs::write(&path, b"keep me").expect("write");
        let e = UnixSocket::bind(&d, 7001).expect_err("not a socket");
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&path).expect("still there"), b"keep me");
    }

    #[tokio::test]
    async fn a_socket_replaced_by_another_process_is_not_removed() {
        let d = dir();
        let path = socket_path(&d, 7002);
        let s = UnixSocket::bind(&d, 7002).expect("bind");
        // Someone removes the file and binds their own there.
        std::fs::remove_file(&path).expect("remove");
        let theirs = std::os::unix::net::UnixListener::bind(&path).expect("bind theirs");
        drop(s);
        assert!(path.exists(), "another process's socket stays");
        drop(theirs);
    }

    #[tokio::test]
    async fn a_path_too_long_for_a_socket_is_named() {
        let base = dir();
        let d = base.join("d".repeat(100));
        let e = UnixSocket::bind(&d, 7004).expect_err("too long");
        assert!(e.to_string().contains("cannot listen on"), "{e}");
        assert!(e.to_string().contains(".s.PGSQL.7004"), "{e}");
    }

    #[tokio::test]
    async fn a_missing_folder_is_named_in_the_error() {
        let base = dir();
        let d = base.join("missing");
        let e = UnixSocket::bind(&d, 7003).expect_err("no folder");
        assert!(e.to_string().contains("missing/.s.PGSQL.7003"), "{e}");
    }
}
