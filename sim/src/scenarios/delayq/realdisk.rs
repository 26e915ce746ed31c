//! `real-disk-recovers-alike`: what users run is a queue over `FsStorage`, not the simulated
//! disk. In one seed of sixteen, the first restart writes the crashed disk's files into a
//! temporary directory and recovers the queue there too (through `&mut FsStorage`, as the
//! CLI's adapters pass it): `verify` and the recovered queue must match the simulated
//! recovery, and every file must read back, by size and bytes, as the simulated disk holds it.
//! File names that would leave the directory (or name it) are refused.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use pgyard_delayq::{verify, Config, DelayQueue, FsStorage, SimStorage, Storage};
use pgyard_types::{side_stream, uniform_inclusive, Rng};

use super::fail;
use crate::Violation;

/// Draws of their own: the main stream is untouched.
const STREAM: u64 = 0x7265_616c_6473;

/// Directories of concurrent seeds (the sweep runs seeds on several threads) never collide.
static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// Whether this seed also recovers on the real file system.
pub(super) fn chosen(rng: &Rng) -> bool {
    let mut rng = side_stream(rng, STREAM);
    uniform_inclusive(&mut rng, 15) == 0
}

/// `before`: the disk the simulated recovery read; `sim`: the queue it recovered.
pub(super) fn judge(
    before: &SimStorage,
    cfg: &Config,
    sim: &DelayQueue<SimStorage>,
) -> Result<(), Violation> {
    let dir = Scratch(std::env::temp_dir().join(format!(
        "pgyard-sim-delayq-{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed)
    )));
    recover_there(&dir.0, before, cfg, sim)
}

/// The temporary directory, removed however the judge ends (a seed that panics included).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        // Scratch space: a failure to remove it changes no verdict.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn recover_there(
    dir: &Path,
    before: &SimStorage,
    cfg: &Config,
    sim: &DelayQueue<SimStorage>,
) -> Result<(), Violation> {
    let bad = |what: String| fail("real-disk-recovers-alike", what);
    let io = |e: pgyard_delayq::StorageError| bad(format!("the real file system: {e}"));
    let mut fs = FsStorage::create_dir(dir).map_err(io)?;
    // A name that would leave the directory, or name it, is refused before any file is touched.
    for name in ["", ".", "..", "../escaped", "sub/dir"] {
        if fs.create(name).is_ok() || fs.size(name).is_ok() {
            return Err(bad(format!("the real disk took the file name {name:?}")));
        }
    }
    for name in before.list().map_err(io)? {
        let bytes = before.file(&name).unwrap_or_default();
        fs.create(&name).map_err(io)?;
        fs.append(&name, bytes).map_err(io)?;
    }
    let verified = verify(&fs).map_err(|e| bad(format!("verify: {e}")))?;
    if verified != *sim.recovery() {
        return Err(bad(format!(
            "verify on the real disk says {verified:?}; the simulated recovery {:?}",
            sim.recovery()
        )));
    }
    let q = DelayQueue::open(&mut fs, cfg.clone()).map_err(|e| bad(format!("open: {e}")))?;
    let (real, simulated) = (q.inspect(), sim.inspect());
    if real != simulated || q.recovery() != sim.recovery() {
        return Err(bad(format!(
            "recovered on the real disk: {real:?}; on the simulated one: {simulated:?}"
        )));
    }
    drop(q);
    let mut names = fs.list().map_err(io)?;
    names.sort();
    let mut expected = sim.storage().list().map_err(io)?;
    expected.sort();
    if names != expected {
        return Err(bad(format!(
            "the real disk holds {names:?}, the simulated one {expected:?}"
        )));
    }
    let mut buf = Vec::new();
    for name in &names {
        let want = sim.storage().file(name).unwrap_or_default();
        let size = fs.size(name).map_err(io)?;
        buf.clear();
        buf.resize(want.len() + 1, 0);
        let n = fs.read(name, 0, &mut buf).map_err(io)?;
        if size != want.len() as u64 || buf[..n] != *want {
            return Err(bad(format!(
                "{name} reads back {n} bytes (size {size}) on the real disk, not the {} it holds",
                want.len()
            )));
        }
    }
    Ok(())
}
