//! `follow` on a live PostgreSQL 18 publisher (pgyard-testkit): while every transaction is held
//! back for an hour, the slot's `confirmed_flush_lsn` and `restart_lsn` advance and old WAL is
//! recycled; after a restart of `follow`, nothing is lost or duplicated.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pgyard_delayq::{Config, DelayQueue, FsStorage, TxnState};
use pgyard_testkit::cluster::{Node, Options, Primary};
use pgyard_tokio::follow::{self, FollowOptions, Progress};
use pgyard_types::Lsn;
use tokio::sync::{oneshot, watch};

const SLOT: &str = "delayq_slot";
const HOUR: Duration = Duration::from_secs(3600);

fn q(node: &Node, sql: &str) -> String {
    node.psql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn lsn(text: &str) -> Lsn {
    text.parse()
        .unwrap_or_else(|e| panic!("not an LSN: {text:?}: {e:?}"))
}

/// `(confirmed_flush_lsn, restart_lsn, active)` of the slot.
fn slot_state(node: &Node) -> (Lsn, Lsn, bool) {
    let row = q(
        node,
        &format!(
            "select confirmed_flush_lsn, restart_lsn, active from pg_replication_slots \
             where slot_name = '{SLOT}'"
        ),
    );
    let f: Vec<&str> = row.split('|').collect();
    (lsn(f[0]), lsn(f[1]), f[2] == "t")
}

/// The oldest WAL segment file still in pg_wal.
fn oldest_segment(node: &Node) -> String {
    q(
        node,
        "select min(name) from pg_ls_waldir() where name ~ '^[0-9A-F]{24}$'",
    )
}

/// Commits one transaction of a few rows and returns its xid.
fn commit_one(node: &Node, n: u32) -> u32 {
    let out = q(
        node,
        &format!(
            "begin; insert into t(v) select 'txn {n} row ' || g from generate_series(1, 3) g; \
             select pg_current_xact_id()::text; commit;"
        ),
    );
    let xid = out
        .lines()
        .find_map(|l| l.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no xid in {out:?}"));
    u32::try_from(xid).expect("epoch 0")
}

/// Waits (at most `limit`) until `check` holds, doing `between` after each failed check.
async fn wait_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !check() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Running {
    stop: oneshot::Sender<()>,
    progress: watch::Receiver<Progress>,
    task: tokio::task::JoinHandle<Result<Progress, follow::FollowError>>,
}

fn start(options: &FollowOptions) -> Running {
    let (stop, stopped) = oneshot::channel::<()>();
    let (tx, progress) = watch::channel(Progress::default());
    let options = options.clone();
    let task = tokio::spawn(async move {
        let stop = async move {
            let _ = stopped.await;
        };
        follow::run_observed(&options, stop, &tx).await
    });
    Running {
        stop,
        progress,
        task,
    }
}

impl Running {
    async fn stop(self) -> Progress {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("follow stops")
            .unwrap()
            .expect("follow ran without error")
    }

    /// Committed transactions (xid → count) in the last published inspection.
    fn committed(&self) -> BTreeMap<u32, usize> {
        let p = self.progress.borrow();
        let mut out = BTreeMap::new();
        for t in p.inspection.iter().flat_map(|i| &i.transactions) {
            if t.state == TxnState::Committed {
                *out.entry(t.xid.0).or_insert(0) += 1;
            }
        }
        out
    }
}

/// Both tests follow the same slot of the same publication, so they start from this.
fn publish_with_slot(node: &Node) {
    q(
        node,
        "create table t (id serial primary key, v text not null); \
         create publication pgyard for table t",
    );
    q(
        node,
        &format!("select pg_create_logical_replication_slot('{SLOT}', 'pgoutput')"),
    );
}

/// Holding for an hour must not pin WAL: checkpoints go on until the slot and segments move.
async fn checkpoint_until_the_slot_moves(
    primary: &Primary,
    work_end: Lsn,
    (flush0, restart0): (Lsn, Lsn),
    oldest0: &str,
) {
    // Checkpoints log running-xacts records (the slot's next restart point) and recycle the
    // segments no one needs any more; keep making them until the slot has moved on.
    let t0 = Instant::now();
    loop {
        q(primary, "select pg_switch_wal(); checkpoint");
        let (flush, restart, _) = slot_state(primary);
        let oldest = oldest_segment(primary);
        if flush >= work_end && restart >= work_end && oldest.as_str() > oldest0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(25),
            "slot did not advance: confirmed_flush {flush} (was {flush0}), restart {restart} \
             (was {restart0}), work ended at {work_end}; oldest segment {oldest} (was {oldest0})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The slot may advance only because nothing was applied: all held, each an hour from due.
fn assert_held_for_the_hour(running: &Running, work_end: Lsn) {
    let p = running.progress.borrow();
    let info = p.inspection.as_ref().unwrap();
    assert_eq!(info.apply_lsn, Lsn(0));
    let soon = pgyard_types::UnixTime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64
            + 59 * 60 * 1_000_000,
    );
    for t in &info.transactions {
        assert_eq!(t.state, TxnState::Committed, "{t:?}");
        assert!(t.due.unwrap() > soon, "{t:?} is due within the hour");
        assert!(t.messages >= 3, "{t:?}");
    }
    assert!(p.reported_flush >= work_end);
}

/// What the queue in `dir` holds as a restart finds it, after a recovery with no torn tail.
fn recovered(dir: &std::path::Path) -> pgyard_delayq::Inspection {
    let storage = FsStorage::open(dir).unwrap();
    let report = pgyard_delayq::verify(&storage).expect("verify");
    assert!(report.torn_tail.is_none(), "{report:?}");
    let queue = DelayQueue::open(
        storage,
        Config {
            delay: HOUR,
            ..Config::default()
        },
    )
    .unwrap();
    queue.inspect()
}

/// Exactly once is judged on the queue as a restart finds it, not on what `follow` reported.
fn assert_queue_holds_each_once(dir: &std::path::Path, xids: &[u32]) {
    let info = recovered(dir);
    let mut held: Vec<u32> = info
        .transactions
        .iter()
        .filter(|t| t.state == TxnState::Committed)
        .map(|t| t.xid.0)
        .collect();
    let mut expected = xids.to_vec();
    held.sort_unstable();
    expected.sort_unstable();
    assert_eq!(held, expected, "{info:#?}");
    assert_eq!(info.apply_lsn, Lsn(0));
    assert!(info
        .transactions
        .iter()
        .all(|t| t.state == TxnState::Committed));
    // Commit LSNs are strictly increasing in commit order: no transaction twice.
    let commits: Vec<Lsn> = info
        .transactions
        .iter()
        .map(|t| t.commit_lsn.unwrap())
        .collect();
    assert!(commits.windows(2).all(|w| w[0] < w[1]), "{commits:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_holds_an_hour_while_the_slot_advances_and_resumes_exactly_once() {
    let primary = Primary::start(
        Options::default()
            .conf("max_wal_size = 32MB")
            .conf("min_wal_size = 32MB")
            .conf("wal_keep_size = 0")
            .conf("checkpoint_timeout = 1h"),
    )
    .expect("primary");
    publish_with_slot(&primary);
    let dir = tempfile::Builder::new()
        .prefix("pgyard-follow-")
        .tempdir()
        .unwrap();
    let mut options = FollowOptions::new(primary.conninfo(), SLOT, "pgyard", HOUR, dir.path());
    options.inspect = true;

    let (flush0, restart0, _) = slot_state(&primary);
    let oldest0 = oldest_segment(&primary);
    let mut xids: Vec<u32> = Vec::new();

    // Session 1: several transactions, each followed by a WAL switch; then checkpoints.
    let running = start(&options);
    wait_until(Duration::from_secs(15), "follow to start streaming", || {
        running.progress.borrow().status_updates > 0 || slot_state(&primary).2
    })
    .await;
    for n in 0..5 {
        xids.push(commit_one(&primary, n));
        q(&primary, "select pg_switch_wal()");
    }
    let work_end = lsn(&q(&primary, "select pg_current_wal_lsn()"));
    checkpoint_until_the_slot_moves(&primary, work_end, (flush0, restart0), &oldest0).await;
    // Meanwhile nothing is due: every transaction is queued, committed and pending an hour.
    wait_until(
        Duration::from_secs(5),
        "the queue to hold every transaction",
        || running.committed().len() == xids.len(),
    )
    .await;
    assert_held_for_the_hour(&running, work_end);
    let first = running.stop().await;
    assert_eq!(first.start_lsn, Lsn(0));

    // While follow is down: more transactions.
    wait_until(Duration::from_secs(10), "the slot to be released", || {
        !slot_state(&primary).2
    })
    .await;
    for n in 5..8 {
        xids.push(commit_one(&primary, n));
    }
    q(&primary, "select pg_switch_wal()");

    // Session 2 resumes from the queue's durable position and catches up.
    let running = start(&options);
    wait_until(Duration::from_secs(15), "the queue to catch up", || {
        running.committed().len() == xids.len()
    })
    .await;
    let second = running.stop().await;
    // It resumed at the end of the last transaction the first session made durable.
    let first_end = first
        .inspection
        .as_ref()
        .unwrap()
        .transactions
        .iter()
        .filter_map(|t| t.end_lsn)
        .max()
        .unwrap();
    assert_eq!(second.start_lsn, first_end);

    // Exactly once: the reopened queue holds each committed transaction once, none applied.
    wait_until(Duration::from_secs(10), "the slot to be released", || {
        !slot_state(&primary).2
    })
    .await;
    assert_queue_holds_each_once(dir.path(), &xids);
}

/// Commits `n` transactions one after the other through `conninfo`, returning their xids in
/// commit order.
fn produce(conninfo: &str, from: u32, n: u32) -> Vec<u32> {
    (from..from + n)
        .map(|i| {
            let out = pgyard_testkit::cluster::psql(
                conninfo,
                &format!(
                    "begin; insert into t(v) select 'txn {i} row ' || g from generate_series(1, 3) g; \
                     select pg_current_xact_id()::text; commit;"
                ),
            )
            .unwrap_or_else(|e| panic!("transaction {i}: {e}"));
            std::thread::sleep(Duration::from_millis(20));
            let xid = out
                .lines()
                .find_map(|l| l.trim().parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no xid in {out:?}"));
            u32::try_from(xid).expect("epoch 0")
        })
        .collect()
}

/// Terminates the slot's walsender, once one holds it.
async fn terminate_walsender(node: &Node) {
    let sql = format!(
        "select pg_terminate_backend(active_pid) from pg_replication_slots \
         where slot_name = '{SLOT}' and active_pid is not null"
    );
    wait_until(Duration::from_secs(15), "a walsender to terminate", || {
        q(node, &sql) == "t"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_reconnects_after_walsender_kills_and_a_restart_exactly_once_in_order() {
    let mut primary = Primary::start(Options::default()).expect("primary");
    publish_with_slot(&primary);
    let dir = tempfile::Builder::new()
        .prefix("pgyard-follow-reconnect-")
        .tempdir()
        .unwrap();
    let mut options = FollowOptions::new(primary.conninfo(), SLOT, "pgyard", HOUR, dir.path());
    options.inspect = true;
    options.reconnect_delay_min = Duration::from_millis(50);
    options.reconnect_delay_max = Duration::from_millis(800);
    let running = start(&options);
    let reconnects = |r: &Running| r.progress.borrow().reconnects;

    // Transactions keep coming while the walsender is killed twice under them.
    let conninfo = primary.conninfo();
    let producer = tokio::task::spawn_blocking(move || produce(&conninfo, 0, 30));
    for k in 1..=2 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        terminate_walsender(&primary).await;
        wait_until(Duration::from_secs(15), "follow to notice", || {
            reconnects(&running) >= k
        })
        .await;
    }
    let mut xids = producer.await.unwrap();

    // A restart of the primary (fast shutdown) while follow is connected, then more work.
    let before = reconnects(&running);
    primary.restart().expect("restart");
    wait_until(Duration::from_secs(20), "follow to reconnect", || {
        reconnects(&running) > before && slot_state(&primary).2
    })
    .await;
    let conninfo = primary.conninfo();
    xids.extend(
        tokio::task::spawn_blocking(move || produce(&conninfo, 30, 5))
            .await
            .unwrap(),
    );
    wait_until(Duration::from_secs(20), "the queue to catch up", || {
        running.committed().len() == xids.len()
    })
    .await;
    let last = running.stop().await;
    assert!(last.reconnects >= 3, "{last:?}");
    assert!(last.sessions >= 4, "{last:?}");

    // Exactly once, in commit order, after a clean recovery.
    let info = recovered(dir.path());
    let held: Vec<u32> = info
        .transactions
        .iter()
        .filter(|t| t.state == TxnState::Committed)
        .map(|t| t.xid.0)
        .collect();
    assert_eq!(held, xids, "{info:#?}");
    assert!(info
        .transactions
        .iter()
        .all(|t| matches!(t.state, TxnState::Committed | TxnState::Aborted)));
}
