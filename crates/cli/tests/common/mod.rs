//! What the delayed-replica tests share: a publisher and a subscriber, a queue folder
//! removed with them, psql that panics with the statement, and the slot.

use std::path::PathBuf;

use pgyard_testkit::cluster::{Node, Primary};

/// Runs `sql` on `node`; panics naming the node and the statement.
pub fn q(node: &Node, sql: &str) -> String {
    node.psql(sql)
        .unwrap_or_else(|e| panic!("{}: {sql}: {e}", node.name()))
}

/// A publisher, a subscriber and the queue folder between them.
pub struct Rig {
    pub publisher: Primary,
    pub subscriber: Primary,
    pub dir: PathBuf,
}

impl Rig {
    /// The two servers and a fresh folder `pgyard-{kind}-{name}-{pid}` under the temp dir.
    pub fn with(publisher: Primary, subscriber: Primary, kind: &str, name: &str) -> Rig {
        let dir = std::env::temp_dir().join(format!("pgyard-{kind}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Rig {
            publisher,
            subscriber,
            dir,
        }
    }

    /// The logical slot `pgyard` (pgoutput) on the publisher.
    // Not every test file uses it: `delayq_copy_cli` has `run` create the slot.
    #[allow(dead_code)]
    pub fn create_slot(&self) {
        q(
            &self.publisher,
            "select pg_create_logical_replication_slot('pgyard', 'pgoutput')",
        );
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
