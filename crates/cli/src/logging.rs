//! Logs of the long-running commands: `tracing` events to standard error, filtered by
//! `RUST_LOG` (`info` when it is unset).

use tracing_subscriber::EnvFilter;

/// Installs the subscriber; a second call, or a malformed `RUST_LOG`, is reported and
/// otherwise ignored.
pub fn init() {
    let filter = match std::env::var("RUST_LOG") {
        Ok(text) if !text.is_empty() => EnvFilter::try_new(&text).unwrap_or_else(|e| {
            eprintln!("RUST_LOG={text:?} is not a filter ({e}); logging at info");
            EnvFilter::new("info")
        }),
        _ => EnvFilter::new("info"),
    };
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    if let Err(e) = installed {
        eprintln!("logging not set up: {e}");
    }
}
