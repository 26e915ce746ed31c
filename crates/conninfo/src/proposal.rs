//! The 2015 multi-host proposal dialect.
