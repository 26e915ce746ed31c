//! libpq 18 loaded at run time, as the oracle that pgyard's parser is compared against.
//!
//! The parse-time entry points are wrapped: `PQconninfoParse`, `PQconndefaults`,
//! `PQconninfoFree`, `PQfreemem` and `PQlibVersion`; and, for the password libpq settles on
//! (the string's, the service file's, or the password file's), `PQconnectdb`, `PQpass` and
//! `PQfinish` ([`Libpq::password_for`], which opens a connection), and `PQuser`, `PQdb`,
//! `PQhost`, `PQport` and `PQoptions` ([`Libpq::resolved_for`]) for what it resolved, and
//! `PQerrorMessage` ([`Libpq::connect_error`]) for why it failed.
//!
//! The library is loaded once per process ([`Libpq::shared`]); every call copies what libpq
//! returns into owned Rust values and frees libpq's memory before returning.
//!
//! libpq takes C strings, so an input holding a NUL byte cannot be handed to it: libpq would
//! only ever see the part before the NUL. [`Libpq::conninfo_parse`] panics on such input;
//! callers skip those cases (pgyard rejects them with its own error).

#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

/// libpq's `PQconninfoOption`, field for field (`libpq-fe.h`).
#[repr(C)]
struct PQconninfoOption {
    keyword: *mut c_char,
    envvar: *mut c_char,
    compiled: *mut c_char,
    val: *mut c_char,
    label: *mut c_char,
    dispchar: *mut c_char,
    dispsize: c_int,
}

type ConninfoParseFn =
    unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> *mut PQconninfoOption;
type ConndefaultsFn = unsafe extern "C" fn() -> *mut PQconninfoOption;
type ConninfoFreeFn = unsafe extern "C" fn(*mut PQconninfoOption);
type FreememFn = unsafe extern "C" fn(*mut c_void);
type LibVersionFn = unsafe extern "C" fn() -> c_int;
type ConnectdbFn = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type PassFn = unsafe extern "C" fn(*const c_void) -> *const c_char;
type FinishFn = unsafe extern "C" fn(*mut c_void);
type StatusFn = unsafe extern "C" fn(*const c_void) -> c_int;

/// The TLS libraries a libpq build links against, in dependency order. Each one present in
/// libpq's own folder is loaded by full path before libpq, so the dynamic loader then resolves
/// libpq's `NEEDED` entry by soname to that copy, never to a system OpenSSL of another version.
/// (The npm build also carries `RUNPATH=$ORIGIN`, which finds them too; the explicit load keeps
/// working when libpq is loaded through a symlink or copied without that rpath.)
const COMPANIONS: &[&str] = &[
    "libcrypto.so.1.1",
    "libssl.so.1.1",
    "libcrypto.so.3",
    "libssl.so.3",
];

/// A copy of a C string libpq returned (`None` for NULL).
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn owned(p: *const c_char) -> Option<Vec<u8>> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
}

/// What a connection object holds after `PQconnectdb`: the values libpq resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// `PQuser`.
    pub user: Vec<u8>,
    /// `PQdb`.
    pub db: Vec<u8>,
    /// `PQhost` (the host it tried last).
    pub host: Vec<u8>,
    /// `PQport` (of that host).
    pub port: Vec<u8>,
    /// `PQoptions`.
    pub options: Vec<u8>,
}

/// Why libpq could not be loaded.
#[derive(Debug)]
pub struct LoadError {
    /// The library (libpq or a companion) that failed.
    pub path: PathBuf,
    /// What the dynamic loader said.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot load {}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for LoadError {}

/// One row of `PQconndefaults()`: a keyword with its environment variable and compiled default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnDefault {
    /// The keyword (`PQconninfoOption.keyword`).
    pub keyword: String,
    /// The environment variable consulted for it, if any (`envvar`).
    pub envvar: Option<String>,
    /// The compiled-in default, if any (`compiled`); unaffected by the environment.
    pub compiled: Option<String>,
    /// The value after defaults from the environment and service file (`val`).
    pub val: Option<Vec<u8>>,
    /// How libpq displays it (`dispchar`): `""`, `"*"` (secret) or `"D"` (debug).
    pub dispchar: String,
}

/// A loaded libpq with the entry points the oracle needs.
pub struct Libpq {
    path: PathBuf,
    conninfo_parse: ConninfoParseFn,
    conndefaults: ConndefaultsFn,
    conninfo_free: ConninfoFreeFn,
    freemem: FreememFn,
    lib_version: LibVersionFn,
    connectdb: ConnectdbFn,
    pass: PassFn,
    finish: FinishFn,
    /// `PQuser`, `PQdb`, `PQhost`, `PQport`, `PQoptions`, in [`Resolved`]'s order.
    accessors: [PassFn; 5],
    error_message: PassFn,
    /// `PQstatus`, then `PQsslInUse`.
    status: [StatusFn; 2],
    // Kept last and never dropped early: the function pointers above point into it.
    _libs: Vec<Library>,
}

impl fmt::Debug for Libpq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Libpq")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Libpq {
    /// Loads libpq from `path`, first loading the companion libraries found in its folder.
    pub fn load(path: &Path) -> Result<Libpq, LoadError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut libs = Vec::new();
        for name in COMPANIONS {
            let companion = dir.join(name);
            if companion.exists() {
                libs.push(open(&companion, RTLD_NOW | RTLD_LOCAL)?);
            }
        }
        let lib = open(path, RTLD_NOW | RTLD_LOCAL)?;
        let err = |e: libloading::Error| LoadError {
            path: path.to_owned(),
            message: e.to_string(),
        };
        // SAFETY: the symbol types match the prototypes in libpq-fe.h; the pointers are only
        // used while `lib` is alive, because `lib` is stored in the returned value with them.
        let (conninfo_parse, conndefaults, conninfo_free, freemem, lib_version) = unsafe {
            (
                *lib.get::<ConninfoParseFn>(b"PQconninfoParse\0")
                    .map_err(err)?,
                *lib.get::<ConndefaultsFn>(b"PQconndefaults\0")
                    .map_err(err)?,
                *lib.get::<ConninfoFreeFn>(b"PQconninfoFree\0")
                    .map_err(err)?,
                *lib.get::<FreememFn>(b"PQfreemem\0").map_err(err)?,
                *lib.get::<LibVersionFn>(b"PQlibVersion\0").map_err(err)?,
            )
        };
        // SAFETY: as above, the prototypes of libpq-fe.h, used only while `lib` lives.
        let (connectdb, finish) = unsafe {
            (
                *lib.get::<ConnectdbFn>(b"PQconnectdb\0").map_err(err)?,
                *lib.get::<FinishFn>(b"PQfinish\0").map_err(err)?,
            )
        };
        // SAFETY: each of these takes a `const PGconn *` and returns a string the connection
        // owns (libpq-fe.h); used only while `lib` lives, as above.
        let string_of = |name: &[u8]| unsafe { lib.get::<PassFn>(name).map(|f| *f).map_err(err) };
        let pass = string_of(b"PQpass\0")?;
        let accessors = [
            string_of(b"PQuser\0")?,
            string_of(b"PQdb\0")?,
            string_of(b"PQhost\0")?,
            string_of(b"PQport\0")?,
            string_of(b"PQoptions\0")?,
        ];
        let error_message = string_of(b"PQerrorMessage\0")?;
        // SAFETY: both take a `const PGconn *` and return an int (libpq-fe.h); used only
        // while `lib` lives, as above.
        let int_of = |name: &[u8]| unsafe { lib.get::<StatusFn>(name).map(|f| *f).map_err(err) };
        let status = [int_of(b"PQstatus\0")?, int_of(b"PQsslInUse\0")?];
        libs.push(lib);
        Ok(Libpq {
            path: path.to_owned(),
            conninfo_parse,
            conndefaults,
            conninfo_free,
            freemem,
            lib_version,
            connectdb,
            pass,
            finish,
            accessors,
            error_message,
            status,
            _libs: libs,
        })
    }

    /// The process-wide libpq 18 from the PostgreSQL 18 cache, installed and loaded on first use.
    pub fn shared() -> Result<&'static Libpq, String> {
        static SHARED: OnceLock<Result<Libpq, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                let install = crate::postgres::ensure_installed()
                    .map_err(|e| format!("installing PostgreSQL 18 failed: {e}"))?;
                Libpq::load(&install.libpq).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The file this libpq was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `PQlibVersion()`, e.g. `180004` for 18.4.
    pub fn lib_version(&self) -> i32 {
        // SAFETY: PQlibVersion takes no arguments and only returns a constant.
        unsafe { (self.lib_version)() }
    }

    /// `PQconninfoParse(input)`: `Ok` holds the keywords that were set, in table order, with
    /// their values; `Err` holds libpq's exact `errmsg` bytes (trailing newline included).
    ///
    /// # Panics
    /// If `input` contains a NUL byte (libpq cannot see past it), or if libpq reports failure
    /// without a message (out of memory).
    pub fn conninfo_parse(&self, input: &[u8]) -> Result<Vec<(String, Vec<u8>)>, Vec<u8>> {
        let c = CString::new(input).expect("libpq cannot be given input containing a NUL byte");
        let mut errmsg: *mut c_char = std::ptr::null_mut();
        // SAFETY: `c` is a valid NUL-terminated string that outlives the call; `errmsg` is a
        // valid out-pointer. libpq does not keep either pointer.
        let opts = unsafe { (self.conninfo_parse)(c.as_ptr(), &mut errmsg) };
        if opts.is_null() {
            assert!(
                !errmsg.is_null(),
                "PQconninfoParse failed without a message"
            );
            // SAFETY: a non-null errmsg is a NUL-terminated string malloc'ed by libpq, which
            // we copy and then release exactly once with PQfreemem.
            let msg = unsafe {
                let msg = CStr::from_ptr(errmsg).to_bytes().to_vec();
                (self.freemem)(errmsg.cast());
                msg
            };
            return Err(msg);
        }
        // On success libpq leaves errmsg NULL; free it defensively if it did not.
        if !errmsg.is_null() {
            // SAFETY: errmsg was allocated by libpq and is freed once.
            unsafe { (self.freemem)(errmsg.cast()) };
        }
        // SAFETY: `opts` is a non-null array returned by PQconninfoParse; it is read up to its
        // terminating entry and then freed once with PQconninfoFree.
        let rows = unsafe { self.take_options(opts) };
        Ok(rows
            .into_iter()
            .filter_map(|r| r.val.map(|v| (r.keyword, v)))
            .collect())
    }

    /// The password libpq settles on for `conninfo`'s first host (`PQpass` after
    /// `PQconnectdb`, then `PQfinish`), `None` when it has none. This connects: give a
    /// string whose server refuses at once (a port nothing listens on) so that it returns
    /// quickly; the environment and files libpq reads are this process's.
    ///
    /// # Panics
    /// If `conninfo` contains a NUL byte, or libpq cannot allocate a connection object.
    pub fn password_for(&self, conninfo: &str) -> Option<Vec<u8>> {
        self.with_connection(conninfo, |conn| {
            // SAFETY: `conn` is live for the closure; PQpass returns a string it owns.
            unsafe { owned((self.pass)(conn)) }
        })
        .filter(|p| !p.is_empty())
    }

    /// What libpq resolved for `conninfo` (`PQuser`, `PQdb`, `PQhost`, `PQport`,
    /// `PQoptions` after `PQconnectdb`), the host and port of the host it tried last. This
    /// connects, as [`Libpq::password_for`] does.
    ///
    /// # Panics
    /// As [`Libpq::password_for`].
    pub fn resolved_for(&self, conninfo: &str) -> Resolved {
        self.with_connection(conninfo, |conn| {
            // SAFETY: `conn` is live for the closure; each accessor returns a string it owns.
            let [user, db, host, port, options] = self
                .accessors
                .map(|f| unsafe { owned(f(conn)) }.unwrap_or_default());
            Resolved {
                user,
                db,
                host,
                port,
                options,
            }
        })
    }

    /// `PQerrorMessage` after `PQconnectdb(conninfo)`: libpq's whole text of why the connect
    /// failed (empty when it did not). This connects, as [`Libpq::password_for`] does.
    ///
    /// # Panics
    /// As [`Libpq::password_for`].
    pub fn connect_error(&self, conninfo: &str) -> Vec<u8> {
        self.with_connection(conninfo, |conn| {
            // SAFETY: `conn` is live for the closure; the message is a string it owns.
            unsafe { owned((self.error_message)(conn)) }.unwrap_or_default()
        })
    }

    /// [`Libpq::connect_error`] as text, without its final newline(s): what a driver's error
    /// `Display` is compared with.
    ///
    /// # Panics
    /// As [`Libpq::password_for`].
    pub fn connect_error_text(&self, conninfo: &str) -> String {
        let text = self.connect_error(conninfo);
        String::from_utf8_lossy(&text).trim_end().to_owned()
    }

    /// One `PQconnectdb(conninfo)`: where it landed (`PQport`) and whether over TLS
    /// (`PQsslInUse`) when `PQstatus` says it is up, else `PQerrorMessage` without its final
    /// newline(s).
    ///
    /// # Panics
    /// As [`Libpq::password_for`].
    pub fn connect_outcome(&self, conninfo: &str) -> Result<(Vec<u8>, bool), String> {
        self.with_connection(conninfo, |conn| {
            let [status, ssl] = self.status;
            // SAFETY: `conn` is live for the closure; PQstatus and PQsslInUse only read it,
            // and the strings read are ones it owns.
            unsafe {
                // CONNECTION_OK is 0.
                if status(conn) == 0 {
                    let port = owned((self.accessors[3])(conn)).unwrap_or_default();
                    Ok((port, ssl(conn) != 0))
                } else {
                    let text = owned((self.error_message)(conn)).unwrap_or_default();
                    Err(String::from_utf8_lossy(&text).trim_end().to_owned())
                }
            }
        })
    }

    /// Runs `f` on the connection object `PQconnectdb(conninfo)` made, then `PQfinish`es it.
    fn with_connection<R>(&self, conninfo: &str, f: impl FnOnce(*const c_void) -> R) -> R {
        let c = CString::new(conninfo).expect("a connection string without NUL");
        // SAFETY: `c` is NUL-terminated and outlives the call; the connection object is only
        // handed to `f` and then freed once with PQfinish.
        unsafe {
            let conn = (self.connectdb)(c.as_ptr());
            assert!(!conn.is_null(), "PQconnectdb returned NULL");
            let out = f(conn);
            (self.finish)(conn);
            out
        }
    }

    /// `PQconndefaults()`: every keyword in table order with its env var, compiled default and
    /// defaulted value (read from this process's environment and service file).
    ///
    /// # Panics
    /// If libpq returns NULL (out of memory).
    pub fn conndefaults(&self) -> Vec<ConnDefault> {
        // SAFETY: PQconndefaults takes no arguments and returns a fresh array or NULL.
        let opts = unsafe { (self.conndefaults)() };
        assert!(!opts.is_null(), "PQconndefaults returned NULL");
        // SAFETY: `opts` is a non-null array returned by PQconndefaults, read to its end and
        // then freed once.
        unsafe { self.take_options(opts) }
    }

    /// The keyword names of `PQconndefaults()`, in libpq's table order.
    pub fn conndefaults_keywords(&self) -> Vec<String> {
        self.conndefaults().into_iter().map(|d| d.keyword).collect()
    }

    /// Copies a `PQconninfoOption` array into owned rows and frees it.
    ///
    /// # Safety
    /// `opts` must be a non-null array returned by this libpq, terminated by an entry whose
    /// keyword is NULL, and not used again afterwards.
    unsafe fn take_options(&self, opts: *mut PQconninfoOption) -> Vec<ConnDefault> {
        let mut rows = Vec::new();
        let mut p = opts;
        // SAFETY: per this function's contract every entry up to and including the terminator
        // is readable, and every non-null string field is NUL-terminated.
        unsafe {
            while !(*p).keyword.is_null() {
                let o = &*p;
                rows.push(ConnDefault {
                    keyword: lossy(o.keyword).unwrap_or_default(),
                    envvar: lossy(o.envvar),
                    compiled: lossy(o.compiled),
                    val: bytes(o.val),
                    dispchar: lossy(o.dispchar).unwrap_or_default(),
                });
                p = p.add(1);
            }
            (self.conninfo_free)(opts);
        }
        rows
    }
}

/// Copies a possibly-null C string.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
unsafe fn bytes(p: *const c_char) -> Option<Vec<u8>> {
    // SAFETY: per the contract above.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
}

/// Copies a possibly-null C string as text (lossily).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
unsafe fn lossy(p: *const c_char) -> Option<String> {
    // SAFETY: per the contract above.
    unsafe { bytes(p) }.map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn open(path: &Path, flags: c_int) -> Result<Library, LoadError> {
    // SAFETY: loading a shared library runs its initializers; libpq and the libraries it links
    // against have initializers that are safe to run in any process.
    unsafe { Library::open(Some(path), flags) }.map_err(|e| LoadError {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_libpq_is_version_18_and_parses() {
        let lib = Libpq::shared().unwrap_or_else(|e| panic!("libpq 18 unavailable: {e}"));
        let v = lib.lib_version();
        assert!((180000..190000).contains(&v), "PQlibVersion() = {v}");
        assert_eq!(
            lib.conninfo_parse(b"host='a b' port=1"),
            Ok(vec![
                ("host".to_owned(), b"a b".to_vec()),
                ("port".to_owned(), b"1".to_vec())
            ])
        );
        assert_eq!(
            lib.conninfo_parse(b"x=1"),
            Err(b"invalid connection option \"x\"\n".to_vec())
        );
        assert_eq!(
            lib.conninfo_parse(b"\xff=1").unwrap_err()[26..],
            *b"\"\xff\"\n"
        );
        let kws = lib.conndefaults_keywords();
        assert_eq!(kws.first().map(String::as_str), Some("service"));
        assert!(kws.iter().any(|k| k == "sslmode"));
        // The TLS library in use is the package's own, not a system copy.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let dir = lib.path().parent().expect("libpq has a folder");
        for line in maps.lines().filter(|l| l.contains("libssl.so")) {
            assert!(
                line.contains(&*dir.to_string_lossy()),
                "foreign libssl: {line}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "NUL")]
    fn nul_input_panics() {
        if let Ok(lib) = Libpq::shared() {
            let _ = lib.conninfo_parse(b"host=a\0b");
        } else {
            panic!("NUL (libpq unavailable)");
        }
    }
}
