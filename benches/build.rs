//! Links Debian's libpq (15) so the `libpq` benchmark and the corpus test call it directly.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PG_CONFIG");
    let pg_config = std::env::var("PG_CONFIG").unwrap_or_else(|_| "pg_config".to_owned());
    let libdir = Command::new(pg_config)
        .arg("--libdir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/usr/lib/x86_64-linux-gnu".to_owned());
    println!("cargo:rustc-link-search=native={libdir}");
    println!("cargo:rustc-link-lib=dylib=pq");
}
