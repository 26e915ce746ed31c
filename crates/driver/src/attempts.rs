//! The attempt log both adapters keep while they drive a connect: one [`Attempt`] per socket
//! the machine opened, closed out from the machine's events and its final result.

use std::collections::HashMap;
use std::time::Duration;

use pgyard_connect::{AttemptId, ConnectError, Event, OpenTarget};

use crate::Attempt;

/// Appends to a session's attempt log during one connect (or reset).
pub struct AttemptLog<'a> {
    log: &'a mut Vec<Attempt>,
    index: HashMap<AttemptId, usize>,
    start: usize,
}

impl<'a> AttemptLog<'a> {
    /// Starts a connect's entries after what `log` already holds.
    pub fn new(log: &'a mut Vec<Attempt>) -> Self {
        let start = log.len();
        AttemptLog {
            log,
            index: HashMap::new(),
            start,
        }
    }

    /// The machine opened `attempt` to `target` (named `host`) at `at`.
    pub fn opened(&mut self, attempt: AttemptId, host: String, target: OpenTarget, at: Duration) {
        self.index.insert(attempt, self.log.len());
        self.log.push(Attempt {
            host,
            target,
            started: at,
            ended: None,
            outcome: String::new(),
        });
    }

    /// Where `attempt` connects to.
    pub fn target(&self, attempt: AttemptId) -> Option<&OpenTarget> {
        self.index.get(&attempt).map(|&i| &self.log[i].target)
    }

    /// Ends `attempt` with `outcome` unless it already has one.
    fn end(&mut self, attempt: AttemptId, outcome: impl FnOnce() -> String, at: Duration) {
        if let Some(&i) = self.index.get(&attempt) {
            let a = &mut self.log[i];
            a.ended.get_or_insert(at);
            if a.outcome.is_empty() {
                a.outcome = outcome();
            }
        }
    }

    /// The machine closed `attempt`.
    pub fn closed(&mut self, attempt: AttemptId, at: Duration) {
        self.end(attempt, || "closed".to_owned(), at);
    }

    /// Records what an event says about its attempt (a failed open or handshake, an EOF).
    pub fn event(&mut self, ev: &Event, at: Duration) {
        match ev {
            Event::OpenFailed { attempt, error } => {
                self.end(*attempt, || error.strerror().to_owned(), at)
            }
            Event::TlsFailed {
                attempt, message, ..
            } => self.end(*attempt, || message.trim_end().to_owned(), at),
            Event::Closed { attempt } => self.end(*attempt, || "closed by server".to_owned(), at),
            _ => {}
        }
    }

    /// `attempt` won.
    pub fn connected(&mut self, attempt: AttemptId, at: Duration) {
        if let Some(&i) = self.index.get(&attempt) {
            self.log[i].ended = Some(at);
            self.log[i].outcome = "connected".to_owned();
        }
    }

    /// The connect failed: each attempt gets its line of the error report.
    pub fn failed(&mut self, e: &ConnectError, at: Duration) {
        for r in &e.reports {
            let Some(&i) = r.attempt.and_then(|a| self.index.get(&a)) else {
                continue;
            };
            let text = r.text.trim_end().replace('\n', " / ");
            if !text.is_empty() {
                self.log[i].outcome = text;
            }
        }
        for a in &mut self.log[self.start..] {
            a.ended.get_or_insert(at);
        }
    }
}
