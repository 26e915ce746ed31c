//! The walk over a capture: framing, the phase and the inferences one side needs (the
//! encryption answers, what a `p` message is, when CopyBoth starts and ends).

use super::messages::{backend, encryption_answer, frontend, startup};
use super::streaming::{pgoutput, replication};
use super::{int, text, Description, Fields, Layer, Side, Value, WalkError, WalkOptions};
use crate::backend::BackendMessage;
use crate::buf::DecodeError;
use crate::frame::{Decoded, EncryptionRequest, FrameDecoder, Limits, UnitRef, HEADER_BYTES};
use crate::frontend::{AuthResponseKind, FrontendMessage, SaslInitialResponse, StartupPacket};
use crate::middleware::{MiddlewareMessage, MIDDLEWARE_TAG};
use crate::pgoutput::{PgOutputDecoder, ProtoVersion};
use crate::replication::ReplicationMessage;

/// The state of one walk.
pub(super) struct Walker {
    options: WalkOptions,
    emitted: usize,
    /// Inside the CopyBoth phase of a replication connection.
    copy_both: bool,
    /// How the next frontend `p` is read, once known.
    auth: Option<AuthResponseKind>,
    pgoutput: PgOutputDecoder,
}

/// A decode error at `inner` offset of a unit whose decoded part starts at `base`.
fn at(base: usize, message_offset: usize, e: &DecodeError) -> WalkError {
    WalkError {
        offset: base + error_offset(e),
        message_offset,
        reason: e.to_string(),
    }
}

fn error_offset(e: &DecodeError) -> usize {
    match *e {
        DecodeError::UnexpectedEnd { offset, .. }
        | DecodeError::MissingTerminator { offset }
        | DecodeError::InvalidLength { offset, .. }
        | DecodeError::TrailingBytes { offset, .. }
        | DecodeError::InvalidCount { offset, .. }
        | DecodeError::Invalid { offset, .. } => offset,
        _ => 0,
    }
}

impl Walker {
    /// A walker at the first byte of a capture.
    pub(super) fn new(options: WalkOptions) -> Self {
        Walker {
            options,
            emitted: 0,
            copy_both: false,
            auth: None,
            pgoutput: PgOutputDecoder::new(ProtoVersion::MAX),
        }
    }

    /// How many descriptions were emitted so far.
    pub(super) fn emitted(&self) -> usize {
        self.emitted
    }

    /// Walks the whole capture, emitting as it goes.
    pub(super) fn run(
        &mut self,
        capture: &[u8],
        emit: &mut dyn FnMut(Description),
    ) -> Result<(), WalkError> {
        let mut dec = match self.options.side {
            Side::Frontend => FrameDecoder::frontend(Limits::default()),
            Side::Backend => FrameDecoder::backend(Limits::default()),
        };
        let mut pos = 0usize;
        if self.options.side == Side::Backend {
            pos = self.encryption_answers(capture, emit);
        }
        dec.feed(capture.get(pos..).unwrap_or_default());
        loop {
            let unit = match dec.decode_ref() {
                Ok(Decoded::Frame(u)) => u,
                Ok(Decoded::NeedMore { at_least }) => {
                    if pos == capture.len() {
                        return Ok(());
                    }
                    return Err(WalkError {
                        offset: capture.len(),
                        message_offset: pos,
                        reason: format!(
                            "the capture ends inside a message ({} byte(s) present, at least \
                             {at_least} more needed)",
                            capture.len() - pos
                        ),
                    });
                }
                Err(e) => {
                    let reason = match &e {
                        DecodeError::TooLarge { length, .. } => {
                            format!("impossible length word {length}")
                        }
                        other => other.to_string(),
                    };
                    return Err(WalkError {
                        offset: pos + error_offset(&e),
                        message_offset: pos,
                        reason,
                    });
                }
            };
            let wire_len = match unit {
                UnitRef::Typed(f) => {
                    self.typed(pos, f.tag, f.body, emit)?;
                    f.wire_len()
                }
                UnitRef::Startup(body) => {
                    let p = StartupPacket::decode(body).map_err(|e| at(pos + 4, pos, &e))?;
                    self.emit(emit, startup(pos, body.len() + 4, &p));
                    body.len() + 4
                }
                UnitRef::Byte(b) => {
                    self.emit(emit, encryption_answer(pos, b, None));
                    1
                }
            };
            pos += wire_len;
        }
    }

    fn emit(&mut self, emit: &mut dyn FnMut(Description), d: Description) {
        self.emitted += 1;
        emit(d);
    }

    /// Describes the one-byte answers at the start of a backend capture; returns their count.
    fn encryption_answers(&mut self, capture: &[u8], emit: &mut dyn FnMut(Description)) -> usize {
        let mut pos = 0;
        // At most two: GSSENCRequest refused, then SSLRequest.
        while pos < 2 {
            let Some(&b) = capture.get(pos) else { break };
            if !matches!(b, b'N' | b'S' | b'G') {
                break;
            }
            // After the first answer, `N` may also start a NoticeResponse, whose length word
            // begins with a zero byte.
            if pos > 0 && capture.get(pos + 1).is_none_or(|&next| next == 0) {
                break;
            }
            let request = match b {
                b'S' => Some(EncryptionRequest::Ssl),
                b'G' => Some(EncryptionRequest::GssEnc),
                _ => None,
            };
            self.emit(emit, encryption_answer(pos, b, request));
            pos += 1;
            if b != b'N' {
                break;
            }
        }
        pos
    }

    fn typed(
        &mut self,
        pos: usize,
        tag: u8,
        body: &[u8],
        emit: &mut dyn FnMut(Description),
    ) -> Result<(), WalkError> {
        let len = Some((body.len() + 4) as u32);
        let base = pos + HEADER_BYTES;
        let err = |e: DecodeError| at(base, pos, &e);
        match self.options.side {
            Side::Frontend => {
                if tag == MIDDLEWARE_TAG {
                    let m = MiddlewareMessage::decode(body).map_err(err)?;
                    let fields = vec![
                        ("class", Value::Int(m.class.get())),
                        ("payload", text(m.payload)),
                    ];
                    let d = typed_desc(Layer::Frontend, pos, tag, len, "MiddlewareMessage");
                    self.emit(emit, Description { fields, ..d });
                    return Ok(());
                }
                let kind = if tag == b'p' {
                    Some(self.auth_kind(body))
                } else {
                    None
                };
                let m = FrontendMessage::decode_with(tag, body, kind).map_err(err)?;
                let replication_copy = self.copy_both && self.options.replication;
                let (name, fields) = match m {
                    FrontendMessage::CopyData(p) if replication_copy => copy_data_len(p),
                    _ => frontend(&m),
                };
                let d = typed_desc(Layer::Frontend, pos, tag, len, name);
                self.emit(emit, Description { fields, ..d });
                match m {
                    FrontendMessage::Query(q) if is_start_replication(q) => self.copy_both = true,
                    FrontendMessage::CopyDone | FrontendMessage::CopyFail(_) => {
                        self.copy_both = false
                    }
                    FrontendMessage::CopyData(payload) if replication_copy => {
                        let r = ReplicationMessage::decode_from_client(payload).map_err(err)?;
                        self.emit(emit, replication(base, &r));
                    }
                    _ => {}
                }
            }
            Side::Backend => {
                let m = BackendMessage::decode(tag, body).map_err(err)?;
                let replication_copy = self.copy_both && self.options.replication;
                let (name, fields) = match m {
                    BackendMessage::CopyData(p) if replication_copy => copy_data_len(p),
                    _ => backend(&m),
                };
                let d = typed_desc(Layer::Backend, pos, tag, len, name);
                self.emit(emit, Description { fields, ..d });
                match m {
                    BackendMessage::CopyBothResponse(_) => self.copy_both = true,
                    BackendMessage::CopyDone
                    | BackendMessage::ErrorResponse(_)
                    | BackendMessage::ReadyForQuery(_) => self.copy_both = false,
                    BackendMessage::CopyData(payload) if replication_copy => {
                        let r = ReplicationMessage::decode_from_server(payload).map_err(err)?;
                        self.emit(emit, replication(base, &r));
                        if let ReplicationMessage::XLogData(x) = r {
                            let inner = base + 25;
                            let p = self
                                .pgoutput
                                .decode(x.data)
                                .map_err(|e| at(inner, pos, &e))?;
                            self.emit(emit, pgoutput(inner, &p));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Infers what a frontend `p` message is (see the module documentation).
    fn auth_kind(&mut self, body: &[u8]) -> AuthResponseKind {
        if let Some(kind) = self.auth {
            return kind;
        }
        let sasl = SaslInitialResponse::decode(body).is_ok_and(|m| {
            matches!(
                m.mechanism,
                b"SCRAM-SHA-256" | b"SCRAM-SHA-256-PLUS" | b"OAUTHBEARER"
            )
        });
        if sasl {
            self.auth = Some(AuthResponseKind::Sasl);
            return AuthResponseKind::SaslInitial;
        }
        if body.last() == Some(&0) && !body[..body.len() - 1].contains(&0) {
            AuthResponseKind::Password
        } else {
            self.auth = Some(AuthResponseKind::Gss);
            AuthResponseKind::Gss
        }
    }
}

/// A CopyData whose payload is described on its own line: only its size here.
fn copy_data_len(payload: &[u8]) -> (&'static str, Fields) {
    ("CopyData", vec![("data_len", int(payload.len() as i64))])
}

fn is_start_replication(q: &[u8]) -> bool {
    let q = q.trim_ascii_start();
    q.len() >= 17 && q[..17].eq_ignore_ascii_case(b"START_REPLICATION")
}

fn typed_desc(
    layer: Layer,
    offset: usize,
    tag: u8,
    len: Option<u32>,
    type_name: &'static str,
) -> Description {
    Description {
        layer,
        offset,
        tag: Some(tag),
        len,
        type_name,
        fields: Vec::new(),
    }
}
