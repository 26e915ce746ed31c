//! Phase 2 and password-file tests: the shared spec's §6 rules and §19.4 vectors, plus
//! behaviour checked against libpq 18.4 (`@embedded-postgres` build) with a ctypes harness.

use super::*;
use crate::{parse, parse_params};
use proptest::prelude::*;

fn env(vars: &[(&str, &str)]) -> Environment {
    let mut e = Environment::new().with_os_user("osuser");
    for (k, v) in vars {
        e.vars.insert((*k).to_string(), v.as_bytes().to_vec());
    }
    e
}

fn resolve(input: &str, e: &Environment, files: &MemFiles) -> Result<(ConnInfo, Sources), String> {
    let mut info = parse(input).expect("test inputs parse");
    match add_defaults(&mut info, e, files) {
        Ok(s) => Ok((info, s)),
        Err(err) => Err(err.to_string()),
    }
}

fn val(info: &ConnInfo, kw: Keyword) -> Option<&str> {
    info.get(kw)
        .map(|v| std::str::from_utf8(v).expect("test values are UTF-8"))
}

// ---------------------------------------------------------------- defaults and precedence

#[test]
fn empty_environment_gives_compiled_defaults_and_os_user() {
    let (info, src) = resolve("", &env(&[]), &MemFiles::new()).unwrap();
    let got: Vec<(String, String, String)> = info
        .iter()
        .map(|(k, v)| {
            let s = src.get(k).map(|s| s.to_string()).unwrap_or_default();
            (
                k.name().to_string(),
                String::from_utf8_lossy(v).into_owned(),
                s,
            )
        })
        .collect();
    let want: Vec<(String, String, String)> = [
        ("user", "osuser", "special OS user"),
        ("channel_binding", "prefer", "compiled"),
        ("port", "5432", "compiled"),
        ("options", "", "compiled"),
        ("sslmode", "prefer", "compiled"),
        ("sslnegotiation", "postgres", "compiled"),
        ("sslcompression", "0", "compiled"),
        ("sslsni", "1", "compiled"),
        ("ssl_min_protocol_version", "TLSv1.2", "compiled"),
        ("gssencmode", "disable", "compiled"),
        ("krbsrvname", "postgres", "compiled"),
        ("gssdelegation", "0", "compiled"),
        ("target_session_attrs", "any", "compiled"),
        ("load_balance_hosts", "disable", "compiled"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(got, want);
    assert_eq!(src.service_file(), None);
}

#[test]
fn no_os_user_leaves_user_unset() {
    let e = Environment::new();
    let (info, src) = resolve("", &e, &MemFiles::new()).unwrap();
    assert_eq!(info.get(Keyword::User), None);
    assert_eq!(src.get(Keyword::User), None);
}

fn spec_env() -> Environment {
    env(&[
        ("PGHOST", "127.0.0.1"),
        ("PGPORT", "6099"),
        ("PGUSER", "envuser"),
        ("PGDATABASE", "envdb"),
        ("PGREQUIRESSL", "1"),
        ("PGTARGETSESSIONATTRS", "standby"),
    ])
}

#[test]
fn spec_19_4_env_fills_everything() {
    let (info, src) = resolve("", &spec_env(), &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("127.0.0.1"));
    assert_eq!(val(&info, Keyword::Port), Some("6099"));
    assert_eq!(val(&info, Keyword::User), Some("envuser"));
    assert_eq!(val(&info, Keyword::Dbname), Some("envdb"));
    assert_eq!(val(&info, Keyword::Sslmode), Some("require"));
    assert_eq!(val(&info, Keyword::TargetSessionAttrs), Some("standby"));
    assert_eq!(src.get(Keyword::Host), Some(Source::Env("PGHOST")));
    assert_eq!(src.get(Keyword::Sslmode), Some(Source::RequireSsl));
    assert_eq!(src.get(Keyword::Sslmode).map(Source::kind), Some("special"));
    assert_eq!(src.get(Keyword::Port).map(Source::kind), Some("env"));
}

#[test]
fn spec_19_4_explicit_empty_blocks_env() {
    let (info, src) = resolve("host='' port=6099", &spec_env(), &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some(""));
    assert_eq!(val(&info, Keyword::Port), Some("6099"));
    assert_eq!(src.get(Keyword::Host), Some(Source::Explicit));
}

#[test]
fn spec_19_4_uri_empty_dbname_blocks_env() {
    let (info, src) = resolve("postgresql://h2:1/?dbname=", &spec_env(), &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Dbname), Some(""));
    assert_eq!(src.get(Keyword::Dbname), Some(Source::Explicit));
    assert_eq!(val(&info, Keyword::User), Some("envuser"));
    assert_eq!(val(&info, Keyword::Host), Some("h2"));
    assert_eq!(val(&info, Keyword::Port), Some("1"));
}

#[test]
fn spec_19_4_array_empty_values_are_skipped() {
    let params: [(&str, Option<&str>); 2] = [("host", Some("")), ("user", Some(""))];
    let mut info = parse_params(&params, false).unwrap();
    add_defaults(&mut info, &spec_env(), &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("127.0.0.1"));
    assert_eq!(val(&info, Keyword::User), Some("envuser"));
}

#[test]
fn spec_19_4_pgsslmode_beats_pgrequiressl() {
    let e = env(&[("PGREQUIRESSL", "1"), ("PGSSLMODE", "allow")]);
    let (info, src) = resolve("", &e, &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Sslmode), Some("allow"));
    assert_eq!(src.get(Keyword::Sslmode), Some(Source::Env("PGSSLMODE")));
}

#[test]
fn pgrequiressl_only_looks_at_the_first_byte() {
    for (value, want) in [
        ("1", "require"),
        ("10", "require"),
        ("1x", "require"),
        ("0", "prefer"),
        ("yes", "prefer"),
        ("true", "prefer"),
        ("", "prefer"),
        (" 1", "prefer"),
    ] {
        let e = env(&[("PGREQUIRESSL", value)]);
        let (info, _) = resolve("", &e, &MemFiles::new()).unwrap();
        assert_eq!(
            val(&info, Keyword::Sslmode),
            Some(want),
            "PGREQUIRESSL={value:?}"
        );
    }
    // Explicit sslmode is not touched.
    let e = env(&[("PGREQUIRESSL", "1")]);
    let (info, _) = resolve("sslmode=disable", &e, &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Sslmode), Some("disable"));
}

#[test]
fn spec_19_4_sslrootcert_system_strengthens_default_sslmode() {
    let e = env(&[("PGSSLROOTCERT", "system")]);
    let (info, src) = resolve("", &e, &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Sslmode), Some("verify-full"));
    assert_eq!(src.get(Keyword::Sslmode), Some(Source::RootCertSystem));
    assert_eq!(
        src.get(Keyword::Sslrootcert),
        Some(Source::Env("PGSSLROOTCERT"))
    );

    // An explicit sslmode is kept (phase 3 then rejects the weak mode).
    let (info, src) = resolve("sslmode=prefer", &e, &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Sslmode), Some("prefer"));
    assert_eq!(src.get(Keyword::Sslmode), Some(Source::Explicit));

    // Explicit sslrootcert works the same way.
    let (info, _) = resolve("sslrootcert=system", &env(&[]), &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Sslmode), Some("verify-full"));

    // PGSSLMODE and PGREQUIRESSL are not "default".
    for vars in [
        [("PGSSLROOTCERT", "system"), ("PGSSLMODE", "prefer")],
        [("PGSSLROOTCERT", "system"), ("PGREQUIRESSL", "1")],
    ] {
        let (info, _) = resolve("", &env(&vars), &MemFiles::new()).unwrap();
        assert_ne!(
            val(&info, Keyword::Sslmode),
            Some("verify-full"),
            "{vars:?}"
        );
    }

    // Only the exact text `system`.
    for other in ["System", "system ", "/etc/ssl/system"] {
        let (info, _) = resolve("", &env(&[("PGSSLROOTCERT", other)]), &MemFiles::new()).unwrap();
        assert_eq!(val(&info, Keyword::Sslmode), Some("prefer"), "{other:?}");
    }
}

#[test]
fn spec_19_4_empty_env_vars_are_set() {
    let e = env(&[("PGPORT", ""), ("PGHOST", "")]);
    let (info, src) = resolve("user=u", &e, &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Port), Some(""));
    assert_eq!(val(&info, Keyword::Host), Some(""));
    assert_eq!(val(&info, Keyword::User), Some("u"));
    assert_eq!(src.get(Keyword::Port), Some(Source::Env("PGPORT")));
}

#[test]
fn empty_pguser_beats_os_user() {
    let (info, src) = resolve("", &env(&[("PGUSER", "")]), &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::User), Some(""));
    assert_eq!(src.get(Keyword::User), Some(Source::Env("PGUSER")));
}

#[test]
fn env_var_with_compiled_default_beats_it() {
    let e = env(&[("PGOPTIONS", "-c x=1"), ("PGGSSENCMODE", "require")]);
    let (info, _) = resolve("", &e, &MemFiles::new()).unwrap();
    assert_eq!(val(&info, Keyword::Options), Some("-c x=1"));
    assert_eq!(val(&info, Keyword::Gssencmode), Some("require"));
}

#[test]
fn keywords_without_env_var_ignore_lookalike_vars() {
    let e = env(&[
        ("PGSSLPASSWORD", "x"),
        ("PGREPLICATION", "y"),
        ("PGKEEPALIVES", "0"),
    ]);
    let (info, _) = resolve("", &e, &MemFiles::new()).unwrap();
    assert_eq!(info.get(Keyword::Sslpassword), None);
    assert_eq!(info.get(Keyword::Replication), None);
    assert_eq!(info.get(Keyword::Keepalives), None);
}

#[test]
fn env_values_are_read_as_c_strings() {
    let mut e = env(&[]);
    e.vars.insert("PGHOST".into(), b"a\0b".to_vec());
    let (info, _) = resolve("", &e, &MemFiles::new()).unwrap();
    assert_eq!(info.get(Keyword::Host), Some(&b"a"[..]));
}

#[test]
fn every_set_keyword_has_a_source() {
    let files = MemFiles::new().with(
        "/etc/postgresql-common/pg_service.conf",
        MemFile::regular("[s]\nhost=svc\n"),
    );
    let e = env(&[("PGSERVICE", "s"), ("PGAPPNAME", "app")]);
    let (info, src) = resolve("dbname=d", &e, &files).unwrap();
    for (kw, _) in info.iter() {
        assert!(src.get(kw).is_some(), "{kw:?}");
    }
    assert_eq!(src.iter().count(), info.len());
    assert_eq!(src.get(Keyword::Dbname), Some(Source::Explicit));
    assert_eq!(src.get(Keyword::Host), Some(Source::Service));
    assert_eq!(src.get(Keyword::Service), Some(Source::Env("PGSERVICE")));
    assert_eq!(
        src.get(Keyword::ApplicationName),
        Some(Source::Env("PGAPPNAME"))
    );
    assert_eq!(
        src.service_file(),
        Some(&b"/etc/postgresql-common/pg_service.conf"[..])
    );
}

// ---------------------------------------------------------------- service files

const USER_CONF: &str = "/home/u/user.conf";
const SYSDIR: &str = "/sys/etc";

fn spec_service_files() -> MemFiles {
    MemFiles::new()
        .with(
            USER_CONF,
            MemFile::regular(
                "[mysvc]\nhost=svchost\nport=7777\ndbname=svcdb\ndbname=second\n".as_bytes(),
            ),
        )
        .with(
            "/sys/etc/pg_service.conf",
            MemFile::regular(
                "[mysvc]\nhost=syshost\nuser=sysuser\n\n[sysonly]\nhost=sh\nport=8888\nsslmode=require\n"
                    .as_bytes(),
            ),
        )
}

#[test]
fn spec_19_4_service_file_precedence_and_no_merging() {
    let e = env(&[
        ("PGSERVICEFILE", USER_CONF),
        ("PGSYSCONFDIR", SYSDIR),
        ("PGHOST", "envhost"),
        ("PGPORT", "1111"),
    ]);
    let (info, src) = resolve("service=mysvc port=6099", &e, &spec_service_files()).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("svchost"));
    assert_eq!(val(&info, Keyword::Port), Some("6099"));
    assert_eq!(val(&info, Keyword::Dbname), Some("svcdb"));
    assert_eq!(val(&info, Keyword::User), Some("osuser"));
    assert_eq!(val(&info, Keyword::Service), Some("mysvc"));
    assert_eq!(src.get(Keyword::Host), Some(Source::Service));
    assert_eq!(src.get(Keyword::Port), Some(Source::Explicit));
    assert_eq!(src.get(Keyword::User), Some(Source::OsUser));
    assert_eq!(src.service_file(), Some(USER_CONF.as_bytes()));
}

#[test]
fn spec_19_4_pgservice_from_system_file() {
    let e = env(&[
        ("PGSERVICEFILE", USER_CONF),
        ("PGSYSCONFDIR", SYSDIR),
        ("PGSERVICE", "sysonly"),
    ]);
    let (info, src) = resolve("port=6099 host=127.0.0.1", &e, &spec_service_files()).unwrap();
    assert_eq!(val(&info, Keyword::Sslmode), Some("require"));
    assert_eq!(val(&info, Keyword::Host), Some("127.0.0.1"));
    assert_eq!(val(&info, Keyword::Port), Some("6099"));
    assert_eq!(val(&info, Keyword::Service), Some("sysonly"));
    assert_eq!(src.get(Keyword::Sslmode), Some(Source::Service));
    assert_eq!(src.get(Keyword::Service), Some(Source::Env("PGSERVICE")));
    assert_eq!(src.service_file(), Some(&b"/sys/etc/pg_service.conf"[..]));
}

#[test]
fn spec_19_4_missing_pgservicefile() {
    let e = env(&[("PGSERVICEFILE", "/nonexist")]);
    let err = resolve("service=mysvc", &e, &MemFiles::new()).unwrap_err();
    assert_eq!(err, r#"service file "/nonexist" not found"#);
}

#[test]
fn spec_19_4_service_file_syntax_errors() {
    let mut text = String::new();
    for i in 1..=8 {
        text.push_str(&format!("# filler {i}\n"));
    }
    text.push_str("[bad]\nhost = x\n[nested]\nservice=other\n[nokv]\njusttext\n");
    let files = MemFiles::new().with("/sys/etc/pg_service.conf", MemFile::regular(text));
    let e = env(&[("PGSYSCONFDIR", SYSDIR)]);
    let path = "/sys/etc/pg_service.conf";
    for (svc, want) in [
        (
            "bad",
            format!(r#"syntax error in service file "{path}", line 10"#),
        ),
        (
            "nested",
            format!(
                r#"nested service specifications not supported in service file "{path}", line 12"#
            ),
        ),
        (
            "nokv",
            format!(r#"syntax error in service file "{path}", line 14"#),
        ),
    ] {
        let err = resolve(&format!("service={svc}"), &e, &files).unwrap_err();
        assert_eq!(err, want, "service={svc}");
    }
}

#[test]
fn service_not_found_anywhere() {
    let e = env(&[("PGSYSCONFDIR", SYSDIR), ("PGSERVICEFILE", USER_CONF)]);
    let err = resolve("service=nosuch", &e, &spec_service_files()).unwrap_err();
    assert_eq!(err, r#"definition of service "nosuch" not found"#);
    // No files at all.
    let err = resolve("service=x", &env(&[]), &MemFiles::new()).unwrap_err();
    assert_eq!(err, r#"definition of service "x" not found"#);
}

#[test]
fn no_service_name_reads_no_file() {
    // Even an unusable PGSERVICEFILE does not matter without a service name.
    let e = env(&[("PGSERVICEFILE", "/nonexist")]);
    assert!(resolve("", &e, &MemFiles::new()).is_ok());
}

#[test]
fn empty_service_name_looks_for_an_empty_group() {
    // libpq 18.4: `service=''` found `[]` in the system file.
    let files = MemFiles::new().with(
        "/etc/postgresql-common/pg_service.conf",
        MemFile::regular("[]\nhost=emptyname\n[a]\nhost=sysa\n"),
    );
    let (info, _) = resolve("service=''", &env(&[]), &files).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("emptyname"));
    assert_eq!(val(&info, Keyword::Service), Some(""));
    let err = resolve("service=''", &env(&[]), &MemFiles::new()).unwrap_err();
    assert_eq!(err, r#"definition of service "" not found"#);
}

#[test]
fn home_service_file_then_system_file() {
    let files = MemFiles::new()
        .with(
            "/home/u/.pg_service.conf",
            MemFile::regular("[a]\nhost=home\n"),
        )
        .with(
            "/etc/postgresql-common/pg_service.conf",
            MemFile::regular("[a]\nhost=sys\nport=1\n[b]\nhost=sysb\n"),
        );
    let e = env(&[("HOME", "/home/u")]);
    let (info, src) = resolve("service=a", &e, &files).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("home"));
    assert_eq!(
        val(&info, Keyword::Port),
        Some("5432"),
        "no merging with the system group"
    );
    assert_eq!(src.service_file(), Some(&b"/home/u/.pg_service.conf"[..]));

    // Group absent from the user file: the system file is read.
    let (info, _) = resolve("service=b", &e, &files).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("sysb"));

    // HOME empty: the passwd home directory is used.
    let e2 = env(&[("HOME", "")]).with_passwd_home("/home/u");
    let (info, _) = resolve("service=a", &e2, &files).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("home"));

    // No home at all: straight to the system file.
    let (info, _) = resolve("service=a", &env(&[]), &files).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("sys"));

    // PGSERVICEFILE replaces ~/.pg_service.conf entirely.
    let e3 = env(&[("HOME", "/home/u"), ("PGSERVICEFILE", "/other.conf")]);
    let files3 = files.clone().with("/other.conf", MemFile::regular("[x]\n"));
    let (info, _) = resolve("service=a", &e3, &files3).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("sys"));
}

#[test]
fn compiled_sysconfdir_is_configurable() {
    let files = MemFiles::new().with(
        "/opt/pg/etc/pg_service.conf",
        MemFile::regular("[a]\nhost=o\n"),
    );
    let e = env(&[]).with_sysconfdir("/opt/pg/etc");
    let (info, _) = resolve("service=a", &e, &files).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("o"));
    // PGSYSCONFDIR beats it, even when empty ("/pg_service.conf").
    let files = files.with("/pg_service.conf", MemFile::regular("[a]\nhost=root\n"));
    let (info, _) = resolve("service=a", &e.clone().with_var("PGSYSCONFDIR", ""), &files).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("root"));
}

#[test]
fn errors_in_user_file_stop_the_search() {
    let sys = MemFile::regular("[a]\nhost=sys\n");
    let e = env(&[("HOME", "/h")]);
    // An error inside the group.
    let files = MemFiles::new()
        .with("/h/.pg_service.conf", MemFile::regular("[a]\nbogus=1\n"))
        .with("/etc/postgresql-common/pg_service.conf", sys.clone());
    let err = resolve("service=a", &e, &files).unwrap_err();
    assert_eq!(
        err,
        r#"syntax error in service file "/h/.pg_service.conf", line 2"#
    );
    // A home file that exists but cannot be opened.
    let files = MemFiles::new()
        .with("/h/.pg_service.conf", MemFile::regular("").unreadable())
        .with("/etc/postgresql-common/pg_service.conf", sys.clone());
    let err = resolve("service=a", &e, &files).unwrap_err();
    assert_eq!(err, r#"service file "/h/.pg_service.conf" not found"#);
    // Garbage outside the group is not checked.
    let files = MemFiles::new()
        .with(
            "/h/.pg_service.conf",
            MemFile::regular("junk\n[b]\nbogus\n"),
        )
        .with("/etc/postgresql-common/pg_service.conf", sys);
    let (info, _) = resolve("service=a", &e, &files).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("sys"));
}

#[test]
fn directory_as_service_file_reads_as_empty() {
    // libpq 18.4: PGSERVICEFILE naming a directory falls through to the system file.
    let files = MemFiles::new().with("/d", MemFile::directory()).with(
        "/etc/postgresql-common/pg_service.conf",
        MemFile::regular("[a]\nhost=sys\n"),
    );
    let (info, _) = resolve("service=a", &env(&[("PGSERVICEFILE", "/d")]), &files).unwrap();
    assert_eq!(val(&info, Keyword::Host), Some("sys"));
}

#[test]
fn unreadable_system_file_is_an_error() {
    let files = MemFiles::new().with(
        "/etc/postgresql-common/pg_service.conf",
        MemFile::regular("[a]\n").unreadable(),
    );
    let err = resolve("service=a", &env(&[]), &files).unwrap_err();
    assert_eq!(
        err,
        r#"service file "/etc/postgresql-common/pg_service.conf" not found"#
    );
}

fn scan(contents: &[u8], name: &str) -> ServiceScan {
    parse_service_file(contents, b"f.conf", name.as_bytes())
}

fn settings(s: &ServiceScan) -> Vec<(&'static str, String)> {
    s.settings
        .iter()
        .map(|(k, v)| (k.name(), String::from_utf8_lossy(v).into_owned()))
        .collect()
}

#[test]
fn service_group_headers() {
    let file =
        b"  [mysvc]   \nhost=a\n[Case]\nhost=b\n[mysvcx]\nhost=c\n[mysvc] trailing junk\nhost=d\n";
    assert_eq!(settings(&scan(file, "mysvc")), [("host", "a".to_string())]);
    assert!(!scan(file, "case").found);
    assert_eq!(settings(&scan(file, "Case")), [("host", "b".to_string())]);
    assert_eq!(settings(&scan(file, "mysvcx")), [("host", "c".to_string())]);
    // `[mysvc] trailing junk` matches, but the first `[mysvc]` group wins and ends at `[Case]`.
    assert!(!scan(b"[mysvc\nhost=x\n", "mysvc").found);
    assert!(scan(b"[a]b]\nhost=x\n", "a]b").found);
}

#[test]
fn service_group_lines() {
    let file =
        b"[s]\n  # comment\n\n\t host=a=b \t\ndbname=one\ndbname=two\noptions=\n[t]\nport=1\n";
    let s = scan(file, "s");
    assert!(s.found);
    assert_eq!(s.error, None);
    assert_eq!(
        settings(&s),
        [
            ("host", "a=b".to_string()),
            ("dbname", "one".to_string()),
            ("dbname", "two".to_string()),
            ("options", "".to_string()),
        ]
    );
    // Quotes and backslashes are literal.
    let s = scan(b"[s]\nhost='a b'\\x\n", "s");
    assert_eq!(settings(&s), [("host", "'a b'\\x".to_string())]);
}

#[test]
fn service_first_occurrence_wins_and_explicit_is_kept() {
    let files = MemFiles::new().with(
        "/etc/postgresql-common/pg_service.conf",
        MemFile::regular("[s]\ndbname=svcdb\ndbname=second\nhost=svc\nport=1\n"),
    );
    let (info, src) = resolve("service=s host=mine", &env(&[]), &files).unwrap();
    assert_eq!(val(&info, Keyword::Dbname), Some("svcdb"));
    assert_eq!(val(&info, Keyword::Host), Some("mine"));
    assert_eq!(src.get(Keyword::Host), Some(Source::Explicit));
    assert_eq!(val(&info, Keyword::Port), Some("1"));
}

#[test]
fn service_line_errors() {
    for (line, want) in [
        (
            "host = x",
            r#"syntax error in service file "f.conf", line 2"#,
        ),
        ("host", r#"syntax error in service file "f.conf", line 2"#),
        (
            "requiressl=1",
            r#"syntax error in service file "f.conf", line 2"#,
        ),
        ("Host=x", r#"syntax error in service file "f.conf", line 2"#),
        ("=x", r#"syntax error in service file "f.conf", line 2"#),
        (
            "ldap://example/x",
            r#"syntax error in service file "f.conf", line 2"#,
        ),
        (
            "service=x",
            r#"nested service specifications not supported in service file "f.conf", line 2"#,
        ),
    ] {
        let s = scan(format!("[s]\n{line}\nhost=after\n").as_bytes(), "s");
        assert_eq!(
            s.error.map(|e| e.to_string()).as_deref(),
            Some(want),
            "{line:?}"
        );
        assert!(s.settings.is_empty(), "{line:?}");
    }
    // Settings before the error are kept in the scan.
    let s = scan(b"[s]\nhost=a\nbad\n", "s");
    assert_eq!(settings(&s), [("host", "a".to_string())]);
    assert!(s.error.is_some());
}

#[test]
fn service_line_length_limit() {
    // libpq 18.4: `host=` + 1016 bytes + newline (1022 bytes) is fine; one more byte is not.
    let ok = [b"[a]\nhost=".as_slice(), &[b'x'; 1016], b"\n"].concat();
    let s = scan(&ok, "a");
    assert_eq!(s.error, None);
    assert_eq!(s.settings[0].1.len(), 1016);
    let long = [b"[a]\nhost=".as_slice(), &[b'x'; 1017], b"\n"].concat();
    assert_eq!(
        scan(&long, "a").error.map(|e| e.to_string()).as_deref(),
        Some(r#"line 2 too long in service file "f.conf""#)
    );
    // Without a newline at the end of the file: 1023 bytes is too long, 1022 is not.
    let tail = [b"[a]\nhost=".as_slice(), &[b'x'; 1018]].concat();
    assert!(matches!(
        scan(&tail, "a").error,
        Some(ServiceError::LineTooLong { line: 2, .. })
    ));
    let tail = [b"[a]\nhost=".as_slice(), &[b'x'; 1017]].concat();
    assert_eq!(scan(&tail, "a").error, None);
    // The limit applies to every line before the group ends, in any group.
    let other = [b"[b]\n#".as_slice(), &[b'x'; 1200], b"\n[a]\nhost=x\n"].concat();
    assert!(matches!(
        scan(&other, "a").error,
        Some(ServiceError::LineTooLong { line: 2, .. })
    ));
    // ... but not after it.
    let after = [b"[a]\nhost=x\n[b]\n#".as_slice(), &[b'x'; 1200]].concat();
    assert_eq!(scan(&after, "a").error, None);
}

#[test]
fn service_nul_bytes_cut_the_fgets_chunk() {
    // libpq 18.4: `user=ab\0cd…` (1111 bytes) gives user=ab, and the rest of the physical line
    // after the first 1023 bytes is read as line 3.
    let file = [b"[a]\nuser=ab\0cd".as_slice(), &[b'z'; 1100], b"\nhost=h\n"].concat();
    let s = scan(&file, "a");
    assert_eq!(settings(&s), [("user", "ab".to_string())]);
    assert_eq!(
        s.error.map(|e| e.to_string()).as_deref(),
        Some(r#"syntax error in service file "f.conf", line 3"#)
    );
}

#[test]
fn service_paths_are_cut_like_maxpgpath() {
    let long_dir = "d".repeat(1100);
    let e = env(&[("PGSYSCONFDIR", &long_dir)]);
    assert_eq!(service::system_service_file(&e).len(), 1023);
    let e = env(&[("PGSERVICEFILE", &long_dir)]);
    let err = resolve("service=a", &e, &MemFiles::new()).unwrap_err();
    assert_eq!(
        err,
        format!(r#"service file "{}" not found"#, &long_dir[..1023])
    );
}

#[test]
fn service_error_messages() {
    let cases = [
        (
            ServiceError::FileNotFound {
                path: b"/p".to_vec(),
            },
            "service file \"/p\" not found\n",
        ),
        (
            ServiceError::ServiceNotFound {
                name: b"n".to_vec(),
            },
            "definition of service \"n\" not found\n",
        ),
        (
            ServiceError::Syntax {
                path: b"/p".to_vec(),
                line: 3,
            },
            "syntax error in service file \"/p\", line 3\n",
        ),
        (
            ServiceError::Nested {
                path: b"/p".to_vec(),
                line: 4,
            },
            "nested service specifications not supported in service file \"/p\", line 4\n",
        ),
        (
            ServiceError::LineTooLong {
                path: b"/p".to_vec(),
                line: 5,
            },
            "line 5 too long in service file \"/p\"\n",
        ),
    ];
    for (err, want) in cases {
        assert_eq!(err.libpq_message(), want.as_bytes());
        assert_eq!(format!("{err}\n"), want);
    }
}

#[test]
fn conndefaults_ignores_service_errors_and_keeps_partial_values() {
    // libpq 18.4: PQconndefaults with PGSERVICE=nosuch still returns the defaults.
    let (info, src) = conndefaults(&env(&[("PGSERVICE", "nosuch")]), &MemFiles::new());
    assert_eq!(val(&info, Keyword::Service), Some("nosuch"));
    assert_eq!(val(&info, Keyword::Port), Some("5432"));
    assert_eq!(src.get(Keyword::Port), Some(Source::Compiled));

    let files = MemFiles::new().with(
        "/etc/postgresql-common/pg_service.conf",
        MemFile::regular("[s]\nhost=first\nbad line\nport=9\n"),
    );
    let (info, src) = conndefaults(&env(&[("PGSERVICE", "s")]), &files);
    assert_eq!(val(&info, Keyword::Host), Some("first"));
    assert_eq!(src.get(Keyword::Host), Some(Source::Service));
    assert_eq!(val(&info, Keyword::Port), Some("5432"));

    let mut info = ConnInfo::new();
    let (_, err) = add_defaults_with(
        &mut info,
        &env(&[("PGSERVICE", "s")]),
        &files,
        OnServiceError::Ignore,
    );
    assert!(matches!(err, Some(ServiceError::Syntax { line: 3, .. })));
    assert_eq!(val(&info, Keyword::Port), Some("5432"));
}

#[test]
fn service_name_comes_from_keyword_then_env() {
    let e = env(&[("PGSERVICE", "fromenv")]);
    let info = parse("service=explicit").unwrap();
    assert_eq!(service::service_name(&info, &e), Some(&b"explicit"[..]));
    assert_eq!(
        service::service_name(&ConnInfo::new(), &e),
        Some(&b"fromenv"[..])
    );
    assert_eq!(service::service_name(&ConnInfo::new(), &env(&[])), None);
}

// ---------------------------------------------------------------- password file

const SPEC_PGPASS: &str = "127.0.0.1:6005:d:u:pw_ip\n\
localhost:6005:*:u:pw_localhost\n\
pgmulti:*:*:*:pw\\:with\\\\colon:trailing\n\
*:*:*:esc\\:user:pw_escuser\n\
*:*:*:nopw\n";

fn spec_lookup(host: &str, hostaddr: &str, user: &str) -> Option<String> {
    let key = slot_key(host.as_bytes(), hostaddr.as_bytes(), b"6005", b"/tmp");
    lookup(
        SPEC_PGPASS.as_bytes(),
        key.host,
        key.port,
        b"d",
        user.as_bytes(),
    )
    .map(|p| String::from_utf8(p).expect("test passwords are UTF-8"))
}

#[test]
fn spec_19_4_pgpass_vectors() {
    assert_eq!(spec_lookup("127.0.0.1", "", "u").as_deref(), Some("pw_ip"));
    assert_eq!(
        spec_lookup("localhost", "", "u").as_deref(),
        Some("pw_localhost")
    );
    assert_eq!(spec_lookup("", "127.0.0.1", "u").as_deref(), Some("pw_ip"));
    assert_eq!(
        spec_lookup("localhost", "127.0.0.2", "u").as_deref(),
        Some("pw_localhost")
    );
    assert_eq!(
        spec_lookup("pgmulti", "", "u").as_deref(),
        Some("pw:with\\colon")
    );
    assert_eq!(
        spec_lookup("h", "", "esc:user").as_deref(),
        Some("pw_escuser")
    );
    assert_eq!(spec_lookup("h", "", "nopw"), None);
    // `password=` (empty) still consults the file; a non-empty one does not.
    let info = parse("password=").unwrap();
    assert!(wants_passfile(info.get(Keyword::Password)));
    assert!(wants_passfile(None));
    assert!(!wants_passfile(Some(b"x")));
}

#[test]
fn spec_19_4_pgpass_permissions() {
    let files = MemFiles::new()
        .with("/h/.pgpass", MemFile::regular(SPEC_PGPASS).with_mode(0o644))
        .with("/ok", MemFile::regular(SPEC_PGPASS).with_mode(0o400))
        .with("/dir", MemFile::directory())
        .with(
            "/locked",
            MemFile::regular(SPEC_PGPASS).with_mode(0o644).unreadable(),
        );
    let key = slot_key(b"localhost", b"", b"6005", b"/tmp");
    let out = password_from_file(&files, b"/h/.pgpass", key, b"d", b"u");
    assert_eq!(out.password, None);
    let w = out.warning.expect("0644 warns");
    assert_eq!(
        w.to_string(),
        r#"WARNING: password file "/h/.pgpass" has group or world access; permissions should be u=rw (0600) or less"#
    );
    assert_eq!(w.libpq_message(), format!("{w}\n").into_bytes());
    for mode in [0o601, 0o610, 0o604, 0o620, 0o640, 0o700 | 0o001] {
        let f = MemFiles::new().with("/p", MemFile::regular(SPEC_PGPASS).with_mode(mode));
        let out = password_from_file(&f, b"/p", key, b"d", b"u");
        assert!(out.warning.is_some(), "{mode:o}");
        assert_eq!(out.password, None);
    }

    let out = password_from_file(&files, b"/ok", key, b"d", b"u");
    assert_eq!(
        out,
        PassfileOutcome {
            password: Some(b"pw_localhost".to_vec()),
            warning: None
        }
    );

    let out = password_from_file(&files, b"/dir", key, b"d", b"u");
    assert_eq!(
        out.warning.map(|w| w.to_string()).as_deref(),
        Some(r#"WARNING: password file "/dir" is not a plain file"#)
    );
    assert_eq!(out.password, None);

    for path in [&b"/locked"[..], b"/missing"] {
        assert_eq!(
            password_from_file(&files, path, key, b"d", b"u"),
            PassfileOutcome::default()
        );
    }
    // Empty dbname or user: the file is not even opened (no warning).
    assert_eq!(
        password_from_file(&files, b"/h/.pgpass", key, b"", b"u"),
        PassfileOutcome::default()
    );
    assert_eq!(
        password_from_file(&files, b"/h/.pgpass", key, b"d", b""),
        PassfileOutcome::default()
    );
}

#[test]
fn passfile_path_choice() {
    let e = env(&[("HOME", "/home/u")]);
    assert_eq!(
        passfile_path(Some(b"/x/pass"), &e),
        Some(b"/x/pass".to_vec())
    );
    assert_eq!(
        passfile_path(Some(b""), &e),
        Some(b"/home/u/.pgpass".to_vec())
    );
    assert_eq!(passfile_path(None, &e), Some(b"/home/u/.pgpass".to_vec()));
    assert_eq!(passfile_path(None, &env(&[])), None);
    let e = env(&[("HOME", "")]).with_passwd_home("/pw");
    assert_eq!(passfile_path(None, &e), Some(b"/pw/.pgpass".to_vec()));

    // PGPASSFILE reaches the keyword in phase 2; an explicit empty passfile blocks it.
    let e = env(&[("HOME", "/home/u"), ("PGPASSFILE", "/env/pass")]);
    let (info, src) = resolve("", &e, &MemFiles::new()).unwrap();
    assert_eq!(
        passfile_path(info.get(Keyword::Passfile), &e),
        Some(b"/env/pass".to_vec())
    );
    assert_eq!(src.get(Keyword::Passfile), Some(Source::Env("PGPASSFILE")));
    let (info, _) = resolve("passfile=''", &e, &MemFiles::new()).unwrap();
    assert_eq!(
        passfile_path(info.get(Keyword::Passfile), &e),
        Some(b"/home/u/.pgpass".to_vec())
    );
}

#[test]
fn slot_key_rules() {
    let k = |h: &str, a: &str, p: &str| {
        let k = slot_key(h.as_bytes(), a.as_bytes(), p.as_bytes(), b"/tmp");
        (
            String::from_utf8_lossy(k.host).into_owned(),
            String::from_utf8_lossy(k.port).into_owned(),
        )
    };
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(k("", "", ""), s("localhost", "5432"));
    assert_eq!(k("/tmp", "", "6001"), s("localhost", "6001"));
    assert_eq!(k("/tmp/", "", ""), s("/tmp/", "5432"));
    assert_eq!(
        k("/var/run/postgresql", "", ""),
        s("/var/run/postgresql", "5432")
    );
    assert_eq!(k("@abstract", "", ""), s("@abstract", "5432"));
    assert_eq!(
        k("db.example", "10.0.0.1", " 6001 "),
        s("db.example", " 6001 ")
    );
    assert_eq!(k("", "10.0.0.1", ""), s("10.0.0.1", "5432"));
    assert_eq!(k("LOCALHOST", "", ""), s("LOCALHOST", "5432"));
    // A Debian-style build: its socket directory is the one that maps to localhost.
    let d = slot_key(b"/var/run/postgresql", b"", b"", b"/var/run/postgresql");
    assert_eq!(d.host, b"localhost");
    let d = slot_key(b"/tmp", b"", b"", b"/var/run/postgresql");
    assert_eq!(d.host, b"/tmp");
    let e = Environment::new();
    assert_eq!(
        e.passfile_key(b"/tmp", b"", b""),
        slot_key(b"", b"", b"", b"/tmp")
    );
    let e = e.with_default_socket_dir("/run/pg");
    assert_eq!(e.passfile_key(b"/run/pg", b"", b"7").host, b"localhost");
}

#[test]
fn pgpass_matching_rules() {
    let f = b"# localhost:*:*:u:commented\n\
h:6001:d:u:raw_port\n\
H:*:*:u:upper\n\
*x:*:*:u:starx\n\
h:*:d:u\n\
h:*:*:u:first\n\
h:*:*:u:second\n";
    let l = |host: &str, port: &str, db: &str, user: &str| {
        lookup(
            f,
            host.as_bytes(),
            port.as_bytes(),
            db.as_bytes(),
            user.as_bytes(),
        )
        .map(|p| String::from_utf8(p).expect("UTF-8"))
    };
    assert_eq!(l("localhost", "1", "d", "u"), None, "comment line");
    assert_eq!(l("h", "6001", "d", "u").as_deref(), Some("raw_port"));
    assert_eq!(
        l("h", " 6001 ", "d", "u").as_deref(),
        Some("first"),
        "raw port text"
    );
    assert_eq!(
        l("H", "1", "d", "u").as_deref(),
        Some("upper"),
        "case-sensitive"
    );
    assert_eq!(
        l("*x", "1", "d", "u").as_deref(),
        Some("starx"),
        "`*` only whole field"
    );
    assert_eq!(l("ax", "1", "d", "u"), None);
    assert_eq!(
        l("h", "1", "d", "u").as_deref(),
        Some("first"),
        "4 fields never match"
    );
    assert_eq!(l("h", "1", "", "u"), None, "empty dbname");
    assert_eq!(l("h", "1", "d", ""), None, "empty user");
    // Empty host and port mean localhost and 5432.
    let f2 = b"localhost:5432:d:u:deflt\n";
    assert_eq!(lookup(f2, b"", b"", b"d", b"u"), Some(b"deflt".to_vec()));
    assert_eq!(
        lookup(f2, b"localhost", b"5432", b"d", b"u"),
        Some(b"deflt".to_vec())
    );
}

#[test]
fn pgpass_line_endings_and_escapes() {
    let one = |content: &[u8]| lookup(content, b"h", b"1", b"d", b"u");
    assert_eq!(one(b"h:1:d:u:crlf\r\n"), Some(b"crlf".to_vec()));
    assert_eq!(one(b"h:1:d:u:many\r\r\n\n"), Some(b"many".to_vec()));
    assert_eq!(one(b"h:1:d:u:eof"), Some(b"eof".to_vec()));
    assert_eq!(one(b"h:1:d:u:"), Some(Vec::new()), "empty password");
    assert_eq!(
        one(b"h:1:d:u:p\\"),
        Some(b"p\\".to_vec()),
        "lone trailing backslash kept"
    );
    assert_eq!(one(b"h:1:d:u:a\\b\\\\c:rest"), Some(b"ab\\c".to_vec()));
    assert_eq!(
        one(b"\\h:\\1:d:\\u:x"),
        Some(b"x".to_vec()),
        "escaped plain bytes"
    );
    assert_eq!(one(b" h:1:d:u:x\n"), None, "no trimming");
    assert_eq!(one(b"h :1:d:u:x\n"), None);
    assert_eq!(
        one(b"h:1:d:u\\:x\n"),
        None,
        "escaped colon is not a separator"
    );
    assert_eq!(one(b"\n\n#c\nh:1:d:u:later\n"), Some(b"later".to_vec()));
    // A long line (unlimited length) is read whole.
    let long = [b"h:1:d:u:".as_slice(), &[b'p'; 5000], b"\n"].concat();
    assert_eq!(one(&long).map(|p| p.len()), Some(5000));
    let long_first = [&[b'x'; 3000][..], b"\nh:1:d:u:ok\n"].concat();
    assert_eq!(one(&long_first), Some(b"ok".to_vec()));
}

#[test]
fn pgpass_nul_bytes_behave_like_libpq() {
    // All observed with libpq 18.4 (PQpass after PQconnectStart).
    let one = |content: &[u8]| lookup(content, b"h1", b"1", b"d", b"u");
    assert_eq!(
        one(b"h1:*:*:u:a\0b\n:x\nh1:*:*:u:second\n"),
        Some(b"a".to_vec())
    );
    assert_eq!(one(b"h1:*:*:u:a\0b\n"), None);
    assert_eq!(one(b"h1:*:*:u:a\0b"), Some(b"a".to_vec()));
    assert_eq!(one(b"h1:*:*:u:a\0b\nc\n"), Some(b"ac".to_vec()));
    // The NUL drops only the rest of its 255-byte fgets chunk.
    let file = [b"h1:*:*:u:a\0".as_slice(), &[b'b'; 300], b"c\n"].concat();
    let want = [b"a".as_slice(), &[b'b'; 56], b"c"].concat();
    assert_eq!(one(&file), Some(want));
    // NUL inside the lookup values: compared as C strings.
    assert_eq!(
        lookup(b"h1:1:d:u:pw\n", b"h1\0zz", b"1", b"d", b"u\0"),
        Some(b"pw".to_vec())
    );
}

#[test]
fn escaping_round_trips() {
    let line = format_line(b"*", b"5:4", b"#db", b"us\\er", b"p:w\\").expect("writable");
    assert_eq!(line, b"\\*:5\\:4:\\#db:us\\\\er:p\\:w\\\\".to_vec());
    assert_eq!(
        lookup(&line, b"*", b"5:4", b"#db", b"us\\er"),
        Some(b"p:w\\".to_vec())
    );
    assert_eq!(
        lookup(&line, b"other", b"5:4", b"#db", b"us\\er"),
        None,
        "`\\*` is literal"
    );
    assert_eq!(escape_field(b"a\nb"), None);
    assert_eq!(escape_field(b"a\rb"), None);
    assert_eq!(escape_field(b"a\0b"), None);
}

#[test]
fn home_directory_rules() {
    assert_eq!(env(&[("HOME", "/h")]).home_directory(), Some(&b"/h"[..]));
    let e = env(&[("HOME", "")]).with_passwd_home("/pw");
    assert_eq!(e.home_directory(), Some(&b"/pw"[..]));
    assert_eq!(
        env(&[]).with_passwd_home("/pw").home_directory(),
        Some(&b"/pw"[..])
    );
    assert_eq!(env(&[("HOME", "")]).home_directory(), None);
    let long = "h".repeat(2000);
    assert_eq!(
        env(&[("HOME", &long)]).home_directory().map(<[u8]>::len),
        Some(1023)
    );
}

#[test]
fn fuzzing_entry_points_accept_samples() {
    for data in [
        &b""[..],
        b"\n",
        b"s\n[s]\nhost=x\nservice=y\n",
        b"s\n[s]\n\0\0\0",
        b"h:1:d:u:p\\",
        b"*:*:*:*:\\",
        b"localhost:5432:db:user:\0pw",
    ] {
        crate::fuzzing::service_file(data);
        crate::fuzzing::passfile(data);
    }
}

// ---------------------------------------------------------------- properties

fn field() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        any::<u8>().prop_filter("line bytes", |b| !matches!(b, b'\n' | b'\r' | 0)),
        1..12,
    )
}

proptest! {
    #[test]
    fn service_parser_never_panics(name in proptest::collection::vec(any::<u8>(), 0..8),
                                   contents in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let s = parse_service_file(&contents, b"p", &name);
        prop_assert!(s.found || s.settings.is_empty());
        prop_assert!(s.settings.iter().all(|(_, v)| v.len() < 1023));
        crate::fuzzing::service_file(&contents);
    }

    #[test]
    fn service_parser_on_structured_input(lines in proptest::collection::vec(
        prop_oneof![
            Just("[s]".to_string()),
            Just("[t]".to_string()),
            Just("host=h".to_string()),
            Just("port=1".to_string()),
            Just("service=x".to_string()),
            Just("bad".to_string()),
            Just("#c".to_string()),
            "[a-z=\\[\\] ]{0,12}",
        ], 0..20)) {
        let text = lines.join("\n");
        let s = parse_service_file(text.as_bytes(), b"p", b"s");
        // The scan only ever reports lines of the first [s] group.
        if let Some(start) = lines.iter().position(|l| l.trim().starts_with("[s]")) {
            prop_assert!(s.found);
            let group: Vec<&String> = lines[start + 1..]
                .iter()
                .take_while(|l| !l.trim().starts_with('['))
                .collect();
            prop_assert!(s.settings.len() <= group.len());
        } else {
            prop_assert!(!s.found);
            prop_assert_eq!(s.error, None);
        }
    }

    #[test]
    fn passfile_lookup_never_panics(contents in proptest::collection::vec(any::<u8>(), 0..2000),
                                    host in proptest::collection::vec(any::<u8>(), 0..6),
                                    user in proptest::collection::vec(any::<u8>(), 0..6)) {
        if let Some(pw) = lookup(&contents, &host, b"5432", b"d", &user) {
            prop_assert!(pw.len() <= contents.len());
        }
        crate::fuzzing::passfile(&contents);
    }

    #[test]
    fn escaped_entry_is_found(host in field(), port in field(), db in field(), user in field(),
                              password in proptest::collection::vec(any::<u8>().prop_filter("line bytes", |b| !matches!(b, b'\n' | b'\r' | 0)), 0..16),
                              noise in proptest::collection::vec(field(), 0..4)) {
        let mut file = Vec::new();
        for n in &noise {
            // Lines for a user that differs from `user` never match first.
            let mut other = user.clone();
            other.push(b'!');
            file.extend_from_slice(&format_line(n, n, n, &other, b"wrong").expect("filtered"));
            file.push(b'\n');
        }
        file.extend_from_slice(&format_line(&host, &port, &db, &user, &password).expect("filtered"));
        file.extend_from_slice(b"\r\n");
        prop_assert_eq!(lookup(&file, &host, &port, &db, &user), Some(password));
    }
}
