//! What each client of the `proxy` scenario sends: a few transactions of four kinds, some
//! preceded by middleware messages (ROUTE, TAG, a class nobody knows).

use std::collections::BTreeSet;

use bytes::BytesMut;
use pgyard_proxy::classes::{ROUTE, TAG};
use pgyard_types::{uniform_inclusive, Rng};
use pgyard_wire::frontend;
use pgyard_wire::middleware::encode_middleware;

use super::proxy::Request;

/// The requests of client `c` after its startup.
pub(super) fn plan(rng: &mut Rng, c: u64) -> Vec<Request> {
    let mut out = Vec::new();
    let mut parsed = BTreeSet::new();
    let txns = 3 + uniform_inclusive(rng, 7);
    for txn in 0..txns {
        let mut first = middleware(rng);
        let name = |n: u64| format!("c{c} t{txn} n{n}").into_bytes();
        match uniform_inclusive(rng, 3) {
            0 => {
                first.extend(query(&name(0)));
                out.push(request(first, vec![name(0)]));
            }
            1 => {
                let begin = format!("begin c{c} t{txn}").into_bytes();
                let commit = format!("commit c{c} t{txn}").into_bytes();
                first.extend(query(&begin));
                out.push(request(first, vec![begin]));
                for n in 1..=2 {
                    out.push(request(query(&name(n)), vec![name(n)]));
                }
                out.push(request(query(&commit), vec![commit]));
            }
            kind => {
                let statement = if kind == 2 {
                    Vec::new()
                } else {
                    format!("s{}", uniform_inclusive(rng, 2)).into_bytes()
                };
                let parse = statement.is_empty() || parsed.insert(statement.clone());
                first.extend(extended(&statement, parse, &name(0)));
                out.push(request(first, vec![name(0)]));
            }
        }
    }
    out
}

fn request(bytes: Vec<u8>, tags: Vec<Vec<u8>>) -> Request {
    Request { bytes, tags }
}

fn query(text: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    let _ = frontend::encode_query(text, &mut b);
    b.to_vec()
}

fn extended(statement: &[u8], parse: bool, param: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    if parse {
        let _ = frontend::encode_parse(statement, b"select $1", &[25], &mut b);
    }
    let _ = frontend::encode_bind(b"", statement, &[], &[Some(param)], &[], &mut b);
    let _ = frontend::encode_describe(frontend::Target::Portal, b"", &mut b);
    let _ = frontend::encode_execute(b"", 0, &mut b);
    frontend::encode_sync(&mut b);
    b.to_vec()
}

/// Middleware messages before a transaction, maybe.
fn middleware(rng: &mut Rng) -> Vec<u8> {
    let mut b = BytesMut::new();
    match uniform_inclusive(rng, 5) {
        0 => {
            let route: &[u8] =
                [b"primary".as_slice(), b"standby", b"any"][uniform_inclusive(rng, 2) as usize];
            let _ = encode_middleware(ROUTE, route, &mut b);
        }
        1 => {
            let _ = encode_middleware(TAG, b"batch", &mut b);
        }
        2 => {
            let _ = encode_middleware(4_000_000_007, b"someone else's", &mut b);
        }
        _ => {}
    }
    b.to_vec()
}
