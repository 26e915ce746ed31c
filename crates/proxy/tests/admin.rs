//! The admin console in the client-session machine: who is admitted to the database
//! `pgyard`, the welcome, commands answered in order (those needing the adapter wait for
//! its reply), what is refused; and the activity every session reports for it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgyard_proxy::admin::{AdminError, AdminReply, AdminRequest, ClientState, Snapshot};
use pgyard_proxy::classes::TAG;
use pgyard_proxy::client::Settings;
use pgyard_proxy::{
    AuthFile, CancelKey, ClientAuth, ClientConfig, ClientId, ClientOut, ClientSession, Databases,
    Lent, PoolMode, Route, ServerId,
};
use pgyard_types::Instant;
use pgyard_wire::auth::{md5_password, md5_secret, LoginRandom};
use pgyard_wire::backend::{self, TransactionStatus};
use pgyard_wire::frame::{frames, ProtocolVersion};
use pgyard_wire::frontend;
use pgyard_wire::middleware::encode_middleware;

const T0: Instant = Instant(0);
const SALT: [u8; 4] = [1, 2, 3, 4];

fn ms(n: u64) -> Instant {
    Instant(n * 1_000_000)
}

fn session_with(auth: ClientAuth, admins: &[&str], mode: PoolMode) -> ClientSession {
    session_disabling(auth, admins, mode, &[])
}

/// [`session_with`], the databases in `disabled` DISABLEd when the client connected.
fn session_disabling(
    auth: ClientAuth,
    admins: &[&str],
    mode: PoolMode,
    disabled: &[&str],
) -> ClientSession {
    let admin_users: BTreeSet<String> = admins.iter().map(|s| s.to_string()).collect();
    let names: BTreeSet<String> = ["app".to_owned()].into();
    let config = ClientConfig {
        default_route: Route::Primary,
        login_timeout: Duration::from_secs(5),
        // `pgyard` needs no entry: the console is not a database of the backends.
        databases: Databases::Only(Arc::new(names)),
        disabled: Arc::new(disabled.iter().map(|s| s.to_string()).collect()),
        admin_users: Arc::new(admin_users),
        ..ClientConfig::new(auth, mode)
    };
    let key = CancelKey {
        pid: 77,
        secret: vec![9; 32],
    };
    let random = LoginRandom {
        salt: SALT,
        nonce: [2; 18],
        mock_salt: [3; 16],
    };
    ClientSession::new(T0, ClientId(1), config, key, random)
}

fn startup(user: &str, database: &str) -> Vec<u8> {
    let params: Vec<(&[u8], &[u8])> = vec![
        (b"user", user.as_bytes()),
        (b"database", database.as_bytes()),
        (b"application_name", b"psql"),
    ];
    let mut b = BytesMut::new();
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b).expect("startup");
    b.to_vec()
}

fn query(sql: &str) -> Vec<u8> {
    let mut b = BytesMut::new();
    frontend::encode_query(sql.as_bytes(), &mut b).expect("query");
    b.to_vec()
}

fn outputs(s: &mut ClientSession) -> Vec<ClientOut> {
    std::iter::from_fn(|| s.poll_output()).collect()
}

/// Every byte written to the client in `out`.
fn to_client(out: &[ClientOut]) -> Vec<u8> {
    out.iter()
        .filter_map(|o| match o {
            ClientOut::ToClient(b) => Some(b.to_vec()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn tags(bytes: &[u8]) -> Vec<u8> {
    frames(bytes, 1 << 30)
        .map(|f| f.expect("frame").tag)
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn never_acquires(out: &[ClientOut]) {
    assert!(
        !out.iter().any(|o| matches!(o, ClientOut::Acquire(_))),
        "{out:?}"
    );
}

/// An admin session under trust, welcomed.
fn admin() -> ClientSession {
    let mut s = session_with(ClientAuth::Trust, &[], PoolMode::Transaction);
    s.handle_client_bytes(T0, &startup("anyone", "pgyard"));
    let out = outputs(&mut s);
    never_acquires(&out);
    let welcome = to_client(&out);
    assert_eq!(tags(&welcome), b"RSSSSSSSKZ", "{}", text(&welcome));
    assert!(
        text(&welcome).contains("/pgyard\0"),
        "server_version names pgyard"
    );
    assert!(s.is_admin());
    s
}

fn empty_snapshot(paused: bool) -> AdminReply {
    AdminReply::Snapshot(Box::new(Snapshot {
        pool_mode: PoolMode::Transaction,
        paused,
        pools: Vec::new(),
        clients: Vec::new(),
        servers: Vec::new(),
        retired: Default::default(),
        config: Vec::new(),
        databases: Vec::new(),
    }))
}

#[test]
fn under_trust_any_user_gets_a_console_that_never_asks_for_a_server() {
    let mut s = admin();
    // Two queries in one write: the second waits for the adapter's answer to the first.
    let mut both = query("show state;");
    both.extend(query("SHOW HELP"));
    s.handle_client_bytes(ms(1), &both);
    let out = outputs(&mut s);
    assert_eq!(out, [ClientOut::Admin(AdminRequest::Snapshot)]);
    assert_eq!(s.activity().state, ClientState::Active);
    s.handle_admin(empty_snapshot(true));
    let answer = to_client(&outputs(&mut s));
    assert_eq!(tags(&answer), b"TDDDCZNCZ", "{}", text(&answer));
    assert!(
        text(&answer).contains("paused\0\0\0\x03yes"),
        "{}",
        text(&answer)
    );
    assert_eq!(s.activity().state, ClientState::Idle);

    // Actions go to the adapter one at a time, and their outcome comes back.
    s.handle_client_bytes(ms(2), &query("PAUSE"));
    assert_eq!(outputs(&mut s), [ClientOut::Admin(AdminRequest::Pause)]);
    s.handle_admin(AdminReply::Done);
    assert_eq!(tags(&to_client(&outputs(&mut s))), b"CZ");
    s.handle_client_bytes(ms(3), &query("resume"));
    assert_eq!(outputs(&mut s), [ClientOut::Admin(AdminRequest::Resume)]);
    s.handle_admin(AdminReply::Failed(AdminError::pooler(
        "pooler is not paused/suspended",
    )));
    let err = to_client(&outputs(&mut s));
    assert_eq!(tags(&err), b"EZ");
    assert!(text(&err).contains("SERROR") && text(&err).contains("C08P01"));
    s.handle_client_bytes(ms(4), &query("reload"));
    assert_eq!(outputs(&mut s), [ClientOut::Admin(AdminRequest::Reload)]);

    // A reply nobody waits for is ignored.
    s.handle_admin(AdminReply::Done);
    s.handle_admin(AdminReply::Done);
    assert_eq!(tags(&to_client(&outputs(&mut s))), b"CZ", "one answer");
    assert!(!s.is_closed());
}

#[test]
fn a_wrong_command_is_an_error_and_the_console_goes_on() {
    let mut s = admin();
    s.handle_client_bytes(T0, &query("SHOW MEM"));
    let out = to_client(&outputs(&mut s));
    assert_eq!(tags(&out), b"EZ");
    assert!(
        text(&out).contains("invalid command 'SHOW MEM', use SHOW HELP;"),
        "{}",
        text(&out)
    );
    s.handle_client_bytes(T0, &query(""));
    assert_eq!(tags(&to_client(&outputs(&mut s))), b"IZ");
    s.handle_client_bytes(T0, &query("show version"));
    assert_eq!(tags(&to_client(&outputs(&mut s))), b"TDCZ");
    let mut b = BytesMut::new();
    frontend::encode_terminate(&mut b);
    s.handle_client_bytes(T0, &b);
    assert_eq!(outputs(&mut s), [ClientOut::Close]);
    assert!(s.is_closed());
}

#[test]
fn the_extended_protocol_and_other_messages_end_the_console() {
    let mut s = admin();
    let mut b = BytesMut::new();
    frontend::encode_parse(b"", b"show pools", &[], &mut b).expect("parse");
    s.handle_client_bytes(T0, &b);
    let out = outputs(&mut s);
    let err = to_client(&out);
    assert!(
        text(&err).contains("extended query protocol not supported by admin console"),
        "{}",
        text(&err)
    );
    assert_eq!(out.last(), Some(&ClientOut::Close));

    let mut s = admin();
    let mut b = BytesMut::new();
    frontend::encode_copy_done(&mut b);
    s.handle_client_bytes(T0, &b);
    let err = to_client(&outputs(&mut s));
    assert!(
        text(&err).contains("unsupported packet type for admin console: c"),
        "{}",
        text(&err)
    );

    // A message beyond the console's limit is refused, not held.
    let mut s = admin();
    let mut huge = vec![b'Q'];
    huge.extend_from_slice(&(1u32 << 20).to_be_bytes());
    s.handle_client_bytes(T0, &huge);
    assert!(s.is_closed());
}

#[test]
fn a_shutdown_closes_the_console() {
    let mut s = admin();
    s.handle_shutdown();
    let out = outputs(&mut s);
    assert!(text(&to_client(&out)).contains("pooler is shutting down"));
    assert_eq!(out.last(), Some(&ClientOut::Close));
}

/// Logs `user` in with MD5 against an auth file where bob and carol have password `pw`.
fn md5_login(user: &str, admins: &[&str]) -> (ClientSession, Vec<ClientOut>) {
    md5_login_to(user, "pgyard", "pw", admins, &[])
}

/// Logs `user` in to `database` with `password` (MD5, bob and carol have `pw`), with the
/// databases in `disabled` DISABLEd.
fn md5_login_to(
    user: &str,
    database: &str,
    password: &str,
    admins: &[&str],
    disabled: &[&str],
) -> (ClientSession, Vec<ClientOut>) {
    let file = format!(
        "\"bob\" \"{}\"\n\"carol\" \"{}\"\n",
        md5_secret("bob", "pw"),
        md5_secret("carol", "pw")
    );
    let file = AuthFile::parse(&file, &mut pgyard_types::rng_from_seed(1)).expect("auth file");
    let auth = ClientAuth::File(Arc::new(file));
    let mut s = session_disabling(auth, admins, PoolMode::Session, disabled);
    s.handle_client_bytes(T0, &startup(user, database));
    outputs(&mut s);
    let mut b = BytesMut::new();
    let proof = md5_password(user, password, SALT);
    frontend::encode_password(proof.as_bytes(), &mut b).expect("p");
    s.handle_client_bytes(T0, &b);
    let out = outputs(&mut s);
    (s, out)
}

#[test]
fn with_an_auth_file_only_admin_users_are_admitted_after_their_password() {
    let (s, out) = md5_login("bob", &["bob"]);
    never_acquires(&out);
    assert_eq!(tags(&to_client(&out)).last(), Some(&b'Z'));
    assert!(s.is_admin() && !s.is_closed());

    let (s, out) = md5_login("carol", &["bob"]);
    never_acquires(&out);
    let err = text(&to_client(&out));
    assert!(
        err.contains("SFATAL") && err.contains("C08P01") && err.contains("Mnot allowed\0"),
        "{err}"
    );
    assert!(s.is_closed() && !s.is_admin());
}

#[test]
fn a_disabled_database_refuses_logins_after_the_password_check() {
    // The right password: PgBouncer 1.18's FATAL, and no server is asked for.
    let (s, out) = md5_login_to("bob", "app", "pw", &[], &["app"]);
    never_acquires(&out);
    let err = text(&to_client(&out));
    assert!(
        err.contains("SFATAL")
            && err.contains("C08P01")
            && err.contains("Mdatabase \"app\" is disabled\0"),
        "{err}"
    );
    assert_eq!(out.last(), Some(&ClientOut::Close));
    assert!(s.is_closed());
    // A wrong password is told only that (nothing about the database).
    let (_, out) = md5_login_to("bob", "app", "nope", &[], &["app"]);
    let err = text(&to_client(&out));
    assert!(err.contains("C28P01") && !err.contains("disabled"), "{err}");
    // Another database, and the console, are not affected.
    let (s, out) = md5_login_to("bob", "app", "pw", &[], &["shop"]);
    assert!(matches!(out.last(), Some(ClientOut::Acquire(_))), "{out:?}");
    assert!(!s.is_closed());
    let (s, out) = md5_login_to("bob", "pgyard", "pw", &["bob"], &["app"]);
    assert_eq!(tags(&to_client(&out)).last(), Some(&b'Z'));
    assert!(s.is_admin());
}

fn lent(id: u64) -> Lent {
    // The client's own application_name: no alignment query before its messages.
    let settings: Settings = [
        ("TimeZone".to_owned(), "UTC".to_owned()),
        ("application_name".to_owned(), "psql".to_owned()),
    ]
    .into_iter()
    .collect();
    Lent {
        id: ServerId(id),
        settings,
        prepared: Default::default(),
    }
}

fn reply(status: TransactionStatus) -> Bytes {
    let mut b = BytesMut::new();
    backend::encode_command_complete(b"SELECT 1", &mut b).expect("C");
    backend::encode_ready_for_query(status, &mut b);
    b.freeze()
}

#[test]
fn a_client_reports_its_state_route_tag_and_counters() {
    let mut s = session_with(ClientAuth::Trust, &[], PoolMode::Transaction);
    assert_eq!(s.activity().state, ClientState::Login);
    s.handle_client_bytes(T0, &startup("alice", "app"));
    outputs(&mut s);
    let a = s.activity();
    assert_eq!(
        (a.state, a.logged_in, a.admin),
        (ClientState::Waiting, true, false)
    );
    assert_eq!(a.wait_since, Some(T0));
    s.handle_server(ms(2), lent(1));
    outputs(&mut s);
    let a = s.activity();
    assert_eq!(a.state, ClientState::Idle, "the welcome server went back");
    assert_eq!((a.stats.assignments, a.stats.wait_us), (1, 2_000));
    assert_eq!(s.application_name(), Some("psql"));

    // A TAG and an unknown class change the labels and the counters.
    let labels = a.labels;
    let mut b = BytesMut::new();
    encode_middleware(TAG, b"batch-7", &mut b).expect("M");
    encode_middleware(4_000_000_000, b"?", &mut b).expect("M");
    s.handle_client_bytes(ms(3), &b);
    let a = s.activity();
    assert_ne!(a.labels, labels);
    assert_eq!(s.tag(), Some("batch-7"));
    assert_eq!((a.stats.middleware, a.stats.unknown_classes), (2, 1));

    // A transaction: waiting, holding (with its server and route), then idle and counted.
    s.handle_client_bytes(ms(10), &query("begin"));
    assert_eq!(s.activity().state, ClientState::Waiting);
    s.handle_server(ms(11), lent(2));
    let a = s.activity();
    assert_eq!(
        (a.state, a.server, a.route),
        (ClientState::Active, Some(ServerId(2)), Route::Primary)
    );
    s.handle_server_bytes(ms(12), reply(TransactionStatus::InTransaction));
    s.handle_client_bytes(ms(20), &query("commit"));
    s.handle_server_bytes(ms(25), reply(TransactionStatus::Idle));
    outputs(&mut s);
    let a = s.activity();
    assert_eq!((a.state, a.server), (ClientState::Idle, None));
    assert_eq!(a.last_request, Some(ms(20)));
    assert_eq!((a.stats.xacts, a.stats.queries), (1, 2));
    assert_eq!(
        a.stats.xact_us, 15_000,
        "from begin at 10 ms to commit's end at 25 ms"
    );
    assert_eq!(a.stats.query_us, 2_000 + 5_000);
    assert_eq!(a.stats.wait_us, 2_000 + 1_000);
    assert!(a.stats.received > 0 && a.stats.sent > 0);
    assert!(a.counted());
}

#[test]
fn kill_closes_a_client_in_a_transaction_and_gives_its_server_back_unclean() {
    let mut s = session_with(ClientAuth::Trust, &[], PoolMode::Transaction);
    s.handle_client_bytes(T0, &startup("alice", "app"));
    outputs(&mut s);
    s.handle_server(ms(1), lent(1));
    outputs(&mut s);
    s.handle_client_bytes(ms(2), &query("begin"));
    s.handle_server(ms(3), lent(2));
    s.handle_server_bytes(ms(4), reply(TransactionStatus::InTransaction));
    outputs(&mut s);

    s.handle_kill();
    let out = outputs(&mut s);
    let err = text(&to_client(&out));
    assert!(
        err.contains("SFATAL") && err.contains("C08P01") && err.contains("Mdatabase removed\0"),
        "{err}"
    );
    // Inside a transaction: the server may not serve anyone else.
    assert!(
        out.iter().any(|o| matches!(
            o,
            ClientOut::Release { server, reusable: false } if server.id == ServerId(2)
        )),
        "{out:?}"
    );
    assert_eq!(out.last(), Some(&ClientOut::Close));
    assert!(s.is_closed());

    // An idle client between transactions is closed too; a console is not a client of any
    // database and stays.
    let mut idle = session_with(ClientAuth::Trust, &[], PoolMode::Transaction);
    idle.handle_client_bytes(T0, &startup("bob", "app"));
    idle.handle_server(ms(1), lent(3));
    outputs(&mut idle);
    idle.handle_kill();
    assert!(text(&to_client(&outputs(&mut idle))).contains("database removed"));
    assert!(idle.is_closed());
    let mut console = admin();
    console.handle_kill();
    assert!(outputs(&mut console).is_empty());
    assert!(!console.is_closed());
}
