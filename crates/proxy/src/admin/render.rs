//! The admin console's answers on the wire: result sets with PgBouncer's column names and
//! types (text, int4, int8, numeric), CommandComplete and ReadyForQuery; errors as
//! ErrorResponse then ReadyForQuery, as PgBouncer answers them.

use bytes::BytesMut;
use pgyard_wire::backend::{
    encode_command_complete, encode_data_row, encode_empty, encode_ready_for_query,
    encode_row_description, tag, FieldDescription, TransactionStatus,
};
use pgyard_wire::error_fields::{encode_error_response, encode_notice_response};

use super::command::{Command, Show};
use super::snapshot::{ClientRow, ClientStats, ServerRow, Snapshot};
use super::{AdminError, AdminReply};
use crate::client::PoolMode;

/// A column's type, as PgBouncer types its result sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Text,
    Int4,
    Int8,
    Numeric,
}

impl Ty {
    /// The type's OID and length.
    fn oid_and_size(self) -> (u32, i16) {
        match self {
            Ty::Text => (25, -1),
            Ty::Int4 => (23, 4),
            Ty::Int8 => (20, 8),
            Ty::Numeric => (1700, -1),
        }
    }
}

type Row = Vec<Option<String>>;

/// Writes the answer to `command`, with the adapter's `reply` when it needed one.
pub fn answer(command: Command, reply: Option<AdminReply>, buf: &mut BytesMut) {
    match (&command, reply) {
        (_, Some(AdminReply::Failed(e))) => error(&e, buf),
        (Command::Empty, _) => encode_empty(tag::EMPTY_QUERY_RESPONSE, buf),
        (Command::Show(Show::Help), _) => help(buf),
        (Command::Show(Show::Version), _) => {
            let version = format!("pgyard {}", env!("CARGO_PKG_VERSION"));
            table(&[("version", Ty::Text)], &[vec![Some(version)]], buf);
        }
        (Command::Show(what), Some(AdminReply::Snapshot(s))) => show(*what, &s, buf),
        (Command::Act(_), Some(AdminReply::Done)) => complete(command.tag(), buf),
        (_, other) => {
            let message = format!(
                "internal error: {} was answered with {:?}",
                command.tag(),
                other.map(|r| r.kind())
            );
            error(&AdminError::new("XX000", message), buf)
        }
    }
    encode_ready_for_query(TransactionStatus::Idle, buf);
}

/// ErrorResponse at level ERROR (the session goes on).
fn error(e: &AdminError, buf: &mut BytesMut) {
    let fields: [(u8, &[u8]); 4] = [
        (b'S', b"ERROR"),
        (b'V', b"ERROR"),
        (b'C', e.code.as_bytes()),
        (b'M', e.message.as_bytes()),
    ];
    // An error too long to encode is dropped; its ReadyForQuery still follows.
    let _ = encode_error_response(&fields, buf);
}

fn complete(tag: &str, buf: &mut BytesMut) {
    let _ = encode_command_complete(tag.as_bytes(), buf);
}

/// The commands, as a NOTICE (as PgBouncer's SHOW HELP).
fn help(buf: &mut BytesMut) {
    let detail = "\n\tSHOW HELP|POOLS|CLIENTS|SERVERS|STATS|CONFIG|STATE|VERSION|DATABASES|LISTS\n\
                  \tSHOW USERS|TOTALS|STATS_TOTALS\n\
                  \tRELOAD\n\tPAUSE [<db>]\n\tRESUME [<db>]\n\tKILL <db>\n\tSHUTDOWN\n\tDISABLE <db>\n\tENABLE <db>\n\tRECONNECT [<db>]\n\t\
                  WAIT_CLOSE [<db>]";
    let fields: [(u8, &[u8]); 5] = [
        (b'S', b"NOTICE"),
        (b'V', b"NOTICE"),
        (b'C', b"00000"),
        (b'M', b"Console usage"),
        (b'D', detail.as_bytes()),
    ];
    let _ = encode_notice_response(&fields, buf);
    complete("SHOW", buf);
}

/// A result set, then CommandComplete `SHOW`.
fn table(columns: &[(&str, Ty)], rows: &[Row], buf: &mut BytesMut) {
    let fields: Vec<FieldDescription<'_>> = columns
        .iter()
        .map(|(name, ty)| {
            let (type_oid, type_size) = ty.oid_and_size();
            FieldDescription {
                name: name.as_bytes(),
                table_oid: 0,
                column_id: 0,
                type_oid,
                type_size,
                type_modifier: -1,
                format: 0,
            }
        })
        .collect();
    let _ = encode_row_description(&fields, buf);
    for row in rows {
        let values: Vec<Option<&[u8]>> = row
            .iter()
            .map(|v| v.as_deref().map(str::as_bytes))
            .collect();
        let _ = encode_data_row(&values, buf);
    }
    complete("SHOW", buf);
}

fn show(what: Show, s: &Snapshot, buf: &mut BytesMut) {
    match what {
        Show::Pools => pools(s, buf),
        Show::Clients => {
            let rows: Vec<Row> = s.clients.iter().map(client_row).collect();
            table(&client_columns(), &rows, buf)
        }
        Show::Servers => {
            let rows: Vec<Row> = s.servers.iter().map(server_row).collect();
            table(&server_columns(), &rows, buf)
        }
        Show::Stats => stats(s, buf),
        Show::StatsTotals => stats_totals(s, buf),
        Show::Totals => totals(s, buf),
        Show::Users => {
            let cols = [("name", Ty::Text), ("pool_mode", Ty::Text)];
            let rows: Vec<Row> = s.users().into_iter().map(|u| vec![Some(u), None]).collect();
            table(&cols, &rows, buf)
        }
        Show::Config => {
            let cols = [
                ("key", Ty::Text),
                ("value", Ty::Text),
                ("default", Ty::Text),
                ("changeable", Ty::Text),
            ];
            let rows: Vec<Row> = s
                .config
                .iter()
                .map(|c| {
                    let yes = if c.changeable { "yes" } else { "no" };
                    vec![
                        Some(c.key.clone()),
                        Some(c.value.clone()),
                        Some(c.default.clone()),
                        text(yes),
                    ]
                })
                .collect();
            table(&cols, &rows, buf)
        }
        Show::State => {
            let yes = |b: bool| text(if b { "yes" } else { "no" });
            let rows = vec![
                vec![text("active"), yes(!s.paused)],
                vec![text("paused"), yes(s.paused)],
                vec![text("suspended"), yes(false)],
            ];
            table(&[("key", Ty::Text), ("value", Ty::Text)], &rows, buf)
        }
        Show::Databases => databases(s, buf),
        Show::Lists => {
            let rows: Vec<Row> = s
                .lists()
                .into_iter()
                .map(|(list, items)| vec![text(list), num(items)])
                .collect();
            table(&[("list", Ty::Text), ("items", Ty::Int4)], &rows, buf)
        }
        Show::Help | Show::Version => help(buf),
    }
}

/// SHOW DATABASES in PgBouncer 1.18's columns. pgyard has no `force_user` (a user in a
/// database's connection string is refused), no minimum or reserve pool, no pool mode of a
/// database's own (PgBouncer's column shows only such an override), no per-database
/// connection limit and no DISABLE, so those are NULL or 0; every database is paused at once.
fn databases(s: &Snapshot, buf: &mut BytesMut) {
    let mut cols = vec![
        ("name", Ty::Text),
        ("host", Ty::Text),
        ("port", Ty::Int4),
        ("database", Ty::Text),
        ("force_user", Ty::Text),
    ];
    typed(
        &mut cols,
        &["pool_size", "min_pool_size", "reserve_pool"],
        Ty::Int4,
    );
    cols.push(("pool_mode", Ty::Text));
    typed(
        &mut cols,
        &[
            "max_connections",
            "current_connections",
            "paused",
            "disabled",
        ],
        Ty::Int4,
    );
    let rows: Vec<Row> = s
        .databases
        .iter()
        .map(|d| {
            vec![
                Some(d.name.clone()),
                d.host.clone(),
                num(d.port.unwrap_or(5432)),
                Some(d.database.clone()),
                None,
                num(d.pool_size),
                num(0),
                num(0),
                None,
                num(0),
                num(s.connections(&d.name)),
                num(u8::from(s.paused || d.paused)),
                num(u8::from(d.disabled)),
            ]
        })
        .collect();
    table(&cols, &rows, buf)
}

/// The pool mode as PgBouncer writes it.
fn mode_word(mode: PoolMode) -> &'static str {
    match mode {
        PoolMode::Session => "session",
        PoolMode::Transaction => "transaction",
    }
}

/// Appends columns of one type, in order.
fn typed(cols: &mut Vec<(&'static str, Ty)>, names: &[&'static str], ty: Ty) {
    cols.extend(names.iter().map(|name| (*name, ty)));
}

fn text(s: &str) -> Option<String> {
    Some(s.to_owned())
}

fn num(n: impl ToString) -> Option<String> {
    Some(n.to_string())
}

fn pools(s: &Snapshot, buf: &mut BytesMut) {
    let mut cols = vec![("database", Ty::Text), ("user", Ty::Text)];
    typed(
        &mut cols,
        &[
            "cl_active",
            "cl_waiting",
            "sv_active",
            "sv_idle",
            "sv_used",
            "sv_tested",
            "sv_login",
            "maxwait",
            "maxwait_us",
        ],
        Ty::Int4,
    );
    cols.push(("pool_mode", Ty::Text));
    cols.push(("route", Ty::Text));
    cols.push(("options", Ty::Text));
    let mode = mode_word(s.pool_mode);
    let rows: Vec<Row> = s
        .pool_rows()
        .into_iter()
        .map(|(key, p)| {
            vec![
                Some(key.database),
                Some(key.user),
                num(p.cl_active),
                num(p.cl_waiting),
                num(p.sv_active),
                num(p.sv_idle),
                // pgyard has no server check phase: a server is never "used".
                num(0),
                num(p.sv_tested),
                num(p.sv_login),
                num(p.maxwait.as_secs()),
                num(p.maxwait.subsec_micros()),
                text(mode),
                text(key.route.as_str()),
                Some(key.options),
            ]
        })
        .collect();
    table(&cols, &rows, buf)
}

fn stats(s: &Snapshot, buf: &mut BytesMut) {
    let mut cols = vec![("database", Ty::Text)];
    typed(
        &mut cols,
        &[
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
        ],
        Ty::Numeric,
    );
    let rows: Vec<Row> = s
        .stats()
        .into_iter()
        .map(|(database, t)| {
            let assignments = [Some(database), num(t.assignments)];
            let pgyards = [num(t.middleware), num(t.unknown_classes)];
            assignments
                .into_iter()
                .chain(totals_of(&t))
                .chain(pgyards)
                .collect()
        })
        .collect();
    table(&cols, &rows, buf)
}

/// SHOW STATS_TOTALS: PgBouncer 1.18's eight columns, SHOW STATS's totals under them.
fn stats_totals(s: &Snapshot, buf: &mut BytesMut) {
    let mut cols = vec![("database", Ty::Text)];
    typed(&mut cols, &TOTAL_NAMES, Ty::Numeric);
    let rows: Vec<Row> = s
        .stats()
        .into_iter()
        .map(|(database, t)| {
            std::iter::once(Some(database))
                .chain(totals_of(&t))
                .collect()
        })
        .collect();
    table(&cols, &rows, buf)
}

/// SHOW TOTALS: a `name`, `value` row per counter over every database, PgBouncer's
/// `total_*` rows (its `avg_*` rows need averages over a period, which pgyard does not keep).
fn totals(s: &Snapshot, buf: &mut BytesMut) {
    let cols = [("name", Ty::Text), ("value", Ty::Numeric)];
    let names = [
        "total_xact_count",
        "total_query_count",
        "total_client_bytes",
        "total_server_bytes",
        "total_xact_time",
        "total_query_time",
        "total_wait_time",
    ];
    let rows: Vec<Row> = names
        .iter()
        .zip(totals_of(&s.totals()))
        .map(|(n, v)| vec![text(n), v])
        .collect();
    table(&cols, &rows, buf)
}

/// SHOW STATS_TOTALS's counters after the database.
const TOTAL_NAMES: [&str; 7] = [
    "xact_count",
    "query_count",
    "bytes_received",
    "bytes_sent",
    "xact_time",
    "query_time",
    "wait_time",
];

/// The seven counters PgBouncer totals, in its order.
fn totals_of(t: &ClientStats) -> [Option<String>; 7] {
    [
        num(t.xacts),
        num(t.queries),
        num(t.received),
        num(t.sent),
        num(t.xact_us),
        num(t.query_us),
        num(t.wait_us),
    ]
}

/// PgBouncer's columns of SHOW CLIENTS and SHOW SERVERS.
fn socket_columns() -> Vec<(&'static str, Ty)> {
    use Ty::{Int4, Text};
    vec![
        ("type", Text),
        ("user", Text),
        ("database", Text),
        ("replication", Text),
        ("state", Text),
        ("addr", Text),
        ("port", Int4),
        ("local_addr", Text),
        ("local_port", Int4),
        ("connect_time", Text),
        ("request_time", Text),
        ("wait", Int4),
        ("wait_us", Int4),
        ("close_needed", Int4),
        ("ptr", Text),
        ("link", Text),
        ("remote_pid", Int4),
        ("tls", Text),
        ("application_name", Text),
        ("prepared_statements", Int4),
        ("id", Ty::Int8),
    ]
}

fn client_columns() -> Vec<(&'static str, Ty)> {
    let mut cols = socket_columns();
    cols.extend([
        ("route", Ty::Text),
        ("tag", Ty::Text),
        ("middleware", Ty::Int8),
        ("unknown_middleware", Ty::Int8),
        ("options", Ty::Text),
    ]);
    cols
}

fn server_columns() -> Vec<(&'static str, Ty)> {
    let mut cols = socket_columns();
    cols.push(("route", Ty::Text));
    cols.push(("options", Ty::Text));
    cols
}

fn or_none(s: &str, none: &str) -> Option<String> {
    Some(if s.is_empty() { none } else { s }.to_owned())
}

fn client_row(c: &ClientRow) -> Row {
    let a = &c.activity;
    let mut row = vec![
        text("C"),
        or_none(&c.user, "(nouser)"),
        or_none(&c.database, "(nodb)"),
        text("none"),
        text(a.state.word()),
        c.addr.map(|a| a.host()),
        c.addr.and_then(|a| num(a.port())),
        c.local.map(|a| a.host()),
        c.local.and_then(|a| num(a.port())),
        c.connect_time.map(timestamp),
        c.request_time.map(timestamp),
        num(c.wait.as_secs()),
        num(c.wait.subsec_micros()),
        num(u8::from(a.draining)),
        Some(format!("c{}", c.id.0)),
        Some(a.server.map(|s| format!("s{}", s.0)).unwrap_or_default()),
        num(0),
        Some(c.tls.clone().unwrap_or_default()),
        Some(c.application_name.clone()),
        num(a.prepared),
        num(c.id.0),
    ];
    row.extend([
        text(a.route.as_str()),
        c.tag.clone(),
        num(a.stats.middleware),
        num(a.stats.unknown_classes),
        Some(c.options.clone()),
    ]);
    row
}

fn server_row(s: &ServerRow) -> Row {
    vec![
        text("S"),
        Some(s.key.user.clone()),
        Some(s.key.database.clone()),
        text("none"),
        text(s.state.word()),
        s.addr.clone(),
        s.port.and_then(num),
        None,
        None,
        s.connect_time.map(timestamp),
        s.request_time.map(timestamp),
        num(0),
        num(0),
        num(u8::from(s.close_needed)),
        Some(format!("s{}", s.id.0)),
        Some(s.client.map(|c| format!("c{}", c.0)).unwrap_or_default()),
        num(s.pid.unwrap_or(0)),
        text(if s.tls { "TLS" } else { "" }),
        Some(s.application_name.clone()),
        num(s.prepared),
        num(s.id.0),
        text(s.key.route.as_str()),
        Some(s.key.options.clone()),
    ]
}

/// Seconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn timestamp(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil: shift the epoch to 0000-03-01 so leap days end a year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests;
