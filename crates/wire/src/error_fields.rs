//! ErrorResponse/NoticeResponse fields, SQLSTATE constants and the failover classification.
//!
//! [`ErrorFields`] is a validated, borrowed view of an ErrorResponse or NoticeResponse body:
//! field values stay bytes (they may not be UTF-8 when `client_encoding` and `lc_messages`
//! disagree), unknown field codes are preserved, and when a code appears twice the last one
//! wins, as in libpq. [`ErrorFields::render`] reproduces libpq's message text.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::buf::{DecodeError, Reader};
use crate::frame::{put_cstr, put_frame, EncodeError};

/// Type byte of ErrorResponse.
pub const ERROR_RESPONSE_TAG: u8 = b'E';
/// Type byte of NoticeResponse.
pub const NOTICE_RESPONSE_TAG: u8 = b'N';

/// An error/notice field code; unknown codes are kept as [`FieldCode::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldCode {
    /// `S`: severity, possibly localized.
    Severity,
    /// `V`: severity, never localized (9.6+).
    SeverityNonLocalized,
    /// `C`: SQLSTATE.
    Code,
    /// `M`: primary message.
    Message,
    /// `D`: detail.
    Detail,
    /// `H`: hint.
    Hint,
    /// `P`: position in the client's query (1-based, characters).
    Position,
    /// `p`: position in an internally generated query.
    InternalPosition,
    /// `q`: text of that internal query.
    InternalQuery,
    /// `W`: context ("where"), one line per call level.
    Where,
    /// `s`: schema name.
    Schema,
    /// `t`: table name.
    Table,
    /// `c`: column name.
    Column,
    /// `d`: data type name.
    DataType,
    /// `n`: constraint name.
    Constraint,
    /// `F`: source file.
    File,
    /// `L`: source line.
    Line,
    /// `R`: source routine.
    Routine,
    /// Any other non-zero code (future additions must be ignored, not rejected).
    Unknown(u8),
}

impl FieldCode {
    /// Classifies a code byte.
    pub fn from_byte(b: u8) -> Self {
        match b {
            b'S' => FieldCode::Severity,
            b'V' => FieldCode::SeverityNonLocalized,
            b'C' => FieldCode::Code,
            b'M' => FieldCode::Message,
            b'D' => FieldCode::Detail,
            b'H' => FieldCode::Hint,
            b'P' => FieldCode::Position,
            b'p' => FieldCode::InternalPosition,
            b'q' => FieldCode::InternalQuery,
            b'W' => FieldCode::Where,
            b's' => FieldCode::Schema,
            b't' => FieldCode::Table,
            b'c' => FieldCode::Column,
            b'd' => FieldCode::DataType,
            b'n' => FieldCode::Constraint,
            b'F' => FieldCode::File,
            b'L' => FieldCode::Line,
            b'R' => FieldCode::Routine,
            other => FieldCode::Unknown(other),
        }
    }

    /// The code byte.
    pub fn byte(self) -> u8 {
        match self {
            FieldCode::Severity => b'S',
            FieldCode::SeverityNonLocalized => b'V',
            FieldCode::Code => b'C',
            FieldCode::Message => b'M',
            FieldCode::Detail => b'D',
            FieldCode::Hint => b'H',
            FieldCode::Position => b'P',
            FieldCode::InternalPosition => b'p',
            FieldCode::InternalQuery => b'q',
            FieldCode::Where => b'W',
            FieldCode::Schema => b's',
            FieldCode::Table => b't',
            FieldCode::Column => b'c',
            FieldCode::DataType => b'd',
            FieldCode::Constraint => b'n',
            FieldCode::File => b'F',
            FieldCode::Line => b'L',
            FieldCode::Routine => b'R',
            FieldCode::Unknown(b) => b,
        }
    }
}

/// The fields of an ErrorResponse or NoticeResponse body, borrowed and validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorFields<'a> {
    /// The body, final terminator included.
    raw: &'a [u8],
}

impl<'a> ErrorFields<'a> {
    /// Validates a body: (code, string) pairs ended by a zero byte that must be the last byte.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        loop {
            if r.u8()? == 0 {
                r.finish()?;
                return Ok(ErrorFields { raw: body });
            }
            r.cstr()?;
        }
    }

    /// Every field in wire order, unknown codes included.
    pub fn iter(&self) -> ErrorFieldIter<'a> {
        ErrorFieldIter { rest: self.raw }
    }

    /// The value of the last field with code byte `code`.
    pub fn get(&self, code: u8) -> Option<&'a [u8]> {
        self.iter()
            .filter(|(c, _)| c.byte() == code)
            .last()
            .map(|(_, v)| v)
    }

    /// Severity: the non-localized `V` if present, else `S`.
    pub fn severity(&self) -> Option<&'a [u8]> {
        self.get(b'V').or_else(|| self.get(b'S'))
    }

    /// `S`: the possibly localized severity (what libpq prints).
    pub fn severity_localized(&self) -> Option<&'a [u8]> {
        self.get(b'S')
    }

    /// `C` as raw bytes.
    pub fn code(&self) -> Option<&'a [u8]> {
        self.get(b'C')
    }

    /// `C` parsed; `None` when absent or malformed.
    pub fn sqlstate(&self) -> Option<SqlState> {
        self.code().and_then(SqlState::from_bytes)
    }

    /// `M`: the primary message.
    pub fn message(&self) -> Option<&'a [u8]> {
        self.get(b'M')
    }

    /// `D`: detail.
    pub fn detail(&self) -> Option<&'a [u8]> {
        self.get(b'D')
    }

    /// `H`: hint.
    pub fn hint(&self) -> Option<&'a [u8]> {
        self.get(b'H')
    }

    /// `P`: position in the client query.
    pub fn position(&self) -> Option<&'a [u8]> {
        self.get(b'P')
    }

    /// `p`: position in the internal query.
    pub fn internal_position(&self) -> Option<&'a [u8]> {
        self.get(b'p')
    }

    /// `q`: the internal query.
    pub fn internal_query(&self) -> Option<&'a [u8]> {
        self.get(b'q')
    }

    /// `W`: context.
    pub fn where_(&self) -> Option<&'a [u8]> {
        self.get(b'W')
    }

    /// `s`: schema name.
    pub fn schema(&self) -> Option<&'a [u8]> {
        self.get(b's')
    }

    /// `t`: table name.
    pub fn table(&self) -> Option<&'a [u8]> {
        self.get(b't')
    }

    /// `c`: column name.
    pub fn column(&self) -> Option<&'a [u8]> {
        self.get(b'c')
    }

    /// `d`: data type name.
    pub fn data_type(&self) -> Option<&'a [u8]> {
        self.get(b'd')
    }

    /// `n`: constraint name.
    pub fn constraint(&self) -> Option<&'a [u8]> {
        self.get(b'n')
    }

    /// `F`: source file.
    pub fn file(&self) -> Option<&'a [u8]> {
        self.get(b'F')
    }

    /// `L`: source line.
    pub fn line(&self) -> Option<&'a [u8]> {
        self.get(b'L')
    }

    /// `R`: source routine.
    pub fn routine(&self) -> Option<&'a [u8]> {
        self.get(b'R')
    }

    /// The body as received (final terminator included).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// Writes these fields as a message with type byte `tag` (`E` or `N`).
    pub fn encode(&self, tag: u8, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_frame(buf, tag, self.raw.len(), |b| {
            b.put_slice(self.raw);
            Ok(())
        })
    }

    /// libpq's text for this error or notice, with `verbosity` and whether CONTEXT is shown
    /// (libpq's default shows it for errors only). Non-UTF-8 bytes are replaced. The query
    /// text is not known here, so a position is always rendered as " at character N".
    pub fn render(&self, verbosity: Verbosity, show_context: bool) -> String {
        fn push_line(out: &mut String, label: &str, v: Option<&[u8]>) {
            if let Some(v) = v {
                out.push_str(label);
                out.push_str(&String::from_utf8_lossy(v));
                out.push('\n');
            }
        }
        let mut out = String::new();
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        if let Some(v) = self.severity_localized() {
            out.push_str(&text(v));
            out.push_str(":  ");
        }
        let mut verbosity = verbosity;
        if verbosity == Verbosity::Sqlstate {
            if let Some(c) = self.code() {
                out.push_str(&text(c));
                out.push('\n');
                return out;
            }
            verbosity = Verbosity::Terse;
        }
        if verbosity == Verbosity::Verbose {
            if let Some(c) = self.code() {
                out.push_str(&text(c));
                out.push_str(": ");
            }
        }
        if let Some(m) = self.message() {
            out.push_str(&text(m));
        }
        if let Some(p) = self.position() {
            out.push_str(" at character ");
            out.push_str(&text(p));
        } else if let Some(p) = self.internal_position() {
            // With the internal query at hand (and not terse) libpq draws a cursor instead.
            if verbosity == Verbosity::Terse || self.internal_query().is_none() {
                out.push_str(" at character ");
                out.push_str(&text(p));
            }
        }
        out.push('\n');
        if verbosity != Verbosity::Terse {
            push_line(&mut out, "DETAIL:  ", self.detail());
            push_line(&mut out, "HINT:  ", self.hint());
            push_line(&mut out, "QUERY:  ", self.internal_query());
            if show_context {
                push_line(&mut out, "CONTEXT:  ", self.where_());
            }
        }
        if verbosity == Verbosity::Verbose {
            push_line(&mut out, "SCHEMA NAME:  ", self.schema());
            push_line(&mut out, "TABLE NAME:  ", self.table());
            push_line(&mut out, "COLUMN NAME:  ", self.column());
            push_line(&mut out, "DATATYPE NAME:  ", self.data_type());
            push_line(&mut out, "CONSTRAINT NAME:  ", self.constraint());
            let (f, l, r) = (self.file(), self.line(), self.routine());
            if f.is_some() || l.is_some() || r.is_some() {
                out.push_str("LOCATION:  ");
                if let Some(r) = r {
                    out.push_str(&text(r));
                    out.push_str(", ");
                }
                if let (Some(f), Some(l)) = (f, l) {
                    out.push_str(&text(f));
                    out.push(':');
                    out.push_str(&text(l));
                }
                out.push('\n');
            }
        }
        out
    }

    /// An owned copy.
    pub fn to_owned_fields(&self) -> OwnedErrorFields {
        OwnedErrorFields {
            raw: Bytes::copy_from_slice(self.raw),
        }
    }
}

impl fmt::Display for ErrorFields<'_> {
    /// libpq's default rendering of an error (CONTEXT shown), without the final newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.render(Verbosity::Default, true);
        f.write_str(s.strip_suffix('\n').unwrap_or(&s))
    }
}

/// Iterator over (code, value) pairs of [`ErrorFields`].
#[derive(Clone, Debug)]
pub struct ErrorFieldIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for ErrorFieldIter<'a> {
    type Item = (FieldCode, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        // Validated on decode: a non-zero code is always followed by a terminated string.
        let (&code, tail) = self.rest.split_first()?;
        if code == 0 {
            self.rest = &[];
            return None;
        }
        let end = tail.iter().position(|&b| b == 0)?;
        let (value, rest) = tail.split_at(end);
        self.rest = rest.get(1..).unwrap_or_default();
        Some((FieldCode::from_byte(code), value))
    }
}

/// Owned error fields (for keeping an error after the receive buffer is reused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedErrorFields {
    raw: Bytes,
}

impl OwnedErrorFields {
    /// Validates and keeps a body.
    pub fn decode(body: Bytes) -> Result<Self, DecodeError> {
        ErrorFields::decode(&body)?;
        Ok(OwnedErrorFields { raw: body })
    }

    /// The borrowed view.
    pub fn fields(&self) -> ErrorFields<'_> {
        ErrorFields { raw: &self.raw }
    }
}

impl fmt::Display for OwnedErrorFields {
    /// Same as [`ErrorFields`]'s `Display`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fields().fmt(f)
    }
}

/// libpq's error verbosity (`PQsetErrorVerbosity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbosity {
    /// Severity, message and position only.
    Terse,
    /// Adds DETAIL, HINT, QUERY and CONTEXT lines (libpq's default).
    Default,
    /// Adds the SQLSTATE, the name fields and LOCATION.
    Verbose,
    /// Severity and SQLSTATE only.
    Sqlstate,
}

/// Writes an ErrorResponse with `fields` in the given order.
pub fn encode_error_response(
    fields: &[(u8, &[u8])],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    encode_fields(ERROR_RESPONSE_TAG, fields, buf)
}

/// Writes a NoticeResponse with `fields` in the given order.
pub fn encode_notice_response(
    fields: &[(u8, &[u8])],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    encode_fields(NOTICE_RESPONSE_TAG, fields, buf)
}

/// Writes an error-or-notice layout under any type byte.
pub fn encode_fields(
    tag: u8,
    fields: &[(u8, &[u8])],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let size = fields.iter().map(|(_, v)| v.len() + 2).sum::<usize>() + 1;
    put_frame(buf, tag, size, |b| {
        for &(code, value) in fields {
            if code == 0 {
                return Err(EncodeError::Invalid {
                    what: "error field code 0",
                });
            }
            b.put_u8(code);
            put_cstr(b, value, "error field")?;
        }
        b.put_u8(0);
        Ok(())
    })
}

/// A five-character SQLSTATE (`[0-9A-Z]{5}`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SqlState([u8; 5]);

impl SqlState {
    /// Wraps five bytes without checking them (for constants).
    pub const fn from_array(code: [u8; 5]) -> Self {
        SqlState(code)
    }

    /// Parses five uppercase alphanumeric ASCII bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let a: [u8; 5] = b.try_into().ok()?;
        a.iter()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
            .then_some(SqlState(a))
    }

    /// The code as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("?????")
    }

    /// The code bytes.
    pub fn bytes(&self) -> [u8; 5] {
        self.0
    }

    /// The two-character class (e.g. `08` connection exception).
    pub fn class(&self) -> [u8; 2] {
        [self.0[0], self.0[1]]
    }

    /// The condition name from PostgreSQL's errcodes table, for the codes this crate knows.
    pub fn name(&self) -> Option<&'static str> {
        SQLSTATE_NAMES
            .iter()
            .find(|(s, _)| s == self)
            .map(|(_, n)| *n)
    }

    /// 57P01: the server is shutting down or the backend was terminated.
    pub fn is_admin_shutdown(&self) -> bool {
        *self == Self::ADMIN_SHUTDOWN
    }

    /// 57P02: another backend crashed.
    pub fn is_crash_shutdown(&self) -> bool {
        *self == Self::CRASH_SHUTDOWN
    }

    /// 57P03: starting up, shutting down or not yet consistent.
    pub fn is_cannot_connect_now(&self) -> bool {
        *self == Self::CANNOT_CONNECT_NOW
    }

    /// 53300: max_connections reached.
    pub fn is_too_many_connections(&self) -> bool {
        *self == Self::TOO_MANY_CONNECTIONS
    }

    /// 28P01: password (or SCRAM proof) rejected.
    pub fn is_invalid_password(&self) -> bool {
        *self == Self::INVALID_PASSWORD
    }

    /// 28000: pg_hba.conf rejection and similar.
    pub fn is_invalid_authorization(&self) -> bool {
        *self == Self::INVALID_AUTHORIZATION_SPECIFICATION
    }

    /// 25006: a write reached a read-only session (typically a standby or demoted primary).
    pub fn is_read_only_transaction(&self) -> bool {
        *self == Self::READ_ONLY_SQL_TRANSACTION
    }

    /// 40001: serialization failure (also recovery conflicts on standbys).
    pub fn is_serialization_failure(&self) -> bool {
        *self == Self::SERIALIZATION_FAILURE
    }

    /// 40P01: deadlock.
    pub fn is_deadlock(&self) -> bool {
        *self == Self::DEADLOCK_DETECTED
    }

    /// 57014: cancelled by a CancelRequest or statement_timeout.
    pub fn is_query_canceled(&self) -> bool {
        *self == Self::QUERY_CANCELED
    }

    /// 08P01: the peer saw a malformed message.
    pub fn is_protocol_violation(&self) -> bool {
        *self == Self::PROTOCOL_VIOLATION
    }

    /// Class 08: connection exceptions.
    pub fn is_connection_exception(&self) -> bool {
        self.class() == *b"08"
    }

    /// Class 40: the transaction was rolled back and may be retried.
    pub fn is_transaction_rollback(&self) -> bool {
        self.class() == *b"40"
    }

    /// Whether the server ends the session after sending this (shutdowns, session and
    /// transaction timeouts, database dropped).
    pub fn terminates_session(&self) -> bool {
        matches!(
            *self,
            Self::ADMIN_SHUTDOWN
                | Self::CRASH_SHUTDOWN
                | Self::CANNOT_CONNECT_NOW
                | Self::DATABASE_DROPPED
                | Self::IDLE_SESSION_TIMEOUT
                | Self::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
                | Self::TRANSACTION_TIMEOUT
        )
    }
}

impl fmt::Debug for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SqlState({})", self.as_str())
    }
}

impl fmt::Display for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

macro_rules! sqlstates {
    ($($konst:ident = $code:literal, $name:literal;)*) => {
        impl SqlState {
            $(
                #[doc = concat!("`", $name, "`")]
                pub const $konst: SqlState = SqlState(*$code);
            )*
        }
        const SQLSTATE_NAMES: &[(SqlState, &str)] = &[$((SqlState(*$code), $name),)*];
    };
}

sqlstates! {
    SUCCESSFUL_COMPLETION = b"00000", "successful_completion";
    WARNING = b"01000", "warning";
    DEPRECATED_FEATURE = b"01P01", "deprecated_feature";
    NO_DATA = b"02000", "no_data";
    SQL_STATEMENT_NOT_YET_COMPLETE = b"03000", "sql_statement_not_yet_complete";
    CONNECTION_EXCEPTION = b"08000", "connection_exception";
    CONNECTION_DOES_NOT_EXIST = b"08003", "connection_does_not_exist";
    CONNECTION_FAILURE = b"08006", "connection_failure";
    SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION = b"08001", "sqlclient_unable_to_establish_sqlconnection";
    SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION = b"08004", "sqlserver_rejected_establishment_of_sqlconnection";
    TRANSACTION_RESOLUTION_UNKNOWN = b"08007", "transaction_resolution_unknown";
    PROTOCOL_VIOLATION = b"08P01", "protocol_violation";
    TRIGGERED_ACTION_EXCEPTION = b"09000", "triggered_action_exception";
    FEATURE_NOT_SUPPORTED = b"0A000", "feature_not_supported";
    INVALID_TRANSACTION_INITIATION = b"0B000", "invalid_transaction_initiation";
    INVALID_ROLE_SPECIFICATION = b"0P000", "invalid_role_specification";
    CASE_NOT_FOUND = b"20000", "case_not_found";
    CARDINALITY_VIOLATION = b"21000", "cardinality_violation";
    DATA_EXCEPTION = b"22000", "data_exception";
    STRING_DATA_RIGHT_TRUNCATION = b"22001", "string_data_right_truncation";
    NUMERIC_VALUE_OUT_OF_RANGE = b"22003", "numeric_value_out_of_range";
    NULL_VALUE_NOT_ALLOWED = b"22004", "null_value_not_allowed";
    INVALID_DATETIME_FORMAT = b"22007", "invalid_datetime_format";
    DATETIME_FIELD_OVERFLOW = b"22008", "datetime_field_overflow";
    DIVISION_BY_ZERO = b"22012", "division_by_zero";
    CHARACTER_NOT_IN_REPERTOIRE = b"22021", "character_not_in_repertoire";
    INVALID_PARAMETER_VALUE = b"22023", "invalid_parameter_value";
    INVALID_TEXT_REPRESENTATION = b"22P02", "invalid_text_representation";
    INVALID_BINARY_REPRESENTATION = b"22P03", "invalid_binary_representation";
    UNTRANSLATABLE_CHARACTER = b"22P05", "untranslatable_character";
    INTEGRITY_CONSTRAINT_VIOLATION = b"23000", "integrity_constraint_violation";
    RESTRICT_VIOLATION = b"23001", "restrict_violation";
    NOT_NULL_VIOLATION = b"23502", "not_null_violation";
    FOREIGN_KEY_VIOLATION = b"23503", "foreign_key_violation";
    UNIQUE_VIOLATION = b"23505", "unique_violation";
    CHECK_VIOLATION = b"23514", "check_violation";
    EXCLUSION_VIOLATION = b"23P01", "exclusion_violation";
    INVALID_CURSOR_STATE = b"24000", "invalid_cursor_state";
    INVALID_TRANSACTION_STATE = b"25000", "invalid_transaction_state";
    ACTIVE_SQL_TRANSACTION = b"25001", "active_sql_transaction";
    READ_ONLY_SQL_TRANSACTION = b"25006", "read_only_sql_transaction";
    NO_ACTIVE_SQL_TRANSACTION = b"25P01", "no_active_sql_transaction";
    IN_FAILED_SQL_TRANSACTION = b"25P02", "in_failed_sql_transaction";
    IDLE_IN_TRANSACTION_SESSION_TIMEOUT = b"25P03", "idle_in_transaction_session_timeout";
    TRANSACTION_TIMEOUT = b"25P04", "transaction_timeout";
    INVALID_SQL_STATEMENT_NAME = b"26000", "invalid_sql_statement_name";
    INVALID_AUTHORIZATION_SPECIFICATION = b"28000", "invalid_authorization_specification";
    INVALID_PASSWORD = b"28P01", "invalid_password";
    DEPENDENT_OBJECTS_STILL_EXIST = b"2BP01", "dependent_objects_still_exist";
    INVALID_TRANSACTION_TERMINATION = b"2D000", "invalid_transaction_termination";
    INVALID_CURSOR_NAME = b"34000", "invalid_cursor_name";
    INVALID_CATALOG_NAME = b"3D000", "invalid_catalog_name";
    INVALID_SCHEMA_NAME = b"3F000", "invalid_schema_name";
    TRANSACTION_ROLLBACK = b"40000", "transaction_rollback";
    SERIALIZATION_FAILURE = b"40001", "serialization_failure";
    TRANSACTION_INTEGRITY_CONSTRAINT_VIOLATION = b"40002", "transaction_integrity_constraint_violation";
    STATEMENT_COMPLETION_UNKNOWN = b"40003", "statement_completion_unknown";
    DEADLOCK_DETECTED = b"40P01", "deadlock_detected";
    SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION = b"42000", "syntax_error_or_access_rule_violation";
    INSUFFICIENT_PRIVILEGE = b"42501", "insufficient_privilege";
    SYNTAX_ERROR = b"42601", "syntax_error";
    AMBIGUOUS_COLUMN = b"42702", "ambiguous_column";
    UNDEFINED_COLUMN = b"42703", "undefined_column";
    UNDEFINED_OBJECT = b"42704", "undefined_object";
    DUPLICATE_OBJECT = b"42710", "duplicate_object";
    DATATYPE_MISMATCH = b"42804", "datatype_mismatch";
    UNDEFINED_FUNCTION = b"42883", "undefined_function";
    UNDEFINED_TABLE = b"42P01", "undefined_table";
    UNDEFINED_PARAMETER = b"42P02", "undefined_parameter";
    DUPLICATE_CURSOR = b"42P03", "duplicate_cursor";
    DUPLICATE_DATABASE = b"42P04", "duplicate_database";
    DUPLICATE_PREPARED_STATEMENT = b"42P05", "duplicate_prepared_statement";
    DUPLICATE_TABLE = b"42P07", "duplicate_table";
    INDETERMINATE_DATATYPE = b"42P18", "indeterminate_datatype";
    WITH_CHECK_OPTION_VIOLATION = b"44000", "with_check_option_violation";
    INSUFFICIENT_RESOURCES = b"53000", "insufficient_resources";
    DISK_FULL = b"53100", "disk_full";
    OUT_OF_MEMORY = b"53200", "out_of_memory";
    TOO_MANY_CONNECTIONS = b"53300", "too_many_connections";
    CONFIGURATION_LIMIT_EXCEEDED = b"53400", "configuration_limit_exceeded";
    PROGRAM_LIMIT_EXCEEDED = b"54000", "program_limit_exceeded";
    STATEMENT_TOO_COMPLEX = b"54001", "statement_too_complex";
    TOO_MANY_COLUMNS = b"54011", "too_many_columns";
    TOO_MANY_ARGUMENTS = b"54023", "too_many_arguments";
    OBJECT_NOT_IN_PREREQUISITE_STATE = b"55000", "object_not_in_prerequisite_state";
    OBJECT_IN_USE = b"55006", "object_in_use";
    CANT_CHANGE_RUNTIME_PARAM = b"55P02", "cant_change_runtime_param";
    LOCK_NOT_AVAILABLE = b"55P03", "lock_not_available";
    OPERATOR_INTERVENTION = b"57000", "operator_intervention";
    QUERY_CANCELED = b"57014", "query_canceled";
    ADMIN_SHUTDOWN = b"57P01", "admin_shutdown";
    CRASH_SHUTDOWN = b"57P02", "crash_shutdown";
    CANNOT_CONNECT_NOW = b"57P03", "cannot_connect_now";
    DATABASE_DROPPED = b"57P04", "database_dropped";
    IDLE_SESSION_TIMEOUT = b"57P05", "idle_session_timeout";
    SYSTEM_ERROR = b"58000", "system_error";
    IO_ERROR = b"58030", "io_error";
    UNDEFINED_FILE = b"58P01", "undefined_file";
    DUPLICATE_FILE = b"58P02", "duplicate_file";
    CONFIG_FILE_ERROR = b"F0000", "config_file_error";
    LOCK_FILE_EXISTS = b"F0001", "lock_file_exists";
    PLPGSQL_ERROR = b"P0000", "plpgsql_error";
    RAISE_EXCEPTION = b"P0001", "raise_exception";
    NO_DATA_FOUND = b"P0002", "no_data_found";
    TOO_MANY_ROWS = b"P0003", "too_many_rows";
    ASSERT_FAILURE = b"P0004", "assert_failure";
    INTERNAL_ERROR = b"XX000", "internal_error";
    DATA_CORRUPTED = b"XX001", "data_corrupted";
    INDEX_CORRUPTED = b"XX002", "index_corrupted";
}

/// How far into the startup an ErrorResponse arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectStage {
    /// Before AuthenticationOk (includes errors instead of an authentication request).
    BeforeAuthOk,
    /// After AuthenticationOk, before the first ReadyForQuery.
    AfterAuthOk,
}

/// What libpq does after an ErrorResponse during connection startup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectDisposition {
    /// Give up on this host entry (all its addresses and encryption methods) and try the next.
    NextHost,
    /// Retry the same address with the next encryption method on a new connection (prefer:
    /// TLS then plaintext; allow: plaintext then TLS); abort if no method remains.
    NextMethodSameAddress,
    /// Fail the whole connection attempt: remaining hosts are not tried.
    Abort,
}

/// libpq 18's classification of a startup-time ErrorResponse (libpq-connect spec §8.3):
/// 57P03 before authentication completes moves to the next host; any other error before
/// AuthenticationOk (53300, 28P01, 28000, a missing SQLSTATE...) falls back to the next
/// encryption method on the same address; anything after AuthenticationOk aborts.
///
/// Not modelled: the pre-9.0 retry without `application_name` on 42704.
pub fn connect_disposition(sqlstate: Option<SqlState>, stage: ConnectStage) -> ConnectDisposition {
    match stage {
        ConnectStage::AfterAuthOk => ConnectDisposition::Abort,
        ConnectStage::BeforeAuthOk => match sqlstate {
            Some(s) if s.is_cannot_connect_now() => ConnectDisposition::NextHost,
            _ => ConnectDisposition::NextMethodSameAddress,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(fields: &[(u8, &[u8])]) -> Vec<u8> {
        let mut b = BytesMut::new();
        encode_error_response(fields, &mut b).unwrap();
        b[5..].to_vec()
    }

    #[test]
    fn decodes_every_field_and_keeps_unknown_codes() {
        let codes = b"SVCMDHPpqWstcdnFLRZ";
        let fields: Vec<(u8, &[u8])> = codes.iter().map(|&c| (c, &b"v"[..])).collect();
        let b = body(&fields);
        let f = ErrorFields::decode(&b).unwrap();
        let got: Vec<u8> = f.iter().map(|(c, _)| c.byte()).collect();
        assert_eq!(&got[..], &codes[..]);
        assert_eq!(
            f.iter().last().map(|(c, _)| c),
            Some(FieldCode::Unknown(b'Z'))
        );
        for &c in codes {
            assert_eq!(FieldCode::from_byte(c).byte(), c);
        }
    }

    #[test]
    fn last_duplicate_wins_and_v_beats_s() {
        let b = body(&[
            (b'S', b"FEHLER"),
            (b'V', b"ERROR"),
            (b'M', b"a"),
            (b'M', b"b"),
        ]);
        let f = ErrorFields::decode(&b).unwrap();
        assert_eq!(f.message(), Some(&b"b"[..]));
        assert_eq!(f.severity(), Some(&b"ERROR"[..]));
        assert_eq!(f.severity_localized(), Some(&b"FEHLER"[..]));
    }

    #[test]
    fn malformed_bodies() {
        assert!(matches!(
            ErrorFields::decode(b"Mabc"),
            Err(DecodeError::MissingTerminator { .. })
        ));
        assert!(matches!(
            ErrorFields::decode(b"Mabc\0"),
            Err(DecodeError::UnexpectedEnd { .. })
        ));
        assert!(matches!(
            ErrorFields::decode(b"\0x"),
            Err(DecodeError::TrailingBytes {
                offset: 1,
                count: 1
            })
        ));
        assert_eq!(ErrorFields::decode(b"\0").map(|f| f.iter().count()), Ok(0));
        let mut buf = BytesMut::new();
        assert!(encode_error_response(&[(b'M', b"a\0b")], &mut buf).is_err());
        assert!(encode_error_response(&[(0, b"a")], &mut buf).is_err());
        assert!(buf.is_empty());
    }

    #[test]
    fn renders_like_libpq() {
        let b = body(&[
            (b'S', b"FATAL"),
            (b'V', b"FATAL"),
            (b'C', b"28P01"),
            (b'M', b"password authentication failed for user \"u\""),
            (b'F', b"auth.c"),
            (b'L', b"321"),
            (b'R', b"auth_failed"),
        ]);
        let f = ErrorFields::decode(&b).unwrap();
        assert_eq!(
            f.to_string(),
            "FATAL:  password authentication failed for user \"u\""
        );
        assert_eq!(
            f.render(Verbosity::Verbose, true),
            "FATAL:  28P01: password authentication failed for user \"u\"\n\
             LOCATION:  auth_failed, auth.c:321\n"
        );
        assert_eq!(f.render(Verbosity::Sqlstate, true), "FATAL:  28P01\n");

        let b = body(&[
            (b'S', b"ERROR"),
            (b'C', b"42601"),
            (b'M', b"syntax error at or near \"x\""),
            (b'P', b"8"),
            (b'D', b"some detail"),
            (b'H', b"a hint"),
            (b'W', b"SQL function"),
        ]);
        let f = ErrorFields::decode(&b).unwrap();
        assert_eq!(
            f.render(Verbosity::Default, true),
            "ERROR:  syntax error at or near \"x\" at character 8\n\
             DETAIL:  some detail\nHINT:  a hint\nCONTEXT:  SQL function\n"
        );
        assert_eq!(
            f.render(Verbosity::Default, false),
            "ERROR:  syntax error at or near \"x\" at character 8\n\
             DETAIL:  some detail\nHINT:  a hint\n"
        );
        assert_eq!(
            f.render(Verbosity::Terse, true),
            "ERROR:  syntax error at or near \"x\" at character 8\n"
        );
        let owned = f.to_owned_fields();
        assert_eq!(owned.fields(), f);
        assert_eq!(owned.to_string(), f.to_string());
    }

    #[test]
    fn sqlstates_and_classification() {
        let s = SqlState::from_bytes(b"57P03").unwrap();
        assert_eq!(s, SqlState::CANNOT_CONNECT_NOW);
        assert_eq!(s.name(), Some("cannot_connect_now"));
        assert_eq!(s.to_string(), "57P03");
        assert!(SqlState::from_bytes(b"57p03").is_none());
        assert!(SqlState::from_bytes(b"5703").is_none());
        assert!(SqlState::ADMIN_SHUTDOWN.is_admin_shutdown());
        assert!(SqlState::TOO_MANY_CONNECTIONS.is_too_many_connections());
        assert!(SqlState::INVALID_PASSWORD.is_invalid_password());
        assert!(SqlState::READ_ONLY_SQL_TRANSACTION.is_read_only_transaction());
        assert!(SqlState::PROTOCOL_VIOLATION.is_connection_exception());
        assert!(SqlState::DEADLOCK_DETECTED.is_transaction_rollback());
        assert!(SqlState::IDLE_SESSION_TIMEOUT.terminates_session());
        use ConnectDisposition::*;
        use ConnectStage::*;
        assert_eq!(connect_disposition(Some(s), BeforeAuthOk), NextHost);
        assert_eq!(
            connect_disposition(Some(SqlState::TOO_MANY_CONNECTIONS), BeforeAuthOk),
            NextMethodSameAddress
        );
        assert_eq!(
            connect_disposition(Some(SqlState::INVALID_PASSWORD), BeforeAuthOk),
            NextMethodSameAddress
        );
        assert_eq!(
            connect_disposition(None, BeforeAuthOk),
            NextMethodSameAddress
        );
        assert_eq!(connect_disposition(Some(s), AfterAuthOk), Abort);
        assert_eq!(
            connect_disposition(Some(SqlState::INVALID_CATALOG_NAME), AfterAuthOk),
            Abort
        );
        // Every constant parses back to itself and has a name.
        for (s, n) in SQLSTATE_NAMES {
            assert_eq!(SqlState::from_bytes(&s.bytes()), Some(*s), "{n}");
            assert_eq!(s.name(), Some(*n));
        }
    }
}
