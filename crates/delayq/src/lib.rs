//! A crash-safe segmented queue for time-delayed logical replication: everything received is
//! written to durable files and handed out for apply only once it is due.
