//! `pgyard slotsync collect` against the world: the primary and the standby answer its queries
//! as the servers would (`pg_replication_slots` rows, `SHOW` texts such as `4kB`, WAL file
//! names, snapshot files as `SnapBuildOnDisk` bytes, `pg_walinspect` descriptions and raw
//! record bytes), and the snapshot it builds must be the world's (`collect-reads-the-world`):
//! the same slots, positions, settings, snapshot files and, over the WAL range it asked for,
//! the same running-xacts records and transactions. The answers are rendered here from the
//! world's state in the servers' formats, so every parser on the live path runs in the seeds.

use std::collections::BTreeMap;

use pgyard_slotsync::decoding::{RunningXacts, SnapshotFile, XactRecords};
use pgyard_slotsync::snapshot::{collect, QueryError, Snapshot, Source};
use pgyard_slotsync::{Standby, Version, WalLevel};
use pgyard_types::{Lsn, Xid};
use serde_json::{json, Value};

use super::decode::StandbyDecoding;
use super::fail;
use crate::publisher::WalFacts;
use crate::Violation;

/// The timeline every node of the world is on (promotion ends the run).
const TLI: u64 = 1;
/// Bytes of a record `pg_read_binary_file` returns for the top-level xid.
const RAW_BYTES: u64 = 160;

/// The primary's answers.
struct PrimaryServer<'a> {
    snap: &'a Snapshot,
}

impl Source for PrimaryServer<'_> {
    fn value(&mut self, sql: &str) -> Result<Option<String>, QueryError> {
        let rows = |v: &[pgyard_slotsync::SlotRow]| {
            Value::Array(v.iter().map(|r| r.to_json_as(Version::V18)).collect())
        };
        if sql.contains("row_to_json") {
            return Ok(Some(rows(&self.snap.input.remote_slots).to_string()));
        }
        let p = self.snap.primary.as_ref();
        let sent: serde_json::Map<String, Value> = p
            .map(|p| {
                p.sent_lsn
                    .iter()
                    .map(|(k, l)| (k.clone(), Value::String(l.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let setting = p.map_or("", |p| p.synchronized_standby_slots.as_str());
        let in_recovery = self.snap.input.standby.primary_in_recovery;
        Ok(Some(
            json!({"server_version_num": "180000", "in_recovery": in_recovery,
                "synchronized_standby_slots": setting, "sent": sent, "hidden": []})
            .to_string(),
        ))
    }
}

/// The standby's answers; `asked` keeps the WAL range the last WAL query named.
struct StandbyServer<'a> {
    snap: &'a Snapshot,
    facts: Option<&'a WalFacts>,
    dec: &'a StandbyDecoding,
    asked: Option<(Lsn, Lsn)>,
}

fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// `SHOW`'s form of a size in bytes (`4kB`, `16MB`).
fn show_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "kB")];
    UNITS
        .iter()
        .find(|(n, _)| bytes.is_multiple_of(*n))
        .map_or(format!("{bytes}B"), |(n, u)| format!("{}{u}", bytes / n))
}

/// The range `pg_get_wal_records_info('FROM', 'END')` names in `sql`.
fn range_of(sql: &str) -> Option<(Lsn, Lsn)> {
    let at = sql.find("pg_get_wal_records_info('")? + "pg_get_wal_records_info('".len();
    let mut parts = sql[at..].split('\'');
    let from = parts.next()?.parse().ok()?;
    let end = parts.nth(1)?.parse().ok()?;
    Some((from, end))
}

impl Source for StandbyServer<'_> {
    fn value(&mut self, sql: &str) -> Result<Option<String>, QueryError> {
        let sb = &self.snap.input.standby;
        let text = if sql.contains("row_to_json") {
            let rows = self.snap.input.local_slots.iter();
            Value::Array(rows.map(|r| r.to_json_as(Version::V18)).collect()).to_string()
        } else if sql.contains("pg_last_wal_receive_lsn") {
            standby_object(sb).to_string()
        } else if sql.contains("primary_conninfo") {
            sb.primary_conninfo.clone()
        } else if sql.contains("pg_control_checkpoint") {
            json!({"redo_lsn": sb.redo_lsn.map(|l| l.to_string()), "tli": TLI}).to_string()
        } else if sql.contains("pg_ls_waldir") {
            let seg = sb.wal_segment_size_bytes;
            let at = sb.oldest_wal_lsn.unwrap_or(Lsn::INVALID).0;
            let per_log = 0x1_0000_0000 / seg;
            format!("{TLI:08X}{:08X}{:08X}", at >> 32, (at / seg) % per_log)
        } else if sql.contains("pg_ls_logicalsnapdir") {
            snapshot_files(self.dec).to_string()
        } else if sql.contains("RUNNING_XACTS") {
            let (from, end) = range_of(sql).unwrap_or_default();
            self.asked = Some((from, end));
            running_rows(self.facts, from, end).to_string()
        } else if sql.contains("with r as") {
            let (from, end) = range_of(sql).unwrap_or_default();
            xact_rows(self.facts, from, end).to_string()
        } else {
            return Err(QueryError {
                sqlstate: Some("42601".into()),
                message: format!("the simulated standby does not know {sql:?}"),
            });
        };
        Ok(Some(text))
    }
}

fn standby_object(sb: &Standby) -> Value {
    let lsn = |l: Option<Lsn>| l.map(|l| l.to_string());
    let wal_level = match sb.wal_level {
        WalLevel::Minimal => "minimal",
        WalLevel::Replica => "replica",
        WalLevel::Logical => "logical",
    };
    json!({
        "server_version_num": "180000",
        "receive_lsn": lsn(sb.receive_lsn), "replay_lsn": lsn(sb.replay_lsn),
        "in_recovery": sb.in_recovery,
        "snapshot_xmin": sb.snapshot_xmin.0, "snapshot_xmax": sb.snapshot_xmin.0,
        "wal_level": wal_level,
        "hot_standby_feedback": onoff(sb.hot_standby_feedback),
        "primary_slot_name": sb.primary_slot_name,
        "sync_replication_slots": onoff(sb.sync_replication_slots),
        "wal_segment_size": show_size(sb.wal_segment_size_bytes),
        "max_replication_slots": sb.max_replication_slots,
    })
}

/// `pg_logical/snapshots`: `%X-%X.snap` names; a file whose contents the world knows as
/// `SnapBuildOnDisk` bytes (64-bit little-endian layout: magic, then the builder with its
/// `xmin` at 32, `committed.xcnt` at 96, `catchange.xcnt` at 128, the xids from 144), any
/// other as bytes no reader takes for a snapshot.
fn snapshot_files(dec: &StandbyDecoding) -> Value {
    let mut files: Vec<(String, &Lsn)> = dec
        .snapshots
        .iter()
        .flatten()
        .map(|l| (format!("{:X}-{:X}.snap", l.0 >> 32, l.0 & 0xFFFF_FFFF), l))
        .collect();
    // `order by name`: text order, not LSN order.
    files.sort();
    let files = files.into_iter().map(|(name, l)| {
        let bytes = dec.files.get(l).map_or_else(|| vec![0u8; 16], on_disk);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        json!({"name": name, "hex": hex})
    });
    Value::Array(files.collect())
}

fn on_disk(f: &SnapshotFile) -> Vec<u8> {
    let mut b = vec![0u8; 144];
    b[0..4].copy_from_slice(&0x51A1_E001u32.to_le_bytes());
    b[32..36].copy_from_slice(&f.xmin.0.to_le_bytes());
    // committed.xcnt stays 0: the builder of a fast-forward advance tracks no committed xids.
    b[128..136].copy_from_slice(&(f.catchange.len() as u64).to_le_bytes());
    for x in &f.catchange {
        b.extend_from_slice(&x.0.to_le_bytes());
    }
    b
}

fn in_range(l: Lsn, (from, end): (Lsn, Lsn)) -> bool {
    l >= from && l < end
}

/// `pg_walinspect`'s rows of the running-xacts records in `[from, end)`.
fn running_rows(facts: Option<&WalFacts>, from: Lsn, end: Lsn) -> Value {
    let rows = facts
        .into_iter()
        .flat_map(|f| &f.running)
        .filter(|r| in_range(r.start_lsn, (from, end)));
    Value::Array(
        rows.map(|r| {
            json!({"start_lsn": r.start_lsn.to_string(),
                "end_lsn": r.end_lsn.map(|l| l.to_string()),
                "description": describe(r)})
        })
        .collect(),
    )
}

/// `standby_desc`'s words for a running-xacts record.
fn describe(r: &RunningXacts) -> String {
    let words = |xs: &[Xid]| xs.iter().map(|x| format!(" {}", x.0)).collect::<String>();
    let mut d = format!(
        "nextXid {} latestCompletedXid {} oldestRunningXid {}",
        r.next_xid.0,
        r.next_xid.0.saturating_sub(1),
        r.oldest_running_xid.0
    );
    if !r.xids.is_empty() {
        d.push_str(&format!("; {} xacts:{}", r.xids.len(), words(&r.xids)));
    }
    if !r.subxids.is_empty() {
        d.push_str(&format!(
            "; {} subxacts:{}",
            r.subxids.len(),
            words(&r.subxids)
        ));
    }
    d
}

/// The raw bytes of the record of `xid` at `at`, `RAW_BYTES` of them as the file holds them
/// (a 24-byte page header at every 8 kB boundary after the start), laid out as
/// `XLogRecordAssemble` writes a heap record: the `XLogRecord` header; up to two block
/// references (`XLogRecordBlockHeader`, a full-page image header with a compression header
/// when its hole is compressed, the relation unless `BKPBLOCK_SAME_REL`, the block number) and
/// a replication origin, each chosen by the LSN's bits; `XLR_BLOCK_ID_TOPLEVEL_XID` with `top`
/// for a subtransaction's first record; then the main data.
fn raw_record(at: Lsn, xid: u32, top: Option<Xid>) -> String {
    let mut rec = vec![0u8; 24];
    rec[4..8].copy_from_slice(&xid.to_le_bytes());
    let bits = at.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    for block in 0..(bits % 3) as u8 {
        let image = (bits >> (2 + block)) & 1 == 1;
        let same_rel = block > 0;
        let fork_flags = 0x20 | if image { 0x10 } else { 0 } | if same_rel { 0x80 } else { 0 };
        rec.extend_from_slice(&[block, fork_flags, 0x31, 0x02]);
        if image {
            // length, hole_offset, bimg_info: a hole, compressed by one of the three methods
            // or not at all.
            let bimg_info = [0x01 | 0x04, 0x01 | 0x08, 0x01 | 0x10, 0x02 | 0x04, 0x01]
                [(bits >> 5) as usize % 5];
            rec.extend_from_slice(&[0x40, 0x1f, 0x30, 0x01, bimg_info]);
            if bimg_info & 0x01 != 0 && bimg_info & 0x1c != 0 {
                rec.extend_from_slice(&[0x10, 0x00]);
            }
        }
        if !same_rel {
            rec.extend_from_slice(&[0x7f, 0x06, 0, 0, 0x05, 0, 0, 0, 0xfc, 0x3f, 0, 0]);
        }
        rec.extend_from_slice(&(bits as u32 & 0xffff).to_le_bytes());
    }
    if (bits >> 8) & 3 == 0 {
        rec.extend_from_slice(&[253, 0x01, 0x00]);
    }
    if let Some(t) = top {
        rec.push(252);
        rec.extend_from_slice(&t.0.to_le_bytes());
    }
    rec.extend_from_slice(&[255, 8]);
    rec.resize(RAW_BYTES as usize, 0);
    let mut raw = Vec::new();
    let mut body = rec.into_iter();
    let mut pos = at.0;
    while (raw.len() as u64) < RAW_BYTES {
        if pos.is_multiple_of(8192) && !raw.is_empty() {
            raw.extend_from_slice(&[0u8; 24]);
            pos += 24;
            continue;
        }
        raw.push(body.next().unwrap_or(0));
        pos += 1;
    }
    raw.truncate(RAW_BYTES as usize);
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the WAL over `r` shows of transaction `x`, as one row of `xacts_sql` reads: its
/// records, changes, PREPARE and end there, what its PREPARE and end records list, the
/// top-level xid its first record there carries; and that first record (by its own xid).
/// `None` when it has no record in the range.
fn seen(
    facts: Option<&WalFacts>,
    x: &XactRecords,
    r: (Lsn, Lsn),
) -> Option<(XactRecords, Option<Lsn>)> {
    let within = |v: &[Lsn]| {
        v.iter()
            .copied()
            .filter(|l| in_range(*l, r))
            .collect::<Vec<_>>()
    };
    let records = within(&x.record_lsns);
    let prepare = x.prepare_lsn.filter(|l| in_range(*l, r));
    let end_at = x.end_lsn.filter(|l| in_range(*l, r));
    if records.is_empty() && prepare.is_none() && end_at.is_none() {
        return None;
    }
    // A prepared transaction's decision is written by another backend (xid 0): its own
    // records are its data and its PREPARE; anyone else's end is its own.
    let own_end = end_at.filter(|_| x.prepare_lsn.is_none());
    let first = records
        .first()
        .copied()
        .into_iter()
        .chain(prepare)
        .chain(own_end)
        .min();
    let carried = x
        .top_xid
        .filter(|_| first.is_some() && first == x.top_xid_lsn);
    let view = XactRecords {
        xid: x.xid,
        change_lsns: within(&x.change_lsns),
        record_lsns: records,
        end_lsn: end_at,
        aborted: end_at.is_some() && x.aborted,
        has_invals: end_at.is_some() && x.has_invals,
        subxids: listed_subs(facts, x, (prepare, end_at)),
        top_xid: carried,
        top_xid_lsn: carried.and(first),
        invalidation_lsns: Vec::new(),
        prepare_lsn: prepare,
    };
    Some((view, first))
}

/// The rows `xacts_sql` returns for `[from, end)`: one per xid with a record in the range.
fn xact_rows(facts: Option<&WalFacts>, from: Lsn, end: Lsn) -> Value {
    let lsns =
        |v: &[Lsn]| (!v.is_empty()).then(|| v.iter().map(Lsn::to_string).collect::<Vec<_>>());
    let text = |l: Option<Lsn>| l.map(|l| l.to_string());
    let all = facts.into_iter().flat_map(|f| f.xacts.values());
    let rows = all.filter_map(|x| seen(facts, x, (from, end))).map(|(v, first)| {
        let subs: Vec<String> = v.subxids.iter().map(|s| s.0.to_string()).collect();
        json!({
            "xid": v.xid.0, "record_lsns": lsns(&v.record_lsns), "change_lsns": lsns(&v.change_lsns),
            "invalidation_lsns": null, "prepare_lsn": text(v.prepare_lsn),
            "end_lsn": text(v.end_lsn), "aborted": v.aborted, "has_invals": v.has_invals,
            "subxids": (!subs.is_empty()).then(|| subs.join(" ")),
            "first_lsn": text(first),
            "raw": first.map(|f| raw_record(f, v.xid.0, v.top_xid)),
        })
    });
    Value::Array(rows.collect())
}

/// The subtransactions `x`'s PREPARE and commit or abort records in the range list, in
/// record order (`string_agg` over both when both are there): once it ended, those of its
/// end record (a prepared one could not change them after its PREPARE); before, those not
/// rolled back on their own.
fn listed_subs(
    facts: Option<&WalFacts>,
    x: &XactRecords,
    (prepare, end_at): (Option<Lsn>, Option<Lsn>),
) -> Vec<Xid> {
    let subs: Vec<Xid> = if x.end_lsn.is_some() {
        x.subxids.clone()
    } else {
        let all = facts.into_iter().flat_map(|f| f.xacts.values());
        all.filter(|s| s.top_xid == Some(x.xid) && s.end_lsn.is_none())
            .map(|s| s.xid)
            .collect()
    };
    let times = usize::from(prepare.is_some()) + usize::from(end_at.is_some());
    subs.repeat(times)
}

/// What collect must read of the WAL over `[from, end)`: the world's records and
/// transactions as `pg_walinspect` shows them there.
fn expected_wal(
    facts: Option<&WalFacts>,
    from: Lsn,
    end: Lsn,
) -> (Vec<RunningXacts>, Vec<XactRecords>) {
    let r = (from, end);
    let running = facts
        .into_iter()
        .flat_map(|f| &f.running)
        .filter(|x| in_range(x.start_lsn, r))
        .cloned()
        .collect();
    let mut parent: BTreeMap<Xid, Xid> = BTreeMap::new();
    let all = facts.into_iter().flat_map(|f| f.xacts.values());
    let mut xacts: Vec<XactRecords> = all
        .filter_map(|x| seen(facts, x, r))
        .map(|(v, _)| v)
        .collect();
    for x in &xacts {
        for s in &x.subxids {
            parent.insert(*s, x.xid);
        }
    }
    for x in &mut xacts {
        if x.top_xid.is_none() {
            x.top_xid = parent.get(&x.xid).copied();
        }
    }
    (running, xacts)
}

/// `collect-reads-the-world` for the world's snapshot `snap` of standby `i`.
pub(super) fn judge(
    tick: u64,
    i: usize,
    snap: &Snapshot,
    facts: Option<&WalFacts>,
    dec: &StandbyDecoding,
) -> Result<(), Violation> {
    let mut primary = PrimaryServer { snap };
    let mut standby = StandbyServer {
        snap,
        facts,
        dec,
        asked: None,
    };
    let got = collect(Some(&mut primary), &mut standby);
    let mut want = snap.clone();
    let sb = &mut want.input.standby;
    (sb.running_xacts, sb.xacts) = match standby.asked {
        Some((from, end)) => expected_wal(facts, from, end),
        None => (Vec::new(), Vec::new()),
    };
    // What the WAL shows of the next xid raises the snapshot's, as collect reads it.
    let seen = sb.running_xacts.iter().map(|r| r.next_xid.0);
    let seen = seen.chain(
        sb.xacts
            .iter()
            .flat_map(|x| std::iter::once(x.xid.0 + 1).chain(x.subxids.iter().map(|s| s.0 + 1))),
    );
    sb.snapshot_xmin = Xid(seen.fold(sb.snapshot_xmin.0, u32::max));
    // The in-memory xmins are not in any view.
    sb.effective_catalog_xmins.clear();
    // The files come in name order; the engine reads them as a set.
    let got = got.map(|mut g| {
        if let Some(s) = &mut g.input.standby.serialized_snapshots {
            s.sort();
        }
        g
    });
    if got.as_ref() != Ok(&want) {
        return Err(fail(
            "collect-reads-the-world",
            format!(
                "tick {tick}: collect from standby{} read {got:?}, the world is {want:?}",
                i + 1
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_texts_are_rendered_as_postgresql_prints_them() {
        assert_eq!(show_size(4096), "4kB");
        assert_eq!(show_size(16 << 20), "16MB");
        assert_eq!(show_size(1 << 30), "1GB");
        assert_eq!(show_size(1000), "1000B");
        let sql = "select 1 from pg_get_wal_records_info('0/3000010', '1/20') where x";
        assert_eq!(range_of(sql), Some((Lsn(0x300_0010), Lsn(0x1_0000_0020))));
        assert_eq!(range_of("select 1"), None);
        let r = RunningXacts {
            start_lsn: Lsn(0x10),
            end_lsn: None,
            oldest_running_xid: Xid(7),
            next_xid: Xid(9),
            xids: vec![Xid(7), Xid(8)],
            subxids: vec![Xid(10)],
        };
        assert_eq!(
            describe(&r),
            "nextXid 9 latestCompletedXid 8 oldestRunningXid 7; 2 xacts: 7 8; 1 subxacts: 10"
        );
        // A page header inside the bytes is skipped by a reader, as the WAL holds it.
        let raw = raw_record(Lsn(8192 - 26), 12, Some(Xid(11)));
        assert_eq!(raw.len(), 2 * RAW_BYTES as usize);
        let bytes = pgyard_slotsync::snapshot::hex_bytes(&raw).unwrap_or_default();
        assert_eq!(
            pgyard_slotsync::decoding::record_toplevel_xid(Lsn(8192 - 26), &bytes),
            Some(Xid(11))
        );
    }
}
