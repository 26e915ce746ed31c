//! How a running `pgyard` process is backed by memory.

#![cfg(target_os = "linux")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `THP_enabled` line of a process's status, waited for while the process starts.
fn thp_enabled(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_owned())
}

/// A long-running command (here a follower retrying a publisher that refuses connections)
/// runs with transparent huge pages off: with them, the kernel zeroed a fresh 2 MiB page at
/// many of the allocator's page faults, a third of `delayq run`'s CPU (src/memory.rs).
#[test]
fn a_running_pgyard_has_transparent_huge_pages_off() {
    assert_eq!(
        thp_enabled(std::process::id()).as_deref(),
        Some("1"),
        "this kernel reports THP_enabled, and the test process itself has it on"
    );
    let dir = std::env::temp_dir().join(format!("pgyard-thp-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["delayq", "follow", "--slot", "s", "--delay", "1h"])
        .arg("host=127.0.0.1 port=1 connect_timeout=1")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pgyard starts");
    // The flag is set first thing in `main`; the follower then keeps retrying for good.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = None;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        seen = thp_enabled(child.id());
        if seen.as_deref() == Some("0") {
            break;
        }
    }
    let still_running = child.try_wait().expect("wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(still_running, "the follower kept retrying");
    assert_eq!(seen.as_deref(), Some("0"));
}
