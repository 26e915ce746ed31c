//! Why a pool's server could not be opened, and what the clients waiting on it are told.

use pgyard_driver::ErrorKind;
use pgyard_wire::error_fields::OwnedErrorFields;

/// The server's ErrorResponse for the client, when the server refused what the client
/// asked for (not the proxy's own credentials, class 28, which stay `server login failed`).
fn answer_for_client(e: &crate::Error) -> Option<OwnedErrorFields> {
    match e {
        crate::Error::Connect(c) if matches!(c.kind(), ErrorKind::Refused(_)) => {
            c.server_fields().cloned()
        }
        _ => None,
    }
}

/// Why a server could not be opened.
pub(super) struct Failed {
    /// The server (or the proxy's credentials) refused the login: retrying will not cure it.
    pub login: bool,
    /// The server's own answer, for the waiting clients (see [`answer_for_client`]).
    pub answer: Option<OwnedErrorFields>,
    pub text: String,
}

impl Failed {
    /// The failure of a connect.
    pub(super) fn of(e: &crate::Error) -> Failed {
        Failed {
            login: e.kind().is_refusal_for_good(),
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
