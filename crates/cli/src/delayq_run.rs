//! `pgyard delayq run`: a delayed logical replica in one process. The tokio follower streams
//! the publisher's slot into the queue (reporting the queue's durable position, so the
//! publisher recycles WAL while transactions wait) and an apply thread applies each
//! transaction to the subscriber once it is due, exactly once; both share the queue.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgyard_tokio::follow::{self, FollowOptions, Progress};

use crate::delayq_apply::{apply_loop, ApplyFailure, Controls, Subscriber};
use crate::delayq_loop::Doorbell;

/// Arguments of `pgyard delayq run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The publisher's connection string (`replication=database` is added for streaming).
    #[arg(long)]
    pub publisher: String,
    /// The logical replication slot (pgoutput) to stream from.
    #[arg(long)]
    pub slot: String,
    /// The publication to ask pgoutput for.
    #[arg(long)]
    pub publication: String,
    /// The subscriber's connection string.
    #[arg(long)]
    pub subscriber: String,
    /// How long after its commit on the publisher each transaction is applied, e.g. `1h`.
    #[arg(long, value_parser = crate::delayq_cmd::parse_delay)]
    pub delay: Duration,
    /// The queue directory (created if missing).
    pub dir: PathBuf,
    /// The replication origin on the subscriber that records what was applied.
    #[arg(long, default_value = "pgyard_delayq")]
    pub origin: String,
    /// Create the slot (pgoutput) on the publisher when it does not exist yet.
    #[arg(long)]
    pub create_slot: bool,
    /// Decode prepared transactions at PREPARE (the slot is created with TWO_PHASE): they
    /// wait in the queue and are applied only when their COMMIT PREPARED is due.
    #[arg(long)]
    pub two_phase: bool,
    /// With a slot `--create-slot` creates: copy the published tables into the subscriber at
    /// the slot's exported snapshot before streaming (the subscriber's tables must be empty).
    #[arg(long, requires = "create_slot")]
    pub copy_data: bool,
    /// Apply only what committed before this LSN or UTC time, then hold (and keep
    /// following).
    #[arg(long, value_parser = crate::delayq_control::parse_until)]
    pub until: Option<crate::delayq_control::Until>,
    /// Advanced: a transaction is read out of the queue and sent in pieces of at most this
    /// many bytes of pgoutput messages, one subscriber transaction (memory stays bounded by
    /// a few pieces however large a transaction is). Default 1 MiB.
    #[arg(long, hide = true, default_value_t = pgyard_delayq::apply::ApplyConfig::default().piece_bytes)]
    pub piece_bytes: usize,
}

/// Connects to the subscriber again, waiting 100 ms doubling up to 10 s between attempts,
/// until it works or `stop` is set.
fn reconnect(conninfo: &str, origin: &str, stop: &AtomicBool) -> Option<Subscriber> {
    let mut wait = Duration::from_millis(100);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(wait);
        match Subscriber::connect(conninfo, origin) {
            Ok(s) => return Some(s),
            Err(e) => eprintln!("pgyard delayq run: {e}; retrying in {wait:?}"),
        }
        wait = (wait * 2).min(Duration::from_secs(10));
    }
    None
}

/// Runs `pgyard delayq run` until Ctrl-C (exit 0), an apply failure (exit 1: the message names
/// the transaction, which stays queued), or an error reconnecting cannot cure (exit 2).
pub fn run(args: RunArgs) -> ExitCode {
    let fail = |code: u8, e: &dyn std::fmt::Display| {
        eprintln!("pgyard delayq run: {}", e.to_string().trim_end());
        ExitCode::from(code)
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(2, &format!("cannot start the async runtime: {e}")),
    };
    let _lock = match crate::delayq_control::lock_dir(&args.dir) {
        Ok(l) => l,
        Err(e) => return fail(2, &e),
    };
    if args.create_slot {
        let setup = crate::delayq_copy::SlotSetup {
            publisher: &args.publisher,
            subscriber: &args.subscriber,
            slot: &args.slot,
            publication: &args.publication,
            origin: &args.origin,
            two_phase: args.two_phase,
            copy_data: args.copy_data,
        };
        match crate::delayq_copy::create_slot(&setup) {
            Ok(line) => eprintln!("pgyard delayq run: {line}"),
            Err(e) => return fail(2, &format!("creating slot {}: {e}", args.slot)),
        }
    }
    let mut options = FollowOptions::new(
        args.publisher.clone(),
        args.slot.clone(),
        args.publication.clone(),
        args.delay,
        args.dir.clone(),
    );
    options.two_phase = args.two_phase;
    let queue = match follow::open_shared(&options) {
        Ok(q) => q,
        Err(e) => return fail(2, &e),
    };
    let mut sub = match Subscriber::connect(&args.subscriber, &args.origin) {
        Ok(s) => s,
        Err(e) => return fail(2, &e),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let failed: Arc<Mutex<Option<ApplyFailure>>> = Arc::new(Mutex::new(None));
    let wake = Arc::new(tokio::sync::Notify::new());
    let bell = Arc::new(Doorbell::default());
    let applier = {
        let (queue, stop, failed, wake) =
            (queue.clone(), stop.clone(), failed.clone(), wake.clone());
        let controls = Controls {
            dir: args.dir.clone(),
            until: args.until,
            piece_bytes: args.piece_bytes,
            bell: Some(bell.clone()),
        };
        let (subscriber, origin) = (args.subscriber.clone(), args.origin.clone());
        std::thread::spawn(move || loop {
            match apply_loop(&queue, &mut sub, Some(&stop), &controls) {
                Ok(done) => {
                    sub.close();
                    return Some(done);
                }
                // The subscriber went away (restart, network) or the session must start
                // afresh (a unique index it relied on is gone): connect again; the next
                // apply machine has the queue hand the unacknowledged items out again, and
                // the origin says which of them were applied.
                Err(ApplyFailure::Subscriber(e)) => {
                    eprintln!("pgyard delayq run: subscriber: {e}; reconnecting");
                    // The old session ends first: alive, it holds the origin.
                    sub.close();
                    match reconnect(&subscriber, &origin, &stop) {
                        Some(s) => sub = s,
                        None => return None,
                    }
                }
                Err(e) => {
                    *failed
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
                    wake.notify_one();
                    return None;
                }
            }
        })
    };
    let followed = runtime.block_on(async {
        let (tx, mut rx) = tokio::sync::watch::channel(Progress::default());
        let printer =
            tokio::spawn(async move { crate::delayq_follow::print_progress(&mut rx, "run").await });
        // The follower publishes its progress with the status update after each flush that
        // made more of the queue durable: the moment the applier may find more to do.
        let mut flushes = tx.subscribe();
        let ringer = tokio::spawn(async move {
            while flushes.changed().await.is_ok() {
                bell.ring();
            }
        });
        let stop_on = async {
            tokio::select! {
                r = tokio::signal::ctrl_c() => if r.is_err() { std::future::pending::<()>().await },
                () = wake.notified() => {}
            }
        };
        let r = follow::run_shared(&options, &queue, stop_on, &tx).await;
        drop(tx);
        let _ = printer.await;
        let _ = ringer.await;
        r
    });
    stop.store(true, Ordering::Relaxed);
    let done = applier.join().ok().flatten();
    if let Some(e) = failed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
    {
        let code = match e {
            ApplyFailure::Apply(_) | ApplyFailure::RowCheck(_) | ApplyFailure::Refused { .. } => 1,
            _ => 2,
        };
        return fail(code, &e);
    }
    match followed {
        Err(e) => fail(2, &e),
        Ok(p) => {
            let applied = done.map_or(0, |d| d.transactions);
            println!(
                "stopped: {} message(s) received, {applied} transaction(s) applied, flushed {}",
                p.messages, p.reported_flush
            );
            ExitCode::SUCCESS
        }
    }
}
