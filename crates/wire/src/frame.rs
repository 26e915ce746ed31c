//! Framing: the incremental frame decoder, startup-phase messages and size limits.
