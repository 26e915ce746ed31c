//! Logical replication's pgoutput protocol, versions 1 to 4.
