//! The operator of the delayed replica (`docs/delayq.md`, "When the delay has done its job"):
//! pause and resume at any time; skip one transaction not yet applied; apply only what
//! committed before an LSN or a time (`--until`), and lift that later. A skip and an `until`
//! are given to an applier as it starts, as an operator writes them and starts `pgyard delayq
//! apply` again: a running machine may have sent later work already, which only a machine
//! started with the controls is bound not to. Lifting `until` is safe at any time.
//!
//! Drawn from an RNG stream of their own: a seed whose operator only pauses runs the world it
//! ran before these existed.

use pgyard_delayq::apply::{ApplyControls, Until};
use pgyard_types::{side_stream, uniform_inclusive, Lsn, PgTimestamp, Rng};

use crate::publisher::Commit;

/// The RNG stream the operator's skips and `until`s are drawn from.
const STREAM: u64 = 0x6f70_6572_6174;

/// How often the operator intervenes, drawn once per seed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct OperatorMix {
    /// Percent of applier starts with a new skip ...
    skip_percent: u64,
    /// ... and with a new `until`.
    until_percent: u64,
    /// Percent of steps that lift `until`.
    lift_percent: u64,
}

/// The operator's controls and their history.
#[derive(Debug)]
pub(super) struct Operator {
    /// The mix.
    pub(super) mix: OperatorMix,
    rng: Rng,
    /// What the operator asks of every applier now.
    pub(super) controls: ApplyControls,
    /// The run is in its calm: nothing new is asked, `until` is lifted.
    calm: bool,
}

impl Operator {
    /// A seed's operator, drawn from `rng`'s own stream (the caller's draws are untouched).
    pub(super) fn new(rng: &Rng) -> Operator {
        let mut rng = side_stream(rng, STREAM);
        let r = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
        let mix = if r(&mut rng, 2) == 0 {
            OperatorMix {
                skip_percent: 5 + r(&mut rng, 30),
                until_percent: 5 + r(&mut rng, 30),
                lift_percent: 1 + r(&mut rng, 10),
            }
        } else {
            OperatorMix::default()
        };
        Operator {
            mix,
            rng,
            controls: ApplyControls::default(),
            calm: false,
        }
    }

    /// Whether the operator skips the transaction that committed at `commit_lsn`.
    pub(super) fn skips(&self, commit_lsn: Lsn) -> bool {
        self.controls.skip.contains(&commit_lsn)
    }

    /// Whether a transaction that committed at `lsn` at time `ts` is to be held back now:
    /// the documented rule, stated here rather than taken from the machine it judges.
    pub(super) fn holds(&self, lsn: Lsn, ts: PgTimestamp) -> bool {
        match self.controls.until {
            Some(Until::Lsn(u)) => lsn >= u,
            Some(Until::Time(u)) => ts.to_unix() >= u,
            None => false,
        }
    }

    /// The calm begins: `until` is lifted and nothing new is asked.
    pub(super) fn calm(&mut self) {
        self.calm = true;
        self.controls.until = None;
    }

    /// Maybe lifts `until` (between steps); whether it did.
    pub(super) fn maybe_lift(&mut self) -> bool {
        if self.controls.until.is_none()
            || uniform_inclusive(&mut self.rng, 99) >= self.mix.lift_percent
        {
            return false;
        }
        self.controls.until = None;
        true
    }

    /// As an applier starts at subscriber origin `origin`: maybe a skip of a commit after it,
    /// maybe an `until` at one of them (its commit LSN or its commit time); a skip only where
    /// `may_skip` allows it (nothing drawn builds on the transaction). Returns the index
    /// of a commit newly skipped, and what was asked (for the trace).
    pub(super) fn at_start(
        &mut self,
        commits: &[Commit],
        times: impl Fn(&Commit) -> Option<PgTimestamp>,
        mut may_skip: impl FnMut(&Commit) -> bool,
        origin: Lsn,
    ) -> (Option<usize>, Option<String>) {
        let first = commits.partition_point(|c| c.end_lsn <= origin);
        if self.calm || first == commits.len() {
            return (None, None);
        }
        let span = (commits.len() - first - 1) as u64;
        let mut said = Vec::new();
        let mut skipped = None;
        if uniform_inclusive(&mut self.rng, 99) < self.mix.skip_percent {
            let i = first + uniform_inclusive(&mut self.rng, span) as usize;
            let lsn = commits[i].commit_lsn;
            if !self.controls.skip.contains(&lsn) && may_skip(&commits[i]) {
                self.controls.skip.insert(lsn);
                skipped = Some(i);
                said.push(format!("skip {}", commits[i].commit_lsn));
            }
        }
        if uniform_inclusive(&mut self.rng, 99) < self.mix.until_percent {
            let c = &commits[first + uniform_inclusive(&mut self.rng, span) as usize];
            let by_time = uniform_inclusive(&mut self.rng, 1) == 0;
            let until = match times(c) {
                Some(ts) if by_time => Until::Time(ts.to_unix()),
                _ => Until::Lsn(c.commit_lsn),
            };
            said.push(format!("until {until:?}"));
            self.controls.until = Some(until);
        }
        (skipped, (!said.is_empty()).then(|| said.join(", ")))
    }
}
