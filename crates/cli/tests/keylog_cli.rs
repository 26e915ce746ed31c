//! `sslkeylogfile` (libpq 18) end to end: `pgyard connect` and psql (libpq 18) over TLS 1.3
//! and TLS 1.2 to a live PostgreSQL 18 write the same secrets, by NSS key log label and
//! length, into files only their owner can read, and with a file that cannot be opened both
//! still connect and print the same warnings on standard error.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use pgyard_testkit::cluster::{psql_path, Primary};
use pgyard_testkit::fixtures::{pki_tls_options, write_pki};
use pgyard_testkit::postgres::ensure_installed;

fn pgyard(conninfo: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["connect", conninfo, "-c", "select 1"])
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .expect("run pgyard")
}

fn psql(conninfo: &str) -> Output {
    Command::new(psql_path().expect("psql"))
        .args(["-X", "-A", "-t", "-c", "select 1", "-d", conninfo])
        .env(
            "LD_LIBRARY_PATH",
            &ensure_installed().expect("PostgreSQL 18").lib_dir,
        )
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .expect("run psql")
}

/// Each line's label with the lengths of its two hex fields, sorted (OpenSSL and rustls log
/// the same secrets in different orders).
fn shape(path: &Path) -> Vec<(String, usize, usize)> {
    let text = std::fs::read_to_string(path).expect("the key log");
    let mut lines: Vec<_> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 3, "{l}");
            assert!(
                f[1..]
                    .iter()
                    .all(|h| h.bytes().all(|b| b.is_ascii_hexdigit())),
                "{l}"
            );
            (f[0].to_owned(), f[1].len(), f[2].len())
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn key_log_files_and_warnings_match_libpqs() {
    let dir = tempfile::tempdir().expect("a directory");
    let pki = write_pki(dir.path()).expect("certificates written");
    let primary = Primary::start(pki_tls_options(&pki)).expect("a primary serving TLS");
    for version in ["TLSv1.3", "TLSv1.2"] {
        let conninfo = |file: &str| {
            format!(
                "host=localhost port={} user=postgres dbname=postgres sslmode=require \
                 ssl_min_protocol_version={version} ssl_max_protocol_version={version} \
                 sslkeylogfile={file}",
                primary.port()
            )
        };
        let theirs_file = dir.path().join(format!("libpq-{version}.log"));
        let ours_file = dir.path().join(format!("pgyard-{version}.log"));
        for round in 1..=2 {
            let theirs = psql(&conninfo(theirs_file.to_str().unwrap()));
            let ours = pgyard(&conninfo(ours_file.to_str().unwrap()));
            assert_eq!(theirs.stdout, b"1\n", "{version}: {theirs:?}");
            assert_eq!(ours.stdout, b"1\n", "{version}: {ours:?}");
            let (t, o) = (shape(&theirs_file), shape(&ours_file));
            assert_eq!(o, t, "{version}, connect {round}: the secrets logged");
            assert_eq!(o.len(), round * if version == "TLSv1.3" { 5 } else { 1 });
        }
        for file in [&theirs_file, &ours_file] {
            let mode = std::fs::metadata(file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", file.display());
        }
        let nowhere = conninfo("/nonexistent-pgyard-dir/keys.log");
        let (theirs, ours) = (psql(&nowhere), pgyard(&nowhere));
        assert_eq!(theirs.stdout, b"1\n", "{version}: {theirs:?}");
        assert_eq!(ours.stdout, b"1\n", "{version}: {ours:?}");
        assert!(!theirs.stderr.is_empty(), "{version}: libpq warned");
        assert_eq!(
            String::from_utf8_lossy(&ours.stderr),
            String::from_utf8_lossy(&theirs.stderr),
            "{version}: the warnings"
        );
    }
}
