//! Descriptions of the startup-phase packets and of the frontend and backend messages.

use super::{
    ch, formats, hex, int, oids, opt_text, text, values, Description, Fields, Layer, Value,
};
use crate::backend::{Authentication, BackendMessage, CopyResponse, TransactionStatus};
use crate::error_fields::{ErrorFields, FieldCode};
use crate::frame::EncryptionRequest;
use crate::frontend::{FrontendMessage, StartupPacket, Target};

pub(super) fn encryption_answer(
    offset: usize,
    b: u8,
    request: Option<EncryptionRequest>,
) -> Description {
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

pub(super) fn startup(offset: usize, len: usize, p: &StartupPacket<'_>) -> Description {
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
