//! Rows the publisher has committed, and the row locks open transactions hold on them: what
//! lets a change update or delete a row another transaction committed without ever writing a
//! history the server would not (`ops.rs` draws the changes).
//!
//! A (sub)transaction that updates or deletes a committed row claims it until it ends, as the
//! row lock does; nobody else may claim it meanwhile. A TRUNCATE waits for no one in the model,
//! so it is drawn only where no other transaction holds a claim on the table, and while it is
//! uncommitted nobody claims rows there (on the server either would wait for the other's lock).
//! Claimed rows are what they were when claimed until their claimant commits, so an update's
//! old row is the row the subscriber holds when it applies the update in commit order.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::ops::Values;

/// A (transaction, subtransaction) pair: who inserted, claimed or truncated.
pub(super) type Group = (u32, u32);

/// A committed row.
#[derive(Debug)]
struct Row {
    version: u32,
    values: Values,
    claim: Option<Group>,
    /// The transaction that committed this version of it.
    writer: u32,
}

/// How many recently committed rows are candidates for a claim.
const RECENT: usize = 64;

/// The committed rows, the claims on them and the uncommitted TRUNCATEs.
#[derive(Debug, Default)]
pub(super) struct Public {
    rows: BTreeMap<(u32, Vec<u8>), Row>,
    /// Rows committed lately, by table and key: where claims are drawn from (some may be gone).
    recent: VecDeque<(u32, Vec<u8>)>,
    /// Rows each group claimed, by table and key as claimed.
    claims: BTreeMap<Group, Vec<(u32, Vec<u8>)>>,
    /// Tables each group truncated.
    truncs: BTreeMap<Group, Vec<u32>>,
    /// Transactions some of whose rows were ever claimed.
    claimed_writers: BTreeSet<u32>,
}

impl Public {
    /// Whether anyone's uncommitted TRUNCATE holds table `rel`.
    fn truncating(&self, rel: u32) -> bool {
        self.truncs.values().any(|t| t.contains(&rel))
    }

    /// Whether group `g` may truncate table `rel`: no other transaction claims a row there.
    pub(super) fn may_truncate(&self, g: Group, rel: u32) -> bool {
        self.claims
            .iter()
            .all(|(h, rows)| h.0 == g.0 || rows.iter().all(|(r, _)| *r != rel))
    }

    /// `g` truncates `rels`.
    pub(super) fn truncated(&mut self, g: Group, rels: &[u32]) {
        self.truncs.entry(g).or_default().extend_from_slice(rels);
    }

    /// Claims for `g` the `pick`-th recent row (counting from the newest) if it is there,
    /// unclaimed, outside any uncommitted TRUNCATE and of the version `version_of` its table
    /// has now: its table, version and values.
    pub(super) fn claim(
        &mut self,
        g: Group,
        pick: usize,
        version_of: impl Fn(u32) -> u32,
    ) -> Option<(u32, u32, Values)> {
        let (rel, key) = self.recent.iter().rev().nth(pick)?.clone();
        if self.truncating(rel) {
            return None;
        }
        let row = self.rows.get_mut(&(rel, key.clone()))?;
        if row.claim.is_some() || row.version != version_of(rel) {
            return None;
        }
        row.claim = Some(g);
        self.claimed_writers.insert(row.writer);
        let out = (rel, row.version, row.values.clone());
        self.claims.entry(g).or_default().push((rel, key));
        Some(out)
    }

    /// How many recent rows there are to pick from.
    pub(super) fn recent_len(&self) -> usize {
        self.recent.len()
    }

    /// Transaction `top` committed with `rows` (table, version, values) as its groups left
    /// them: what it claimed is replaced, what it truncated is emptied, then its rows count.
    pub(super) fn commit(&mut self, top: u32, rows: Vec<(u32, u32, Values)>) {
        for (_, claimed) in take_groups(&mut self.claims, top) {
            for key in claimed {
                self.rows.remove(&key);
            }
        }
        for (_, rels) in take_groups(&mut self.truncs, top) {
            self.rows.retain(|(r, _), _| !rels.contains(r));
        }
        for (rel, version, values) in rows {
            let key = values.first().cloned().flatten().unwrap_or_default();
            self.recent.push_back((rel, key.clone()));
            if self.recent.len() > RECENT {
                self.recent.pop_front();
            }
            let row = Row {
                version,
                values,
                claim: None,
                writer: top,
            };
            self.rows.insert((rel, key), row);
        }
    }

    /// The operator skips transaction `xid` on the subscriber, where its rows will never be:
    /// only if nobody ever claimed one (a change built on it would find the subscriber
    /// without it); its rows are then nobody's to claim. Whether it may be skipped.
    pub(super) fn forget(&mut self, xid: u32) -> bool {
        if self.claimed_writers.contains(&xid) {
            return false;
        }
        self.rows.retain(|_, r| r.writer != xid);
        true
    }

    /// Transaction `top` (or only its subtransaction `sub`) rolled back: its claims are
    /// released and its TRUNCATEs forgotten.
    pub(super) fn abort(&mut self, top: u32, sub: Option<u32>) {
        let groups = match sub {
            Some(s) => {
                let mut one = BTreeMap::new();
                if let Some(c) = self.claims.remove(&(top, s)) {
                    one.insert((top, s), c);
                }
                self.truncs.remove(&(top, s));
                one
            }
            None => {
                take_groups(&mut self.truncs, top);
                take_groups(&mut self.claims, top)
            }
        };
        for key in groups.into_values().flatten() {
            if let Some(row) = self.rows.get_mut(&key) {
                row.claim = None;
            }
        }
    }
}

/// Removes and returns every entry of transaction `top`.
pub(super) fn take_groups<V>(map: &mut BTreeMap<Group, V>, top: u32) -> BTreeMap<Group, V> {
    // A transaction has none or a few entries: taken out one by one, where splitting the
    // tree twice and joining it again built new nodes at every commit.
    let mut taken = BTreeMap::new();
    loop {
        let next = map.range((top, 0)..=(top, u32::MAX)).next();
        let Some(key) = next.map(|(k, _)| *k) else {
            return taken;
        };
        if let Some(v) = map.remove(&key) {
            taken.insert(key, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(k: &str) -> Values {
        vec![Some(k.as_bytes().to_vec()), Some(b"1".to_vec())]
    }

    #[test]
    fn a_claim_holds_until_its_transaction_ends() {
        let mut p = Public::default();
        p.commit(1, vec![(0, 1, row("a"))]);
        let v = |_| 1;
        assert_eq!(p.claim((2, 2), 0, v).map(|c| c.0), Some(0));
        assert_eq!(p.claim((3, 3), 0, v), None, "claimed by 2");
        assert!(!p.may_truncate((3, 3), 0), "2 holds a row of table 0");
        assert!(p.may_truncate((2, 5), 0), "its own claim does not stop 2");
        p.abort(2, None);
        assert!(p.claim((3, 3), 0, v).is_some(), "released");
        p.commit(3, vec![(0, 1, row("b"))]);
        assert_eq!(p.rows.len(), 1, "3 replaced the row it claimed");
        p.truncated((4, 4), &[0]);
        assert_eq!(
            p.claim((5, 5), 0, v),
            None,
            "an uncommitted TRUNCATE holds the table"
        );
        assert_eq!(p.claim((5, 5), 0, |_| 2), None);
        p.commit(4, Vec::new());
        assert!(p.rows.is_empty(), "the TRUNCATE emptied table 0");
        p.commit(6, vec![(1, 1, row("c"))]);
        p.commit(7, vec![(1, 1, row("d"))]);
        assert!(p.claim((8, 8), 0, v).is_some(), "7's row");
        assert!(!p.forget(7), "a row of 7 was claimed");
        assert!(p.forget(6));
        assert_eq!(p.claim((8, 8), 1, v), None, "6's row is gone");
    }

    #[test]
    fn take_groups_takes_exactly_one_transactions_entries() {
        let mut m: BTreeMap<Group, u8> = BTreeMap::new();
        for g in [(1, 1), (2, 0), (2, 7), (2, u32::MAX), (3, 0)] {
            m.insert(g, 0);
        }
        let taken: Vec<_> = take_groups(&mut m, 2).into_keys().collect();
        assert_eq!(taken, vec![(2, 0), (2, 7), (2, u32::MAX)]);
        assert_eq!(m.into_keys().collect::<Vec<_>>(), vec![(1, 1), (3, 0)]);
    }
}
