//! The simulated disk the simulator's verdicts rest on: a crash keeps what was synced, and
//! with torn writes keeps a prefix of what was not, of a length drawn from its seed.

use std::collections::BTreeSet;

use crate::{SimFaults, SimStorage, Storage};

const SYNCED: &[u8] = b"synced:";
const UNSYNCED: &[u8] = b"0123456789abcdef";

/// A file with synced bytes and unsynced ones after them, crashed: what survived, and the
/// disk's count of torn crashes.
fn crash_once(seed: u64, torn_writes: bool) -> (Vec<u8>, u64) {
    let mut s = SimStorage::new(seed);
    s.set_faults(SimFaults {
        torn_writes,
        ..SimFaults::default()
    });
    s.create("seg").unwrap();
    s.sync_dir().unwrap();
    s.append("seg", SYNCED).unwrap();
    s.sync("seg").unwrap();
    s.append("seg", UNSYNCED).unwrap();
    s.crash();
    let mut buf = vec![0; s.size("seg").unwrap() as usize];
    assert_eq!(s.read("seg", 0, &mut buf).unwrap(), buf.len());
    (buf, s.stats().torn)
}

#[test]
fn a_crash_keeps_the_synced_bytes_and_drops_the_rest() {
    for seed in 0..16 {
        assert_eq!(crash_once(seed, false), (SYNCED.to_vec(), 0));
    }
}

#[test]
fn a_crash_with_torn_writes_keeps_a_prefix_of_the_unsynced_bytes() {
    let whole = [SYNCED, UNSYNCED].concat();
    let mut kept = BTreeSet::new();
    for seed in 0..64 {
        let (survived, torn) = crash_once(seed, true);
        assert!(
            survived.len() >= SYNCED.len(),
            "seed {seed}: synced bytes lost"
        );
        assert_eq!(survived[..], whole[..survived.len()], "seed {seed}");
        assert_eq!(
            torn,
            u64::from(survived.len() > SYNCED.len()),
            "seed {seed}"
        );
        kept.insert(survived.len() - SYNCED.len());
    }
    // Over 64 seeds, none of the tail, some of it, and all of it each happen.
    assert!(kept.contains(&0), "{kept:?}");
    assert!(kept.contains(&UNSYNCED.len()), "{kept:?}");
    assert!(kept.len() > 8, "{kept:?}");
}
