//! The backend of the structured session fuzzer: enough of PostgreSQL's simple and extended
//! query protocol, with transaction blocks and named statements, that the same backend
//! answering the client directly gives the replies the proxy must pass on. Every command
//! tag is the statement's own text, so replies show which statement they answer.

use std::collections::BTreeMap;

use bytes::BytesMut;
use pgyard_wire::backend::{
    encode_command_complete, encode_empty, encode_ready_for_query, TransactionStatus,
};
use pgyard_wire::error_fields::encode_error_response;
use pgyard_wire::frame::{decode_frame, Decoded};
use pgyard_wire::frontend::{Bind, Parse, TargetName};

/// A transaction block's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    None,
    Open,
    Failed,
}

/// One server connection.
#[derive(Debug)]
pub(super) struct Backend {
    buf: Vec<u8>,
    statements: BTreeMap<Vec<u8>, Vec<u8>>,
    portal: Option<Vec<u8>>,
    block: Block,
    /// After an error in the extended protocol, until Sync.
    skipping: bool,
    /// Replies not yet read by the other side.
    pub out: Vec<u8>,
}

impl Backend {
    /// A fresh connection past its login.
    pub fn new() -> Backend {
        Backend {
            buf: Vec::new(),
            statements: BTreeMap::new(),
            portal: None,
            block: Block::None,
            skipping: false,
            out: Vec::new(),
        }
    }

    /// Whether another client may use it now: no partial message, no block, no error
    /// awaiting its Sync, and every reply read.
    pub fn idle(&self) -> Result<(), &'static str> {
        if !self.buf.is_empty() {
            Err("holds part of a message")
        } else if self.block != Block::None {
            Err("is inside a transaction block")
        } else if self.skipping {
            Err("awaits the Sync after an error")
        } else if !self.out.is_empty() {
            Err("has replies nobody read")
        } else {
            Ok(())
        }
    }

    /// Takes frontend bytes and answers into `out`; a message a server must never see, or
    /// cannot read, is the error.
    pub fn receive(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.buf.extend_from_slice(bytes);
        loop {
            let (tag, body) = match decode_frame(&self.buf, 1 << 20) {
                Ok(Decoded::Frame(f)) => (f.tag, f.body.to_vec()),
                Ok(Decoded::NeedMore { .. }) => return Ok(()),
                Err(e) => return Err(format!("unreadable bytes reached a server: {e}")),
            };
            self.buf.drain(..5 + body.len());
            self.message(tag, &body)?;
        }
    }

    fn message(&mut self, tag: u8, body: &[u8]) -> Result<(), String> {
        let mut out = BytesMut::new();
        match tag {
            b'M' | b'X' => return Err(format!("a {} frame reached a server", char::from(tag))),
            b'S' => {
                self.skipping = false;
                self.ready(&mut out);
            }
            b'H' => {}
            _ if self.skipping => {}
            b'Q' => {
                let text = body.strip_suffix(&[0]).unwrap_or(body);
                self.query(text, &mut out);
                self.ready(&mut out);
            }
            // As PostgreSQL: in a failed block Parse, Bind, Describe and Execute are refused
            // (the fuzzer's statements never end a block); Close still works.
            b'P' | b'B' | b'D' | b'E' if self.refuse_in_failed_block(&mut out) => {
                self.skipping = true;
            }
            b'P' => {
                let p = Parse::decode(body).map_err(|e| format!("Parse: {e}"))?;
                self.statements.insert(p.name.to_vec(), p.query.to_vec());
                encode_empty(b'1', &mut out);
            }
            b'B' => {
                let b = Bind::decode(body).map_err(|e| format!("Bind: {e}"))?;
                match self.statements.get(b.statement) {
                    Some(text) => {
                        self.portal = Some(text.clone());
                        encode_empty(b'2', &mut out);
                    }
                    None => {
                        let name = String::from_utf8_lossy(b.statement);
                        let text = format!("prepared statement \"{name}\" does not exist");
                        error(&mut out, b"26000", text.as_bytes());
                        self.skipping = true;
                    }
                }
            }
            b'D' => encode_empty(b'n', &mut out),
            b'E' => match self.portal.clone() {
                Some(text) if text.starts_with(b"fail") => {
                    error(&mut out, b"42000", &text);
                    self.skipping = true;
                }
                Some(text) => put(&mut out, |b| encode_command_complete(&text, b)),
                None => {
                    error(&mut out, b"34000", b"portal \"\" does not exist");
                    self.skipping = true;
                }
            },
            b'C' => {
                let t = TargetName::decode(body).map_err(|e| format!("Close: {e}"))?;
                self.statements.remove(t.name);
                encode_empty(b'3', &mut out);
            }
            other => return Err(format!("unexpected {} frame", char::from(other))),
        }
        self.out.extend_from_slice(&out);
        Ok(())
    }

    fn query(&mut self, text: &[u8], out: &mut BytesMut) {
        // The proxy's alignment: PostgreSQL answers each SET; one answer stands for them.
        if text.starts_with(b"SET ") {
            return put(out, |b| encode_command_complete(b"SET", b));
        }
        if !text.starts_with(b"commit") && self.refuse_in_failed_block(out) {
            return;
        }
        if text.starts_with(b"fail") {
            error(out, b"42000", text);
            if self.block == Block::Open {
                self.block = Block::Failed;
            }
            return;
        }
        if text.starts_with(b"begin") {
            self.block = Block::Open;
        } else if text.starts_with(b"commit") {
            let failed = self.block == Block::Failed;
            self.block = Block::None;
            if failed {
                return put(out, |b| encode_command_complete(b"ROLLBACK", b));
            }
        }
        put(out, |b| encode_command_complete(text, b));
    }

    /// In a failed block every command but its end is refused.
    fn refuse_in_failed_block(&self, out: &mut BytesMut) -> bool {
        if self.block != Block::Failed {
            return false;
        }
        let text: &[u8] =
            b"current transaction is aborted, commands ignored until end of transaction block";
        error(out, b"25P02", text);
        true
    }

    fn ready(&self, out: &mut BytesMut) {
        let status = match self.block {
            Block::None => TransactionStatus::Idle,
            Block::Open => TransactionStatus::InTransaction,
            Block::Failed => TransactionStatus::Failed,
        };
        encode_ready_for_query(status, out);
    }
}

fn error(out: &mut BytesMut, code: &[u8], message: &[u8]) {
    let fields: [(u8, &[u8]); 4] = [
        (b'S', b"ERROR"),
        (b'V', b"ERROR"),
        (b'C', code),
        (b'M', message),
    ];
    put(out, |b| encode_error_response(&fields, b));
}

/// Encodes a reply the backend builds itself: all are well-formed, so a failure is a codec
/// bug and stops the run.
fn put<E: std::fmt::Debug>(out: &mut BytesMut, f: impl FnOnce(&mut BytesMut) -> Result<(), E>) {
    if let Err(e) = f(out) {
        panic!("a well-formed reply failed to encode: {e:?}");
    }
}
