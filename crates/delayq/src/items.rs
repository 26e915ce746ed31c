//! [`ItemMap`]: the queued items by id, in id order.
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
    fn find(&self, id: u64) -> Result<usize, usize> {
        let (Some(first), Some(last)) = (self.items.first(), self.items.last()) else {
            return Err(0);
        };
        if id > last.id {
            return Err(self.items.len());
        }
        if id < first.id {
            return Err(0);
        }
        // No gaps after the position: counted back from the newest item.
        let from_end = (self.items.len() - 1).checked_sub((last.id - id) as usize);
        // No gaps before it: counted from the oldest one.
        let from_start = Some((id - first.id) as usize).filter(|i| *i < self.items.len());
        for guess in [from_end, from_start].into_iter().flatten() {
            if self.items[guess].id == id {
                return Ok(guess);
            }
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

#[cfg(test)]
mod tests {
    use super::ItemMap;
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
}
