//! The structured session fuzzers have teeth: with a planted bug in the connect machine or
//! the proxy's client session, seeded inputs make one of their checks fail, and the same
//! input passes without the bug.
#![cfg(feature = "planted-bugs")]

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use pgyard_connect::fuzzing::{session, session_with_bug};
use pgyard_connect::PlantedBug;

/// A seeded stand-in for a fuzzer's input.
fn input(seed: u64, len: usize) -> Vec<u8> {
    pgyard_types::seeded_bytes(seed, len)
}

thread_local! {
    /// Set while this thread expects panics: the planted bug's catches.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Silences the expected panics of the thread that catches them, and only those: a test that
/// fails still prints its message, whichever thread it runs on.
fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                default(info);
            }
        }));
    });
}

fn connect_input(seed: u64) -> Vec<u8> {
    input(seed, 16 + (seed as usize * 7) % 240)
}

fn proxy_input(seed: u64) -> Vec<u8> {
    input(seed, 32 + (seed as usize * 13) % 480)
}

/// The first seed under 20,000 whose input makes `run` panic, and the message.
fn first_catch(input: fn(u64) -> Vec<u8>, run: impl Fn(&[u8])) -> Option<(u64, String)> {
    (0..20_000u64).find_map(|seed| {
        let data = input(seed);
        quiet_panics();
        QUIET.with(|q| q.set(true));
        let caught = catch_unwind(AssertUnwindSafe(|| run(&data)));
        QUIET.with(|q| q.set(false));
        let message = caught.err()?;
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| message.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        Some((seed, text))
    })
}

#[test]
fn planted_connect_bugs_trip_the_connect_session_fuzzers_checks() {
    // Quiet the expected panics; the assertion messages below say what was caught.
    // Each bug with the checks it breaks. A role misjudged (a stale one, or read-only judged
    // by `in_hot_standby` alone) makes the machine accept a server that does not fit or
    // refuse one that would have served, whichever the first catching input shows.
    let bugs: [(PlantedBug, &[&str]); 9] = [
        (PlantedBug::IgnoreTargetSessionAttrs, &["accepted"]),
        (PlantedBug::SkipPreferSecondPass, &["would have served"]),
        (PlantedBug::StartupErrorNextAddress, &["after its 57P03"]),
        (PlantedBug::ReuseClosedAttempt, &["opened twice"]),
        (PlantedBug::DropAttemptTimeout, &["stalled"]),
        (
            PlantedBug::TrustStaleParameterStatus,
            &["would have served", "accepted"],
        ),
        (PlantedBug::AcceptAnyAlpn, &["libpq refuses"]),
        (
            PlantedBug::IgnoreDefaultReadOnly,
            &["accepted", "would have served"],
        ),
        (PlantedBug::BrokenWordedAsClosed, &["broke with an alert"]),
    ];
    let mut missed = Vec::new();
    for (bug, checks) in bugs {
        match first_catch(connect_input, |d| {
            session_with_bug(d, bug);
        }) {
            Some((seed, text)) => {
                println!("planted bug {bug:?} caught by the session fuzzer at seed {seed}: {text}");
                assert!(
                    checks.iter().any(|check| text.contains(check)),
                    "{bug:?} tripped another check: {text}"
                );
                let data = connect_input(seed);
                assert!(
                    catch_unwind(|| session(&data)).is_ok(),
                    "{bug:?}: seed {seed} fails without the bug"
                );
            }
            None => missed.push(bug),
        }
    }
    assert!(missed.is_empty(), "not caught in 20,000 inputs: {missed:?}");
}

#[test]
fn planted_proxy_bugs_trip_the_structured_session_fuzzers_checks() {
    use pgyard_proxy::fuzzing::{structured_session, structured_session_with_bug};
    use pgyard_proxy::PlantedBug as Bug;
    let bugs = [
        (
            Bug::ReleaseInTransaction,
            "went back reusable while it is inside a transaction block",
        ),
        (Bug::ForwardMiddleware, "a M frame reached a server"),
        (
            Bug::ForgetStatementOnNewServer,
            "differs from the reference",
        ),
    ];
    let mut missed = Vec::new();
    for (bug, check) in bugs {
        match first_catch(proxy_input, |d| {
            structured_session_with_bug(d, bug);
        }) {
            Some((seed, text)) => {
                println!(
                    "planted bug {bug:?} caught by the proxy session fuzzer at seed {seed}: {text}"
                );
                assert!(
                    text.contains(check),
                    "{bug:?} tripped another check: {text}"
                );
                let data = proxy_input(seed);
                assert!(
                    catch_unwind(|| structured_session(&data)).is_ok(),
                    "{bug:?}: seed {seed} fails without the bug"
                );
            }
            None => missed.push(bug),
        }
    }
    assert!(missed.is_empty(), "not caught in 20,000 inputs: {missed:?}");
}
