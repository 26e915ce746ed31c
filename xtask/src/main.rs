//! Project automation: `cargo xtask test`.

fn main() {}
