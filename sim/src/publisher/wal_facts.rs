//! The WAL facts decoding reads, kept beside the publisher model when a scenario asks for
//! them ([`super::Publisher::track_wal`]): its `XLOG_RUNNING_XACTS` records and the records of
//! every transaction that can be running at one (streamed and two-phase ones, with their
//! subtransactions). Plain transactions are written whole within one step, so no such record
//! ever falls inside one and decoding needs nothing of them.
//!
//! These are the inputs of `pgyard_slotsync::decoding` as a standby would read them from its
//! own WAL (`RunningXacts`, `XactRecords`).

use std::collections::BTreeMap;

use pgyard_slotsync::decoding::{RunningXacts, XactRecords};
use pgyard_types::{Lsn, Xid};

/// The running-xacts records and the transactions' records so far.
#[derive(Clone, Debug, Default)]
pub struct WalFacts {
    /// Every `RUNNING_XACTS` record, in LSN order.
    pub running: Vec<RunningXacts>,
    /// The records of each tracked (sub)transaction, by xid.
    pub xacts: BTreeMap<u32, XactRecords>,
}

impl WalFacts {
    /// Whether `xid` commits with catalog changes (`XACT_XINFO_HAS_INVALS`): a fixed quarter
    /// of the transactions, chosen by the xid so no random draw moves the world.
    pub fn has_invals(xid: u32) -> bool {
        xid.wrapping_mul(0x9E37_79B1) >> 30 == 0
    }

    fn entry(&mut self, xid: u32) -> &mut XactRecords {
        self.xacts.entry(xid).or_insert_with(|| XactRecords {
            xid: Xid(xid),
            ..XactRecords::default()
        })
    }

    /// A record of `xid` that is not a data change (a stream's start or stop, say).
    pub(super) fn record(&mut self, xid: u32, lsn: Lsn) {
        self.entry(xid).record_lsns.push(lsn);
    }

    /// A data-change record of `sub` (a subtransaction of `top`, or `top` itself); the first
    /// record of a subtransaction carries its top-level xid.
    pub(super) fn change(&mut self, top: u32, sub: u32, lsn: Lsn) {
        let x = self.entry(sub);
        if sub != top && x.top_xid.is_none() {
            x.top_xid = Some(Xid(top));
            x.top_xid_lsn = Some(lsn);
        }
        x.record_lsns.push(lsn);
        x.change_lsns.push(lsn);
    }

    /// `xid`'s prepare record.
    pub(super) fn prepare(&mut self, xid: u32, lsn: Lsn) {
        self.entry(xid).prepare_lsn = Some(lsn);
    }

    /// `ROLLBACK TO SAVEPOINT`: the subtransaction's own abort record.
    pub(super) fn sub_abort(&mut self, sub: u32, lsn: Lsn) {
        let x = self.entry(sub);
        x.end_lsn = Some(lsn);
        x.aborted = true;
    }

    /// The commit or abort record of top-level `xid` (for a prepared one, `COMMIT PREPARED` or
    /// `ROLLBACK PREPARED`): it lists the subtransactions not rolled back on their own.
    pub(super) fn end(&mut self, xid: u32, lsn: Lsn, aborted: bool) {
        let subxids: Vec<Xid> = self.live_subs(xid).map(Xid).collect();
        let x = self.entry(xid);
        x.end_lsn = Some(lsn);
        x.aborted = aborted;
        x.has_invals = !aborted && Self::has_invals(xid);
        x.subxids = subxids;
    }

    /// A transaction that never wrote a record leaves no trace.
    pub(super) fn forget(&mut self, xid: u32) {
        self.xacts.remove(&xid);
    }

    /// The subtransactions of `top` that have not been rolled back on their own.
    fn live_subs(&self, top: u32) -> impl Iterator<Item = u32> + '_ {
        self.xacts
            .values()
            .filter(move |x| x.top_xid == Some(Xid(top)) && x.end_lsn.is_none())
            .map(|x| x.xid.0)
    }

    /// A `RUNNING_XACTS` record at `start..end` with the top-level transactions `running` and
    /// the next xid `next`; their live subtransactions are listed too.
    pub(super) fn running_xacts(&mut self, start: Lsn, end: Lsn, running: &[u32], next: u32) {
        let mut xids: Vec<u32> = running.to_vec();
        xids.sort_unstable();
        let mut subxids: Vec<u32> = xids.iter().flat_map(|&t| self.live_subs(t)).collect();
        subxids.sort_unstable();
        let oldest = xids.iter().chain(&subxids).copied().min().unwrap_or(next);
        self.running.push(RunningXacts {
            start_lsn: start,
            end_lsn: Some(end),
            oldest_running_xid: Xid(oldest.min(next)),
            next_xid: Xid(next),
            xids: xids.into_iter().map(Xid).collect(),
            subxids: subxids.into_iter().map(Xid).collect(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subtransaction_names_its_parent_and_the_commit_lists_the_live_ones() {
        let mut f = WalFacts::default();
        f.record(10, Lsn(0x100));
        f.change(10, 10, Lsn(0x120));
        f.change(10, 11, Lsn(0x140));
        f.change(10, 12, Lsn(0x160));
        f.change(10, 11, Lsn(0x170));
        f.running_xacts(Lsn(0x180), Lsn(0x1a0), &[10], 13);
        f.sub_abort(12, Lsn(0x1b0));
        f.end(10, Lsn(0x1c0), false);
        let sub = &f.xacts[&11];
        assert_eq!(sub.top_xid, Some(Xid(10)));
        assert_eq!(sub.top_xid_lsn, Some(Lsn(0x140)));
        assert_eq!(sub.change_lsns, vec![Lsn(0x140), Lsn(0x170)]);
        assert_eq!(f.xacts[&12].end_lsn, Some(Lsn(0x1b0)));
        assert!(f.xacts[&12].aborted);
        let top = &f.xacts[&10];
        assert_eq!(top.subxids, vec![Xid(11)]);
        assert_eq!(top.end_lsn, Some(Lsn(0x1c0)));
        let r = &f.running[0];
        assert_eq!(r.xids, vec![Xid(10)]);
        assert_eq!(r.subxids, vec![Xid(11), Xid(12)]);
        assert_eq!((r.oldest_running_xid, r.next_xid), (Xid(10), Xid(13)));
        f.running_xacts(Lsn(0x200), Lsn(0x220), &[], 13);
        assert_eq!(f.running[1].oldest_running_xid, Xid(13));
    }
}
