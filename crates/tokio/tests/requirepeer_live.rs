//! `requirepeer` through the tokio adapter's two drivers (the sequential walk on the caller's
//! task and the racing one with a task per attempt), over a live PostgreSQL 18's Unix socket:
//! the servers' owner passes, another user fails in libpq 18's words, and TCP is not checked.

use pgyard_testkit::cluster::{ensure_server_user, Options, Primary};
use pgyard_testkit::libpq::Libpq;
use pgyard_tokio::{connect_with, ConnectOptions, Strategy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirepeer_is_judged_as_libpq_judges_it() {
    let server = Primary::start(Options::default()).expect("a primary");
    let owner = ensure_server_user().expect("the server's user").name;
    let socket = format!(
        "host={} port={} user=postgres dbname=postgres",
        server.socket_dir().display(),
        server.port()
    );
    let tcp = format!("host=127.0.0.1 port={} user=postgres", server.port());
    let cases = [
        (format!("{socket} requirepeer={owner}"), true),
        (format!("{socket} requirepeer=root"), false),
        (
            format!(
                "{socket},127.0.0.1 port={},{} requirepeer=root",
                server.port(),
                server.port()
            ),
            false,
        ),
        (format!("{tcp} requirepeer=root"), true),
    ];
    let libpq = Libpq::shared().expect("libpq 18");
    for strategy in [Strategy::Sequential, Strategy::Race] {
        let options = ConnectOptions::default().seed(5).strategy(strategy);
        for (conninfo, lands) in &cases {
            let theirs = libpq.connect_outcome(conninfo).map(|_| ());
            let ours = match connect_with(conninfo, &options).await {
                Ok(s) => {
                    s.close().await;
                    Ok(())
                }
                Err(e) => Err(e.to_string().trim_end().to_owned()),
            };
            assert_eq!(ours, theirs, "{strategy:?}: {conninfo}");
            assert_eq!(ours.is_ok(), *lands, "{strategy:?}: {conninfo}");
        }
    }
}
