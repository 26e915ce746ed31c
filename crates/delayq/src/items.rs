//! [`ItemMap`]: the queued items by id, in id order; [`SegCounts`]: how many items begin in
//! each segment; [`SegBytes`]: how many bytes of each segment undecided items hold.
//!
//! Every record applied to the index looks its item up several times, during recovery as on
//! the write path, so the lookup is the hot spot of both. Ids are handed out in increasing
//! order and items leave mostly from the old end, so a vector sorted by id finds almost every
//! item at the position its id predicts (counted from the old or from the new end) and falls
//! back to a binary search otherwise. Unlike a table indexed by id it holds nothing for the
//! ids of forgotten items, however far apart the live ones are.

use crate::model::Item;

/// Items sorted by id.
#[derive(Clone, Debug, Default)]
pub(crate) struct ItemMap {
    items: Vec<Item>,
}

impl ItemMap {
    /// Where `id` is, or where it would be inserted.
    #[inline]
    fn find(&self, id: u64) -> Result<usize, usize> {
        let n = self.items.len();
        let Some(last) = self.items.last() else {
            return Err(0);
        };
        if id >= last.id {
            return if id == last.id { Ok(n - 1) } else { Err(n) };
        }
        // No gaps after the position: counted back from the newest item.
        let back = last.id - id;
        if back < n as u64 && self.items[n - 1 - back as usize].id == id {
            return Ok(n - 1 - back as usize);
        }
        // No gaps before it: counted from the oldest one.
        let first = self.items[0].id;
        if id >= first && id - first < n as u64 && self.items[(id - first) as usize].id == id {
            return Ok((id - first) as usize);
        }
        self.items.binary_search_by_key(&id, |it| it.id)
    }

    /// The item with this id.
    pub fn get(&self, id: &u64) -> Option<&Item> {
        self.find(*id).ok().map(|i| &self.items[i])
    }

    /// The item with this id, to change it (its id must stay).
    pub fn get_mut(&mut self, id: &u64) -> Option<&mut Item> {
        self.find(*id).ok().map(|i| &mut self.items[i])
    }

    /// Whether an item has this id.
    pub fn contains_key(&self, id: &u64) -> bool {
        self.find(*id).is_ok()
    }

    /// Adds `item` under `id` (its own id), replacing one with the same id.
    pub fn insert(&mut self, id: u64, item: Item) {
        debug_assert_eq!(id, item.id);
        if self.items.capacity() == 0 {
            // Recovery rebuilds the map from nothing: skip the first few doublings, each a
            // copy of every item so far.
            self.items.reserve(16);
        }
        match self.find(id) {
            Ok(i) => self.items[i] = item,
            Err(i) => self.items.insert(i, item),
        }
    }

    /// The items in id order.
    pub fn values(&self) -> std::slice::Iter<'_, Item> {
        self.items.iter()
    }

    /// Keeps the items for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&u64, &mut Item) -> bool) {
        self.items.retain_mut(|it| {
            let id = it.id;
            keep(&id, it)
        });
    }

    /// How many items there are.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.items.len()
    }
}

impl std::ops::Index<&u64> for ItemMap {
    type Output = Item;

    fn index(&self, id: &u64) -> &Item {
        match self.get(id) {
            Some(it) => it,
            None => panic!("no queued item {id}"),
        }
    }
}

/// Item counts by segment, for the oldest segment some kind of item still needs. Items begin
/// in a handful of segments and mostly in the newest, so a sorted vector does this with no
/// tree nodes to allocate (the index is rebuilt on every recovery).
#[derive(Clone, Debug, Default)]
pub(crate) struct SegCounts {
    counts: Vec<(u64, u32)>,
}

impl SegCounts {
    /// One more item in `seg`.
    pub fn add(&mut self, seg: u64) {
        if let Some(last) = self.counts.last_mut().filter(|(s, _)| *s == seg) {
            last.1 += 1;
            return;
        }
        match self.counts.iter().rposition(|(s, _)| *s <= seg) {
            Some(i) if self.counts[i].0 == seg => self.counts[i].1 += 1,
            Some(i) => self.counts.insert(i + 1, (seg, 1)),
            None => self.counts.insert(0, (seg, 1)),
        }
    }

    /// One item fewer in `seg` (which must have one).
    pub fn remove(&mut self, seg: u64) {
        if let Some(i) = self.counts.iter().rposition(|(s, _)| *s == seg) {
            self.counts[i].1 -= 1;
            if self.counts[i].1 == 0 {
                self.counts.remove(i);
            }
        }
    }

    /// The oldest segment with an item.
    pub fn first(&self) -> Option<u64> {
        self.counts.first().map(|(s, _)| *s)
    }
}

/// Bytes by segment, oldest segment first: what undecided items (in progress or prepared) hold
/// of each segment, for the budget, which does not count them (only reading on to their
/// decision frees them). Kept per item and for the whole queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SegBytes {
    bytes: Vec<(u64, u64)>,
}

impl SegBytes {
    /// `n` more bytes in `seg` (records arrive mostly in the newest segment).
    pub fn add(&mut self, seg: u64, n: u64) {
        // The newest segment first, without the search: every record of the index passes here.
        if let Some(last) = self.bytes.last_mut().filter(|(s, _)| *s == seg) {
            last.1 += n;
            return;
        }
        match self.bytes.iter().rposition(|(s, _)| *s <= seg) {
            Some(i) if self.bytes[i].0 == seg => self.bytes[i].1 += n,
            Some(i) => self.bytes.insert(i + 1, (seg, n)),
            None => self.bytes.insert(0, (seg, n)),
        }
    }

    /// `n` bytes fewer in `seg` (which must have them).
    pub fn sub(&mut self, seg: u64, n: u64) {
        if let Some(i) = self.bytes.iter().rposition(|(s, _)| *s == seg) {
            self.bytes[i].1 = self.bytes[i].1.saturating_sub(n);
            if self.bytes[i].1 == 0 {
                self.bytes.remove(i);
            }
        }
    }

    /// The bytes in `seg`.
    pub fn get(&self, seg: u64) -> u64 {
        match self.bytes.binary_search_by_key(&seg, |(s, _)| *s) {
            Ok(i) => self.bytes[i].1,
            Err(_) => 0,
        }
    }

    /// Adds all of `other`.
    pub fn add_all(&mut self, other: &SegBytes) {
        for &(seg, n) in &other.bytes {
            self.add(seg, n);
        }
    }

    /// Takes all of `other` away.
    pub fn sub_all(&mut self, other: &SegBytes) {
        for &(seg, n) in &other.bytes {
            self.sub(seg, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ItemMap, SegBytes, SegCounts};
    use crate::format::Flavor;
    use crate::model::{Item, Loc};
    use pgyard_types::Xid;
    use std::collections::BTreeMap;

    fn item(id: u64) -> Item {
        let loc = Loc {
            seg: 1,
            off: id,
            len: 1,
        };
        Item::begun(id, Xid(id as u32), Flavor::Plain, loc)
    }

    /// Inserts, lookups and removals agree with a `BTreeMap` whatever the gaps between ids.
    #[test]
    fn behaves_like_an_ordered_map() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut map = ItemMap::default();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut id = 10;
        for round in 0..4000 {
            match next() % 10 {
                0..=5 => {
                    id += 1 + next() % 3;
                    map.insert(id, item(id));
                    model.insert(id, id);
                }
                6 => {
                    // An old id coming back (a carried-forward item whose originals are gone).
                    let old = next() % (id + 1);
                    map.insert(old, item(old));
                    model.insert(old, old);
                }
                7 => {
                    let cut = next() % (id + 1);
                    let odd = next() % 2;
                    map.retain(|k, _| *k >= cut || *k % 2 == odd);
                    model.retain(|k, _| *k >= cut || *k % 2 == odd);
                }
                _ => {
                    let probe = next() % (id + 2);
                    assert_eq!(map.contains_key(&probe), model.contains_key(&probe));
                    assert_eq!(map.get(&probe).map(|it| it.id), model.get(&probe).copied());
                }
            }
            assert_eq!(map.len(), model.len(), "round {round}");
            let ids: Vec<u64> = map.values().map(|it| it.id).collect();
            let want: Vec<u64> = model.keys().copied().collect();
            assert_eq!(ids, want, "round {round}");
        }
    }

    #[test]
    fn seg_bytes_add_and_take_away_by_segment() {
        let mut b = SegBytes::default();
        for (seg, n) in [(5, 10), (3, 7), (5, 1), (9, 4)] {
            b.add(seg, n);
        }
        assert_eq!((b.get(3), b.get(5), b.get(9), b.get(4)), (7, 11, 4, 0));
        let mut item = SegBytes::default();
        item.add(5, 11);
        item.add(3, 2);
        b.sub_all(&item);
        assert_eq!((b.get(3), b.get(5), b.get(9)), (5, 0, 4));
        assert_eq!(b.bytes, [(3, 5), (9, 4)]);
        b.add_all(&item);
        assert_eq!((b.get(3), b.get(5)), (7, 11));
    }

    #[test]
    fn seg_counts_track_the_oldest_segment() {
        let mut c = SegCounts::default();
        assert_eq!(c.first(), None);
        for seg in [5, 3, 5, 9, 3] {
            c.add(seg);
        }
        assert_eq!(c.first(), Some(3));
        c.remove(3);
        assert_eq!(c.first(), Some(3));
        c.remove(3);
        assert_eq!(c.first(), Some(5));
        c.remove(7);
        c.remove(5);
        c.remove(5);
        assert_eq!(c.first(), Some(9));
        c.remove(9);
        assert_eq!(c.first(), None);
    }
}
