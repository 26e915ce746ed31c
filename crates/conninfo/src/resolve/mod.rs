//! Phase 2: defaults from the environment, service files and the password file (pure).
