//! `backend_decode/{pgyard,postgres_protocol,walk,walk_pairs,memcpy}` (plus `pgyard_decoder`):
//! one pass over the seeded ~1 MiB backend stream of `pgyard_benches::wire`, each decoder
//! handing out every DataRow field, which is counted with its length (what a decoder
//! delivers); `walk` only follows the length words (the floor of a decoder that reads one row
//! after another), `walk_pairs` does the same over two rows at a time; `memcpy` copies the
//! same bytes once. `backend_decode_touch/…`: the same with each field's first and last byte
//! read as well, as a consumer would (the group's form before session 13).
//!
//! `frontend_encode/{pgyard,postgres_protocol}`: 100 × Parse/Bind/Describe/Execute/Sync into a
//! reused, cleared `BytesMut`.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput};
use pgyard_benches::wire::{self, FrontendBatch};

fn backend_decode(c: &mut Criterion) {
    decode_group::<false>(c, "backend_decode");
    decode_group::<true>(c, "backend_decode_touch");
}

/// One group: every implementation over the same stream, each field counted (and with
/// `TOUCH` its first and last byte read).
fn decode_group<const TOUCH: bool>(c: &mut Criterion, name: &str) {
    let stream = wire::backend_stream();
    // The routines agree before anything is timed (the test checks the details).
    let expected = wire::pgyard_visit::<TOUCH>(&stream);
    assert_eq!(
        wire::postgres_protocol_visit::<TOUCH>(&mut BytesMut::from(&stream[..])),
        expected
    );
    assert_eq!(
        wire::pgyard_decoder_visit::<TOUCH>(&mut wire::pgyard_decoder(&stream)),
        expected,
        "FrameDecoder path"
    );

    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.bench_function("pgyard", |b| {
        b.iter(|| black_box(wire::pgyard_visit::<TOUCH>(black_box(&stream))))
    });
    // postgres-protocol consumes its buffer: each iteration gets a fresh copy, made (and
    // dropped, as the routine hands the emptied buffer back) outside the timing.
    group.bench_function("postgres_protocol", |b| {
        b.iter_batched(
            || BytesMut::from(&stream[..]),
            |mut buf| {
                black_box(wire::postgres_protocol_visit::<TOUCH>(&mut buf));
                buf
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("walk", |b| {
        b.iter(|| black_box(wire::walk_visit::<TOUCH>(black_box(&stream))))
    });
    group.bench_function("walk_pairs", |b| {
        b.iter(|| black_box(wire::walk_pairs_visit::<TOUCH>(black_box(&stream))))
    });
    group.bench_function("memcpy", |b| {
        let mut dst = vec![0u8; stream.len()];
        b.iter(|| {
            wire::memcpy(black_box(&mut dst), black_box(&stream));
            black_box(&dst);
        })
    });
    // pgyard the same way round: the phase-aware decoder over an owned buffer filled in setup.
    group.bench_function("pgyard_decoder", |b| {
        b.iter_batched(
            || wire::pgyard_decoder(&stream),
            |mut decoder| {
                black_box(wire::pgyard_decoder_visit::<TOUCH>(&mut decoder));
                decoder
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn frontend_encode(c: &mut Criterion) {
    let batch = FrontendBatch::new();
    let mut a = BytesMut::new();
    let mut b = BytesMut::new();
    wire::pgyard_encode(&batch, &mut a);
    wire::postgres_protocol_encode(&batch, &mut b);
    assert_eq!(a, b, "both encoders write the same bytes");

    let mut group = c.benchmark_group("frontend_encode");
    group.throughput(Throughput::Bytes(a.len() as u64));
    group.bench_function("pgyard", |bench| {
        let mut buf = BytesMut::with_capacity(a.len());
        bench.iter(|| {
            buf.clear();
            wire::pgyard_encode(black_box(&batch), &mut buf);
            black_box(&buf);
        })
    });
    group.bench_function("postgres_protocol", |bench| {
        let mut buf = BytesMut::with_capacity(a.len());
        bench.iter(|| {
            buf.clear();
            wire::postgres_protocol_encode(black_box(&batch), &mut buf);
            black_box(&buf);
        })
    });
    group.finish();
}

fn main() {
    // `criterion_main!` spelled out: its generated `pub fn` would lack a doc comment.
    let mut c = Criterion::default().configure_from_args();
    backend_decode(&mut c);
    frontend_encode(&mut c);
    c.final_summary();
}
