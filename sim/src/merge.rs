//! Folding the reports of a sharded sweep (`pgyard sim --seeds N --shard I/N --json`, one per
//! shard) back into the report of the unsharded sweep, trace hash included. Pure: the caller
//! reads the files and prints the result.
//!
//! The combined hash of a scenario folds every seed's hash in seed order, and shards interleave
//! (`s % N == I`), so no per-shard digest can be folded into it: each shard's report carries its
//! seeds' hashes in order, and the merge walks the whole sweep's seeds, taking each hash from the
//! shard that ran it. Each shard's own hash is checked against its seed hashes first, so a
//! damaged or hand-edited report is caught rather than folded into a wrong answer.

use std::fmt;

use crate::runner::{SeedSelection, Sweep, SweepSummary};
use crate::trace::{combine, combine_run, COMBINE_START};

/// Reports that cannot be merged list at most this many missing shards by index.
const MISSING_LISTED: usize = 10;

/// A broken invariant as a report carries it: owned text, as read back from a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureRecord {
    /// The failing seed.
    pub seed: u64,
    /// The invariant's short name.
    pub invariant: String,
    /// What was seen.
    pub detail: String,
}

/// What a sweep (or one shard of it) found for one scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioReport {
    /// The scenario's registered name.
    pub scenario: String,
    /// Seeds run.
    pub seeds: u64,
    /// The failing seeds, in seed order.
    pub failures: Vec<FailureRecord>,
    /// Simulated nanoseconds over all seeds.
    pub simulated_nanos: u64,
    /// Wall-clock seconds the sweep took (for a merge: the shards' times added up).
    pub wall_seconds: f64,
    /// Every seed's hash folded in seed order ([`SweepSummary::combined_hash`]).
    pub trace_hash: u64,
    /// Each seed's trace hash, in seed order.
    pub seed_hashes: Vec<u64>,
}

impl ScenarioReport {
    /// The report of a sweep of `scenario` that just ran.
    pub fn from_sweep(scenario: &str, summary: SweepSummary, wall_seconds: f64) -> Self {
        ScenarioReport {
            scenario: scenario.to_string(),
            seeds: summary.seeds,
            failures: summary
                .failures
                .into_iter()
                .map(|(seed, v)| FailureRecord {
                    seed,
                    invariant: v.invariant.to_string(),
                    detail: v.detail,
                })
                .collect(),
            simulated_nanos: summary.simulated_nanos,
            wall_seconds,
            trace_hash: summary.combined_hash,
            seed_hashes: summary.seed_hashes,
        }
    }
}

/// One shard's report, as `pgyard sim --shard I/N --json` writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardReport {
    /// Where the report came from (a file name), to name it in errors.
    pub source: String,
    /// The seeds of the whole sweep (not only this shard's).
    pub seeds: SeedSelection,
    /// `(I, N)`: this is shard `I` of `N`.
    pub shard: (u64, u64),
    /// One report per scenario, in the order they ran.
    pub scenarios: Vec<ScenarioReport>,
}

/// The unsharded sweep, put back together from its shards.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    /// The seeds of the sweep.
    pub seeds: SeedSelection,
    /// How many shards it was split into.
    pub shards: u64,
    /// One report per scenario, as the unsharded run gives it (wall time aside).
    pub scenarios: Vec<ScenarioReport>,
    /// What `--trace-hash` prints for the unsharded run.
    pub trace_hash: u64,
}

impl Merged {
    /// The shard index that ran `seed`.
    pub fn shard_of(&self, seed: u64) -> u64 {
        seed % self.shards.max(1)
    }

    /// Whether every seed of every scenario passed.
    pub fn ok(&self) -> bool {
        self.scenarios.iter().all(|s| s.failures.is_empty())
    }
}

/// Why reports cannot be merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MergeError {
    /// Nothing to merge.
    NoReports,
    /// Two reports split different seed selections.
    DifferentSweeps {
        /// The first report and its seeds.
        first: (String, SeedSelection),
        /// The report that differs and its seeds.
        other: (String, SeedSelection),
    },
    /// Two reports split the sweep into different numbers of shards.
    DifferentShardCounts {
        /// The first report and its shard count.
        first: (String, u64),
        /// The report that differs and its shard count.
        other: (String, u64),
    },
    /// Two reports are the same shard.
    DuplicateShard {
        /// The shard, `(I, N)`.
        shard: (u64, u64),
        /// The two reports.
        sources: (String, String),
    },
    /// Some shards have no report.
    MissingShards {
        /// The shard count.
        shards: u64,
        /// The first missing indexes (at most a few).
        listed: Vec<u64>,
        /// How many are missing in all.
        missing: u64,
    },
    /// Two reports ran different scenarios, or in a different order.
    DifferentScenarios {
        /// The first report and its scenarios.
        first: (String, Vec<String>),
        /// The report that differs and its scenarios.
        other: (String, Vec<String>),
    },
    /// A report contradicts itself or its shard.
    Inconsistent {
        /// The report.
        source: String,
        /// The scenario concerned, if one.
        scenario: Option<String>,
        /// What is wrong.
        what: String,
    },
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MergeError::NoReports => write!(f, "no shard reports to merge"),
            MergeError::DifferentSweeps { first, other } => write!(
                f,
                "{} is a shard of a sweep of {}, but {} of a sweep of {}",
                other.0,
                describe(other.1),
                first.0,
                describe(first.1)
            ),
            MergeError::DifferentShardCounts { first, other } => write!(
                f,
                "{} is one of {} shards, but {} is one of {}",
                other.0, other.1, first.0, first.1
            ),
            MergeError::DuplicateShard { shard, sources } => write!(
                f,
                "shard {}/{} given twice: {} and {}",
                shard.0, shard.1, sources.0, sources.1
            ),
            MergeError::MissingShards {
                shards,
                listed,
                missing,
            } => {
                let names: Vec<String> = listed.iter().map(|i| format!("{i}/{shards}")).collect();
                write!(f, "missing shard(s) {}", names.join(", "))?;
                if *missing > listed.len() as u64 {
                    write!(f, " and {} more", *missing - listed.len() as u64)?;
                }
                write!(
                    f,
                    " (every shard 0/{shards} to {}/{shards} is needed)",
                    shards - 1
                )
            }
            MergeError::DifferentScenarios { first, other } => write!(
                f,
                "{} ran scenarios [{}], but {} ran [{}]",
                other.0,
                other.1.join(", "),
                first.0,
                first.1.join(", ")
            ),
            MergeError::Inconsistent {
                source,
                scenario,
                what,
            } => match scenario {
                Some(sc) => write!(f, "{source}, scenario {sc}: {what}"),
                None => write!(f, "{source}: {what}"),
            },
        }
    }
}

impl std::error::Error for MergeError {}

/// A seed selection in words, for messages.
fn describe(seeds: SeedSelection) -> String {
    match seeds {
        SeedSelection::Count(n) => format!("seeds 0..{n}"),
        SeedSelection::One(s) => format!("seed {s}"),
    }
}

/// Merges the reports of every shard of one sweep, given in any order, into the report of the
/// unsharded sweep. Refuses reports of different sweeps, shard counts or scenario lists, a
/// shard given twice or missing, and a report whose figures contradict its shard.
pub fn merge(mut reports: Vec<ShardReport>) -> Result<Merged, MergeError> {
    let first = reports.first().ok_or(MergeError::NoReports)?.clone();
    let (seeds, shards) = (first.seeds, first.shard.1);
    let names: Vec<String> = first.scenarios.iter().map(|s| s.scenario.clone()).collect();
    for r in &reports {
        check_alike(&first, &names, r)?;
    }
    reports.sort_by_key(|r| r.shard.0);
    check_complete(&reports, shards)?;
    for r in &reports {
        for sc in &r.scenarios {
            check_shard(r, sc)?;
        }
    }

    let whole = Sweep { seeds, shard: None };
    let mut merged = Vec::with_capacity(names.len());
    for (k, name) in names.iter().enumerate() {
        let parts: Vec<&ScenarioReport> = reports.iter().map(|r| &r.scenarios[k]).collect();
        merged.push(fold_scenario(name, &whole, shards, &parts)?);
    }
    let trace_hash = combine_run(merged.iter().map(|s| s.trace_hash));
    Ok(Merged {
        seeds,
        shards,
        scenarios: merged,
        trace_hash,
    })
}

/// `r` belongs to the same sweep as `first`: same seeds, shard count and scenarios.
fn check_alike(first: &ShardReport, names: &[String], r: &ShardReport) -> Result<(), MergeError> {
    let (index, count) = r.shard;
    if count == 0 || index >= count {
        return Err(MergeError::Inconsistent {
            source: r.source.clone(),
            scenario: None,
            what: format!("shard {index}/{count} is not a shard (need 0 <= I < N)"),
        });
    }
    if r.seeds != first.seeds {
        return Err(MergeError::DifferentSweeps {
            first: (first.source.clone(), first.seeds),
            other: (r.source.clone(), r.seeds),
        });
    }
    if count != first.shard.1 {
        return Err(MergeError::DifferentShardCounts {
            first: (first.source.clone(), first.shard.1),
            other: (r.source.clone(), count),
        });
    }
    if r.scenarios.len() != names.len()
        || r.scenarios.iter().zip(names).any(|(s, n)| s.scenario != *n)
    {
        return Err(MergeError::DifferentScenarios {
            first: (first.source.clone(), names.to_vec()),
            other: (
                r.source.clone(),
                r.scenarios.iter().map(|s| s.scenario.clone()).collect(),
            ),
        });
    }
    Ok(())
}

/// `reports`, sorted by shard index, hold each of the `shards` shards exactly once.
fn check_complete(reports: &[ShardReport], shards: u64) -> Result<(), MergeError> {
    for pair in reports.windows(2) {
        if pair[0].shard.0 == pair[1].shard.0 {
            return Err(MergeError::DuplicateShard {
                shard: pair[0].shard,
                sources: (pair[0].source.clone(), pair[1].source.clone()),
            });
        }
    }
    let missing = shards - reports.len() as u64;
    if missing == 0 {
        return Ok(());
    }
    // The indexes are distinct and below `shards`, so walking them finds the gaps; stop
    // after a few, since N can be large.
    let mut listed = Vec::new();
    let mut present = reports.iter().map(|r| r.shard.0).peekable();
    let mut i = 0;
    while listed.len() < MISSING_LISTED && i < shards {
        if present.peek() == Some(&i) {
            present.next();
        } else {
            listed.push(i);
        }
        i += 1;
    }
    Err(MergeError::MissingShards {
        shards,
        listed,
        missing,
    })
}

/// One scenario of one shard agrees with the seeds its shard covers.
fn check_shard(r: &ShardReport, sc: &ScenarioReport) -> Result<(), MergeError> {
    let bad = |what: String| MergeError::Inconsistent {
        source: r.source.clone(),
        scenario: Some(sc.scenario.clone()),
        what,
    };
    let part = Sweep {
        seeds: r.seeds,
        shard: Some(r.shard),
    };
    let expected = part.seeds().count() as u64;
    if sc.seeds != expected {
        return Err(bad(format!(
            "reports {} seeds, but shard {}/{} of {} has {expected}",
            sc.seeds,
            r.shard.0,
            r.shard.1,
            describe(r.seeds)
        )));
    }
    if sc.seed_hashes.len() as u64 != expected {
        return Err(bad(format!(
            "carries {} seed hashes for {expected} seeds",
            sc.seed_hashes.len()
        )));
    }
    let own = part
        .seeds()
        .zip(&sc.seed_hashes)
        .fold(COMBINE_START, |acc, (seed, &h)| combine(acc, seed, h));
    if own != sc.trace_hash {
        return Err(bad(format!(
            "its seed hashes fold to {own:016x}, not to its trace hash {:016x} (damaged report?)",
            sc.trace_hash
        )));
    }
    let mut last = None;
    for f in &sc.failures {
        let in_shard = part_contains(&part, f.seed);
        if !in_shard || last.is_some_and(|l| l >= f.seed) {
            return Err(bad(format!(
                "failing seed {} is {}",
                f.seed,
                if in_shard {
                    "out of order or repeated"
                } else {
                    "not one of this shard's seeds"
                }
            )));
        }
        last = Some(f.seed);
    }
    Ok(())
}

/// Whether `part` runs `seed`, without walking its seeds.
fn part_contains(part: &Sweep, seed: u64) -> bool {
    let in_range = match part.seeds {
        SeedSelection::Count(n) => seed < n,
        SeedSelection::One(s) => seed == s,
    };
    in_range && part.shard.is_none_or(|(i, n)| seed % n == i)
}

/// Folds one scenario's shard reports (indexed by shard) in the whole sweep's seed order.
fn fold_scenario(
    name: &str,
    whole: &Sweep,
    shards: u64,
    parts: &[&ScenarioReport],
) -> Result<ScenarioReport, MergeError> {
    let mut cursors = vec![0usize; parts.len()];
    let mut out = ScenarioReport {
        scenario: name.to_string(),
        seeds: 0,
        failures: Vec::new(),
        simulated_nanos: 0,
        wall_seconds: 0.0,
        trace_hash: COMBINE_START,
        seed_hashes: Vec::new(),
    };
    for seed in whole.seeds() {
        // `merge` checked every shard's hash count against its seeds, so this cannot miss;
        // stay an error rather than a panic all the same.
        let shard = (seed % shards) as usize;
        let hash = cursors
            .get_mut(shard)
            .and_then(|c| {
                let h = parts[shard].seed_hashes.get(*c).copied();
                *c += 1;
                h
            })
            .ok_or_else(|| MergeError::Inconsistent {
                source: format!("shard {shard}/{shards}"),
                scenario: Some(name.to_string()),
                what: format!("has no hash for seed {seed}"),
            })?;
        out.trace_hash = combine(out.trace_hash, seed, hash);
        out.seed_hashes.push(hash);
        out.seeds += 1;
    }
    for p in parts {
        out.simulated_nanos = out.simulated_nanos.saturating_add(p.simulated_nanos);
        out.wall_seconds += p.wall_seconds;
        out.failures.extend(p.failures.iter().cloned());
    }
    out.failures.sort_by_key(|f| f.seed);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Violation;

    const SCENARIOS: [&str; 2] = ["conninfo", "middleware"];

    /// What `pgyard sim --scenario … --shard i/n --json` reports, run in-process.
    fn shard(seeds: SeedSelection, i: u64, n: u64) -> ShardReport {
        ShardReport {
            source: format!("shard-{i}.json"),
            seeds,
            shard: (i, n),
            scenarios: run(seeds, Some((i, n))),
        }
    }

    fn run(seeds: SeedSelection, shard: Option<(u64, u64)>) -> Vec<ScenarioReport> {
        SCENARIOS
            .iter()
            .map(|name| {
                let sc = crate::scenario(name).expect("registered");
                let summary = Sweep { seeds, shard }.run(sc, |_| {});
                ScenarioReport::from_sweep(name, summary, 0.5)
            })
            .collect()
    }

    fn all_shards(seeds: SeedSelection, n: u64) -> Vec<ShardReport> {
        (0..n).map(|i| shard(seeds, i, n)).collect()
    }

    fn assert_like_unsharded(merged: &Merged, seeds: SeedSelection) {
        let whole = run(seeds, None);
        assert_eq!(merged.scenarios.len(), whole.len());
        for (m, w) in merged.scenarios.iter().zip(&whole) {
            assert_eq!(m.scenario, w.scenario);
            assert_eq!(m.seeds, w.seeds, "{}", w.scenario);
            assert_eq!(m.simulated_nanos, w.simulated_nanos, "{}", w.scenario);
            assert_eq!(m.trace_hash, w.trace_hash, "{}", w.scenario);
            assert_eq!(m.seed_hashes, w.seed_hashes, "{}", w.scenario);
            assert_eq!(m.failures, w.failures, "{}", w.scenario);
        }
        assert_eq!(
            merged.trace_hash,
            combine_run(whole.iter().map(|s| s.trace_hash))
        );
    }

    #[test]
    fn shards_in_any_order_merge_into_the_unsharded_sweep() {
        let seeds = SeedSelection::Count(30);
        for n in [1, 4, 7, 45] {
            let mut reports = all_shards(seeds, n);
            reports.reverse();
            let third = reports.len() / 3;
            reports.rotate_left(third);
            let merged = merge(reports).expect("merges");
            assert_eq!(merged.shards, n);
            assert!(merged.ok());
            assert_like_unsharded(&merged, seeds);
            // Wall time is the shards' added up.
            let walls = merged.scenarios[0].wall_seconds;
            assert!((walls - 0.5 * n as f64).abs() < 1e-9, "{walls}");
        }
    }

    #[test]
    fn a_single_seed_sweep_merges_too() {
        let seeds = SeedSelection::One(77);
        let merged = merge(all_shards(seeds, 3)).expect("merges");
        assert_eq!(merged.scenarios[0].seeds, 1);
        assert_like_unsharded(&merged, seeds);
    }

    #[test]
    fn failures_come_back_in_seed_order_with_their_shards() {
        let seeds = SeedSelection::Count(12);
        let mut reports = all_shards(seeds, 4);
        for (i, seed) in [(1, 5), (3, 3), (1, 9)] {
            reports[i].scenarios[1].failures.push(FailureRecord {
                seed,
                invariant: "planted".into(),
                detail: format!("seed {seed}"),
            });
        }
        let merged = merge(reports).expect("merges");
        assert!(!merged.ok());
        let got: Vec<(u64, u64)> = merged.scenarios[1]
            .failures
            .iter()
            .map(|f| (f.seed, merged.shard_of(f.seed)))
            .collect();
        assert_eq!(got, [(3, 3), (5, 1), (9, 1)]);
        assert!(merged.scenarios[0].failures.is_empty());
    }

    #[test]
    fn from_sweep_keeps_violations() {
        let summary = SweepSummary {
            seeds: 2,
            failures: vec![(
                1,
                Violation {
                    invariant: "x",
                    detail: "y".into(),
                },
            )],
            ..SweepSummary::default()
        };
        let r = ScenarioReport::from_sweep("s", summary, 1.0);
        assert_eq!(r.failures[0].invariant, "x");
        assert_eq!(r.failures[0].detail, "y");
    }

    fn refused(reports: Vec<ShardReport>) -> String {
        match merge(reports) {
            Ok(_) => panic!("merged what it should refuse"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn missing_and_repeated_shards_are_refused() {
        let seeds = SeedSelection::Count(20);
        assert_eq!(refused(Vec::new()), "no shard reports to merge");

        let mut reports = all_shards(seeds, 4);
        reports.remove(2);
        let msg = refused(reports);
        assert!(msg.starts_with("missing shard(s) 2/4 "), "{msg}");

        let reports = vec![shard(seeds, 5, 40)];
        let msg = refused(reports);
        assert!(msg.contains("0/40, 1/40, 2/40"), "{msg}");
        assert!(msg.contains("and 29 more"), "{msg}");

        let mut reports = all_shards(seeds, 3);
        let mut again = reports[1].clone();
        again.source = "copy.json".into();
        reports.push(again);
        let msg = refused(reports);
        assert_eq!(msg, "shard 1/3 given twice: shard-1.json and copy.json");
    }

    #[test]
    fn reports_of_different_sweeps_are_refused() {
        let mut reports = all_shards(SeedSelection::Count(20), 2);
        reports[1] = shard(SeedSelection::Count(21), 1, 2);
        let msg = refused(reports);
        assert!(msg.contains("seeds 0..21"), "{msg}");
        assert!(msg.contains("seeds 0..20"), "{msg}");

        let mut reports = all_shards(SeedSelection::Count(20), 2);
        reports.push(shard(SeedSelection::Count(20), 2, 3));
        let msg = refused(reports);
        assert!(msg.contains("one of 3 shards"), "{msg}");

        let mut reports = all_shards(SeedSelection::Count(20), 2);
        reports[0].scenarios.swap(0, 1);
        let msg = refused(reports);
        assert!(
            msg.contains("ran scenarios [conninfo, middleware]"),
            "{msg}"
        );

        let mut reports = all_shards(SeedSelection::Count(20), 2);
        reports[1].scenarios.pop();
        let msg = refused(reports);
        assert!(
            msg.starts_with("shard-1.json ran scenarios [conninfo], "),
            "{msg}"
        );
    }

    #[test]
    fn reports_that_contradict_their_shard_are_refused() {
        let seeds = SeedSelection::Count(20);
        let mut reports = all_shards(seeds, 2);
        reports[1].scenarios[0].seed_hashes[3] ^= 1;
        let msg = refused(reports);
        assert!(msg.starts_with("shard-1.json, scenario conninfo:"), "{msg}");
        assert!(msg.contains("damaged report?"), "{msg}");

        let mut reports = all_shards(seeds, 2);
        reports[0].scenarios[1].seed_hashes.pop();
        assert!(refused(reports).contains("carries 9 seed hashes for 10 seeds"));

        let mut reports = all_shards(seeds, 2);
        reports[0].scenarios[0].seeds = 11;
        assert!(refused(reports).contains("reports 11 seeds"));

        let mut reports = all_shards(seeds, 2);
        reports[0].scenarios[0].failures.push(FailureRecord {
            seed: 3,
            invariant: "x".into(),
            detail: String::new(),
        });
        assert!(refused(reports).contains("failing seed 3 is not one of this shard's seeds"));

        let mut reports = all_shards(seeds, 2);
        reports[0].shard = (2, 2);
        assert!(refused(reports).contains("shard 2/2 is not a shard"));
    }
}
