//! The wake-up a client task gets when the proxy's phase changes (drain, stop).
//!
//! A client task waits for the phase beside its sockets on every turn of its loop, twice or
//! more per transaction. A `watch` receiver's `changed()` takes the channel's waiter lock on
//! every poll (about 450 instructions per transaction); a [`Kick`] costs an atomic swap and an
//! uncontended lock. Phases change a few times in a proxy's life, so the work moves to the
//! side that changes them: it kicks every client's slot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

/// A flag with the waker of the one task that waits on it.
#[derive(Debug)]
pub(super) struct Kick {
    kicked: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Kick {
    /// A kick already given: the task's first wait returns at once and reads the phase, so a
    /// client accepted just as the proxy began to drain learns it.
    pub(super) fn new() -> Kick {
        Kick {
            kicked: AtomicBool::new(true),
            waker: Mutex::new(None),
        }
    }

    /// Wakes the waiting task (or the next wait returns at once).
    pub(super) fn kick(&self) {
        self.kicked.store(true, Ordering::Release);
        let waker = self.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Ready once kicked since the last time it was ready.
    #[cfg(test)]
    fn wait(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| self.poll(cx))
    }

    /// Ready once kicked since the last time it was ready; else the task is woken by the
    /// next kick.
    pub(super) fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.kicked.swap(false, Ordering::AcqRel) {
            return Poll::Ready(());
        }
        {
            let mut slot = self.waker.lock().unwrap_or_else(|p| p.into_inner());
            match slot.as_ref() {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
        }
        // A kick between the first look and the waker's registration took no waker: look
        // again now that it is registered.
        if self.kicked.swap(false, Ordering::AcqRel) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Kick;
    use std::sync::Arc;

    #[tokio::test]
    async fn the_first_wait_is_ready_and_a_kick_wakes_the_next() {
        let kick = Arc::new(Kick::new());
        kick.wait().await;
        let waiting = {
            let kick = kick.clone();
            tokio::spawn(async move { kick.wait().await })
        };
        // The task is parked on the kick (a current-thread runtime runs it at this yield).
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "nothing kicked it yet");
        kick.kick();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the kick wakes the waiting task")
            .expect("the task ends");
    }

    #[tokio::test]
    async fn a_kick_before_the_wait_is_not_lost() {
        let kick = Kick::new();
        kick.wait().await;
        kick.kick();
        tokio::time::timeout(std::time::Duration::from_secs(5), kick.wait())
            .await
            .expect("a kick given before the wait makes it ready");
    }
}
