//! The workload mix of the publisher model.

use pgyard_types::{uniform_inclusive, Rng};

/// How the workload is mixed (swarm-drawn per seed by the scenario).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Weight of plain transactions.
    pub plain: u64,
    /// Weight of streamed-transaction steps (start, more chunks, savepoint abort, finish).
    pub streamed: u64,
    /// Weight of two-phase steps (prepare a transaction, or decide one).
    pub two_phase: u64,
    /// Weight of non-transactional logical messages.
    pub messages: u64,
    /// Most changes per transaction or chunk.
    pub changes_max: u64,
    /// Percent of streamed and two-phase transactions that end aborted or rolled back.
    pub abort_percent: u64,
    /// Percent of stream steps that roll back the innermost savepoint.
    pub sub_abort_percent: u64,
    /// The publisher's clock is off the caller's wall clock by up to this much either way,
    /// drawn afresh per commit (so commit timestamps go backwards now and then).
    pub skew_micros: i64,
    /// Percent of two-phase transactions left prepared until
    /// [`Publisher::finish_all`](super::Publisher::finish_all) (long-lived prepared
    /// transactions). Not drawn: 0 unless a scenario sets it.
    pub held_percent: u64,
    /// Clock steps (an NTP correction, an operator setting the date): the percent chance per
    /// commit that the publisher's clock jumps by up to [`Workload::clock_step_micros`] either
    /// way and stays there. Not drawn: 0 unless a scenario sets it.
    pub clock_step_percent: u64,
    /// The largest clock step; the clock never strays further than four steps from the wall.
    pub clock_step_micros: i64,
}

impl Workload {
    /// Draws a mix from `rng`.
    pub fn draw(rng: &mut Rng) -> Workload {
        Workload {
            plain: 1 + uniform_inclusive(rng, 9),
            streamed: uniform_inclusive(rng, 6),
            two_phase: uniform_inclusive(rng, 4),
            messages: uniform_inclusive(rng, 3),
            changes_max: 1 + uniform_inclusive(rng, 5),
            abort_percent: uniform_inclusive(rng, 40),
            sub_abort_percent: uniform_inclusive(rng, 40),
            skew_micros: uniform_inclusive(rng, 2_000_000) as i64,
            held_percent: 0,
            clock_step_percent: 0,
            clock_step_micros: 0,
        }
    }
}
