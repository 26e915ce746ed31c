//! The servers of the `proxy` scenario: just enough of PostgreSQL's extended and simple query
//! protocol to tell whether the proxy kept its promises. Every query names its client and
//! transaction (`c3 t7 n12`), so a server can say which transaction ran where; its replies
//! echo that text as the command tag, so a client can check that answers come in order.

use std::collections::{BTreeMap, BTreeSet};

use bytes::BytesMut;
use pgyard_wire::backend::{self, TransactionStatus};
use pgyard_wire::error_fields::encode_error_response;
use pgyard_wire::frame::{decode_frame, Decoded};
use pgyard_wire::frontend::{Bind, Parse, TargetName};

use crate::world::pg::Role;
use crate::Violation;

/// Where each transaction ran: `(client, txn)` → server.
pub type Placement = BTreeMap<(u64, u64), u64>;

/// One simulated server connection.
#[derive(Debug)]
pub struct FakeServer {
    /// The pool's id of the connection.
    pub id: u64,
    /// What the server it reaches is.
    pub role: Role,
    buf: Vec<u8>,
    statements: BTreeSet<Vec<u8>>,
    /// After an error, until the next Sync.
    skipping: bool,
    in_block: bool,
    /// The text the unnamed portal answers with.
    portal: Vec<u8>,
}

fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// The `(client, txn)` a query text names, if any.
pub fn owner(text: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut c = None;
    let mut t = None;
    for word in text.split(' ') {
        if let Some(v) = word.strip_prefix('c') {
            c = v.parse().ok();
        } else if let Some(v) = word.strip_prefix('t') {
            t = v.parse().ok();
        }
    }
    Some((c?, t?))
}

impl FakeServer {
    /// A fresh connection to a server in `role`.
    pub fn new(id: u64, role: Role) -> Self {
        FakeServer {
            id,
            role,
            buf: Vec::new(),
            statements: BTreeSet::new(),
            skipping: false,
            in_block: false,
            portal: Vec::new(),
        }
    }

    /// Takes bytes from the proxy and answers; records where each transaction ran.
    pub fn receive(
        &mut self,
        bytes: &[u8],
        placed: &mut Placement,
        out: &mut BytesMut,
    ) -> Result<(), Violation> {
        self.buf.extend_from_slice(bytes);
        loop {
            let (tag, body) = match decode_frame(&self.buf, 1 << 20) {
                Ok(Decoded::Frame(f)) => (f.tag, f.body.to_vec()),
                Ok(Decoded::NeedMore { .. }) => return Ok(()),
                Err(e) => {
                    let detail = format!("server {} got bad bytes: {e}", self.id);
                    return Err(violation("frames-reach-servers-whole", detail));
                }
            };
            self.buf.drain(..5 + body.len());
            self.message(tag, &body, placed, out)?;
        }
    }

    fn place(&self, text: &[u8], placed: &mut Placement) -> Result<(), Violation> {
        let Some(key) = owner(text) else {
            return Ok(());
        };
        match placed.insert(key, self.id) {
            Some(other) if other != self.id => Err(violation(
                "transaction-on-one-server",
                format!(
                    "client {} transaction {} ran on server {other} and then on server {}",
                    key.0, key.1, self.id
                ),
            )),
            _ => Ok(()),
        }
    }

    fn message(
        &mut self,
        tag: u8,
        body: &[u8],
        placed: &mut Placement,
        out: &mut BytesMut,
    ) -> Result<(), Violation> {
        match tag {
            b'M' | b'X' => {
                let detail = format!("server {} received a {} frame", self.id, char::from(tag));
                return Err(violation(
                    "no-middleware-or-terminate-reaches-a-server",
                    detail,
                ));
            }
            b'S' => {
                self.skipping = false;
                self.ready(out);
            }
            _ if self.skipping => {}
            b'Q' => {
                let text = body.strip_suffix(&[0]).unwrap_or(body);
                self.place(text, placed)?;
                if text.starts_with(b"begin") {
                    self.in_block = true;
                } else if text.starts_with(b"commit") {
                    self.in_block = false;
                }
                if !text.starts_with(b"SET ") {
                    let _ = backend::encode_command_complete(text, out);
                }
                self.ready(out);
            }
            b'P' => {
                let p = Parse::decode(body).map_err(|e| bad(self.id, e))?;
                if !p.name.is_empty() {
                    self.statements.insert(p.name.to_vec());
                }
                backend::encode_empty(b'1', out);
            }
            b'B' => {
                let b = Bind::decode(body).map_err(|e| bad(self.id, e))?;
                if !b.statement.is_empty() && !self.statements.contains(b.statement) {
                    let text = format!(
                        "prepared statement \"{}\" does not exist",
                        String::from_utf8_lossy(b.statement)
                    );
                    let fields: [(u8, &[u8]); 3] =
                        [(b'S', b"ERROR"), (b'C', b"26000"), (b'M', text.as_bytes())];
                    let _ = encode_error_response(&fields, out);
                    self.skipping = true;
                    return Ok(());
                }
                let param = b.params.iter().next().flatten().unwrap_or_default();
                self.place(param, placed)?;
                self.portal = param.to_vec();
                backend::encode_empty(b'2', out);
            }
            b'D' => backend::encode_empty(b'n', out),
            b'E' => {
                let _ = backend::encode_command_complete(&self.portal, out);
            }
            b'C' => {
                let t = TargetName::decode(body).map_err(|e| bad(self.id, e))?;
                self.statements.remove(t.name);
                backend::encode_empty(b'3', out);
            }
            _ => {}
        }
        Ok(())
    }

    fn ready(&self, out: &mut BytesMut) {
        let status = if self.in_block {
            TransactionStatus::InTransaction
        } else {
            TransactionStatus::Idle
        };
        backend::encode_ready_for_query(status, out);
    }
}

fn bad(id: u64, e: pgyard_wire::DecodeError) -> Violation {
    violation(
        "frames-reach-servers-whole",
        format!("server {id} could not read a message: {e}"),
    )
}
