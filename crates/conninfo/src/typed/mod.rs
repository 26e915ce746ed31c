//! Phase 3: the typed view of a resolved connection string, with libpq validation.
