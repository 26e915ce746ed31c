//! [`arbitrary`] generators of client traffic for a pooler (feature `arbitrary`): well-formed
//! requests only, chosen by the input within what a correct client may send in its state (no
//! COMMIT outside a block, no Bind of a statement it never prepared, a Sync after every
//! pipeline, middleware messages between transactions and only when it asked for them at
//! startup). Simple queries, blocks, failing statements, the extended protocol with named
//! statements prepared, executed and closed, pipelines ended by Flush and later Sync, ROUTE and
//! TAG middleware messages, and Terminate. The structured session fuzzer
//! (`fuzzing::structured_session`) plays this client; [`ClientRequests`] hands a whole session
//! to your own pooler or server:
//!
//! ```
//! use arbitrary::{Arbitrary, Unstructured};
//! use pgyard_proxy::arb::ClientRequests;
//!
//! let session = ClientRequests::arbitrary(&mut Unstructured::new(&[7; 64])).expect("total");
//! assert_eq!(session.startup[4..8], [0, 3, 0, 0], "protocol 3.0");
//! let wire: Vec<u8> = session.requests.concat(); // feed it to the pooler under test
//! assert!(!wire.is_empty());
//! ```

use arbitrary::Unstructured;
use bytes::BytesMut;
use pgyard_wire::frame::ProtocolVersion;
use pgyard_wire::frontend::{self, Target};
use pgyard_wire::middleware::encode_middleware;

use crate::classes::{ROUTE, TAG};
use crate::client::MIDDLEWARE_OPTION;

/// The requests a client may make next.
#[derive(Clone, Copy)]
enum Kind {
    Simple,
    BeginOrCommit,
    Fail,
    Extended,
    Prepare,
    ExecuteNamed,
    CloseNamed,
    Pipeline,
    Sync,
    Middleware,
    Terminate,
}

/// A choice among `n` options; an exhausted input picks the first.
pub(crate) fn pick(u: &mut Unstructured<'_>, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    u.int_in_range(0..=n - 1).unwrap_or(0)
}

/// Requests at most in one [`ClientRequests`]: long enough for pipelines and blocks to
/// interleave, short enough to stay cheap per input.
const REQUESTS_MAX: usize = 200;

/// A whole client session: its StartupMessage and its requests, each the bytes of one
/// request (a query, a block's statement, an extended-protocol batch, a middleware message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientRequests {
    /// The StartupMessage (user `u`, database `d`, maybe `application_name` and the
    /// middleware-messages option).
    pub startup: Vec<u8>,
    /// The requests in order; the last may be Terminate.
    pub requests: Vec<Vec<u8>>,
}

impl<'a> arbitrary::Arbitrary<'a> for ClientRequests {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut client = WellFormedClient::arbitrary(u);
        let startup = client.startup();
        let mut requests = Vec::new();
        while !u.is_empty() && !client.finished() && requests.len() < REQUESTS_MAX {
            requests.push(client.next_request(u));
        }
        Ok(ClientRequests { startup, requests })
    }
}

/// One client's state as the client itself knows it; it writes each next request from the
/// input.
pub struct WellFormedClient {
    middleware: bool,
    application_name: Option<&'static str>,
    k: usize,
    in_block: bool,
    /// Extended-protocol messages sent since the last Sync.
    unsynced: bool,
    statements: Vec<String>,
    done: bool,
}

impl WellFormedClient {
    /// A client whose startup options the input chooses.
    pub fn arbitrary(u: &mut Unstructured<'_>) -> WellFormedClient {
        WellFormedClient {
            middleware: pick(u, 2) == 1,
            application_name: [None, Some("app"), Some("other")][pick(u, 3)],
            k: 0,
            in_block: false,
            unsynced: false,
            statements: Vec::new(),
            done: false,
        }
    }

    /// The StartupMessage.
    pub fn startup(&self) -> Vec<u8> {
        let mut params: Vec<(&[u8], &[u8])> = vec![(b"user", b"u"), (b"database", b"d")];
        if let Some(app) = self.application_name {
            params.push((b"application_name", app.as_bytes()));
        }
        if self.middleware {
            params.push((MIDDLEWARE_OPTION, b"on"));
        }
        let mut b = BytesMut::new();
        let encoded = frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b);
        encoded.expect("a plain startup encodes");
        b.to_vec()
    }

    /// Whether it said goodbye.
    pub fn finished(&self) -> bool {
        self.done
    }

    /// Requests sent so far.
    pub fn sent(&self) -> usize {
        self.k
    }

    fn kinds(&self) -> Vec<Kind> {
        if self.unsynced {
            return vec![Kind::Sync, Kind::Pipeline, Kind::Extended];
        }
        let mut kinds = vec![
            Kind::Simple,
            Kind::BeginOrCommit,
            Kind::Fail,
            Kind::Extended,
        ];
        kinds.extend([Kind::Prepare, Kind::Pipeline]);
        if !self.statements.is_empty() {
            kinds.extend([Kind::ExecuteNamed, Kind::CloseNamed]);
        }
        if self.middleware && !self.in_block {
            kinds.push(Kind::Middleware);
        }
        kinds
    }

    /// The next request's bytes.
    pub fn next_request(&mut self, u: &mut Unstructured<'_>) -> Vec<u8> {
        let kinds = self.kinds();
        // Goodbye is rare, so that sessions grow long; never in the middle of a pipeline.
        let kind = if !self.unsynced && pick(u, 32) == 31 {
            Kind::Terminate
        } else {
            kinds[pick(u, kinds.len())]
        };
        self.k += 1;
        let k = self.k;
        let mut b = BytesMut::new();
        let r = match kind {
            Kind::Simple => frontend::encode_query(format!("q{k}").as_bytes(), &mut b),
            Kind::BeginOrCommit => {
                let word = if self.in_block { "commit" } else { "begin" };
                self.in_block = !self.in_block;
                frontend::encode_query(format!("{word} {k}").as_bytes(), &mut b)
            }
            Kind::Fail => frontend::encode_query(format!("fail {k}").as_bytes(), &mut b),
            Kind::Extended | Kind::Pipeline => {
                let text = if pick(u, 4) == 3 { "fail" } else { "x" };
                let r = unnamed(format!("{text}{k}").as_bytes(), pick(u, 2) == 1, &mut b);
                if matches!(kind, Kind::Pipeline) {
                    frontend::encode_flush(&mut b);
                    self.unsynced = true;
                } else {
                    frontend::encode_sync(&mut b);
                    self.unsynced = false;
                }
                r
            }
            Kind::Prepare => {
                let name = format!("s{k}");
                let r = frontend::encode_parse(
                    name.as_bytes(),
                    format!("x{k}").as_bytes(),
                    &[],
                    &mut b,
                );
                frontend::encode_sync(&mut b);
                self.statements.push(name);
                r
            }
            Kind::ExecuteNamed => {
                let name = &self.statements[pick(u, self.statements.len())];
                let r = frontend::encode_bind(b"", name.as_bytes(), &[], &[], &[], &mut b)
                    .and_then(|()| frontend::encode_execute(b"", 0, &mut b));
                frontend::encode_sync(&mut b);
                r
            }
            Kind::CloseNamed => {
                let name = self.statements.remove(pick(u, self.statements.len()));
                let r = frontend::encode_close(Target::Statement, name.as_bytes(), &mut b);
                frontend::encode_sync(&mut b);
                r
            }
            Kind::Sync => {
                frontend::encode_sync(&mut b);
                self.unsynced = false;
                Ok(())
            }
            Kind::Middleware => match pick(u, 4) {
                0 => encode_middleware(ROUTE, b"any", &mut b),
                1 => encode_middleware(ROUTE, b"standby", &mut b),
                2 => encode_middleware(ROUTE, b"primary", &mut b),
                _ => encode_middleware(TAG, format!("t{k}").as_bytes(), &mut b),
            },
            Kind::Terminate => {
                frontend::encode_terminate(&mut b);
                self.done = true;
                Ok(())
            }
        };
        r.expect("the fuzzer's client writes only well-formed requests");
        b.to_vec()
    }
}

/// Parse, Bind, optionally Describe, and Execute of the unnamed statement `text`.
fn unnamed(
    text: &[u8],
    describe: bool,
    b: &mut BytesMut,
) -> Result<(), pgyard_wire::frame::EncodeError> {
    frontend::encode_parse(b"", text, &[], b)?;
    frontend::encode_bind(b"", b"", &[], &[], &[], b)?;
    if describe {
        frontend::encode_describe(Target::Portal, b"", b)?;
    }
    frontend::encode_execute(b"", 0, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbitrary::Arbitrary;
    use pgyard_wire::frame::{decode_frame, Decoded};

    /// Every request is whole frames, and together the sessions reach every kind of request.
    #[test]
    fn sessions_are_whole_frames_and_reach_every_request_kind() {
        let mut tags = std::collections::BTreeSet::new();
        let mut named_parse = false;
        for seed in 0..300u64 {
            let data: Vec<u8> = (0..400u64)
                .map(|i| (seed.wrapping_mul(0x9e37_79b9).wrapping_add(i * 7919) >> 3) as u8)
                .collect();
            let s = ClientRequests::arbitrary(&mut Unstructured::new(&data)).expect("total");
            for r in &s.requests {
                let mut at = 0;
                while at < r.len() {
                    let Ok(Decoded::Frame(f)) = decode_frame(&r[at..], usize::MAX) else {
                        panic!("a request that is not whole frames: {r:?}");
                    };
                    tags.insert(f.tag);
                    named_parse |= f.tag == b'P' && f.body.first() == Some(&b's');
                    at += 5 + f.body.len();
                }
            }
        }
        let seen: String = tags.iter().map(|&t| char::from(t)).collect();
        for tag in "BCDEHMPQSX".chars() {
            assert!(seen.contains(tag), "no {tag} frame in any session: {seen}");
        }
        assert!(named_parse, "a named statement is prepared");
    }

    /// The structured target reads `sent()` to know how far a session got.
    #[test]
    fn a_client_counts_the_requests_it_made() {
        let data: Vec<u8> = (0..512u32).map(|i| (i * 37 % 251) as u8).collect();
        let mut u = Unstructured::new(&data);
        let mut c = WellFormedClient::arbitrary(&mut u);
        assert_eq!(c.sent(), 0);
        let mut made = 0;
        while made < 5 && !c.finished() {
            c.next_request(&mut u);
            made += 1;
            assert_eq!(c.sent(), made);
        }
    }
}
