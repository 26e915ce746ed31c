//! The admin console's result sets, read back with pgyard-wire's decoders.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::BytesMut;
use pgyard_types::Instant;
use pgyard_wire::backend::{DataRowFields, RowDescription};
use pgyard_wire::error_fields::ErrorFields;
use pgyard_wire::frame::frames;

use super::*;
use crate::admin::snapshot::{
    Activity, ClientAddr, ClientState, ClientStats, ConfigRow, DatabaseRow, ServerState,
};
use crate::admin::AdminRequest;
use crate::classes::Route;
use crate::pool::{ClientId, PoolKey, ServerId};

/// What an answer says: the column names with their type OIDs, the rows, the error
/// (SQLSTATE and message), the CommandComplete tag, and the type bytes in order.
#[derive(Debug, Default)]
struct Read {
    columns: Vec<(String, u32)>,
    rows: Vec<Vec<Option<String>>>,
    error: Option<(String, String)>,
    tag: Option<String>,
    types: Vec<u8>,
}

impl Read {
    fn of(buf: &[u8]) -> Read {
        let mut r = Read::default();
        for f in frames(buf, 1 << 20) {
            let f = f.expect("frame");
            r.types.push(f.tag);
            let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            match f.tag {
                b'T' => {
                    let d = RowDescription::decode(f.body).expect("T");
                    r.columns = d.fields().map(|c| (lossy(c.name), c.type_oid)).collect();
                }
                b'D' => {
                    let row = DataRowFields::new(f.body).expect("D");
                    r.rows
                        .push(row.map(|v| v.expect("value").map(lossy)).collect());
                }
                b'E' => {
                    let e = ErrorFields::decode(f.body).expect("E");
                    let code = lossy(e.code().unwrap_or_default());
                    r.error = Some((code, lossy(e.message().unwrap_or_default())));
                }
                b'C' => r.tag = Some(lossy(f.body.strip_suffix(&[0]).unwrap_or(f.body))),
                _ => {}
            }
        }
        r
    }

    /// The value of `column` in row `row`.
    fn get(&self, row: usize, column: &str) -> Option<&str> {
        let i = self.columns.iter().position(|(n, _)| n == column)?;
        self.rows[row][i].as_deref()
    }
}

fn render(command: Command, reply: Option<AdminReply>) -> Read {
    let mut buf = BytesMut::new();
    answer(command, reply, &mut buf);
    Read::of(&buf)
}

fn key(database: &str, route: Route) -> PoolKey {
    PoolKey {
        database: database.into(),
        user: "alice".into(),
        route,
        options: String::new(),
    }
}

fn activity(state: ClientState) -> Activity {
    Activity {
        state,
        admin: false,
        logged_in: state != ClientState::Login,
        route: Route::Primary,
        server: None,
        wait_since: None,
        last_request: Some(Instant(5)),
        draining: false,
        prepared: 0,
        labels: 1,
        stats: ClientStats::default(),
    }
}

fn client(id: u64, database: &str, state: ClientState) -> ClientRow {
    ClientRow {
        id: ClientId(id),
        user: "alice".into(),
        database: database.into(),
        activity: activity(state),
        addr: Some(ClientAddr::Tcp("127.0.0.1:40001".parse().expect("addr"))),
        local: Some(ClientAddr::Tcp("127.0.0.1:6432".parse().expect("addr"))),
        connect_time: Some(1_780_000_000),
        request_time: Some(1_780_000_005),
        wait: Duration::ZERO,
        tls: None,
        application_name: "psql".into(),
        tag: None,
        options: String::new(),
    }
}

fn server(id: u64, database: &str, state: ServerState, client: Option<u64>) -> ServerRow {
    ServerRow {
        id: ServerId(id),
        key: key(database, Route::Primary),
        state,
        client: client.map(ClientId),
        addr: Some("10.0.0.1".into()),
        port: Some(5432),
        connect_time: Some(1_780_000_000),
        request_time: None,
        close_needed: false,
        pid: Some(4242),
        tls: false,
        application_name: String::new(),
        prepared: 3,
    }
}

/// Two pools of `shop` (primary with a client in a transaction, one idle and one waiting;
/// standby, empty), an admin client, a client still logging in. The idle client came in
/// over the Unix socket.
fn snapshot() -> Snapshot {
    let mut holding = client(1, "shop", ClientState::Active);
    holding.activity.server = Some(ServerId(10));
    holding.tag = Some("batch-7".into());
    holding.activity.stats.unknown_classes = 2;
    holding.activity.stats.middleware = 3;
    holding.activity.stats.xacts = 4;
    let mut idle = client(2, "shop", ClientState::Idle);
    idle.addr = Some(ClientAddr::Unix { port: 6432 });
    idle.local = Some(ClientAddr::Unix { port: 6432 });
    let mut waiting = client(3, "shop", ClientState::Waiting);
    waiting.wait = Duration::from_micros(2_500_001);
    let mut admin = client(4, "pgyard", ClientState::Active);
    admin.activity.admin = true;
    let mut login = client(5, "", ClientState::Login);
    login.user = String::new();
    let mut retired = BTreeMap::new();
    retired.insert(
        "shop".to_owned(),
        ClientStats {
            xacts: 10,
            received: 100,
            ..ClientStats::default()
        },
    );
    Snapshot {
        pool_mode: PoolMode::Transaction,
        paused: true,
        pools: vec![key("shop", Route::Primary), key("shop", Route::Standby)],
        clients: vec![holding, idle, waiting, admin, login],
        servers: vec![
            server(10, "shop", ServerState::Active, Some(1)),
            server(11, "shop", ServerState::Idle, None),
            server(12, "shop", ServerState::New, None),
            server(13, "shop", ServerState::Tested, None),
        ],
        retired,
        config: vec![ConfigRow {
            key: "pool_size".into(),
            value: "20".into(),
            default: "20".into(),
            changeable: true,
        }],
        databases: vec![
            DatabaseRow {
                name: "reports".into(),
                host: None,
                port: None,
                database: "reports".into(),
                pool_size: 5,
                paused: true,
                disabled: true,
            },
            DatabaseRow {
                name: "shop".into(),
                host: Some("db1,db2".into()),
                port: Some(5433),
                database: "shop_live".into(),
                pool_size: 20,
                paused: false,
                disabled: false,
            },
        ],
    }
}

fn snap() -> Option<AdminReply> {
    Some(AdminReply::Snapshot(Box::new(snapshot())))
}

#[test]
fn show_pools_counts_clients_and_servers_per_route() {
    let r = render(Command::Show(Show::Pools), snap());
    let names: Vec<&str> = r.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "database",
            "user",
            "cl_active",
            "cl_waiting",
            "sv_active",
            "sv_idle",
            "sv_used",
            "sv_tested",
            "sv_login",
            "maxwait",
            "maxwait_us",
            "pool_mode",
            "route",
            "options"
        ]
    );
    assert_eq!(r.columns[2].1, 23, "counts are int4, as PgBouncer's");
    assert_eq!(r.rows.len(), 2, "the admin and login clients have no pool");
    assert_eq!(r.get(0, "route"), Some("primary"));
    assert_eq!(r.get(0, "cl_active"), Some("2"));
    assert_eq!(r.get(0, "cl_waiting"), Some("1"));
    assert_eq!(r.get(0, "sv_active"), Some("1"));
    assert_eq!(r.get(0, "sv_idle"), Some("1"));
    assert_eq!(r.get(0, "sv_used"), Some("0"));
    assert_eq!(r.get(0, "sv_tested"), Some("1"));
    assert_eq!(r.get(0, "sv_login"), Some("1"));
    assert_eq!(r.get(0, "maxwait"), Some("2"));
    assert_eq!(r.get(0, "maxwait_us"), Some("500001"));
    assert_eq!(r.get(0, "pool_mode"), Some("transaction"));
    assert_eq!(r.get(1, "route"), Some("standby"));
    assert_eq!(r.get(1, "cl_active"), Some("0"));
    assert_eq!(r.tag.as_deref(), Some("SHOW"));
    assert_eq!(r.types.last(), Some(&b'Z'));
}

#[test]
fn show_clients_has_pgbouncers_columns_then_pgyards() {
    let r = render(Command::Show(Show::Clients), snap());
    let names: Vec<&str> = r.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        &names[..5],
        ["type", "user", "database", "replication", "state"]
    );
    assert_eq!(
        &names[names.len() - 5..],
        [
            "route",
            "tag",
            "middleware",
            "unknown_middleware",
            "options"
        ]
    );
    assert_eq!(r.rows.len(), 5);
    assert_eq!(r.get(0, "type"), Some("C"));
    assert_eq!(r.get(0, "state"), Some("active"));
    assert_eq!(r.get(0, "link"), Some("s10"));
    assert_eq!(r.get(0, "ptr"), Some("c1"));
    assert_eq!(r.get(0, "tag"), Some("batch-7"));
    assert_eq!(r.get(0, "unknown_middleware"), Some("2"));
    assert_eq!(r.get(0, "addr"), Some("127.0.0.1"));
    assert_eq!(r.get(0, "port"), Some("40001"));
    assert_eq!(r.get(0, "local_port"), Some("6432"));
    assert_eq!(r.get(0, "connect_time"), Some("2026-05-28 20:26:40 UTC"));
    assert_eq!(r.get(0, "application_name"), Some("psql"));
    assert_eq!(r.get(0, "local_addr"), Some("127.0.0.1"));
    assert_eq!(r.get(1, "state"), Some("idle"));
    // PgBouncer's words for a Unix-socket client: `unix`, and its socket file's port.
    assert_eq!(r.get(1, "addr"), Some("unix"));
    assert_eq!(r.get(1, "port"), Some("6432"));
    assert_eq!(r.get(1, "local_addr"), Some("unix"));
    assert_eq!(r.get(1, "local_port"), Some("6432"));
    assert_eq!(r.get(1, "link"), Some(""));
    assert_eq!(r.get(1, "tag"), None);
    assert_eq!(r.get(2, "state"), Some("waiting"));
    assert_eq!(r.get(2, "wait"), Some("2"));
    assert_eq!(r.get(3, "database"), Some("pgyard"));
    assert_eq!(r.get(4, "state"), Some("login"));
    assert_eq!(r.get(4, "user"), Some("(nouser)"));
    assert_eq!(r.get(4, "database"), Some("(nodb)"));
}

#[test]
fn pools_of_other_options_are_rows_of_their_own() {
    let mut s = snapshot();
    let timeout = "-c statement_timeout=5s";
    let mut own = key("shop", Route::Primary);
    own.options = timeout.into();
    s.pools.push(own.clone());
    s.clients[2].options = timeout.into();
    s.servers[1].key = own;
    let reply = || Some(AdminReply::Snapshot(Box::new(s.clone())));
    let pools = render(Command::Show(Show::Pools), reply());
    assert_eq!(pools.rows.len(), 3);
    // Sorted by database, user, route, then options.
    assert_eq!(pools.get(0, "options"), Some(""));
    assert_eq!(pools.get(0, "cl_waiting"), Some("0"));
    assert_eq!(pools.get(0, "sv_idle"), Some("0"));
    assert_eq!(pools.get(1, "route"), Some("primary"));
    assert_eq!(pools.get(1, "options"), Some(timeout));
    assert_eq!(pools.get(1, "cl_waiting"), Some("1"));
    assert_eq!(pools.get(1, "sv_idle"), Some("1"));
    assert_eq!(pools.get(2, "route"), Some("standby"));
    let clients = render(Command::Show(Show::Clients), reply());
    assert_eq!(clients.get(0, "options"), Some(""));
    assert_eq!(clients.get(2, "options"), Some(timeout));
    let servers = render(Command::Show(Show::Servers), reply());
    assert_eq!(servers.get(0, "options"), Some(""));
    assert_eq!(servers.get(1, "options"), Some(timeout));
}

#[test]
fn show_servers_links_back_to_clients() {
    let r = render(Command::Show(Show::Servers), snap());
    assert_eq!(r.rows.len(), 4);
    assert_eq!(r.get(0, "type"), Some("S"));
    assert_eq!(r.get(0, "state"), Some("active"));
    assert_eq!(r.get(0, "link"), Some("c1"));
    assert_eq!(r.get(0, "remote_pid"), Some("4242"));
    assert_eq!(r.get(0, "addr"), Some("10.0.0.1"));
    assert_eq!(r.get(0, "local_addr"), None);
    assert_eq!(r.get(0, "prepared_statements"), Some("3"));
    assert_eq!(r.get(2, "state"), Some("new"));
    assert_eq!(r.get(3, "state"), Some("tested"));
    assert_eq!(r.get(3, "route"), Some("primary"));
}

#[test]
fn show_stats_sums_live_and_departed_clients_per_database() {
    let r = render(Command::Show(Show::Stats), snap());
    assert_eq!(r.columns[1], ("total_server_assignment_count".into(), 1700));
    assert_eq!(r.rows.len(), 1, "admin and login clients count nowhere");
    assert_eq!(r.get(0, "database"), Some("shop"));
    assert_eq!(r.get(0, "total_xact_count"), Some("14"));
    assert_eq!(r.get(0, "total_received"), Some("100"));
    assert_eq!(r.get(0, "total_unknown_middleware"), Some("2"));
    assert_eq!(r.get(0, "total_middleware"), Some("3"));
}

#[test]
fn show_stats_totals_and_totals_have_pgbouncers_names_and_show_statss_sums() {
    let r = render(Command::Show(Show::StatsTotals), snap());
    let names: Vec<(&str, u32)> = r.columns.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    assert_eq!(
        names,
        [
            ("database", 25),
            ("xact_count", 1700),
            ("query_count", 1700),
            ("bytes_received", 1700),
            ("bytes_sent", 1700),
            ("xact_time", 1700),
            ("query_time", 1700),
            ("wait_time", 1700),
        ]
    );
    let stats = render(Command::Show(Show::Stats), snap());
    assert_eq!(r.rows.len(), stats.rows.len());
    for (short, long) in [
        ("database", "database"),
        ("xact_count", "total_xact_count"),
        ("query_count", "total_query_count"),
        ("bytes_received", "total_received"),
        ("bytes_sent", "total_sent"),
        ("xact_time", "total_xact_time"),
        ("query_time", "total_query_time"),
        ("wait_time", "total_wait_time"),
    ] {
        assert_eq!(r.get(0, short), stats.get(0, long), "{short}");
    }
    // One database here: SHOW TOTALS's values are its row's, named as PgBouncer names them.
    let t = render(Command::Show(Show::Totals), snap());
    assert_eq!(t.columns, [("name".into(), 25), ("value".into(), 1700)]);
    let got: Vec<(Option<&str>, Option<&str>)> = (0..t.rows.len())
        .map(|i| (t.get(i, "name"), t.get(i, "value")))
        .collect();
    let want: Vec<(Option<&str>, Option<&str>)> = [
        ("total_xact_count", "xact_count"),
        ("total_query_count", "query_count"),
        ("total_client_bytes", "bytes_received"),
        ("total_server_bytes", "bytes_sent"),
        ("total_xact_time", "xact_time"),
        ("total_query_time", "query_time"),
        ("total_wait_time", "wait_time"),
    ]
    .into_iter()
    .map(|(name, column)| (Some(name), r.get(0, column)))
    .collect();
    assert_eq!(got, want);
    assert_eq!(t.get(0, "value"), Some("14"));
}

#[test]
fn show_users_lists_the_pools_users_once_each() {
    let r = render(Command::Show(Show::Users), snap());
    assert_eq!(r.columns, [("name".into(), 25), ("pool_mode".into(), 25)]);
    let lists = render(Command::Show(Show::Lists), snap());
    assert_eq!(
        Some(r.rows.len().to_string().as_str()),
        lists.get(1, "items")
    );
    assert_eq!(r.get(0, "name"), Some("alice"));
    assert_eq!(r.get(0, "pool_mode"), None);
}

#[test]
fn show_databases_has_pgbouncers_columns_and_counts_each_ones_servers() {
    let r = render(Command::Show(Show::Databases), snap());
    let names: Vec<(&str, u32)> = r.columns.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    assert_eq!(
        names,
        [
            ("name", 25),
            ("host", 25),
            ("port", 23),
            ("database", 25),
            ("force_user", 25),
            ("pool_size", 23),
            ("min_pool_size", 23),
            ("reserve_pool", 23),
            ("pool_mode", 25),
            ("max_connections", 23),
            ("current_connections", 23),
            ("paused", 23),
            ("disabled", 23),
        ]
    );
    assert_eq!(r.rows.len(), 2);
    let shop = [
        Some("shop"),
        Some("db1,db2"),
        Some("5433"),
        Some("shop_live"),
        None,
        Some("20"),
        Some("0"),
        Some("0"),
        None,
        Some("0"),
        Some("4"),
        Some("1"),
        Some("0"),
    ];
    let got: Vec<Option<&str>> = r.rows[1].iter().map(|v| v.as_deref()).collect();
    assert_eq!(got, shop);
    assert_eq!(r.get(0, "host"), None, "no host: libpq's default socket");
    assert_eq!(r.get(0, "port"), Some("5432"));
    assert_eq!(r.get(0, "current_connections"), Some("0"));
    assert_eq!(r.get(0, "disabled"), Some("1"), "DISABLEd");
    // PAUSE of every database shows on every row; a PAUSE by name on its own row.
    assert_eq!(r.get(1, "paused"), Some("1"), "every database paused");
    let mut unpaused = snapshot();
    unpaused.paused = false;
    let r = render(
        Command::Show(Show::Databases),
        Some(AdminReply::Snapshot(Box::new(unpaused))),
    );
    assert_eq!(r.get(0, "paused"), Some("1"), "paused by name");
    assert_eq!(r.get(1, "paused"), Some("0"));
}

#[test]
fn show_lists_counts_what_the_snapshot_holds() {
    let r = render(Command::Show(Show::Lists), snap());
    assert_eq!(r.columns, [("list".into(), 25), ("items".into(), 23)]);
    let got: Vec<(String, String)> = r
        .rows
        .iter()
        .map(|row| {
            (
                row[0].clone().expect("list"),
                row[1].clone().expect("items"),
            )
        })
        .collect();
    let want = [
        ("databases", 2),
        ("users", 1),
        ("pools", 2),
        ("free_clients", 0),
        ("used_clients", 5),
        ("login_clients", 1),
        ("free_servers", 0),
        ("used_servers", 4),
        ("dns_names", 0),
        ("dns_zones", 0),
        ("dns_queries", 0),
        ("dns_pending", 0),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(l, n)| ((*l).to_owned(), n.to_string()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn show_config_and_state() {
    let r = render(Command::Show(Show::Config), snap());
    let names: Vec<&str> = r.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["key", "value", "default", "changeable"]);
    assert_eq!(r.get(0, "changeable"), Some("yes"));
    let r = render(Command::Show(Show::State), snap());
    assert_eq!(r.get(0, "value"), Some("no"), "not active: paused");
    assert_eq!(r.get(1, "key"), Some("paused"));
    assert_eq!(r.get(1, "value"), Some("yes"));
}

#[test]
fn help_version_and_empty_need_no_snapshot() {
    let r = render(Command::Show(Show::Help), None);
    assert_eq!(r.types, b"NCZ");
    let r = render(Command::Show(Show::Version), None);
    assert_eq!(
        r.get(0, "version"),
        Some(concat!("pgyard ", env!("CARGO_PKG_VERSION")))
    );
    assert_eq!(render(Command::Empty, None).types, b"IZ");
}

#[test]
fn actions_complete_with_their_tag_and_failures_are_errors_the_session_survives() {
    let r = render(Command::Act(AdminRequest::Pause), Some(AdminReply::Done));
    assert_eq!(
        (r.tag.as_deref(), &r.types[..]),
        (Some("PAUSE"), &b"CZ"[..])
    );
    let failed = AdminReply::Failed(AdminError::reload("RELOAD failed: bad file"));
    let r = render(Command::Act(AdminRequest::Reload), Some(failed));
    assert_eq!(
        r.error,
        Some(("F0000".into(), "RELOAD failed: bad file".into()))
    );
    assert_eq!(r.types, b"EZ");
    // A reply of the wrong kind is an internal error, not a panic.
    let r = render(Command::Show(Show::Pools), Some(AdminReply::Done));
    assert_eq!(r.error.map(|e| e.0).as_deref(), Some("XX000"));
    let r = render(Command::Act(AdminRequest::Resume), snap());
    assert_eq!(r.types, b"EZ");
}

#[test]
fn timestamps_are_utc_calendar_dates() {
    assert_eq!(timestamp(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(timestamp(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(timestamp(4_102_444_799), "2099-12-31 23:59:59 UTC");
    assert!(timestamp(u64::MAX).ends_with("UTC"), "no overflow");
}
