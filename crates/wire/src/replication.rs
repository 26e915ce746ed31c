//! Streaming replication: CopyBoth sub-messages and the replication commands' result rows.
