//! `settings-refused-as-documented`: an operator who mistypes the queue's settings. Each seed
//! takes its own configuration and moves one setting to or just past a documented bound (the
//! segment size between 4 KiB and 4 GiB - 1, low ≤ high watermark ≤ the budget, a delay whose
//! microseconds fit an `i64`); `Config::validate` must accept exactly what the documentation
//! allows, and `DelayQueue::open` must refuse what it does not as a setting.

use std::time::Duration;

use pgyard_delayq::{Config, DelayQueue, Error, SimStorage, Storage};
use pgyard_types::{side_stream, uniform_inclusive, Rng};

use super::fail;
use crate::Violation;

/// Draws of their own: the main stream is untouched.
const STREAM: u64 = 0x7365_7474_696e;

/// What docs/delayq.md and `Config`'s documentation allow.
fn allowed(c: &Config) -> bool {
    (4096..=u64::from(u32::MAX)).contains(&c.segment_bytes_max)
        && c.disk_low_watermark_bytes <= c.disk_high_watermark_bytes
        && c.disk_high_watermark_bytes <= c.disk_bytes_max
        && (c.delay + c.skew_tolerance).as_micros() <= i64::MAX as u128
}

/// `base` with one setting moved to a bound or one past it.
fn variant(base: &Config, rng: &mut Rng) -> Config {
    let mut c = base.clone();
    let past = uniform_inclusive(rng, 1);
    match uniform_inclusive(rng, 5) {
        0 => c.segment_bytes_max = 4096 - past,
        1 => c.segment_bytes_max = u64::from(u32::MAX) + past,
        2 => c.disk_low_watermark_bytes = c.disk_high_watermark_bytes + past,
        3 => c.disk_high_watermark_bytes = c.disk_bytes_max + past,
        4 => {
            c.delay = Duration::from_micros(i64::MAX as u64 - 1);
            c.skew_tolerance = Duration::from_micros(past + 1);
        }
        _ => c.disk_low_watermark_bytes = 0,
    }
    c
}

/// Judges `validate` and `open` on a few variants of the seed's configuration.
pub(super) fn judge(base: &Config, rng: &Rng) -> Result<(), Violation> {
    let mut rng = side_stream(rng, STREAM);
    let variants = std::iter::once(base.clone())
        .chain((0..3).map(|_| variant(base, &mut rng)))
        .collect::<Vec<_>>();
    for c in variants {
        let ok = allowed(&c);
        let got = c.validate();
        if got.is_ok() != ok || got.as_ref().is_err_and(|e| !matches!(e, Error::Config(_))) {
            return Err(fail(
                "settings-refused-as-documented",
                format!("{c:?}: validate gave {got:?}, the documentation allows it: {ok}"),
            ));
        }
        if !ok {
            let disk = SimStorage::new(0);
            match DelayQueue::open(disk, c.clone()) {
                Err(Error::Config(_)) => {}
                Err(e) => {
                    return Err(fail(
                        "settings-refused-as-documented",
                        format!("{c:?}: open refused with {e}, not as a setting"),
                    ))
                }
                Ok(q) => {
                    let files = q.storage().list().map(|l| l.len()).unwrap_or(0);
                    return Err(fail(
                        "settings-refused-as-documented",
                        format!("{c:?}: open accepted it and wrote {files} files"),
                    ));
                }
            }
        }
    }
    Ok(())
}
