//! Fixtures shared by the slot-sync unit tests.
// Each test crate uses a different subset of these.
#![allow(dead_code)]

use pgyard_slotsync::{SlotRow, Standby};
use pgyard_types::{Lsn, Xid};

pub fn lsn(s: &str) -> Lsn {
    s.parse().unwrap()
}

/// A standby in recovery with the prerequisites met, receiving and replaying at 0/5000000.
pub fn base_standby() -> Standby {
    Standby {
        receive_lsn: Some(lsn("0/5000000")),
        replay_lsn: Some(lsn("0/5000000")),
        redo_lsn: Some(lsn("0/1000028")),
        oldest_wal_lsn: Some(lsn("0/1000000")),
        snapshot_xmin: Xid(750),
        primary_slot_name: "s1".into(),
        primary_conninfo: "host=127.0.0.1 dbname=postgres".into(),
        ..Standby::default()
    }
}

/// A failover logical slot on the primary.
pub fn remote(name: &str, restart: &str, confirmed: &str, xmin: u32) -> SlotRow {
    let mut r = SlotRow::logical(name);
    r.plugin = Some("test_decoding".into());
    r.datoid = Some(5);
    r.database = Some("postgres".into());
    r.failover = true;
    r.restart_lsn = Some(lsn(restart));
    r.confirmed_flush_lsn = Some(lsn(confirmed));
    r.catalog_xmin = Some(Xid(xmin));
    r.wal_status = Some("reserved".into());
    r
}

/// The same slot as a synced copy on the standby.
pub fn synced(name: &str, restart: &str, confirmed: &str, xmin: u32) -> SlotRow {
    let mut r = remote(name, restart, confirmed, xmin);
    r.synced = true;
    r
}

/// The standby's physical slot on the primary.
pub fn physical_named(name: &str) -> SlotRow {
    let mut r = SlotRow::physical(name);
    r.restart_lsn = Some(lsn("0/5000000"));
    r
}
