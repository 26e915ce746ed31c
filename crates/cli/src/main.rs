//! `pgyard`: the command line of the pgyard workspace.

fn main() {}
