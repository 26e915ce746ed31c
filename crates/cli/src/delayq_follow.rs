//! `pgyard delayq follow`: stream a publisher's logical slot into a delay queue directory
//! (through the tokio adapter) until Ctrl-C, reconnecting after passing failures.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use pgyard_tokio::follow::{self, FollowOptions, Progress};

/// Arguments of `pgyard delayq follow`.
#[derive(clap::Args, Debug)]
pub struct FollowArgs {
    /// The publisher's connection string (`replication=database` is added).
    pub conninfo: String,
    /// The logical replication slot (pgoutput) to stream from.
    #[arg(long)]
    pub slot: String,
    /// The publication to ask pgoutput for.
    #[arg(long, default_value = "pgyard")]
    pub publication: String,
    /// How long every transaction is held back, e.g. `30s`, `5min`, `1h`.
    #[arg(long, value_parser = crate::delayq_cmd::parse_delay)]
    pub delay: Duration,
    /// The queue directory (created if missing).
    pub dir: PathBuf,
}

/// Runs `pgyard delayq follow`: prints `following …` at every (re)start of the stream, then
/// `flushed LSN` whenever the durable position reported to the publisher moves, each
/// reconnect with its cause on stderr, and `stopped …` after Ctrl-C; an error that
/// reconnecting cannot cure ends it with exit status 1.
pub fn run(args: FollowArgs) -> ExitCode {
    let _lock = match crate::delayq_control::lock_dir(&args.dir) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("pgyard delayq follow: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pgyard delayq follow: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = FollowOptions::new(
        args.conninfo,
        args.slot,
        args.publication,
        args.delay,
        args.dir,
    );
    runtime.block_on(async move {
        let (tx, mut rx) = tokio::sync::watch::channel(Progress::default());
        let printer = tokio::spawn(async move { print_progress(&mut rx, "follow").await });
        let stop = async {
            // Without a signal handler there is no way to stop but an error.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let result = follow::run_observed(&options, stop, &tx).await;
        drop(tx);
        let _ = printer.await;
        match result {
            Ok(p) => {
                println!(
                    "stopped: {} message(s) received, {} duplicate(s) dropped, {} reconnect(s), \
                     flushed {}",
                    p.messages, p.duplicates, p.reconnects, p.reported_flush
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                let text = e.to_string();
                eprintln!("pgyard delayq follow: {}", text.trim_end());
                ExitCode::FAILURE
            }
        }
    })
}

/// Reports a follower's progress until its sender is gone: each reconnect with its cause on
/// standard error; each (re)start of the stream and, for `follow`, every new flushed position
/// on standard output (`run` writes them all to standard error, beside its apply status).
pub(crate) async fn print_progress(rx: &mut tokio::sync::watch::Receiver<Progress>, cmd: &str) {
    let mut shown: Option<pgyard_types::Lsn> = None;
    let (mut sessions, mut reconnects) = (0, 0);
    let follow = cmd == "follow";
    while rx.changed().await.is_ok() {
        let p = rx.borrow_and_update().clone();
        if p.reconnects > reconnects {
            reconnects = p.reconnects;
            let why = p.last_error.as_deref().unwrap_or("connection lost");
            eprintln!("pgyard delayq {cmd}: {why}; reconnecting");
        }
        if p.sessions > sessions {
            sessions = p.sessions;
            if follow {
                println!("following from {}", p.start_lsn);
            } else {
                eprintln!("pgyard delayq {cmd}: following from {}", p.start_lsn);
            }
        }
        if follow && p.status_updates > 0 && shown.is_none_or(|s| p.reported_flush > s) {
            shown = Some(p.reported_flush);
            println!("flushed {}", p.reported_flush);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::delayq_cmd::parse_delay;
    use std::time::Duration;

    #[test]
    fn delays_parse() {
        assert_eq!(parse_delay("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_delay("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_delay("90"), Ok(Duration::from_secs(90)));
        assert!(parse_delay("1y").is_err());
    }
}
