//! Why a connect fails, in libpq 18's words: the blocking adapter's error text against
//! `PQerrorMessage` after libpq's own `PQconnectdb`, side by side on this machine, for
//! strings that fail without a server (ports nothing listens on, a missing socket directory,
//! values libpq refuses). The recorded texts elsewhere pin the same from captures; this
//! checks them against the live library.

use pgyard_blocking::{connect_with, ConnectOptions};
use pgyard_testkit::libpq::Libpq;

#[test]
fn failed_connects_are_reported_in_libpqs_words() {
    let libpq = Libpq::shared().expect("libpq 18");
    let missing = tempfile::tempdir().expect("a directory");
    let socket_dir = missing.path().join("no-such-dir");
    let socket_dir = socket_dir.to_str().expect("a UTF-8 path");
    let cases = [
        "host=127.0.0.1 port=1".to_owned(),
        "host=127.0.0.1,127.0.0.1 port=1,2".to_owned(),
        "hostaddr=127.0.0.1 port=1".to_owned(),
        "host=localhost hostaddr=127.0.0.1 port=1".to_owned(),
        "host=127.0.0.1 port=1 sslmode=require".to_owned(),
        "host=127.0.0.1 port=1 sslmode=prefer target_session_attrs=read-write".to_owned(),
        format!("host={socket_dir} port=5432"),
        format!("host={socket_dir},127.0.0.1 port=1"),
        "host=127.0.0.1 port=abc".to_owned(),
        "host=127.0.0.1 port=99999".to_owned(),
        "host=a,b port=1,2,3".to_owned(),
        "hostaddr=not-an-address port=1".to_owned(),
        "host=127.0.0.1 port=1 connect_timeout=abc".to_owned(),
        "host=127.0.0.1 port=1 sslmode=bogus".to_owned(),
        "host=127.0.0.1 port=1 target_session_attrs=bogus".to_owned(),
        "host=127.0.0.1 port=1 load_balance_hosts=bogus".to_owned(),
        "host=127.0.0.1 port=1 require_auth=bogus".to_owned(),
        "host=127.0.0.1 port=1 channel_binding=require sslmode=disable".to_owned(),
        "host=127.0.0.1 port=1 min_protocol_version=3.9".to_owned(),
        "postgresql://127.0.0.1:1,127.0.0.1:2/db?connect_timeout=2".to_owned(),
        "host=localhost port=1".to_owned(),
        "host=localhost,127.0.0.1 port=1 load_balance_hosts=disable".to_owned(),
        "host= port=1".to_owned(),
        "host=127.0.0.1 port=1 sslmode=verify-full sslrootcert=/nonexistent".to_owned(),
        "host=127.0.0.1 port=1 sslnegotiation=direct sslmode=prefer".to_owned(),
        "host=127.0.0.1 port=1 keepalives_idle=x".to_owned(),
        "host=127.0.0.1 port=1 gssencmode=require".to_owned(),
        "host=127.0.0.1 port=1 sslcertmode=require sslmode=disable".to_owned(),
        "host=127.0.0.1 port=1 ssl_min_protocol_version=TLSv1.9".to_owned(),
        "host=127.0.0.1 port=1 min_protocol_version=3.2 max_protocol_version=3.0".to_owned(),
        "dbname='host=127.0.0.1 port=1'".to_owned(),
        "host=127.0.0.1 port=1 sslmode=disable sslnegotiation=direct".to_owned(),
    ];
    // hostaddr as getaddrinfo reads it with AI_NUMERICHOST: inet_aton's forms too.
    let hostaddrs = [
        "127.1",
        "127.0.1",
        "2130706433",
        "0x7f.1",
        "0177.0.0.01",
        "0X7F000001",
        "127.0.0.256",
        "08",
        "0x",
        "1.2.3.4.5",
        "'127.0.0.1 '",
        "' 127.0.0.1'",
        "127.0.0.1.",
        "+127.0.0.1",
        "::1",
        "::ffff:127.0.0.1",
        "[::1]",
        // IPv6 zones: numbers anywhere, interface names only in link-local scope (where
        // the system's resolver looks them up); a link-local address without a usable zone
        // fails at connect, one with a zone naming no device as well.
        "::1%1",
        "::1%0",
        "::1%001",
        "::1%lo",
        "::1%",
        "::1%1%2",
        "::1%+1",
        "::1%4294967295",
        "::1%4294967296",
        "127.0.0.1%1",
        "fe80::1%lo",
        "fe80::1%1",
        "fe80::1%99",
        "fe80::1%nope",
        "fe80::1%",
        "fe80::1",
        "ff02::1%lo",
    ];
    let cases = cases
        .into_iter()
        .chain(hostaddrs.iter().map(|a| format!("hostaddr={a} port=1")))
        // The same forms as a host name: resolved by getaddrinfo without AI_NUMERICHOST.
        .chain(
            [
                "127.1",
                "2130706433",
                "0x7f.1",
                "::1",
                "::1%1",
                "::1%lo",
                "fe80::1%99",
            ]
            .iter()
            .map(|h| format!("host={h} port=1")),
        );
    let options = ConnectOptions::default().seed(1);
    for conninfo in cases {
        let want = libpq.connect_error_text(&conninfo);
        assert!(!want.is_empty(), "libpq connected with {conninfo}");
        let got = match connect_with(&conninfo, &options) {
            Ok(_) => panic!("pgyard connected with {conninfo}"),
            Err(e) => e.to_string().trim_end().to_owned(),
        };
        assert_eq!(got, want, "{conninfo}");
    }
}
