//! Authentication exchanges as sans-IO state machines: SCRAM-SHA-256(-PLUS), MD5, cleartext.
