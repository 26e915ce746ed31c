//! The client of the structured session fuzzer: well-formed requests only, chosen by the
//! input within what a correct client may send in its state (no COMMIT outside a block, no
//! Bind of a statement it never prepared, a Sync after every pipeline, middleware messages
//! between transactions, and only when it asked for them at startup).

use arbitrary::Unstructured;
use bytes::BytesMut;
use pgyard_wire::frame::ProtocolVersion;
use pgyard_wire::frontend::{self, Target};
use pgyard_wire::middleware::encode_middleware;

use super::structured::pick;
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

/// One client's state as the client itself knows it.
pub(super) struct Client {
    middleware: bool,
    application_name: Option<&'static str>,
    k: usize,
    in_block: bool,
    /// Extended-protocol messages sent since the last Sync.
    unsynced: bool,
    statements: Vec<String>,
    done: bool,
}

impl Client {
    /// A client whose startup options the input chooses.
    pub fn arbitrary(u: &mut Unstructured<'_>) -> Client {
        Client {
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
