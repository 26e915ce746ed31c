//! The attempt log both adapters keep while they drive a connect: one [`Attempt`] per socket
//! the machine opened, closed out from the machine's events and its final result.

use std::collections::HashMap;
use std::time::Duration;

use pgyard_connect::{AttemptId, ConnectError, Event, OpenTarget};

use crate::Attempt;

/// The attempts of one connect (or reset), which the session appends to its log.
#[derive(Debug, Default)]
pub struct AttemptLog {
    log: Vec<Attempt>,
    index: HashMap<AttemptId, usize>,
}

impl AttemptLog {
    /// The entries so far.
    pub fn entries(&self) -> &[Attempt] {
        &self.log
    }

    /// The entry of `attempt`.
    pub fn get(&self, attempt: AttemptId) -> Option<&Attempt> {
        self.index.get(&attempt).map(|&i| &self.log[i])
    }

    /// Takes the entries; later events about them are not recorded.
    pub fn take(&mut self) -> Vec<Attempt> {
        self.index.clear();
        std::mem::take(&mut self.log)
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
            Event::Broken { attempt, message } => self.end(*attempt, || message.clone(), at),
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
        for a in &mut self.log {
            a.ended.get_or_insert(at);
        }
    }
}
