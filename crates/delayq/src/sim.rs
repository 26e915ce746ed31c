//! [`SimStorage`]: an in-memory directory with deterministic, seeded faults, shared by the unit
//! tests, the simulator and the fuzz targets (feature `sim`).

use crate::storage::{Storage, StorageError, StorageErrorKind};
use pgyard_types::{rng_from_seed, uniform_inclusive, Rng, RngCore};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Which faults the simulated disk injects, and how often.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimFaults {
    /// Chance per million that a file or directory fsync fails (the file is then poisoned and
    /// its unsynced data is dropped, as Linux does).
    pub fsync_fail_per_million: u32,
    /// Chance per million that an append fails with ENOSPC after writing a random prefix.
    pub enospc_per_million: u32,
    /// Total bytes the disk holds; appends beyond it fail with ENOSPC.
    pub capacity_bytes: Option<u64>,
    /// On [`SimStorage::crash`], keep a random prefix of each file's unsynced bytes (a torn
    /// write) instead of dropping all of them.
    pub torn_writes: bool,
}

/// Counters of what the simulated disk did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Successful file fsyncs.
    pub syncs: u64,
    /// Injected fsync failures.
    pub fsync_failures: u64,
    /// Injected or capacity ENOSPC failures.
    pub enospc: u64,
    /// Crashes.
    pub crashes: u64,
    /// Crashes that left a torn (partial) unsynced tail in some file.
    pub torn: u64,
}

/// File contents, shared between clones of the disk until one of them writes: the simulator
/// keeps a copy of the whole disk around every recovery, and most files never change again.
type Bytes = Arc<Vec<u8>>;

/// The least room a file's contents grow by (about a small segment).
const FILE_ROOM: usize = 4096;

#[derive(Clone, Debug, Default)]
struct SimFile {
    data: Bytes,
    durable: Durable,
    poisoned: bool,
}

/// What of a file survives a power loss. Files almost only grow between syncs, so the durable
/// contents are nearly always a prefix of the current ones and need no copy of their own.
#[derive(Clone, Debug)]
enum Durable {
    /// The first this many bytes of the current contents (never more than there are).
    Prefix(usize),
    /// Contents the current ones no longer start with (the file was cut below them).
    Own(Bytes),
}

impl Default for Durable {
    fn default() -> Self {
        Durable::Prefix(0)
    }
}

impl SimFile {
    /// A file whose current contents are all durable.
    fn settled(data: Bytes) -> SimFile {
        let len = data.len();
        SimFile {
            data,
            durable: Durable::Prefix(len),
            poisoned: false,
        }
    }

    fn durable_bytes(&self) -> &[u8] {
        match &self.durable {
            Durable::Prefix(n) => &self.data[..*n],
            Durable::Own(d) => d,
        }
    }

    /// The durable contents as a value of their own (shared when they are all of the file).
    fn durable_owned(&self) -> Bytes {
        match &self.durable {
            Durable::Prefix(n) if *n == self.data.len() => Arc::clone(&self.data),
            Durable::Prefix(n) => Arc::new(self.data[..*n].to_vec()),
            Durable::Own(d) => Arc::clone(d),
        }
    }

    /// The current contents become what survived: the durable bytes and the first `torn` of
    /// the ones after them (which must follow them).
    fn keep_durable(&mut self, torn: usize) {
        match &self.durable {
            Durable::Prefix(n) => {
                let len = n + torn;
                if len < self.data.len() {
                    Arc::make_mut(&mut self.data).truncate(len);
                }
            }
            Durable::Own(d) => {
                let mut keep = Arc::clone(d);
                if torn > 0 {
                    let tail = &self.data[d.len()..d.len() + torn];
                    Arc::make_mut(&mut keep).extend_from_slice(tail);
                }
                self.data = keep;
            }
        }
        self.durable = Durable::Prefix(self.data.len());
    }
}

/// A deterministic in-memory directory with fault injection.
#[derive(Clone, Debug)]
pub struct SimStorage {
    files: BTreeMap<String, SimFile>,
    /// Durable contents of durable files removed since the last directory sync.
    removed: BTreeMap<String, Bytes>,
    durable_names: BTreeSet<String>,
    rng: Rng,
    faults: SimFaults,
    stats: SimStats,
    /// Calls that changed the files or their durability (see [`SimStorage::changes`]).
    changes: u64,
}

impl SimStorage {
    /// An empty disk without faults; `seed` drives every later fault decision.
    pub fn new(seed: u64) -> Self {
        Self::with_rng(rng_from_seed(seed), SimFaults::default())
    }

    /// An empty disk with the given random source and faults.
    pub fn with_rng(rng: Rng, faults: SimFaults) -> Self {
        SimStorage {
            files: BTreeMap::new(),
            removed: BTreeMap::new(),
            durable_names: BTreeSet::new(),
            rng,
            faults,
            stats: SimStats::default(),
            changes: 0,
        }
    }

    /// Changes the fault mix (e.g. none for a liveness phase).
    pub fn set_faults(&mut self, faults: SimFaults) {
        self.faults = faults;
    }

    /// What happened so far.
    pub fn stats(&self) -> SimStats {
        self.stats
    }

    /// How many calls so far may have changed the files, their contents or what of them is
    /// durable (failed ones included): equal counts before and after some code mean it
    /// only read the disk (the simulator then knows a second recovery would read the same).
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The names of the files there are, in name order (what `list` returns, borrowed).
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.files.keys().map(String::as_str)
    }

    /// Whether file `name` holds the very bytes it holds in `other`, a copy of this disk:
    /// copies share each file's contents until one of them changes it, so shared contents
    /// are unchanged ones (while `other` lives, a change here cannot reuse them in place).
    pub fn shares_file(&self, other: &SimStorage, name: &str) -> bool {
        match (self.files.get(name), other.files.get(name)) {
            (Some(a), Some(b)) => Arc::ptr_eq(&a.data, &b.data),
            _ => false,
        }
    }

    /// Current contents of a file (including unsynced bytes).
    pub fn file(&self, name: &str) -> Option<&[u8]> {
        self.files.get(name).map(|f| f.data.as_slice())
    }

    /// Flips bits of one byte of a file, in both its current and durable contents.
    pub fn corrupt(&mut self, name: &str, offset: usize, xor: u8) {
        self.changes += 1;
        if let Some(f) = self.files.get_mut(name) {
            // A durable prefix is the same bytes: flipping them once flips both.
            if let Some(b) = Arc::make_mut(&mut f.data).get_mut(offset) {
                *b ^= xor;
            }
            if let Durable::Own(d) = &mut f.durable {
                if let Some(b) = Arc::make_mut(d).get_mut(offset) {
                    *b ^= xor;
                }
            }
        }
    }

    /// Power loss: unsynced data is lost (or torn), undurable creations and removals are
    /// undone, poisoned files become readable again with what reached the disk.
    pub fn crash(&mut self) {
        self.changes += 1;
        self.stats.crashes += 1;
        let names: Vec<String> = self.files.keys().cloned().collect();
        for name in names {
            if !self.durable_names.contains(&name) {
                self.files.remove(&name);
            }
        }
        for (name, data) in std::mem::take(&mut self.removed) {
            if self.durable_names.contains(&name) && !self.files.contains_key(&name) {
                self.files.insert(name, SimFile::settled(data));
            }
        }
        let mut torn = false;
        for f in self.files.values_mut() {
            let durable = f.durable_bytes();
            let extra = f.data.len().saturating_sub(durable.len());
            let mut k = 0;
            if self.faults.torn_writes && extra > 0 && f.data.starts_with(durable) {
                k = uniform_inclusive(&mut self.rng, extra as u64) as usize;
                torn |= k > 0;
            }
            f.keep_durable(k);
            f.poisoned = false;
        }
        if torn {
            self.stats.torn += 1;
        }
    }

    fn roll(&mut self, per_million: u32) -> bool {
        per_million > 0 && (self.rng.next_u32() % 1_000_000) < per_million
    }

    /// Up to `len` bytes of file `name` at `offset` (fewer only at its end).
    fn bytes_at(&self, name: &str, offset: u64, len: usize) -> Result<&[u8], StorageError> {
        let f = self
            .files
            .get(name)
            .ok_or_else(|| e("read", name, StorageErrorKind::NotFound))?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(f.data.len());
        let n = len.min(f.data.len() - start);
        Ok(&f.data[start..start + n])
    }

    fn file_mut(&mut self, op: &'static str, name: &str) -> Result<&mut SimFile, StorageError> {
        match self.files.get_mut(name) {
            None => Err(e(op, name, StorageErrorKind::NotFound)),
            Some(f) if f.poisoned => Err(e(op, name, StorageErrorKind::Poisoned)),
            Some(f) => Ok(f),
        }
    }
}

impl Storage for SimStorage {
    fn list(&self) -> Result<Vec<String>, StorageError> {
        Ok(self.files.keys().cloned().collect())
    }

    fn create(&mut self, name: &str) -> Result<(), StorageError> {
        self.changes += 1;
        if self.files.contains_key(name) {
            return Err(e("create", name, StorageErrorKind::AlreadyExists));
        }
        self.files.insert(name.to_owned(), SimFile::default());
        Ok(())
    }

    fn append(&mut self, name: &str, data: &[u8]) -> Result<(), StorageError> {
        self.changes += 1;
        // Only a capacity needs the disk's total.
        let used: u64 = match self.faults.capacity_bytes {
            Some(_) => self.files.values().map(|f| f.data.len() as u64).sum(),
            None => 0,
        };
        let over = self
            .faults
            .capacity_bytes
            .is_some_and(|cap| used + data.len() as u64 > cap);
        let fail = over || self.roll(self.faults.enospc_per_million);
        let prefix = if fail && !data.is_empty() {
            let room = self
                .faults
                .capacity_bytes
                .map_or(data.len() as u64, |cap| cap.saturating_sub(used));
            let max = room.min(data.len() as u64 - 1);
            uniform_inclusive(&mut self.rng, max) as usize
        } else {
            data.len()
        };
        let f = self.file_mut("append", name)?;
        if Arc::get_mut(&mut f.data).is_none() {
            // Shared with a copy of the disk: this file's own copy gets room to grow, where
            // `make_mut`'s exact-size clone would be copied once more right away.
            let mut own = Vec::with_capacity((f.data.len() + prefix).next_power_of_two());
            own.extend_from_slice(&f.data);
            f.data = Arc::new(own);
        }
        let bytes = Arc::make_mut(&mut f.data);
        if bytes.capacity() - bytes.len() < prefix {
            // Segments grow by a record at a time: doubling from a few bytes copied each one
            // about ten times over as it filled.
            bytes.reserve(prefix.max(FILE_ROOM));
        }
        bytes.extend_from_slice(&data[..prefix]);
        if fail {
            self.stats.enospc += 1;
            return Err(e("append", name, StorageErrorKind::NoSpace));
        }
        Ok(())
    }

    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        let bytes = self.bytes_at(name, offset, buf.len())?;
        buf[..bytes.len()].copy_from_slice(bytes);
        Ok(bytes.len())
    }

    fn read_into(
        &self,
        name: &str,
        offset: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, StorageError> {
        let bytes = self.bytes_at(name, offset, len)?;
        out.clear();
        out.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn contents(&self, name: &str) -> Option<&[u8]> {
        self.files.get(name).map(|f| f.data.as_slice())
    }

    fn size(&self, name: &str) -> Result<u64, StorageError> {
        self.files
            .get(name)
            .map(|f| f.data.len() as u64)
            .ok_or_else(|| e("stat", name, StorageErrorKind::NotFound))
    }

    fn sync(&mut self, name: &str) -> Result<(), StorageError> {
        self.changes += 1;
        let fail = self.roll(self.faults.fsync_fail_per_million);
        let f = self.file_mut("sync", name)?;
        if fail {
            // Linux drops the dirty pages and reports the error once; model the worst case.
            f.poisoned = true;
            f.keep_durable(0);
            self.stats.fsync_failures += 1;
            return Err(e(
                "sync",
                name,
                StorageErrorKind::Other("simulated fsync failure (EIO)".into()),
            ));
        }
        f.durable = Durable::Prefix(f.data.len());
        self.stats.syncs += 1;
        Ok(())
    }

    fn sync_dir(&mut self) -> Result<(), StorageError> {
        self.changes += 1;
        if self.roll(self.faults.fsync_fail_per_million) {
            self.stats.fsync_failures += 1;
            return Err(e(
                "sync directory",
                "",
                StorageErrorKind::Other("simulated fsync failure (EIO)".into()),
            ));
        }
        self.durable_names = self.files.keys().cloned().collect();
        self.removed.clear();
        Ok(())
    }

    fn remove(&mut self, name: &str) -> Result<(), StorageError> {
        self.changes += 1;
        let f = self
            .files
            .remove(name)
            .ok_or_else(|| e("remove", name, StorageErrorKind::NotFound))?;
        if self.durable_names.contains(name) {
            self.removed
                .entry(name.to_owned())
                .or_insert_with(|| f.durable_owned());
        }
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), StorageError> {
        self.changes += 1;
        let f = self
            .files
            .remove(from)
            .ok_or_else(|| e("rename", from, StorageErrorKind::NotFound))?;
        if self.durable_names.contains(from) {
            self.removed
                .entry(from.to_owned())
                .or_insert_with(|| f.durable_owned());
        }
        if let Some(old) = self.files.remove(to) {
            if self.durable_names.contains(to) {
                self.removed
                    .entry(to.to_owned())
                    .or_insert_with(|| old.durable_owned());
            }
        }
        self.files.insert(to.to_owned(), f);
        Ok(())
    }

    fn truncate(&mut self, name: &str, len: u64) -> Result<(), StorageError> {
        self.changes += 1;
        let f = self.file_mut("truncate", name)?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len < f.data.len() {
            if matches!(f.durable, Durable::Prefix(n) if n > len) {
                // The durable bytes outlive the cut: they get a copy of their own.
                f.durable = Durable::Own(f.durable_owned());
            }
            Arc::make_mut(&mut f.data).truncate(len);
        } else {
            Arc::make_mut(&mut f.data).resize(len, 0);
        }
        Ok(())
    }
}

fn e(op: &'static str, name: &str, kind: StorageErrorKind) -> StorageError {
    StorageError {
        op,
        file: name.to_owned(),
        kind,
    }
}

#[cfg(test)]
mod tests {
    use super::SimStorage;
    use crate::storage::Storage;

    /// The simulator skips a second recovery when `changes` did not move: reads must not
    /// count, and every call that can change a file or its durability must.
    #[test]
    fn changes_count_writes_not_reads() {
        let mut s = SimStorage::new(1);
        let mut at = s.changes();
        let mut wrote = |s: &SimStorage, what: &str| {
            assert!(s.changes() > at, "{what} did not count");
            at = s.changes();
        };
        s.create("a").unwrap();
        wrote(&s, "create");
        s.append("a", b"hello").unwrap();
        wrote(&s, "append");
        s.sync("a").unwrap();
        wrote(&s, "sync");
        s.sync_dir().unwrap();
        wrote(&s, "sync_dir");
        s.truncate("a", 2).unwrap();
        wrote(&s, "truncate");
        s.rename("a", "b").unwrap();
        wrote(&s, "rename");
        s.remove("b").unwrap();
        wrote(&s, "remove");
        // The rename and the removal were never made durable: `a` comes back.
        s.crash();
        wrote(&s, "crash");
        s.corrupt("a", 0, 1);
        wrote(&s, "corrupt");

        s.create("c").unwrap();
        s.append("c", b"data").unwrap();
        let before = s.changes();
        let mut buf = [0u8; 4];
        s.read("c", 0, &mut buf).unwrap();
        s.size("c").unwrap();
        s.list().unwrap();
        let _ = s.file("c");
        let _ = s.clone();
        assert_eq!(s.changes(), before);
    }
}
