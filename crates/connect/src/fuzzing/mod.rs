//! Structured session fuzzing of the connect machine: the fuzzer's bytes choose a
//! configuration, what each host's server is, and in which order the network answers the
//! machine's actions, cut at any byte and with faults; every message the machine reads is
//! well-formed. After each step and at the end, the machine's behaviour is checked:
//!
//! - it acts only on attempts it opened and has not closed, sends only on open sockets, and
//!   closes every opened attempt exactly once, except the one it returns;
//! - it ends with exactly one `Done`, after which it asks for nothing and sets no timer, and
//!   it never stalls (no action, no timer, not done);
//! - a connection it returns is one whose server said what `target_session_attrs` asks
//!   (judged from what that connection was told), with the parameters, backend key,
//!   protocol version and encryption that connection really had;
//! - when no fault was injected and some host would have served the request, it succeeds;
//! - the same input gives the same actions (determinism).
//!
//! The entry point is [`session`]; [`Outcome`] lets tests see what a run reached.

mod drive;
mod server;

use arbitrary::Unstructured;

pub use drive::Outcome;

/// Drives one connect machine with `data`; panics only when a check above fails.
pub fn session(data: &[u8]) -> Outcome {
    let first = drive::run(data, |m| m);
    let again = drive::run(data, |m| m);
    assert_eq!(
        first.trace, again.trace,
        "the same input gave different actions"
    );
    first
}

/// One run with `bug` planted in the machine (no determinism check): tests show that the
/// checks above catch it.
#[cfg(feature = "planted-bugs")]
pub fn session_with_bug(data: &[u8], bug: crate::PlantedBug) -> Outcome {
    drive::run(data, |m| m.with_planted_bug(bug))
}

/// A choice among `n` options; an exhausted input picks the first.
fn pick(u: &mut Unstructured<'_>, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    u.int_in_range(0..=n - 1).unwrap_or(0)
}
