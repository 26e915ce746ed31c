//! The real process environment and files, read once and handed to the pure resolver (the
//! canonical copy: the CLI calls this one).

use pgyard_conninfo::resolve::{consulted_variables_for, Environment, FileKind, MemFile, MemFiles};
use pgyard_conninfo::{ConnInfo, Keyword};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// A snapshot of everything libpq would read: environment variables, the OS user and its home
/// directory, and the service and password files those point at.
#[derive(Clone, Debug)]
pub struct RealInputs {
    /// The environment, as the pure resolver takes it.
    pub env: Environment,
    /// The files it may open, preloaded.
    pub files: MemFiles,
}

impl RealInputs {
    /// Reads the process environment, the passwd entry of the effective user, and every file
    /// the resolver may consult for `info`.
    pub fn read(info: &ConnInfo) -> Self {
        Self::read_files(whole_environment(), info, Needs::ALL).0
    }

    /// Reads what resolving `info` can consult, and nothing else, as libpq reads lazily: the
    /// variables it reads by name (each keyword's, a few more, `HOME`); the service files
    /// only when a service is named, the password files only when no password is given, the
    /// passwd entry only when no user is given or `HOME` is unset or empty. The resolution is
    /// the same as with [`RealInputs::read`]'s inputs.
    pub fn read_for(info: &ConnInfo) -> Self {
        Reading::take(info).0
    }

    /// The passwd entry and the files `needs` asks for, read into `env` and a file set; also
    /// what was read, for [`Reading::unchanged`].
    fn read_files(
        mut env: Environment,
        info: &ConnInfo,
        needs: Needs,
    ) -> (Self, Option<Passwd>, Vec<Looked>) {
        let passwd = needs.passwd.then(passwd_entry);
        if let Some(Some((name, home))) = &passwd {
            env.os_user = Some(name.clone());
            env.passwd_home = Some(home.clone());
        }
        let mut files = MemFiles::new();
        let mut read = Vec::new();
        let look = |path: Vec<u8>, files: &mut MemFiles, read: &mut Vec<Looked>| {
            let file = load(&path);
            if let Some(f) = &file {
                files.insert(path.clone(), f.clone());
            }
            read.push((path, file));
        };
        for path in candidates(&env, info.get(Keyword::Passfile), needs) {
            look(path, &mut files, &mut read);
        }
        if needs.service && needs.passfile {
            // Known only once the service files are read: a service may name the password
            // file (`passfile=`), which libpq then reads as one the string names.
            if let Some(path) = service_passfile(info, &env, &files) {
                if !read.iter().any(|(p, _)| *p == path) {
                    look(path, &mut files, &mut read);
                }
            }
        }
        (RealInputs { env, files }, passwd, read)
    }
}

/// A passwd lookup's outcome: the user's name and home directory, if found.
type Passwd = Option<(Vec<u8>, Vec<u8>)>;

/// A file looked for: its path, and what was there.
type Looked = (Vec<u8>, Option<MemFile>);

/// What [`RealInputs::read_for`] read for one parsed connection string, kept so that a later
/// connect with the same string can tell, without building its inputs again, whether reading
/// them now would give the same: the variables by name and their values, the passwd entry if
/// it was looked up, and each file looked for with what was found there.
#[derive(Debug)]
pub(crate) struct Reading {
    names: Vec<&'static str>,
    values: Vec<Option<Vec<u8>>>,
    passwd: Option<Passwd>,
    files: Vec<Looked>,
}

impl Reading {
    /// Reads the inputs of `info` as [`RealInputs::read_for`] does, and how. The variables
    /// are the resolver's ([`consulted_variables_for`]) and the startup packet's
    /// ([`STARTUP_VARIABLES`]), read as libpq's `getenv`s read them (the first occurrence of a
    /// name counts) but in one pass over the environment (`environ.rs`).
    pub(crate) fn take(info: &ConnInfo) -> (RealInputs, Reading) {
        let startup = STARTUP_VARIABLES.iter().map(|(var, _)| *var);
        let names: Vec<&'static str> = consulted_variables_for(info).chain(startup).collect();
        let values = crate::environ::lookup(&names);
        let mut env = Environment::new();
        for (name, value) in names.iter().zip(&values) {
            if let Some(v) = value {
                env.vars.insert((*name).to_owned(), v.clone());
            }
        }
        let needs = Needs::of(info, &env);
        let (inputs, passwd, files) = RealInputs::read_files(env, info, needs);
        let reading = Reading {
            names,
            values,
            passwd,
            files,
        };
        (inputs, reading)
    }

    /// Whether reading the inputs again now would give what was read: the same variables,
    /// the same passwd entry (looked up again only if it was), the same files. The variables
    /// decide which files are looked for, so equal variables mean the same paths.
    pub(crate) fn unchanged(&self) -> bool {
        crate::environ::holds(&self.names, &self.values)
            && self.passwd.as_ref().is_none_or(|p| passwd_entry() == *p)
            && self.files.iter().all(|(path, file)| load(path) == *file)
    }
}

/// The password file the named service sets, if the string names none of its own (a service
/// fills only what the string leaves unset); `None` also when the service cannot be read,
/// which the resolution reports itself.
fn service_passfile(info: &ConnInfo, env: &Environment, files: &MemFiles) -> Option<Vec<u8>> {
    if info.get(Keyword::Passfile).is_some() {
        return None;
    }
    let mut resolved = info.clone();
    pgyard_conninfo::resolve::add_defaults(&mut resolved, env, files).ok()?;
    resolved
        .get(Keyword::Passfile)
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
}

/// The files a resolution may open, given what it needs.
fn candidates(env: &Environment, passfile_keyword: Option<&[u8]>, needs: Needs) -> Vec<Vec<u8>> {
    let home = env.home_directory();
    let mut paths: Vec<Vec<u8>> = Vec::new();
    if needs.service {
        let sysconf = env.var("PGSYSCONFDIR").unwrap_or(&env.sysconfdir);
        paths.push(join(sysconf, b"pg_service.conf"));
        paths.extend(env.var("PGSERVICEFILE").map(<[u8]>::to_vec));
        paths.extend(home.map(|h| join(h, b".pg_service.conf")));
    }
    if needs.passfile {
        paths.extend(env.var("PGPASSFILE").map(<[u8]>::to_vec));
        paths.extend(passfile_keyword.map(<[u8]>::to_vec));
        paths.extend(home.map(|h| join(h, b".pgpass")));
    }
    paths
}

/// Which of the inputs beyond the environment a resolution may consult.
#[derive(Clone, Copy, Debug)]
struct Needs {
    passwd: bool,
    service: bool,
    passfile: bool,
}

impl Needs {
    const ALL: Needs = Needs {
        passwd: true,
        service: true,
        passfile: true,
    };

    /// What resolving `info` in `env` may consult.
    fn of(info: &ConnInfo, env: &Environment) -> Needs {
        // The variable is the keyword's default: it counts only where the keyword is absent
        // (`password=` stays empty whatever PGPASSWORD says).
        let given = |kw: Keyword, var: &str| {
            info.get(kw)
                .or_else(|| env.var(var))
                .is_some_and(|v| !v.is_empty())
        };
        // A service file may set the user or the password, so a named service needs all.
        let service = info
            .get(Keyword::Service)
            .or_else(|| env.var("PGSERVICE"))
            .is_some();
        Needs {
            passwd: service || !given(Keyword::User, "PGUSER") || !given_home(env),
            service,
            passfile: service || !given(Keyword::Password, "PGPASSWORD"),
        }
    }
}

/// The startup parameters libpq takes from the environment: variable, parameter.
pub(crate) const STARTUP_VARIABLES: [(&str, &str); 3] = [
    ("PGDATESTYLE", "datestyle"),
    ("PGTZ", "timezone"),
    ("PGGEQO", "geqo"),
];

/// Every variable of the process environment (with a UTF-8 name), as the pure resolver
/// takes them: `pgyard conninfo` reports every source.
fn whole_environment() -> Environment {
    let mut env = Environment::new();
    for (k, v) in std::env::vars_os() {
        if let Ok(k) = k.into_string() {
            env.vars.insert(k, v.into_vec());
        }
    }
    env
}

/// Whether `HOME` names the home directory (libpq asks the passwd database only otherwise).
fn given_home(env: &Environment) -> bool {
    env.var("HOME").is_some_and(|h| !h.is_empty())
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

fn load(path: &[u8]) -> Option<MemFile> {
    let path = Path::new(std::ffi::OsStr::from_bytes(path));
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.is_dir() {
        return Some(MemFile::directory().with_mode(mode));
    }
    let file = match std::fs::read(path) {
        Ok(contents) => MemFile::regular(contents).with_mode(mode),
        Err(_) => MemFile::regular(Vec::new()).with_mode(mode).unreadable(),
    };
    let mut file = file;
    if !meta.is_file() {
        file.kind = FileKind::Other;
    }
    Some(file)
}

/// The effective user's name and home directory from `/etc/passwd` (what `getpwuid` reads on
/// a plain Linux system).
fn passwd_entry() -> Option<(Vec<u8>, Vec<u8>)> {
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    passwd_entry_of(&std::fs::read("/etc/passwd").ok()?, uid)
}

/// The name of user `uid` in `/etc/passwd` (what `getpwuid` reads on a plain Linux system;
/// users known only to another name service are not found).
pub fn user_name(uid: u32) -> Option<String> {
    let (name, _) = passwd_entry_of(&std::fs::read("/etc/passwd").ok()?, uid)?;
    String::from_utf8(name).ok()
}

/// The name of user `uid` as libpq's `requirepeer` check wants it, or libpq's text for why
/// there is none.
pub(crate) fn peer_user_name(uid: u32) -> Result<String, String> {
    let passwd = std::fs::read("/etc/passwd").map_err(|e| {
        let why = crate::net::strerror(&e);
        format!("could not look up local user ID {uid}: {why}")
    })?;
    let (name, _) = passwd_entry_of(&passwd, uid)
        .ok_or_else(|| format!("local user with ID {uid} does not exist"))?;
    Ok(String::from_utf8_lossy(&name).into_owned())
}

/// The name and home directory of `uid` in the text of a passwd file.
fn passwd_entry_of(passwd: &[u8], uid: u32) -> Option<(Vec<u8>, Vec<u8>)> {
    passwd.split(|&b| b == b'\n').find_map(|line| {
        let fields: Vec<&[u8]> = line.split(|&b| b == b':').collect();
        let entry_uid: u32 = std::str::from_utf8(fields.get(2)?).ok()?.parse().ok()?;
        (entry_uid == uid).then(|| {
            (
                fields[0].to_vec(),
                fields.get(5).copied().unwrap_or_default().to_vec(),
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_entries_are_found_by_uid() {
        let passwd =
            b"root:x:0:0:root:/root:/bin/sh\n# odd line\napp:x:1001:1001::/srv/app:/bin/false\n";
        assert_eq!(
            passwd_entry_of(passwd, 1001),
            Some((b"app".to_vec(), b"/srv/app".to_vec()))
        );
        assert_eq!(
            passwd_entry_of(passwd, 0).map(|e| e.0),
            Some(b"root".to_vec())
        );
        assert_eq!(passwd_entry_of(passwd, 7), None);
        assert_eq!(user_name(0).as_deref(), Some("root"), "this machine's root");
    }
    use pgyard_conninfo::{configure, Keyword};

    /// The files of the fixture: system and user service files, two password files (one in
    /// `HOME`, one in the passwd entry's home) and one named by `passfile`.
    fn fixture_files() -> Vec<(&'static str, MemFile)> {
        let pass = |line: &str| MemFile::regular(line.as_bytes().to_vec()).with_mode(0o600);
        vec![
            (
                "/sys/pg_service.conf",
                MemFile::regular(&b"[svc]\nuser=svcuser\nport=6001\n"[..]),
            ),
            (
                "/h/.pg_service.conf",
                MemFile::regular(&b"[hsvc]\npassword=svcpw\ndbname=hdb\n"[..]),
            ),
            ("/h/.pgpass", pass("*:*:*:*:homepw\n")),
            ("/pw/.pgpass", pass("*:*:*:*:passwdpw\n")),
            ("/custom/pass", pass("*:*:*:u:custompw\n")),
        ]
    }

    /// Resolves `conninfo` with every input, and with only the variables `read_for` looks up
    /// and the files `Needs::of` asks for, and returns both outcomes in their debug form and
    /// whether anything was left unread.
    fn both(conninfo: &str, vars: &[(&str, &str)]) -> (String, String, bool) {
        let info = pgyard_conninfo::parse(conninfo).expect("fixture parses");
        let mut env = Environment::new().with_sysconfdir("/sys");
        let mut looked_up = env.clone();
        for (k, v) in vars {
            env = env.with_var(*k, *v);
            if consulted_variables_for(&info).any(|name| name == *k) {
                looked_up = looked_up.with_var(*k, *v);
            }
        }
        let resolve = |env: &Environment, needs: Needs| {
            let mut env = env.clone();
            if needs.passwd {
                env.os_user = Some(b"osuser".to_vec());
                env.passwd_home = Some(b"/pw".to_vec());
            }
            let wanted = candidates(&env, info.get(Keyword::Passfile), needs);
            let mut files = MemFiles::new();
            for (path, file) in fixture_files() {
                if wanted.iter().any(|w| w == path.as_bytes()) {
                    files.insert(path, file);
                }
            }
            format!("{:?}", configure(info.clone(), &env, &files))
        };
        let needs = Needs::of(&info, &looked_up);
        let narrowed = !(needs.passwd && needs.service && needs.passfile) || looked_up != env;
        (
            resolve(&env, Needs::ALL),
            resolve(&looked_up, needs),
            narrowed,
        )
    }

    #[test]
    fn reading_only_what_is_needed_resolves_the_same() {
        let conninfos = [
            "host=h",
            "host=h user=u",
            "host=h user=u password=p",
            "host=h user=u password=",
            "host=h user= password=p",
            "service=svc",
            "service=hsvc user=u",
            "host=h user=u passfile=/custom/pass",
            "host=h passfile=/custom/pass",
            "host=h user=u password=p service=",
            "host= port=7 dbname=d sslmode=disable",
            "service=svc port=",
        ];
        let envs: [&[(&str, &str)]; 10] = [
            &[("HOME", "/h")],
            &[],
            &[("HOME", "")],
            &[("HOME", "/h"), ("PGUSER", "u")],
            &[("HOME", "/h"), ("PGUSER", "")],
            &[("HOME", "/h"), ("PGPASSWORD", "envpw")],
            &[("HOME", "/h"), ("PGSERVICE", "svc")],
            &[("HOME", "/h"), ("PGSERVICE", "")],
            &[
                ("HOME", "/h"),
                ("PGHOST", "eh"),
                ("PGPORT", "9"),
                ("PGUSER", "eu"),
            ],
            &[
                ("PGPASSFILE", "/custom/pass"),
                ("PGDATABASE", "edb"),
                ("PGSSLMODE", "require"),
            ],
        ];
        let mut narrowed = 0;
        for c in conninfos {
            for vars in envs {
                let (all, needed, less) = both(c, vars);
                assert_eq!(all, needed, "{c:?} with {vars:?}");
                narrowed += usize::from(less);
            }
        }
        // The comparison means something only where something was left unread.
        assert!(narrowed > 40, "only {narrowed} cases read less");
    }

    /// Every variable looked up by a literal name (`Environment::var` on a string) in the resolver's or the
    /// driver's source is one `read_for` reads; the keywords' own variables are read from
    /// the same table the resolver walks.
    #[test]
    fn every_variable_looked_up_by_name_is_read() {
        let sources = [
            include_str!("../../conninfo/src/resolve/mod.rs"),
            include_str!("../../conninfo/src/resolve/service.rs"),
            include_str!("../../conninfo/src/resolve/passfile.rs"),
            include_str!("env.rs"),
            include_str!("prepare.rs"),
        ];
        let read: Vec<&str> = pgyard_conninfo::resolve::consulted_variables()
            .chain(STARTUP_VARIABLES.map(|(var, _)| var))
            .collect();
        let mut named = 0;
        for src in sources {
            for piece in src.split(".var(\"").skip(1) {
                let name = piece.split('"').next().unwrap_or_default();
                assert!(read.contains(&name), "{name} is looked up but not read");
                named += 1;
            }
        }
        assert!(named >= 8, "only {named} lookups by name found");
        for kw in pgyard_conninfo::keywords::ALL {
            if let Some(var) = kw.info().env {
                assert!(
                    read.contains(&var),
                    "{var} ({}) is not read",
                    kw.info().name
                );
            }
        }
    }

    #[test]
    fn a_password_user_and_home_given_reads_nothing_but_the_environment() {
        let info = pgyard_conninfo::parse("host=h user=u password=p").expect("parses");
        let env = Environment::new().with_var("HOME", "/h");
        let n = Needs::of(&info, &env);
        assert!(!n.passwd && !n.service && !n.passfile, "{n:?}");
        let no_password = pgyard_conninfo::parse("host=h user=u").expect("parses");
        let n = Needs::of(&no_password, &env);
        assert!(!n.passwd && !n.service && n.passfile, "{n:?}");
        let service = Environment::new()
            .with_var("HOME", "/h")
            .with_var("PGSERVICE", "s");
        let n = Needs::of(&info, &service);
        assert!(n.passwd && n.service && n.passfile, "{n:?}");
    }
}
