//! The adapters' error: libpq's text for display, and a kind to decide on.

use pgyard_connect::ConnectError;
pub use pgyard_connect::FailureKind as ErrorKind;
use pgyard_wire::error_fields::SqlState;

/// Why a connect or a query failed. `Display` is the text libpq (or psql) would print;
/// [`Error::kind`] is what it means, so that no caller has to match texts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection string did not parse (libpq's text).
    #[error("{0}")]
    Parse(String),
    /// The connection string parsed but cannot be used, or a request cannot be encoded
    /// (libpq's text).
    #[error("{0}")]
    Config(String),
    /// Every attempt failed; `Display` is libpq's `PQerrorMessage` text.
    #[error(transparent)]
    Connect(ConnectError),
    /// The server answered a request with an ErrorResponse.
    #[error("{text}")]
    Server {
        /// Its SQLSTATE (`XX000` when the server sent none).
        sqlstate: SqlState,
        /// libpq's rendering of it.
        text: String,
    },
    /// The connection broke (reset, closed, a failed read or write).
    #[error("{0}")]
    Io(String),
    /// The server sent bytes that do not decode, or a message that makes no sense there.
    #[error("{0}")]
    Protocol(String),
    /// A fault in the adapter itself (should not happen).
    #[error("pgyard: {0}")]
    Internal(String),
}

impl Error {
    /// What the failure means; [`ErrorKind::is_retryable`] says whether trying again may help.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Parse(_) | Error::Config(_) => ErrorKind::Configuration,
            Error::Connect(e) => e.kind(),
            Error::Server { sqlstate, .. } if sqlstate.class() == *b"28" => {
                ErrorKind::Authentication
            }
            Error::Server { sqlstate, .. } => ErrorKind::Refused(*sqlstate),
            Error::Io(_) | Error::Internal(_) => ErrorKind::Transient,
            Error::Protocol(_) => ErrorKind::Protocol,
        }
    }

    /// The SQLSTATE the server sent, for [`Error::Server`].
    pub fn sqlstate(&self) -> Option<SqlState> {
        match self {
            Error::Server { sqlstate, .. } => Some(*sqlstate),
            Error::Connect(e) => match e.kind() {
                ErrorKind::Refused(s) => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    /// The text libpq would print, ending in exactly one newline.
    pub fn libpq_message(&self) -> String {
        let mut s = self.to_string();
        while s.ends_with('\n') {
            s.pop();
        }
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_variant_and_the_sqlstate() {
        let server = |code: &[u8; 5]| Error::Server {
            sqlstate: SqlState::from_array(*code),
            text: "ERROR:  x".into(),
        };
        assert_eq!(server(b"28P01").kind(), ErrorKind::Authentication);
        assert_eq!(
            server(b"55006").kind(),
            ErrorKind::Refused(SqlState::from_array(*b"55006"))
        );
        assert!(server(b"57P01").kind().is_retryable());
        assert!(!server(b"42P01").kind().is_retryable());
        assert!(Error::Io("reset".into()).kind().is_retryable());
        assert!(!Error::Parse("bad".into()).kind().is_retryable());
        assert_eq!(Error::Protocol("x".into()).kind(), ErrorKind::Protocol);
        assert_eq!(
            server(b"53300").sqlstate(),
            Some(SqlState::from_array(*b"53300"))
        );
        assert_eq!(Error::Io("x".into()).libpq_message(), "x\n");
    }
}
