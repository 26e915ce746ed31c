//! Why a pool's server could not be opened, and what the clients waiting on it are told.

use pgyard_driver::ErrorKind;
use pgyard_wire::error_fields::SqlState;

/// A login refusal retrying will not cure, which the pool's waiting clients hear at once (as
/// from PgBouncer) instead of at their wait timeout: the credentials (class 28), a database
/// that does not exist (3D000) or may not be connected to (42501).
fn refused_for_good(kind: ErrorKind) -> bool {
    let never = [
        SqlState::INVALID_CATALOG_NAME,
        SqlState::INSUFFICIENT_PRIVILEGE,
    ];
    matches!(kind, ErrorKind::Authentication)
        || matches!(kind, ErrorKind::Refused(s) if never.contains(&s))
}

/// The server's SQLSTATE and words for the client, when the server refused what the client
/// asked for (not the proxy's own credentials, class 28, which stay `server login failed`).
fn answer_for_client(e: &crate::Error) -> Option<(SqlState, String)> {
    match e {
        crate::Error::Connect(c) if matches!(c.kind(), ErrorKind::Refused(_)) => {
            c.server_error().cloned()
        }
        _ => None,
    }
}

/// Why a server could not be opened.
pub(super) struct Failed {
    /// The server (or the proxy's credentials) refused the login: retrying will not cure it.
    pub login: bool,
    /// The server's own answer, for the waiting clients (see [`answer_for_client`]).
    pub answer: Option<(SqlState, String)>,
    pub text: String,
}

impl Failed {
    /// The failure of a connect.
    pub(super) fn of(e: &crate::Error) -> Failed {
        Failed {
            login: refused_for_good(e.kind()),
            answer: answer_for_client(e),
            text: e.to_string().trim_end().to_owned(),
        }
    }

    /// A backend conninfo that could not be used: nothing a server said.
    pub(super) fn unusable(text: String) -> Failed {
        Failed {
            login: false,
            answer: None,
            text,
        }
    }
}
