//! The proposed middleware message (`M`), its class ranges, and the middleware-side splitter.
