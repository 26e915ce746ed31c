//! The standby's `pg_logical/snapshots` after a sync call, checked against the engine's
//! prediction. A copy or a decoding is chosen by whether a file exists at the remote
//! `restart_lsn`, so a file the engine does not know of (or one it wrongly thinks a decoding
//! wrote) decides later calls; the slot rows alone would show it only when it mattered.

use std::collections::BTreeSet;
use std::time::SystemTime;

use pgyard_slotsync::decoding::snapshot_file_lsn;
use pgyard_testkit::cluster::Node;
use pgyard_types::Lsn;
use serde_json::Value;

/// One file in the server's listing.
struct Listed {
    lsn: Lsn,
    name: String,
    /// Read from the file itself: the server's listing has whole seconds only.
    modified: Option<SystemTime>,
}

/// Microseconds from `from` to `to` (negative when `to` is earlier).
fn micros(from: SystemTime, to: SystemTime) -> i128 {
    match to.duration_since(from) {
        Ok(d) => i128::try_from(d.as_micros()).unwrap_or(i128::MAX),
        Err(e) => -i128::try_from(e.duration().as_micros()).unwrap_or(i128::MAX),
    }
}

/// Compares the directory with `predicted` (the engine's `serialized_snapshots` after the
/// call). `captured_at` and `called_at` are the clock before the input was read and before
/// the call: a file the engine did not expect is placed in time by its modification time
/// (the kernel's coarse clock, a few milliseconds behind), which names whose fault it is.
/// A restartpoint may remove a file at any time below both its redo position and the lowest
/// `restart_lsn` of the valid logical slots (all of them when there are none), so a predicted
/// file that is missing counts only at or past both as they stand after the call (a
/// restartpoint under way has a newer redo, never a lower slot position).
pub fn check(
    standby: &Node,
    predicted: Option<&[Lsn]>,
    captured_at: SystemTime,
    called_at: SystemTime,
) -> Option<String> {
    let predicted: BTreeSet<Lsn> = predicted?.iter().copied().collect();
    let text = standby
        .psql(
            "select json_build_object('redo', (select redo_lsn from pg_control_checkpoint()), \
             'kept_from', (select min(restart_lsn) from pg_replication_slots \
               where slot_type = 'logical' and invalidation_reason is null), \
             'files', (select coalesce(json_agg(name order by name), '[]') \
             from pg_ls_logicalsnapdir()))",
        )
        .unwrap_or_else(|e| panic!("standby: listing pg_logical/snapshots: {e}"));
    let v: Value = serde_json::from_str(&text).expect("snapshot listing JSON");
    let redo: Lsn = v["redo"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("redo_lsn");
    // No valid logical slot: a restartpoint removes every file.
    let kept_from: Option<Lsn> = v["kept_from"].as_str().and_then(|s| s.parse().ok());
    let dir = standby.data_dir().join("pg_logical/snapshots");
    let listed: Vec<Listed> = v["files"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|f| {
            let name = f.as_str()?;
            Some(Listed {
                lsn: snapshot_file_lsn(name)?,
                name: name.to_owned(),
                modified: std::fs::metadata(dir.join(name))
                    .and_then(|m| m.modified())
                    .ok(),
            })
        })
        .collect();
    let on_disk: BTreeSet<Lsn> = listed.iter().map(|l| l.lsn).collect();
    let mut found = Vec::new();
    for l in listed.iter().filter(|l| !predicted.contains(&l.lsn)) {
        let when = match l.modified {
            None => "at an unknown time (the file's time is unreadable)".to_owned(),
            Some(t) => format!(
                "{} µs after the capture began and {} µs after the call began",
                micros(captured_at, t),
                micros(called_at, t)
            ),
        };
        found.push(format!(
            "snapshot file {} is not in the engine's set: written {when}",
            l.name
        ));
    }
    if let Some(kept) = kept_from {
        let safe = |l: &Lsn| *l >= redo && *l >= kept;
        for lsn in predicted.iter().filter(|l| safe(l) && !on_disk.contains(l)) {
            found.push(format!(
                "the engine predicted a snapshot file at {lsn} (at or past redo {redo} and \
                 the slots' lowest restart_lsn {kept}), the standby has none"
            ));
        }
    }
    (!found.is_empty()).then(|| {
        format!(
            "snapshot files differ (the call began {} µs after the capture): {}",
            micros(captured_at, called_at),
            found.join("; ")
        )
    })
}
