//! libpq 18's connect entry points (`PQconnectdb`, `PQstatus`, `PQerrorMessage`, `PQport`,
//! `PQfinish`), loaded at run time from pgyard-testkit's PostgreSQL 18 install, for the
//! `connect` benchmark. pgyard-testkit's own loader wraps only the parse-time functions.
//!
//! The library is opened with `RTLD_DEEPBIND`: this crate links Debian's libpq 15 (same soname,
//! same unversioned symbol names) for the `conninfo` benchmark, and without it libpq 18's calls
//! into its own exported functions could bind to libpq 15's copies.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::Path;
use std::ptr::NonNull;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

/// glibc's `RTLD_DEEPBIND` (`<dlfcn.h>`): the library's own symbols come before the global ones.
const RTLD_DEEPBIND: c_int = 0x0008;

/// `CONNECTION_OK` of libpq's `ConnStatusType`.
const CONNECTION_OK: c_int = 0;

/// TLS libraries of the npm build, loaded from libpq's folder first (as pgyard-testkit does) so
/// that libpq's `NEEDED` entries resolve to these copies, never to a system OpenSSL.
const COMPANIONS: &[&str] = &["libcrypto.so.1.1", "libssl.so.1.1"];

type ConnectdbFn = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type StatusFn = unsafe extern "C" fn(*const c_void) -> c_int;
type TextFn = unsafe extern "C" fn(*const c_void) -> *const c_char;
type FinishFn = unsafe extern "C" fn(*mut c_void);

/// A loaded libpq 18 with the entry points needed to open and close a connection.
pub struct Libpq18 {
    connectdb: ConnectdbFn,
    status: StatusFn,
    error_message: TextFn,
    port: TextFn,
    finish: FinishFn,
    // Last, and never dropped before the pointers above: they point into these libraries.
    _libs: Vec<Library>,
}

impl Libpq18 {
    /// Loads libpq from `path` (e.g. `Install::libpq`), after the TLS libraries in its folder.
    pub fn load(path: &Path) -> Result<Libpq18, String> {
        let open = |p: &Path| {
            // SAFETY: loading runs the libraries' initializers; OpenSSL's and libpq's are safe to
            // run in any process.
            unsafe { Library::open(Some(p), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) }
                .map_err(|e| format!("cannot load {}: {e}", p.display()))
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut libs = Vec::new();
        for name in COMPANIONS {
            let companion = dir.join(name);
            if companion.exists() {
                libs.push(open(&companion)?);
            }
        }
        let lib = open(path)?;
        let err = |e: libloading::Error| format!("{}: {e}", path.display());
        // SAFETY: the function types match the prototypes in libpq-fe.h (a `PGconn *` is passed
        // as an opaque pointer); the pointers are used only while `lib` lives, since it is
        // stored with them.
        let (connectdb, status, error_message, port, finish) = unsafe {
            (
                *lib.get::<ConnectdbFn>(b"PQconnectdb\0").map_err(err)?,
                *lib.get::<StatusFn>(b"PQstatus\0").map_err(err)?,
                *lib.get::<TextFn>(b"PQerrorMessage\0").map_err(err)?,
                *lib.get::<TextFn>(b"PQport\0").map_err(err)?,
                *lib.get::<FinishFn>(b"PQfinish\0").map_err(err)?,
            )
        };
        libs.push(lib);
        Ok(Libpq18 {
            connectdb,
            status,
            error_message,
            port,
            finish,
            _libs: libs,
        })
    }

    /// `PQconnectdb(conninfo)`, then `PQstatus`: the open connection, or `PQerrorMessage`'s
    /// text (the failed connection is `PQfinish`ed first).
    pub fn connect(&self, conninfo: &CStr) -> Result<Conn<'_>, String> {
        // SAFETY: `conninfo` is NUL-terminated and outlives the call; libpq keeps no pointer to it.
        let raw = unsafe { (self.connectdb)(conninfo.as_ptr()) };
        let Some(ptr) = NonNull::new(raw) else {
            return Err("PQconnectdb returned NULL (out of memory)".to_owned());
        };
        let conn = Conn { lib: self, ptr };
        // SAFETY: `ptr` is a live `PGconn` owned by `conn`.
        if unsafe { (self.status)(ptr.as_ptr()) } == CONNECTION_OK {
            Ok(conn)
        } else {
            Err(conn.text(self.error_message))
        }
    }
}

/// An open libpq connection; `PQfinish`ed on drop.
pub struct Conn<'a> {
    lib: &'a Libpq18,
    ptr: NonNull<c_void>,
}

impl Conn<'_> {
    /// `PQport`: the port of the server this connection reached.
    pub fn port(&self) -> String {
        self.text(self.lib.port)
    }

    fn text(&self, f: TextFn) -> String {
        // SAFETY: `ptr` is a live `PGconn`; the accessor returns NULL or a NUL-terminated string
        // owned by the connection, copied here before the connection can be finished.
        unsafe {
            let p = f(self.ptr.as_ptr());
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `PQconnectdb` and is finished exactly once, here.
        unsafe { (self.lib.finish)(self.ptr.as_ptr()) }
    }
}
