//! Entry points for the cargo-fuzz targets `delayq_recover` and `delayq_stream` and for their
//! corpus replays (feature `fuzzing`, which turns on `sim`). Each must never panic on any bytes: a panic is a bug in the
//! queue (or in an invariant checked here), never in the input.

//!
//! `recover` damages segment files and recovers them; `stream` drives a queue with operations;
//! `seeds` (tests only) builds the corpus seeds that reach records larger than a segment.

use std::time::Duration;

use crate::Config;

mod recover;
#[cfg(test)]
mod seeds;
mod stream;

pub use recover::recover_segments;
pub use stream::stream_events;

/// Reads fuzz input front to back; once it runs dry every read yields zeros, so any prefix of
/// an input is an input too.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    fn rest(&mut self) -> &'a [u8] {
        self.take(self.0.len())
    }

    fn u8(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }

    fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | u16::from(self.u8()) << 8
    }

    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let head = self.take(8);
        b[..head.len()].copy_from_slice(head);
        u64::from_le_bytes(b)
    }

    fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
}

/// Small segments so that a few kilobytes of input roll over, carry forward and purge.
const SEGMENT_BYTES: u64 = 4096;

fn config(delay_secs: u8, budget_segments: u8) -> Config {
    let budget = match budget_segments % 8 {
        0 => Config::default().disk_bytes_max,
        n => u64::from(n) * SEGMENT_BYTES,
    };
    Config {
        delay: Duration::from_secs(u64::from(delay_secs)),
        skew_tolerance: Duration::ZERO,
        segment_bytes_max: SEGMENT_BYTES,
        write_buffer_bytes: 512,
        disk_bytes_max: budget,
        disk_high_watermark_bytes: budget / 4 * 3,
        disk_low_watermark_bytes: budget / 2,
    }
}
