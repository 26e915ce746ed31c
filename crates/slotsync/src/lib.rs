//! Logical replication slot synchronization to physical standbys, decided as PostgreSQL 18
//! decides it (`pg_sync_replication_slots()` and the slot-sync worker). Pure: the inputs are
//! slot tables, WAL positions and settings; the outputs are actions and the resulting table.
