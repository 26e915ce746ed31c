//! `pgyard delayq run --create-slot [--two-phase] [--copy-data]`: creating the publisher's
//! slot over the replication protocol (with `TWO_PHASE` when asked) and, with `--copy-data`,
//! copying the published tables into the subscriber at the snapshot the slot exported, as
//! CREATE SUBSCRIPTION does, before anything is streamed. Every row committed before the
//! slot's consistent point arrives through the copy, everything after it through the slot.

use pgyard_blocking::{ConnectOptions, Session};
use pgyard_conninfo::Keyword;
use pgyard_delayq::apply::quote_literal;
use pgyard_wire::replication::{
    create_replication_slot, drop_replication_slot, SlotKind, SnapshotAction,
};

/// What `--create-slot` was asked for.
#[derive(Clone, Debug)]
pub struct SlotSetup<'a> {
    /// The publisher's connection string.
    pub publisher: &'a str,
    /// The subscriber's connection string (only used with `copy_data`).
    pub subscriber: &'a str,
    /// The slot to create when missing.
    pub slot: &'a str,
    /// The publication whose tables are copied.
    pub publication: &'a str,
    /// The subscriber's replication origin: created in the copy's own transaction, so that
    /// its existence says the copy committed.
    pub origin: &'a str,
    /// Create the slot with `TWO_PHASE`.
    pub two_phase: bool,
    /// Copy the published tables at the slot's exported snapshot.
    pub copy_data: bool,
}

/// One published table as `pg_publication_tables` shows it.
#[derive(Clone, Debug)]
struct Table {
    /// `"schema"."name"`, quoted.
    qualified: String,
    /// The published columns, quoted and comma-separated.
    columns: String,
    /// The publication's row filter, if any.
    filter: Option<String>,
    /// A partitioned table: its rows are its partitions' (no `ONLY`).
    partitioned: bool,
}

/// Creates the slot when it does not exist (copying the data with `copy_data`) and returns a
/// line saying what was done.
pub fn create_slot(setup: &SlotSetup) -> Result<String, String> {
    let mut publisher = pgyard_blocking::connect(setup.publisher).map_err(|e| e.to_string())?;
    let name = quote_literal(setup.slot);
    let found = publisher.simple_query(&format!(
        "SELECT two_phase FROM pg_catalog.pg_replication_slots WHERE slot_name = {name}"
    ));
    publisher.close();
    if let Some(row) = found.map_err(|e| e.to_string())?.first() {
        // Data is copied only with a new slot: an existing one has already streamed
        // changes the subscriber may hold, and a copy would duplicate them.
        if setup.copy_data && !origin_exists(setup)? {
            return Err(format!(
                "slot {slot} exists but the subscriber has no replication origin {origin}: \
                 a --copy-data run ended before its copy committed (or the slot was made \
                 elsewhere), and streaming from it now would miss the rows before it; drop \
                 the slot (SELECT pg_drop_replication_slot('{slot}') on the publisher) and \
                 run again, or run without --copy-data if the subscriber is seeded",
                slot = setup.slot,
                origin = setup.origin
            ));
        }
        let two_phase = row.first().cloned().flatten().unwrap_or_default();
        return Ok(format!(
            "slot {} exists (two_phase {two_phase}); nothing created{}",
            setup.slot,
            if setup.copy_data {
                ", no data copied"
            } else {
                ""
            }
        ));
    }
    // A replication connection: CREATE_REPLICATION_SLOT can export a snapshot (the SQL
    // function cannot), and the snapshot lives as long as this connection runs nothing else.
    let options = ConnectOptions::default().set(Keyword::Replication, "database");
    let mut repl = pgyard_blocking::connect_with(setup.publisher, &options)
        .map_err(|e| format!("replication connection: {e}"))?;
    let kind = SlotKind::Logical {
        plugin: "pgoutput".to_owned(),
        two_phase: setup.two_phase,
        failover: false,
        snapshot: Some(if setup.copy_data {
            SnapshotAction::Export
        } else {
            SnapshotAction::Nothing
        }),
    };
    let created = repl
        .simple_query(&create_replication_slot(setup.slot, false, &kind))
        .map_err(|e| e.to_string());
    let created = match created {
        Ok(rows) => rows,
        Err(e) => {
            repl.close();
            return Err(e);
        }
    };
    // slot_name, consistent_point, snapshot_name, output_plugin
    let field = |i: usize| {
        created
            .first()
            .and_then(|r| r.get(i).cloned().flatten())
            .unwrap_or_default()
    };
    let (point, snapshot) = (field(1), field(2));
    let mut line = format!(
        "created slot {} at {point}{}",
        setup.slot,
        if setup.two_phase {
            " with two_phase"
        } else {
            ""
        }
    );
    if setup.copy_data {
        match copy_tables(setup, &snapshot) {
            Ok((tables, rows)) => {
                line.push_str(&format!(
                    "; copied {rows} row(s) of {tables} table(s) at snapshot {snapshot}"
                ));
            }
            Err(e) => {
                // Without its data the slot is worthless, and a run finding it would not copy
                // again: drop it so that the next run starts over.
                let dropped = repl.simple_query(&drop_replication_slot(setup.slot, false));
                repl.close();
                return Err(match dropped {
                    Ok(_) => format!("{e} (slot {} dropped again)", setup.slot),
                    Err(d) => format!("{e}; dropping slot {} failed too: {d}", setup.slot),
                });
            }
        }
    }
    repl.close();
    Ok(line)
}

/// Whether the subscriber has the replication origin (the mark of a committed copy).
fn origin_exists(setup: &SlotSetup) -> Result<bool, String> {
    let mut subscriber =
        pgyard_blocking::connect(setup.subscriber).map_err(|e| format!("subscriber: {e}"))?;
    let rows = subscriber.simple_query(&format!(
        "SELECT 1 FROM pg_catalog.pg_replication_origin WHERE roname = {}",
        quote_literal(setup.origin)
    ));
    subscriber.close();
    Ok(!rows.map_err(|e| format!("subscriber: {e}"))?.is_empty())
}

/// Copies every table of the publication from the publisher (at `snapshot`) into the
/// subscriber in one subscriber transaction; returns the tables and rows copied.
fn copy_tables(setup: &SlotSetup, snapshot: &str) -> Result<(usize, u64), String> {
    let mut publisher =
        pgyard_blocking::connect(setup.publisher).map_err(|e| format!("publisher: {e}"))?;
    let mut subscriber =
        pgyard_blocking::connect(setup.subscriber).map_err(|e| format!("subscriber: {e}"))?;
    let r = copy_in_transactions(&mut publisher, &mut subscriber, setup, snapshot);
    publisher.close();
    subscriber.close();
    r
}

fn copy_in_transactions(
    publisher: &mut Session,
    subscriber: &mut Session,
    setup: &SlotSetup,
    snapshot: &str,
) -> Result<(usize, u64), String> {
    let publication = setup.publication;
    publisher
        .simple_query(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
            quote_literal(snapshot)
        ))
        .map_err(|e| format!("publisher: importing snapshot {snapshot}: {e}"))?;
    let tables = published_tables(publisher, publication)?;
    // The apply worker's setting: no user triggers, no FK checks of rows copied in any order.
    subscriber
        .simple_query("BEGIN; SET LOCAL session_replication_role = replica")
        .map_err(|e| format!("subscriber: {e}"))?;
    let r = check_subscriber(subscriber, &tables).and_then(|()| {
        let mut rows = 0;
        for t in &tables {
            rows += copy_table(publisher, subscriber, t)?;
        }
        // The origin commits with the rows: a later run that finds the slot but not the
        // origin knows the copy never committed.
        let origin = quote_literal(setup.origin);
        subscriber
            .simple_query(&format!(
                "SELECT pg_catalog.pg_replication_origin_create({origin}) WHERE NOT EXISTS \
                 (SELECT 1 FROM pg_catalog.pg_replication_origin WHERE roname = {origin})"
            ))
            .map_err(|e| format!("subscriber: creating origin {}: {e}", setup.origin))?;
        subscriber
            .simple_query("COMMIT")
            .map_err(|e| format!("subscriber: COMMIT of the copy: {e}"))?;
        Ok((tables.len(), rows))
    });
    if r.is_err() {
        let _ = subscriber.simple_query("ROLLBACK");
    }
    let _ = publisher.simple_query("COMMIT");
    r
}

/// The publication's tables, with their published columns, row filter and kind.
fn published_tables(publisher: &mut Session, publication: &str) -> Result<Vec<Table>, String> {
    let sql = format!(
        "SELECT pg_catalog.quote_ident(t.schemaname) || '.' || pg_catalog.quote_ident(t.tablename), \
           (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a), ', ' ORDER BY o) \
              FROM pg_catalog.unnest(t.attnames) WITH ORDINALITY AS c(a, o)), \
           t.rowfilter, c.relkind = 'p' \
         FROM pg_catalog.pg_publication_tables t \
         JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname \
         JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename \
         WHERE t.pubname = {} ORDER BY t.schemaname, t.tablename",
        quote_literal(publication)
    );
    let rows = publisher
        .simple_query(&sql)
        .map_err(|e| format!("publisher: listing the tables of publication {publication}: {e}"))?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let get = |i: usize| r.get(i).cloned().flatten();
            Table {
                qualified: get(0).unwrap_or_default(),
                columns: get(1).unwrap_or_default(),
                filter: get(2),
                partitioned: get(3).as_deref() == Some("t"),
            }
        })
        .collect())
}

/// Refuses, before anything is copied, tables missing on the subscriber (all named) and
/// tables that already hold rows (the copy would duplicate them).
fn check_subscriber(subscriber: &mut Session, tables: &[Table]) -> Result<(), String> {
    let mut missing = Vec::new();
    for t in tables {
        let rows = subscriber
            .simple_query(&format!(
                "SELECT pg_catalog.to_regclass({}) IS NULL",
                quote_literal(&t.qualified)
            ))
            .map_err(|e| format!("subscriber: {e}"))?;
        if rows
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .as_deref()
            == Some("t")
        {
            missing.push(t.qualified.clone());
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "--copy-data: published table(s) missing on the subscriber: {}; nothing was copied",
            missing.join(", ")
        ));
    }
    for t in tables {
        let rows = subscriber
            .simple_query(&format!("SELECT 1 FROM {} LIMIT 1", t.qualified))
            .map_err(|e| format!("subscriber: {}: {e}", t.qualified))?;
        if !rows.is_empty() {
            return Err(format!(
                "--copy-data: table {} on the subscriber is not empty, and copying would \
                 duplicate its rows; empty it, or seed the subscriber yourself and run without \
                 --copy-data; nothing was copied",
                t.qualified
            ));
        }
    }
    Ok(())
}

/// How many bytes of CopyData are gathered before one write to the subscriber.
const CHUNK: usize = 256 * 1024;

/// Streams one table from the publisher's `COPY (SELECT …) TO STDOUT` into the subscriber's
/// `COPY … FROM STDIN`; returns the rows copied.
fn copy_table(publisher: &mut Session, subscriber: &mut Session, t: &Table) -> Result<u64, String> {
    let mut select = format!(
        "SELECT {} FROM {}{}",
        t.columns,
        if t.partitioned { "" } else { "ONLY " },
        t.qualified
    );
    if let Some(f) = &t.filter {
        select.push_str(&format!(" WHERE {f}"));
    }
    let mut start = bytes::BytesMut::new();
    pgyard_wire::frontend::encode_query(
        format!("COPY {} ({}) FROM STDIN", t.qualified, t.columns).as_bytes(),
        &mut start,
    )
    .map_err(|e| e.to_string())?;
    // The data follows the query unasked (as apply's COPY does): should the server refuse
    // the COPY, it ignores the data up to CopyDone and its error is the reply.
    let pending = subscriber
        .send_pipeline(&start, 1)
        .map_err(|e| format!("subscriber: {e}"))?
        .pop()
        .ok_or("no pending reply")?;
    let mut buf = bytes::BytesMut::new();
    let mut rows = 0u64;
    let sent = publisher.copy_out(&format!("COPY ({select}) TO STDOUT"), |data| {
        // Text format: one line per row, newlines inside values escaped.
        rows += data.iter().filter(|b| **b == b'\n').count() as u64;
        pgyard_wire::frontend::encode_copy_data(data, &mut buf)
            .map_err(|e| pgyard_blocking::Error::Config(e.to_string()))?;
        if buf.len() >= CHUNK {
            subscriber.send_frame(&buf)?;
            buf.clear();
        }
        Ok(())
    });
    let published = sent.map_err(|e| format!("publisher: copying {}: {e}", t.qualified));
    if published.is_ok() {
        pgyard_wire::frontend::encode_copy_done(&mut buf);
    } else {
        pgyard_wire::frontend::encode_copy_fail(b"the publisher's COPY failed", &mut buf)
            .map_err(|e| e.to_string())?;
    }
    let finished = subscriber
        .send_frame(&buf)
        .and_then(|()| subscriber.finish_query(pending))
        .map_err(|e| format!("subscriber: copying {}: {e}", t.qualified));
    published?;
    finished?;
    Ok(rows)
}
