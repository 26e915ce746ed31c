//! The failover connect machine: walks a libpq host list (and pgyard's race strategy) as a pure
//! sans-IO state machine. Time, randomness, resolved addresses, socket outcomes and bytes are
//! inputs; actions for the driver are outputs.
