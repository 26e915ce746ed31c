//! SHOW's lists in `proxy-login`: the scenario, playing the adapter, makes up a snapshot of a
//! proxy (pools, client and server connections in every state, the counters of clients that
//! left) and judges the console's rendering against its own sums and formats from
//! `docs/proxy.md`: a row per pool with its clients and servers counted by state and its
//! longest wait in seconds and microseconds, a row per database with the counters of its
//! logged-in clients plus those that left, the state's three flags, a row per connection with
//! its times as `YYYY-MM-DD HH:MM:SS UTC`, a row per database with its servers counted, the
//! lists' counts, and every column typed text, int4, int8 or numeric.

use std::collections::BTreeMap;
use std::time::Duration;

use pgyard_proxy::admin::{
    Activity, AdminReply, ClientRow, ClientState, ClientStats, ConfigRow, DatabaseRow, ServerRow,
    ServerState, Snapshot,
};
use pgyard_proxy::{ClientId, PoolKey, PoolMode, Route, ServerId};
use pgyard_types::{side_stream, uniform_inclusive, Rng, RngCore};

use super::proxy_login::{fail, Conn};
use crate::Violation;

fn bad(detail: String) -> Violation {
    fail("console-answered-as-documented", detail)
}

/// A RowDescription body for (name, type OID, size) columns.
pub(super) fn description(cols: &[(&str, u32, i16)]) -> Vec<u8> {
    let mut b = (cols.len() as i16).to_be_bytes().to_vec();
    for (name, oid, size) in cols {
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&oid.to_be_bytes());
        b.extend_from_slice(&size.to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
    }
    b
}

/// A DataRow body.
pub(super) fn data_row(values: &[Option<&str>]) -> Vec<u8> {
    let mut b = (values.len() as i16).to_be_bytes().to_vec();
    for v in values {
        match v {
            Some(s) => {
                b.extend_from_slice(&(s.len() as i32).to_be_bytes());
                b.extend_from_slice(s.as_bytes());
            }
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    b
}

/// A RowDescription's (name, type OID, size) columns.
fn columns(body: &[u8]) -> Option<Vec<(String, u32, i16)>> {
    let n = i16::from_be_bytes(*body.first_chunk::<2>()?);
    let mut rest = body.get(2..)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let end = rest.iter().position(|&b| b == 0)?;
        let name = String::from_utf8_lossy(&rest[..end]).into_owned();
        let after = rest.get(end + 1..)?;
        let oid = u32::from_be_bytes(*after.get(6..)?.first_chunk::<4>()?);
        let size = i16::from_be_bytes(*after.get(10..)?.first_chunk::<2>()?);
        out.push((name, oid, size));
        rest = after.get(18..)?;
    }
    Some(out)
}

/// A DataRow's values as text.
fn values(body: &[u8]) -> Option<Vec<Option<String>>> {
    let n = i16::from_be_bytes(*body.first_chunk::<2>()?);
    let mut rest = body.get(2..)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let len = i32::from_be_bytes(*rest.first_chunk::<4>()?);
        rest = rest.get(4..)?;
        if len < 0 {
            out.push(None);
            continue;
        }
        let v = rest.get(..len as usize)?;
        out.push(Some(String::from_utf8_lossy(v).into_owned()));
        rest = &rest[len as usize..];
    }
    Some(out)
}

/// A result set: column names and rows, each row by column name.
type Table = (Vec<String>, Vec<BTreeMap<String, Option<String>>>);

/// Reads a result set and its CommandComplete and ReadyForQuery.
fn read_table(c: &mut Conn, list: &str) -> Result<Table, Violation> {
    let cols = match c.message() {
        Some((b'T', body)) => columns(&body),
        other => return Err(bad(format!("SHOW {list}: {other:?} in place of a table"))),
    };
    let cols = cols.ok_or_else(|| bad(format!("SHOW {list}: a broken RowDescription")))?;
    // Types as PgBouncer's: text, int4, int8 or numeric, each with its size.
    if let Some(col) = cols
        .iter()
        .find(|(_, oid, size)| !matches!((oid, size), (25, -1) | (23, 4) | (20, 8) | (1700, -1)))
    {
        return Err(bad(format!("SHOW {list}: column {col:?}")));
    }
    let names: Vec<String> = cols.into_iter().map(|(n, _, _)| n).collect();
    let mut rows = Vec::new();
    loop {
        match c.message() {
            Some((b'D', body)) => {
                let v = values(&body).filter(|v| v.len() == names.len());
                let v = v.ok_or_else(|| bad(format!("SHOW {list}: a broken DataRow")))?;
                rows.push(names.iter().cloned().zip(v).collect());
            }
            Some((b'C', tag)) if tag == b"SHOW\0" => break,
            other => return Err(bad(format!("SHOW {list}: {other:?} in the table"))),
        }
    }
    if c.message() != Some((b'Z', b"I".to_vec())) {
        return Err(bad(format!(
            "SHOW {list}: no ReadyForQuery after the table"
        )));
    }
    Ok((names, rows))
}

const DATABASES: [&str; 2] = ["app", "shop"];
const USERS: [&str; 2] = ["u1", "u2"];
const ROUTES: [Route; 3] = [Route::Primary, Route::Standby, Route::Any];

fn pick<T: Copy>(rng: &mut Rng, of: &[T]) -> T {
    of[uniform_inclusive(rng, of.len() as u64 - 1) as usize]
}

/// A pool's `options`: most have none; two kinds of client `options` make pools of their own.
const OPTIONS: [&str; 4] = [
    "",
    "",
    "-c statement_timeout=5s",
    r"-c app.note=a\ b -S 1MB",
];

fn key(rng: &mut Rng) -> PoolKey {
    // Drawn on a side stream, so that the other draws stay as they were before pools had
    // `options`.
    let options = pick(&mut side_stream(rng, OPTIONS_STREAM), &OPTIONS).to_owned();
    PoolKey {
        database: pick(rng, &DATABASES).to_owned(),
        user: pick(rng, &USERS).to_owned(),
        route: pick(rng, &ROUTES),
        options,
    }
}

fn stats(rng: &mut Rng) -> ClientStats {
    let mut n = || u64::from(rng.next_u32() % 5000);
    ClientStats {
        middleware: n(),
        unknown_classes: n(),
        transactions: n(),
        assignments: n(),
        xacts: n(),
        queries: n(),
        received: n(),
        sent: n(),
        xact_us: n(),
        query_us: n(),
        wait_us: n(),
    }
}

/// Some time in this century, in seconds since the Unix epoch.
fn when(rng: &mut Rng) -> u64 {
    946_684_800 + u64::from(rng.next_u32()) % 3_000_000_000
}

fn client(rng: &mut Rng, id: u64) -> ClientRow {
    let states = [
        ClientState::Login,
        ClientState::Idle,
        ClientState::Waiting,
        ClientState::Active,
        ClientState::Closed,
    ];
    let state = pick(rng, &states);
    let k = key(rng);
    ClientRow {
        id: ClientId(id),
        user: k.user,
        database: k.database,
        activity: Activity {
            state,
            admin: uniform_inclusive(rng, 7) == 0,
            logged_in: state != ClientState::Login && uniform_inclusive(rng, 9) > 0,
            route: k.route,
            server: None,
            wait_since: None,
            last_request: None,
            draining: uniform_inclusive(rng, 5) == 0,
            prepared: uniform_inclusive(rng, 3) as usize,
            labels: 0,
            stats: stats(rng),
        },
        addr: Some(std::net::SocketAddr::from(([10, 0, 0, 7], 40_000 + id as u16)).into()),
        local: Some(std::net::SocketAddr::from(([10, 0, 0, 1], 6432)).into()),
        connect_time: Some(when(rng)),
        request_time: (uniform_inclusive(rng, 3) > 0).then(|| when(rng)),
        wait: Duration::from_micros(u64::from(rng.next_u32() % 90_000_000)),
        tls: None,
        application_name: ["", "psql", "batch job"][uniform_inclusive(rng, 2) as usize].into(),
        tag: None,
        options: k.options,
    }
}

fn server(rng: &mut Rng, id: u64) -> ServerRow {
    let states = [
        ServerState::New,
        ServerState::Idle,
        ServerState::Active,
        ServerState::Tested,
    ];
    ServerRow {
        id: ServerId(id),
        key: key(rng),
        state: pick(rng, &states),
        client: None,
        addr: Some("10.1.0.5".into()),
        port: Some(5432),
        connect_time: Some(when(rng)),
        request_time: (uniform_inclusive(rng, 1) == 0).then(|| when(rng)),
        close_needed: false,
        pid: Some(4000 + id as i32),
        tls: uniform_inclusive(rng, 1) == 0,
        application_name: String::new(),
        prepared: 0,
    }
}

/// The stream the made-up databases are drawn from, so that the rest of a seed draws as
/// before they were shown.
const DATABASE_STREAM: u64 = 0x6462_7321;

/// The stream a pool's `options` are drawn from (see [`key`]).
const OPTIONS_STREAM: u64 = 0x6f70_7473;

/// A few of the names clients use, each as a configured database or served by the fallback:
/// host lists, a port or the default, a name on the server of its own or not.
fn databases(rng: &Rng) -> Vec<DatabaseRow> {
    let mut side = side_stream(rng, DATABASE_STREAM);
    let mut rows = Vec::new();
    for name in DATABASES {
        if uniform_inclusive(&mut side, 2) == 0 {
            continue;
        }
        rows.push(DatabaseRow {
            name: name.to_owned(),
            host: pick(&mut side, &[Some("db1"), Some("db1,db2"), None]).map(str::to_owned),
            port: pick(&mut side, &[None, Some(5433)]),
            database: match uniform_inclusive(&mut side, 1) {
                0 => name.to_owned(),
                _ => format!("{name}_live"),
            },
            pool_size: 1 + uniform_inclusive(&mut side, 19) as usize,
            paused: uniform_inclusive(&mut side, 3) == 0,
            disabled: uniform_inclusive(&mut side, 3) == 0,
        });
    }
    rows
}

fn snapshot(rng: &mut Rng, paused: bool) -> Snapshot {
    let pools = (0..uniform_inclusive(rng, 2)).map(|_| key(rng)).collect();
    let clients = (0..uniform_inclusive(rng, 6))
        .map(|i| client(rng, i))
        .collect();
    let servers = (0..uniform_inclusive(rng, 5))
        .map(|i| server(rng, i))
        .collect();
    let mut retired = BTreeMap::new();
    if uniform_inclusive(rng, 1) == 0 {
        retired.insert(pick(rng, &DATABASES).to_owned(), stats(rng));
    }
    Snapshot {
        pool_mode: [PoolMode::Transaction, PoolMode::Session][uniform_inclusive(rng, 1) as usize],
        paused,
        pools,
        clients,
        servers,
        retired,
        config: vec![ConfigRow {
            key: "pool_mode".into(),
            value: "transaction".into(),
            default: "session".into(),
            changeable: true,
        }],
        databases: databases(rng),
    }
}

/// Answers the snapshot request of `SHOW list` and judges the table.
pub(super) fn judge(
    rng: &mut Rng,
    c: &mut Conn,
    list: &str,
    paused: bool,
) -> Result<(), Violation> {
    let s = snapshot(rng, paused);
    c.s.handle_admin(AdminReply::Snapshot(Box::new(s.clone())));
    c.pump()?;
    let (names, rows) = read_table(c, list)?;
    let want = match list {
        "POOLS" => pools(&s),
        "STATS" => stats_rows(&s),
        "STATE" => {
            let yes = |b: bool| if b { "yes" } else { "no" };
            [
                ("active", !paused),
                ("paused", paused),
                ("suspended", false),
            ]
            .iter()
            .map(|(k, v)| row(&[("key", k), ("value", yes(*v))]))
            .collect()
        }
        "CLIENTS" => s.clients.iter().map(client_cells).collect(),
        "DATABASES" => database_cells(&s),
        "LISTS" => list_cells(&s),
        "USERS" => user_cells(&s),
        "TOTALS" => totals_rows(&s),
        "STATS_TOTALS" => stats_totals_rows(&s),
        "SERVERS" => s.servers.iter().map(server_cells).collect(),
        _ => s
            .config
            .iter()
            .map(|r| {
                row(&[
                    ("key", &r.key),
                    ("value", &r.value),
                    ("default", &r.default),
                ])
            })
            .collect(),
    };
    judge_rows(list, &names, &rows, &want)
}

type Cells = BTreeMap<String, Option<String>>;

fn row(cells: &[(&str, &str)]) -> Cells {
    cells
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Some((*v).to_owned())))
        .collect()
}

/// Each wanted row's cells must be in the table's row at the same place, and every wanted
/// column must be one of the table's.
fn judge_rows(
    list: &str,
    names: &[String],
    rows: &[Cells],
    want: &[Cells],
) -> Result<(), Violation> {
    let mut got: Vec<&Cells> = rows.iter().collect();
    let mut want: Vec<&Cells> = want.iter().collect();
    if got.len() != want.len() {
        return Err(bad(format!(
            "SHOW {list}: {} rows, expected {}",
            got.len(),
            want.len()
        )));
    }
    // Rows are matched in the order of their wanted cells (pools and databases come sorted,
    // connections in the snapshot's order; sorting both sides keeps the rule out of it).
    let view = |r: &Cells, keys: &[&String]| -> Vec<Option<String>> {
        keys.iter().map(|k| r.get(*k).cloned().flatten()).collect()
    };
    let keys: Vec<&String> = want.first().map(|w| w.keys().collect()).unwrap_or_default();
    if let Some(k) = keys.iter().find(|k| !names.contains(k)) {
        return Err(bad(format!("SHOW {list}: no column {k} in {names:?}")));
    }
    got.sort_by_key(|r| view(r, &keys));
    want.sort_by_key(|r| view(r, &keys));
    for (g, w) in got.iter().zip(&want) {
        if view(g, &keys) != view(w, &keys) {
            return Err(bad(format!("SHOW {list}: row {g:?}, expected {w:?}")));
        }
    }
    Ok(())
}

/// SHOW POOLS by the docs: a pool's clients holding a server or idle, waiting; its servers
/// lent, pooled, testing, being opened; the longest wait.
fn pools(s: &Snapshot) -> Vec<Cells> {
    #[derive(Default)]
    struct Count {
        active: u64,
        waiting: u64,
        by_state: [u64; 4],
        maxwait: Duration,
    }
    let mut m: BTreeMap<PoolKey, Count> = BTreeMap::new();
    for k in &s.pools {
        m.entry(k.clone()).or_default();
    }
    for c in &s.clients {
        let Some(k) = pool_of(c) else {
            continue;
        };
        let e = m.entry(k).or_default();
        match c.activity.state {
            ClientState::Waiting => {
                e.waiting += 1;
                e.maxwait = e.maxwait.max(c.wait);
            }
            ClientState::Idle | ClientState::Active => e.active += 1,
            ClientState::Login | ClientState::Closed => {}
        }
    }
    for sv in &s.servers {
        let i = match sv.state {
            ServerState::Active => 0,
            ServerState::Idle => 1,
            ServerState::Tested => 2,
            ServerState::New => 3,
        };
        m.entry(sv.key.clone()).or_default().by_state[i] += 1;
    }
    let mode = match s.pool_mode {
        PoolMode::Session => "session",
        PoolMode::Transaction => "transaction",
    };
    m.iter()
        .map(|(k, n)| {
            let t = |v: u64| v.to_string();
            let cells: [(&str, String); 12] = [
                ("database", k.database.clone()),
                ("user", k.user.clone()),
                ("cl_active", t(n.active)),
                ("cl_waiting", t(n.waiting)),
                ("sv_active", t(n.by_state[0])),
                ("sv_idle", t(n.by_state[1])),
                ("sv_used", t(0)),
                ("sv_tested", t(n.by_state[2])),
                ("sv_login", t(n.by_state[3])),
                ("maxwait", t(n.maxwait.as_secs())),
                ("maxwait_us", t(u64::from(n.maxwait.subsec_micros()))),
                ("pool_mode", mode.to_owned()),
            ];
            let mut r: Cells = cells
                .into_iter()
                .map(|(k, v)| (k.to_owned(), Some(v)))
                .collect();
            r.insert("route".into(), Some(k.route.as_str().to_owned()));
            r.insert("options".into(), Some(k.options.clone()));
            r
        })
        .collect()
}

/// SHOW DATABASES by the docs: PgBouncer 1.18's columns, a row per database, its servers
/// counted from the snapshot's connections; what pgyard does not have is NULL or 0.
fn database_cells(s: &Snapshot) -> Vec<Cells> {
    s.databases
        .iter()
        .map(|d| {
            let servers = s
                .servers
                .iter()
                .filter(|v| v.key.database == d.name)
                .count();
            let mut r = row(&[
                ("name", &d.name),
                ("port", &d.port.unwrap_or(5432).to_string()),
                ("database", &d.database),
                ("pool_size", &d.pool_size.to_string()),
                ("min_pool_size", "0"),
                ("reserve_pool", "0"),
                ("max_connections", "0"),
                ("current_connections", &servers.to_string()),
                ("paused", if s.paused || d.paused { "1" } else { "0" }),
                ("disabled", if d.disabled { "1" } else { "0" }),
            ]);
            r.insert("host".into(), d.host.clone());
            r.insert("force_user".into(), None);
            // PgBouncer shows a database's own pool mode there; pgyard has none.
            r.insert("pool_mode".into(), None);
            r
        })
        .collect()
}

/// SHOW LISTS by the docs: the databases shown, the users of the pools SHOW POOLS shows
/// (pools the proxy has, those of logged-in clients, those of servers), the connections, and
/// nothing in free lists or a DNS cache.
/// The pools by the docs: those the proxy has had, those of its servers, and those of its
/// logged-in, non-console clients' current routes.
fn pool_set(s: &Snapshot) -> std::collections::BTreeSet<PoolKey> {
    let mut pools: std::collections::BTreeSet<PoolKey> = Default::default();
    let mut add = |k: &PoolKey| {
        pools.insert(k.clone());
    };
    s.pools.iter().for_each(&mut add);
    s.servers.iter().for_each(|v| add(&v.key));
    s.clients.iter().filter_map(pool_of).for_each(|k| add(&k));
    pools
}

/// The pool of a client by the docs: a logged-in, non-console client's database, user,
/// current route and `options`.
fn pool_of(c: &ClientRow) -> Option<PoolKey> {
    let a = &c.activity;
    (a.logged_in && !a.admin).then(|| PoolKey {
        database: c.database.clone(),
        user: c.user.clone(),
        route: a.route,
        options: c.options.clone(),
    })
}

/// SHOW USERS by the docs: the distinct users of the pools, each once, no pool mode.
fn user_cells(s: &Snapshot) -> Vec<Cells> {
    let users: std::collections::BTreeSet<String> =
        pool_set(s).into_iter().map(|p| p.user).collect();
    users
        .into_iter()
        .map(|u| {
            let mut r = row(&[("name", &u)]);
            r.insert("pool_mode".into(), None);
            r
        })
        .collect()
}

fn list_cells(s: &Snapshot) -> Vec<Cells> {
    let pools = pool_set(s);
    let users: std::collections::BTreeSet<&String> = pools.iter().map(|p| &p.user).collect();
    let login = s
        .clients
        .iter()
        .filter(|c| c.activity.state == ClientState::Login)
        .count();
    [
        ("databases", s.databases.len()),
        ("users", users.len()),
        ("pools", pools.len()),
        ("free_clients", 0),
        ("used_clients", s.clients.len()),
        ("login_clients", login),
        ("free_servers", 0),
        ("used_servers", s.servers.len()),
        ("dns_names", 0),
        ("dns_zones", 0),
        ("dns_queries", 0),
        ("dns_pending", 0),
    ]
    .iter()
    .map(|(list, n)| row(&[("list", list), ("items", &n.to_string())]))
    .collect()
}

/// SHOW STATS by the docs: per database, the counters of its logged-in clients (not the
/// consoles) and of those that left.
fn stats_rows(s: &Snapshot) -> Vec<Cells> {
    let names = [
        "total_server_assignment_count",
        "total_xact_count",
        "total_query_count",
        "total_received",
        "total_sent",
        "total_xact_time",
        "total_query_time",
        "total_wait_time",
        "total_middleware",
        "total_unknown_middleware",
    ];
    named_sums(sums(s), &names)
}

/// SHOW STATS_TOTALS by the docs: SHOW STATS's seven PgBouncer totals under its short names.
fn stats_totals_rows(s: &Snapshot) -> Vec<Cells> {
    let names = [
        "",
        "xact_count",
        "query_count",
        "bytes_received",
        "bytes_sent",
        "xact_time",
        "query_time",
        "wait_time",
    ];
    named_sums(sums(s), &names)
}

/// SHOW TOTALS by the docs: each of those seven summed over every database.
fn totals_rows(s: &Snapshot) -> Vec<Cells> {
    let names = [
        "total_xact_count",
        "total_query_count",
        "total_client_bytes",
        "total_server_bytes",
        "total_xact_time",
        "total_query_time",
        "total_wait_time",
    ];
    let all = sums(s).into_values().fold([0u64; 10], |mut a, v| {
        a.iter_mut().zip(v).for_each(|(x, y)| *x += y);
        a
    });
    names
        .iter()
        .zip(&all[1..8])
        .map(|(n, v)| row(&[("name", n), ("value", &v.to_string())]))
        .collect()
}

/// Per database, its rows' cells: each counter under its name (an empty name: not shown).
fn named_sums(m: BTreeMap<String, [u64; 10]>, names: &[&str]) -> Vec<Cells> {
    m.into_iter()
        .map(|(db, v)| {
            let mut r: Cells = names
                .iter()
                .zip(v)
                .filter(|(n, _)| !n.is_empty())
                .map(|(n, x)| ((*n).to_owned(), Some(x.to_string())))
                .collect();
            r.insert("database".into(), Some(db));
            r
        })
        .collect()
}

/// The ten counters per database, as SHOW STATS orders them.
fn sums(s: &Snapshot) -> BTreeMap<String, [u64; 10]> {
    let mut m: BTreeMap<String, [u64; 10]> = BTreeMap::new();
    let mut add = |db: &str, st: &ClientStats| {
        let e = m.entry(db.to_owned()).or_default();
        let v = [
            st.assignments,
            st.xacts,
            st.queries,
            st.received,
            st.sent,
            st.xact_us,
            st.query_us,
            st.wait_us,
            st.middleware,
            st.unknown_classes,
        ];
        for (a, b) in e.iter_mut().zip(v) {
            *a += b;
        }
    };
    for (db, st) in &s.retired {
        add(db, st);
    }
    for c in &s.clients {
        if c.activity.logged_in && !c.activity.admin {
            add(&c.database, &c.activity.stats);
        }
    }
    m
}

/// `YYYY-MM-DD HH:MM:SS UTC` of seconds since the Unix epoch, counted out year by year and
/// month by month (the proleptic Gregorian calendar).
fn time_text(secs: u64) -> String {
    let leap = |y: u64| y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400));
    let mut days = secs / 86_400;
    let mut year = 1970;
    while days >= 365 + u64::from(leap(year)) {
        days -= 365 + u64::from(leap(year));
        year += 1;
    }
    let lengths = [
        31,
        28 + u64::from(leap(year)),
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let mut month = 1;
    for len in lengths {
        if days < len {
            break;
        }
        days -= len;
        month += 1;
    }
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{:02} {:02}:{:02}:{:02} UTC",
        days + 1,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn opt_time(t: Option<u64>) -> Option<String> {
    t.map(time_text)
}

fn client_cells(c: &ClientRow) -> Cells {
    let mut r = row(&[
        ("type", "C"),
        ("user", &c.user),
        ("database", &c.database),
        ("replication", "none"),
        ("state", c.activity.state.word()),
        ("application_name", &c.application_name),
    ]);
    r.insert("connect_time".into(), opt_time(c.connect_time));
    r.insert("request_time".into(), opt_time(c.request_time));
    r.insert("wait".into(), Some(c.wait.as_secs().to_string()));
    r.insert("wait_us".into(), Some(c.wait.subsec_micros().to_string()));
    let close = u8::from(c.activity.draining).to_string();
    r.insert("close_needed".into(), Some(close));
    r.insert(
        "prepared_statements".into(),
        Some(c.activity.prepared.to_string()),
    );
    r.insert(
        "middleware".into(),
        Some(c.activity.stats.middleware.to_string()),
    );
    r.insert("options".into(), Some(c.options.clone()));
    r
}

fn server_cells(s: &ServerRow) -> Cells {
    let mut r = row(&[
        ("type", "S"),
        ("user", &s.key.user),
        ("database", &s.key.database),
        ("state", s.state.word()),
        ("tls", if s.tls { "TLS" } else { "" }),
    ]);
    r.insert("connect_time".into(), opt_time(s.connect_time));
    r.insert("request_time".into(), opt_time(s.request_time));
    r.insert("remote_pid".into(), s.pid.map(|p| p.to_string()));
    r.insert("options".into(), Some(s.key.options.clone()));
    r
}

#[cfg(test)]
mod tests {
    use super::time_text;

    #[test]
    fn times_read_as_calendar_dates() {
        assert_eq!(time_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(time_text(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(time_text(1_709_251_199), "2024-02-29 23:59:59 UTC");
        assert_eq!(time_text(4_102_444_800), "2100-01-01 00:00:00 UTC");
    }
}
