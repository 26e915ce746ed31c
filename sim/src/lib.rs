//! The deterministic simulator of pgyard: one thread, one seeded RNG, virtual time.
