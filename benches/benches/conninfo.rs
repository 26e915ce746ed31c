//! `conninfo_parse/{pgyard,libpq,tokio_postgres}`: one pass over the shared corpus of
//! connection strings per iteration, each implementation parsing the same strings.

use std::ffi::CString;
use std::hint::black_box;
use std::str::FromStr;

use criterion::{Criterion, Throughput};
use pgyard_benches::{corpus::CONNINFO, libpq15};

/// Panics, naming the string and the implementation, unless all three accept every string.
fn check_corpus(cstrings: &[CString]) {
    let mut rejected = Vec::new();
    for (s, c) in CONNINFO.iter().zip(cstrings) {
        if let Err(e) = pgyard_conninfo::parse(s.as_bytes()) {
            rejected.push(format!("pgyard rejects {s:?}: {e}"));
        }
        if let Err(e) = libpq15::conninfo_parse(c) {
            rejected.push(format!("libpq 15 rejects {s:?}: {}", e.trim_end()));
        }
        if let Err(e) = tokio_postgres::Config::from_str(s) {
            rejected.push(format!("tokio-postgres rejects {s:?}: {e}"));
        }
    }
    assert!(
        rejected.is_empty(),
        "the conninfo corpus must be accepted by every implementation:\n{}",
        rejected.join("\n")
    );
}

fn conninfo_parse(c: &mut Criterion) {
    let cstrings: Vec<CString> = CONNINFO
        .iter()
        .map(|s| CString::new(*s).expect("corpus strings hold no NUL byte"))
        .collect();
    check_corpus(&cstrings);

    let mut group = c.benchmark_group("conninfo_parse");
    group.throughput(Throughput::Elements(CONNINFO.len() as u64));
    group.bench_function("pgyard", |b| {
        b.iter(|| {
            for s in CONNINFO {
                black_box(&pgyard_conninfo::parse(black_box(s.as_bytes())));
            }
        })
    });
    group.bench_function("libpq", |b| {
        b.iter(|| {
            for s in &cstrings {
                black_box(&libpq15::conninfo_parse(black_box(s)));
            }
        })
    });
    group.bench_function("tokio_postgres", |b| {
        b.iter(|| {
            for s in CONNINFO {
                black_box(&tokio_postgres::Config::from_str(black_box(s)));
            }
        })
    });
    group.finish();
}

fn main() {
    // `criterion_main!` spelled out: its generated `pub fn` would lack a doc comment.
    let mut c = Criterion::default().configure_from_args();
    conninfo_parse(&mut c);
    c.final_summary();
}
