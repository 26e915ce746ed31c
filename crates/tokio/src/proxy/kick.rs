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
    /// The waiting task's waker is in `waker` and no kick has taken it since: only the
    /// waiting task reads or writes this, so a wait with nothing new costs two plain loads
    /// instead of a swap, a lock and a second swap.
    registered: AtomicBool,
}

impl Kick {
    /// A kick already given: the task's first wait returns at once and reads the phase, so a
    /// client accepted just as the proxy began to drain learns it.
    pub(super) fn new() -> Kick {
        Kick {
            kicked: AtomicBool::new(true),
            waker: Mutex::new(None),
            registered: AtomicBool::new(false),
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
    /// next kick. Only ever polled by the one task (whose waker stays the same), as the
    /// `registered` shortcut assumes.
    pub(super) fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.take_kick() {
            return Poll::Ready(());
        }
        // A kick sets the flag before it takes the waker, and the flag stays set until a
        // wait takes it: with the flag clear, a waker registered earlier is still there.
        if self.registered.load(Ordering::Relaxed) {
            return Poll::Pending;
        }
        {
            let mut slot = self.waker.lock().unwrap_or_else(|p| p.into_inner());
            match slot.as_ref() {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
        }
        self.registered.store(true, Ordering::Relaxed);
        // A kick between the first look and the waker's registration took no waker: look
        // again now that it is registered.
        if self.take_kick() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Takes a kick given since the last one taken (a plain load first: most looks find
    /// none). A kick takes the waker, so the next wait registers it again.
    fn take_kick(&self) -> bool {
        if self.kicked.load(Ordering::Acquire) && self.kicked.swap(false, Ordering::AcqRel) {
            self.registered.store(false, Ordering::Relaxed);
            return true;
        }
        false
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

    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn a_wait_polled_again_without_a_kick_stays_registered_and_each_kick_wakes_it() {
        use std::task::{Context, Poll};
        let count = Arc::new(Count(Default::default()));
        let waker = std::task::Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let woken = || count.0.load(std::sync::atomic::Ordering::SeqCst);
        let kick = Kick::new();
        assert_eq!(kick.poll(&mut cx), Poll::Ready(()), "born kicked");
        for round in 1..=3 {
            assert_eq!(kick.poll(&mut cx), Poll::Pending);
            // Woken for another reason and polled again: still waiting, still registered.
            assert_eq!(kick.poll(&mut cx), Poll::Pending);
            assert_eq!(woken(), round - 1);
            kick.kick();
            assert_eq!(woken(), round, "the kick woke the registered waker");
            assert_eq!(kick.poll(&mut cx), Poll::Ready(()));
        }
        // Two kicks before a wait make one wake-up at most and one ready wait.
        kick.kick();
        kick.kick();
        assert_eq!(kick.poll(&mut cx), Poll::Ready(()));
        assert_eq!(kick.poll(&mut cx), Poll::Pending);
    }
}
