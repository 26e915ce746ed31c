//! Readable descriptions of a one-direction capture, for dumps and golden tests.
//!
//! [`walk`] decodes a raw capture of one side of a connection from its first byte and hands
//! out one [`Description`] per message: the type byte, the length word, the message's name as
//! the PostgreSQL protocol documentation spells it, and its fields as small dependency-free
//! [`Value`]s (bytes become UTF-8-lossy text, except values that are binary by nature, which
//! become lowercase hex). With [`WalkOptions::replication`] the CopyData payloads of a logical
//! replication stream are described as their own layer, and so are the pgoutput messages
//! inside XLogData; pgoutput is read from the server side alone, tracking Stream Start and
//! Stream Stop to know which changes carry an xid.
//!
//! What one side alone cannot know is inferred: the backend side starts with a one-byte
//! SSL/GSSENC answer when its first byte is `N`, `S` or `G` (a second answer may follow when a
//! client tried GSSENC and then SSL); a frontend `p` message is a SASLInitialResponse when it
//! names a SASL mechanism (then SASLResponse follows), else a PasswordMessage when it is one
//! string, else a GSSResponse. Errors carry the absolute byte offset in the capture.

use std::fmt;

use pgyard_types::{Lsn, PgTimestamp};

use crate::backend::{Authentication, BackendMessage, CopyResponse, TransactionStatus};
use crate::buf::DecodeError;
use crate::error_fields::{ErrorFields, FieldCode};
use crate::frame::{
    Decoded, EncryptionRequest, FormatCodes, FrameDecoder, Limits, Oids, UnitRef, Values,
    HEADER_BYTES,
};
use crate::frontend::{
    AuthResponseKind, FrontendMessage, SaslInitialResponse, StartupPacket, Target,
};
use crate::middleware::{MiddlewareMessage, MIDDLEWARE_TAG};
use crate::pgoutput::{
    OldTuple, PgOutputDecoder, PgOutputMessage, Prepare, ProtoVersion, TupleData, TupleValue,
};
use crate::replication::ReplicationMessage;

/// A field value: the JSON-like shapes a dump needs, with no serializer attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// Absent / SQL NULL.
    Null,
    /// A flag.
    Bool(bool),
    /// A number.
    Int(i64),
    /// Text (bytes rendered UTF-8-lossy, LSNs as `X/X`, binary data as hex).
    Text(String),
    /// A list.
    List(Vec<Value>),
    /// Named values in order.
    Map(Vec<(String, Value)>),
}

/// Which layer of the capture a description belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// A frontend (client → server) protocol message.
    Frontend,
    /// A backend (server → client) protocol message.
    Backend,
    /// The payload of a CopyData of a replication connection.
    Replication,
    /// A pgoutput message inside XLogData.
    PgOutput,
}

impl Layer {
    /// The layer's name in dumps: `frontend`, `backend`, `replication`, `pgoutput`.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Frontend => "frontend",
            Layer::Backend => "backend",
            Layer::Replication => "replication",
            Layer::PgOutput => "pgoutput",
        }
    }
}

/// One described message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    /// Its layer.
    pub layer: Layer,
    /// Byte offset of the message's first byte in the capture.
    pub offset: usize,
    /// The type byte; `None` for untyped startup-phase packets.
    pub tag: Option<u8>,
    /// The length word; `None` where the message has none (one-byte answers, sub-messages).
    pub len: Option<u32>,
    /// The name the protocol documentation gives the message.
    pub type_name: &'static str,
    /// The decoded fields, in wire order, snake_case names.
    pub fields: Vec<(&'static str, Value)>,
}

/// Which direction a capture holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// What the client sent.
    Frontend,
    /// What the server sent.
    Backend,
}

/// How to walk a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkOptions {
    /// The direction the capture holds.
    pub side: Side,
    /// Describe the CopyData payloads of a logical replication stream, and pgoutput.
    pub replication: bool,
}

/// Why a capture could not be walked to its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkError {
    /// Absolute byte offset in the capture where the problem is.
    pub offset: usize,
    /// Offset of the first byte of the message that failed.
    pub message_offset: usize,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed stream at byte offset {} (in the message starting at byte offset {}): {}",
            self.offset, self.message_offset, self.reason
        )
    }
}

impl std::error::Error for WalkError {}

/// Walks a whole capture, calling `emit` for each message (replication sub-messages right
/// after their CopyData, pgoutput right after its XLogData). Returns the number of
/// descriptions emitted.
pub fn walk(
    capture: &[u8],
    options: WalkOptions,
    mut emit: impl FnMut(Description),
) -> Result<usize, WalkError> {
    let mut w = Walker {
        options,
        emitted: 0,
        copy_both: false,
        auth: None,
        pgoutput: PgOutputDecoder::new(ProtoVersion::MAX),
    };
    w.run(capture, &mut emit)?;
    Ok(w.emitted)
}

/// Walks a whole capture and collects the descriptions.
pub fn describe_all(capture: &[u8], options: WalkOptions) -> Result<Vec<Description>, WalkError> {
    let mut out = Vec::new();
    walk(capture, options, |d| out.push(d))?;
    Ok(out)
}

struct Walker {
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
    fn run(&mut self, capture: &[u8], emit: &mut dyn FnMut(Description)) -> Result<(), WalkError> {
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

// ---------------------------------------------------------------------------------------------
// value helpers

/// Bytes as UTF-8-lossy text.
fn text(b: &[u8]) -> Value {
    Value::Text(String::from_utf8_lossy(b).into_owned())
}

/// Bytes as lowercase hex.
fn hex(b: &[u8]) -> Value {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(char::from(b"0123456789abcdef"[usize::from(x >> 4)]));
        s.push(char::from(b"0123456789abcdef"[usize::from(x & 15)]));
    }
    Value::Text(s)
}

fn opt_text(b: Option<&[u8]>) -> Value {
    b.map_or(Value::Null, text)
}

fn int(n: impl Into<i64>) -> Value {
    Value::Int(n.into())
}

fn lsn(l: Lsn) -> Value {
    Value::Text(l.to_string())
}

/// Microseconds since 2000-01-01 00:00:00 UTC, as on the wire.
fn ts(t: PgTimestamp) -> Value {
    Value::Int(t.0)
}

fn ch(b: u8) -> Value {
    Value::Text(char::from(b).to_string())
}

fn formats(f: &FormatCodes<'_>) -> Value {
    Value::List(f.iter().map(int).collect())
}

fn oids(o: &Oids<'_>) -> Value {
    Value::List(o.iter().map(int).collect())
}

fn values(v: &Values<'_>) -> Value {
    Value::List(v.iter().map(opt_text).collect())
}

// ---------------------------------------------------------------------------------------------
// startup phase and frontend

fn encryption_answer(offset: usize, b: u8, request: Option<EncryptionRequest>) -> Description {
    let encryption = match request {
        Some(EncryptionRequest::Ssl) => Value::Text("ssl".into()),
        Some(EncryptionRequest::GssEnc) => Value::Text("gssenc".into()),
        None => Value::Null,
    };
    Description {
        layer: Layer::Backend,
        offset,
        tag: Some(b),
        len: None,
        type_name: "EncryptionResponse",
        fields: vec![
            ("accepted", Value::Bool(b != b'N')),
            ("encryption", encryption),
        ],
    }
}

fn startup(offset: usize, len: usize, p: &StartupPacket<'_>) -> Description {
    let (name, fields) = match p {
        StartupPacket::Startup(s) => (
            "StartupMessage",
            vec![
                (
                    "protocol_version",
                    Value::Text(format!("{}.{}", s.version.major(), s.version.minor())),
                ),
                (
                    "parameters",
                    Value::Map(
                        s.params
                            .iter()
                            .map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), text(v)))
                            .collect(),
                    ),
                ),
            ],
        ),
        StartupPacket::SslRequest => ("SSLRequest", Vec::new()),
        StartupPacket::GssEncRequest => ("GSSENCRequest", Vec::new()),
        StartupPacket::CancelRequest(c) => (
            "CancelRequest",
            vec![("process_id", int(c.pid)), ("secret_key", hex(c.key))],
        ),
    };
    Description {
        layer: Layer::Frontend,
        offset,
        tag: None,
        len: Some(len as u32),
        type_name: name,
        fields,
    }
}

type Fields = Vec<(&'static str, Value)>;

/// The documented name and the fields of a frontend message.
pub fn frontend(m: &FrontendMessage<'_>) -> (&'static str, Fields) {
    let target = |t: Target| ch(t.byte());
    match m {
        FrontendMessage::Bind(b) => (
            "Bind",
            vec![
                ("portal", text(b.portal)),
                ("statement", text(b.statement)),
                ("parameter_format_codes", formats(&b.param_formats)),
                ("parameters", values(&b.params)),
                ("result_format_codes", formats(&b.result_formats)),
            ],
        ),
        FrontendMessage::Close(t) => (
            "Close",
            vec![("target", target(t.target)), ("name", text(t.name))],
        ),
        FrontendMessage::CopyData(d) => ("CopyData", vec![("data", text(d))]),
        FrontendMessage::CopyDone => ("CopyDone", Vec::new()),
        FrontendMessage::CopyFail(msg) => ("CopyFail", vec![("message", text(msg))]),
        FrontendMessage::Describe(t) => (
            "Describe",
            vec![("target", target(t.target)), ("name", text(t.name))],
        ),
        FrontendMessage::Execute(e) => (
            "Execute",
            vec![("portal", text(e.portal)), ("max_rows", int(e.max_rows))],
        ),
        FrontendMessage::Flush => ("Flush", Vec::new()),
        FrontendMessage::FunctionCall(f) => (
            "FunctionCall",
            vec![
                ("function_oid", int(f.function_oid)),
                ("argument_format_codes", formats(&f.arg_formats)),
                ("arguments", values(&f.args)),
                ("result_format", int(f.result_format)),
            ],
        ),
        FrontendMessage::Parse(p) => (
            "Parse",
            vec![
                ("statement", text(p.name)),
                ("query", text(p.query)),
                ("parameter_types", oids(&p.param_types)),
            ],
        ),
        FrontendMessage::Query(q) => ("Query", vec![("query", text(q))]),
        FrontendMessage::Sync => ("Sync", Vec::new()),
        FrontendMessage::Terminate => ("Terminate", Vec::new()),
        FrontendMessage::PasswordMessage(p) => ("PasswordMessage", vec![("password", text(p))]),
        FrontendMessage::GssResponse(t) => ("GSSResponse", vec![("data", hex(t))]),
        FrontendMessage::SaslInitialResponse(s) => (
            "SASLInitialResponse",
            vec![("mechanism", text(s.mechanism)), ("data", opt_text(s.data))],
        ),
        FrontendMessage::SaslResponse(d) => ("SASLResponse", vec![("data", text(d))]),
        FrontendMessage::AuthResponse(d) => ("AuthenticationResponse", vec![("data", hex(d))]),
    }
}

// ---------------------------------------------------------------------------------------------
// backend

fn copy_response(c: &CopyResponse<'_>) -> Fields {
    vec![
        ("format", int(c.format)),
        ("column_format_codes", formats(&c.column_formats)),
    ]
}

fn field_name(code: FieldCode) -> String {
    match code {
        FieldCode::Severity => "severity",
        FieldCode::SeverityNonLocalized => "severity_non_localized",
        FieldCode::Code => "code",
        FieldCode::Message => "message",
        FieldCode::Detail => "detail",
        FieldCode::Hint => "hint",
        FieldCode::Position => "position",
        FieldCode::InternalPosition => "internal_position",
        FieldCode::InternalQuery => "internal_query",
        FieldCode::Where => "where",
        FieldCode::Schema => "schema_name",
        FieldCode::Table => "table_name",
        FieldCode::Column => "column_name",
        FieldCode::DataType => "data_type_name",
        FieldCode::Constraint => "constraint_name",
        FieldCode::File => "file",
        FieldCode::Line => "line",
        FieldCode::Routine => "routine",
        FieldCode::Unknown(b) => return char::from(b).to_string(),
    }
    .to_owned()
}

fn error_fields(f: &ErrorFields<'_>) -> Fields {
    vec![(
        "fields",
        Value::Map(f.iter().map(|(c, v)| (field_name(c), text(v))).collect()),
    )]
}

/// The documented name and the fields of a backend message.
pub fn backend(m: &BackendMessage<'_>) -> (&'static str, Fields) {
    match m {
        BackendMessage::Authentication(a) => authentication(a),
        BackendMessage::BackendKeyData(k) => (
            "BackendKeyData",
            vec![("process_id", int(k.pid)), ("secret_key", hex(k.key))],
        ),
        BackendMessage::BindComplete => ("BindComplete", Vec::new()),
        BackendMessage::CloseComplete => ("CloseComplete", Vec::new()),
        BackendMessage::CommandComplete(t) => ("CommandComplete", vec![("command_tag", text(t))]),
        BackendMessage::CopyData(d) => ("CopyData", vec![("data", text(d))]),
        BackendMessage::CopyDone => ("CopyDone", Vec::new()),
        BackendMessage::CopyInResponse(c) => ("CopyInResponse", copy_response(c)),
        BackendMessage::CopyOutResponse(c) => ("CopyOutResponse", copy_response(c)),
        BackendMessage::CopyBothResponse(c) => ("CopyBothResponse", copy_response(c)),
        BackendMessage::DataRow(r) => ("DataRow", vec![("columns", values(&r.values()))]),
        BackendMessage::EmptyQueryResponse => ("EmptyQueryResponse", Vec::new()),
        BackendMessage::ErrorResponse(f) => ("ErrorResponse", error_fields(f)),
        BackendMessage::FunctionCallResponse(v) => {
            ("FunctionCallResponse", vec![("result", opt_text(*v))])
        }
        BackendMessage::NegotiateProtocolVersion(n) => (
            "NegotiateProtocolVersion",
            vec![
                ("newest_minor_version", int(n.newest_minor)),
                (
                    "unrecognized_options",
                    Value::List(n.unrecognized.iter().map(text).collect()),
                ),
            ],
        ),
        BackendMessage::NoData => ("NoData", Vec::new()),
        BackendMessage::NoticeResponse(f) => ("NoticeResponse", error_fields(f)),
        BackendMessage::NotificationResponse(n) => (
            "NotificationResponse",
            vec![
                ("process_id", int(n.pid)),
                ("channel", text(n.channel)),
                ("payload", text(n.payload)),
            ],
        ),
        BackendMessage::ParameterDescription(o) => {
            ("ParameterDescription", vec![("parameter_types", oids(o))])
        }
        BackendMessage::ParameterStatus(p) => (
            "ParameterStatus",
            vec![("name", text(p.name)), ("value", text(p.value))],
        ),
        BackendMessage::ParseComplete => ("ParseComplete", Vec::new()),
        BackendMessage::PortalSuspended => ("PortalSuspended", Vec::new()),
        BackendMessage::ReadyForQuery(s) => {
            let status = match s {
                TransactionStatus::Idle => b'I',
                TransactionStatus::InTransaction => b'T',
                TransactionStatus::Failed => b'E',
            };
            ("ReadyForQuery", vec![("status", ch(status))])
        }
        BackendMessage::RowDescription(r) => (
            "RowDescription",
            vec![(
                "fields",
                Value::List(
                    r.fields()
                        .map(|f| {
                            Value::Map(vec![
                                ("name".into(), text(f.name)),
                                ("table_oid".into(), int(f.table_oid)),
                                ("column_attribute_number".into(), int(f.column_id)),
                                ("type_oid".into(), int(f.type_oid)),
                                ("type_size".into(), int(f.type_size)),
                                ("type_modifier".into(), int(f.type_modifier)),
                                ("format".into(), int(f.format)),
                            ])
                        })
                        .collect(),
                ),
            )],
        ),
    }
}

fn authentication(a: &Authentication<'_>) -> (&'static str, Fields) {
    match a {
        Authentication::Ok => ("AuthenticationOk", Vec::new()),
        Authentication::KerberosV5 => ("AuthenticationKerberosV5", Vec::new()),
        Authentication::CleartextPassword => ("AuthenticationCleartextPassword", Vec::new()),
        Authentication::Md5Password { salt } => {
            ("AuthenticationMD5Password", vec![("salt", hex(salt))])
        }
        Authentication::ScmCredential => ("AuthenticationSCMCredential", Vec::new()),
        Authentication::Gss => ("AuthenticationGSS", Vec::new()),
        Authentication::GssContinue(d) => ("AuthenticationGSSContinue", vec![("data", hex(d))]),
        Authentication::Sspi => ("AuthenticationSSPI", Vec::new()),
        Authentication::Sasl(m) => (
            "AuthenticationSASL",
            vec![("mechanisms", Value::List(m.iter().map(text).collect()))],
        ),
        Authentication::SaslContinue(d) => ("AuthenticationSASLContinue", vec![("data", text(d))]),
        Authentication::SaslFinal(d) => ("AuthenticationSASLFinal", vec![("data", text(d))]),
    }
}

// ---------------------------------------------------------------------------------------------
// replication and pgoutput

/// Describes a replication CopyData payload that starts at byte `offset` of the capture.
pub fn replication(offset: usize, m: &ReplicationMessage<'_>) -> Description {
    let (name, fields) = match m {
        ReplicationMessage::XLogData(x) => (
            "XLogData",
            vec![
                ("wal_start", lsn(x.start)),
                ("wal_end", lsn(x.end)),
                ("send_time", ts(x.send_time)),
                ("data_len", int(x.data.len() as i64)),
            ],
        ),
        ReplicationMessage::PrimaryKeepalive(k) => (
            "Primary keepalive message",
            vec![
                ("wal_end", lsn(k.wal_end)),
                ("send_time", ts(k.send_time)),
                ("reply_requested", Value::Bool(k.reply_requested)),
            ],
        ),
        ReplicationMessage::StandbyStatusUpdate(s) => (
            "Standby status update",
            vec![
                ("write_lsn", lsn(s.write)),
                ("flush_lsn", lsn(s.flush)),
                ("apply_lsn", lsn(s.apply)),
                ("send_time", ts(s.send_time)),
                ("reply_requested", Value::Bool(s.reply_requested)),
            ],
        ),
        ReplicationMessage::HotStandbyFeedback(h) => (
            "Hot standby feedback message",
            vec![
                ("send_time", ts(h.send_time)),
                ("xmin", int(h.xmin.0)),
                ("xmin_epoch", int(h.xmin_epoch)),
                ("catalog_xmin", int(h.catalog_xmin.0)),
                ("catalog_xmin_epoch", int(h.catalog_xmin_epoch)),
            ],
        ),
    };
    Description {
        layer: Layer::Replication,
        offset,
        tag: Some(m.tag()),
        len: None,
        type_name: name,
        fields,
    }
}

fn tuple(t: &TupleData<'_>) -> Value {
    Value::List(
        t.iter()
            .map(|v| match v {
                TupleValue::Null => Value::Null,
                TupleValue::Text(s) => text(s),
                TupleValue::UnchangedToast => {
                    Value::Map(vec![("kind".into(), Value::Text("u".into()))])
                }
                TupleValue::Binary(b) => Value::Map(vec![
                    ("kind".into(), Value::Text("b".into())),
                    ("value".into(), hex(b)),
                ]),
            })
            .collect(),
    )
}

fn old_tuple(fields: &mut Fields, old: &OldTuple<'_>) {
    match old {
        OldTuple::Key(t) => fields.push(("old_key", tuple(t))),
        OldTuple::Full(t) => fields.push(("old_tuple", tuple(t))),
    }
}

fn prepare_fields(p: &Prepare<'_>) -> Fields {
    vec![
        ("prepare_lsn", lsn(p.prepare_lsn)),
        ("end_lsn", lsn(p.end_lsn)),
        ("prepare_time", ts(p.prepare_time)),
        ("xid", int(p.xid.0)),
        ("gid", text(p.gid)),
    ]
}

/// Describes a pgoutput message that starts at byte `offset` of the capture.
pub fn pgoutput(offset: usize, m: &PgOutputMessage<'_>) -> Description {
    let mut f: Fields = Vec::new();
    if let Some(x) = m.stream_xid() {
        f.push(("xid", int(x.0)));
    }
    let name = match m {
        PgOutputMessage::Begin(b) => {
            f.push(("final_lsn", lsn(b.final_lsn)));
            f.push(("commit_time", ts(b.commit_time)));
            f.push(("xid", int(b.xid.0)));
            "Begin"
        }
        PgOutputMessage::Commit(c) => {
            f.push(("commit_lsn", lsn(c.commit_lsn)));
            f.push(("end_lsn", lsn(c.end_lsn)));
            f.push(("commit_time", ts(c.commit_time)));
            "Commit"
        }
        PgOutputMessage::Origin(o) => {
            f.push(("commit_lsn", lsn(o.commit_lsn)));
            f.push(("name", text(o.name)));
            "Origin"
        }
        PgOutputMessage::Relation(r) => {
            f.push(("oid", int(r.oid)));
            f.push(("namespace", text(r.namespace)));
            f.push(("name", text(r.name)));
            f.push(("replica_identity", ch(r.replica_identity.byte())));
            let cols = r
                .columns
                .iter()
                .map(|c| {
                    Value::Map(vec![
                        ("key".into(), Value::Bool(c.key)),
                        ("name".into(), text(c.name)),
                        ("type_oid".into(), int(c.type_oid)),
                        ("type_modifier".into(), int(c.type_modifier)),
                    ])
                })
                .collect();
            f.push(("columns", Value::List(cols)));
            "Relation"
        }
        PgOutputMessage::Type(t) => {
            f.push(("oid", int(t.oid)));
            f.push(("namespace", text(t.namespace)));
            f.push(("name", text(t.name)));
            "Type"
        }
        PgOutputMessage::Insert(i) => {
            f.push(("relation_oid", int(i.relation)));
            f.push(("new_tuple", tuple(&i.new)));
            "Insert"
        }
        PgOutputMessage::Update(u) => {
            f.push(("relation_oid", int(u.relation)));
            if let Some(old) = &u.old {
                old_tuple(&mut f, old);
            }
            f.push(("new_tuple", tuple(&u.new)));
            "Update"
        }
        PgOutputMessage::Delete(d) => {
            f.push(("relation_oid", int(d.relation)));
            old_tuple(&mut f, &d.old);
            "Delete"
        }
        PgOutputMessage::Truncate(t) => {
            f.push(("cascade", Value::Bool(t.cascade)));
            f.push(("restart_identity", Value::Bool(t.restart_identity)));
            f.push((
                "relation_oids",
                Value::List(t.relations.iter().map(int).collect()),
            ));
            "Truncate"
        }
        PgOutputMessage::Message(msg) => {
            f.push(("transactional", Value::Bool(msg.transactional)));
            f.push(("lsn", lsn(msg.lsn)));
            f.push(("prefix", text(msg.prefix)));
            f.push(("content", text(msg.content)));
            "Message"
        }
        PgOutputMessage::StreamStart(s) => {
            f.push(("xid", int(s.xid.0)));
            f.push(("first_segment", Value::Bool(s.first_segment)));
            "Stream Start"
        }
        PgOutputMessage::StreamStop => "Stream Stop",
        PgOutputMessage::StreamCommit(c) => {
            f.push(("xid", int(c.xid.0)));
            f.push(("commit_lsn", lsn(c.commit_lsn)));
            f.push(("end_lsn", lsn(c.end_lsn)));
            f.push(("commit_time", ts(c.commit_time)));
            "Stream Commit"
        }
        PgOutputMessage::StreamAbort(a) => {
            f.push(("xid", int(a.xid.0)));
            f.push(("subtransaction_xid", int(a.subxid.0)));
            if let Some(info) = a.abort {
                f.push(("abort_lsn", lsn(info.lsn)));
                f.push(("abort_time", ts(info.time)));
            }
            "Stream Abort"
        }
        PgOutputMessage::BeginPrepare(p) => {
            f.extend(prepare_fields(p));
            "Begin Prepare"
        }
        PgOutputMessage::Prepare(p) => {
            f.extend(prepare_fields(p));
            "Prepare"
        }
        PgOutputMessage::StreamPrepare(p) => {
            f.extend(prepare_fields(p));
            "Stream Prepare"
        }
        PgOutputMessage::CommitPrepared(c) => {
            f.push(("commit_lsn", lsn(c.commit_lsn)));
            f.push(("end_lsn", lsn(c.end_lsn)));
            f.push(("commit_time", ts(c.commit_time)));
            f.push(("xid", int(c.xid.0)));
            f.push(("gid", text(c.gid)));
            "Commit Prepared"
        }
        PgOutputMessage::RollbackPrepared(r) => {
            f.push(("prepare_end_lsn", lsn(r.prepare_end_lsn)));
            f.push(("rollback_end_lsn", lsn(r.rollback_end_lsn)));
            f.push(("prepare_time", ts(r.prepare_time)));
            f.push(("rollback_time", ts(r.rollback_time)));
            f.push(("xid", int(r.xid.0)));
            f.push(("gid", text(r.gid)));
            "Rollback Prepared"
        }
    };
    Description {
        layer: Layer::PgOutput,
        offset,
        tag: Some(m.tag()),
        len: None,
        type_name: name,
        fields: f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    const BACKEND: WalkOptions = WalkOptions {
        side: Side::Backend,
        replication: true,
    };

    #[test]
    fn backend_answer_then_frames() {
        let mut s = b"N".to_vec();
        s.extend(frame(b'R', &0i32.to_be_bytes()));
        s.extend(frame(b'N', b"SNOTICE\0\0"));
        s.extend(frame(b'Z', b"I"));
        let d = describe_all(&s, BACKEND).expect("walks");
        let names: Vec<_> = d.iter().map(|d| d.type_name).collect();
        assert_eq!(
            names,
            [
                "EncryptionResponse",
                "AuthenticationOk",
                "NoticeResponse",
                "ReadyForQuery"
            ]
        );
        assert_eq!((d[0].tag, d[0].len), (Some(b'N'), None));
        assert_eq!((d[1].offset, d[1].len), (1, Some(8)));
    }

    #[test]
    fn replication_layers_follow_their_copy_data() {
        let mut s = frame(b'W', &[0, 0, 0]);
        let mut x = vec![b'w'];
        x.extend_from_slice(&[0; 24]);
        x.extend_from_slice(&[b'S', 0, 0, 0, 7, 1]);
        s.extend(frame(b'd', &x));
        let mut x = vec![b'w'];
        x.extend_from_slice(&[0; 24]);
        x.extend_from_slice(&[b'I', 0, 0, 0, 7, 0, 0, 64, 0, b'N', 0, 1, b'n']);
        s.extend(frame(b'd', &x));
        let d = describe_all(&s, BACKEND).expect("walks");
        let got: Vec<_> = d.iter().map(|d| (d.layer, d.type_name)).collect();
        assert_eq!(
            got,
            [
                (Layer::Backend, "CopyBothResponse"),
                (Layer::Backend, "CopyData"),
                (Layer::Replication, "XLogData"),
                (Layer::PgOutput, "Stream Start"),
                (Layer::Backend, "CopyData"),
                (Layer::Replication, "XLogData"),
                (Layer::PgOutput, "Insert"),
            ]
        );
        assert_eq!(d[6].fields[0], ("xid", Value::Int(7)));
        assert_eq!(d[6].offset, 8 + 5 + 25 + 6 + 5 + 25);
    }

    #[test]
    fn errors_name_the_byte_offset() {
        let mut s = frame(b'Z', b"I");
        s.extend(frame(b'Z', b"X"));
        let e = describe_all(&s, BACKEND).expect_err("bad status");
        assert_eq!((e.offset, e.message_offset), (11, 6));
        let e = describe_all(&s[..8], BACKEND).expect_err("truncated");
        assert_eq!((e.offset, e.message_offset), (8, 6));
        assert!(e.to_string().contains("byte offset 8"), "{e}");
    }

    #[test]
    fn frontend_sasl_then_password_inference() {
        let mut s = Vec::new();
        s.extend_from_slice(&8u32.to_be_bytes());
        s.extend_from_slice(&crate::frame::SSL_REQUEST_CODE.to_be_bytes());
        let mut body = b"SCRAM-SHA-256\0".to_vec();
        body.extend_from_slice(&3i32.to_be_bytes());
        body.extend_from_slice(b"n,,");
        s.extend_from_slice(&[0, 0, 0, 13, 0, 3, 0, 0, b'u', 0, b'x', 0, 0]);
        s.extend(frame(b'p', &body));
        s.extend(frame(b'p', b"c=biws,r=abc"));
        let opts = WalkOptions {
            side: Side::Frontend,
            replication: false,
        };
        let d = describe_all(&s, opts).expect("walks");
        let names: Vec<_> = d.iter().map(|d| d.type_name).collect();
        assert_eq!(
            names,
            [
                "SSLRequest",
                "StartupMessage",
                "SASLInitialResponse",
                "SASLResponse"
            ]
        );
        assert_eq!(d[1].tag, None);
    }
}
