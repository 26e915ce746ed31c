//! SQLSTATE codes: the [`SqlState`] type, its named constants, and libpq's classification of
//! errors during connection startup.

use std::fmt;

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
        pub(super) const SQLSTATE_NAMES: &[(SqlState, &str)] = &[$((SqlState(*$code), $name),)*];
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
/// Not here: libpq's retry without `application_name` on 42704 after AuthenticationOk, which
/// depends on the connection string (pgyard-connect decides it).
pub fn connect_disposition(sqlstate: Option<SqlState>, stage: ConnectStage) -> ConnectDisposition {
    match stage {
        ConnectStage::AfterAuthOk => ConnectDisposition::Abort,
        ConnectStage::BeforeAuthOk => match sqlstate {
            Some(s) if s.is_cannot_connect_now() => ConnectDisposition::NextHost,
            _ => ConnectDisposition::NextMethodSameAddress,
        },
    }
}
