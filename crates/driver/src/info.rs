//! What an established session knows about itself, shared by the blocking and tokio sessions
//! (both hold the same [`Established`] from the connect machine).

use pgyard_connect::{BackendKey, Established, OpenTarget, Parameters, ServerRole};

use crate::Attempt;

/// Whether the connection's ParameterStatus values say a middleware consumes middleware
/// messages (`middleware_messages` = `on`).
pub(crate) fn consumes_middleware(est: &Established) -> bool {
    est.parameters.get("middleware_messages") == Some("on")
}

/// Read-only facts about an established session: where it went and what the server reported.
///
/// Implementors provide [`SessionInfo::established`] and [`SessionInfo::attempts`]; the rest
/// are views of those.
pub trait SessionInfo {
    /// The machine's view of the connection.
    fn established(&self) -> &Established;

    /// Every attempt of the last connect or reset, in the order they started.
    fn attempts(&self) -> &[Attempt];

    /// What libpq's `PQhost` reports for this connection.
    fn host(&self) -> &str {
        &self.established().host
    }

    /// The address (or Unix socket) connected to.
    fn target(&self) -> &OpenTarget {
        &self.established().target
    }

    /// The server's port, for TCP connections.
    fn port(&self) -> Option<u16> {
        match &self.established().target {
            OpenTarget::Tcp(a) => Some(a.port()),
            OpenTarget::Unix(_) => None,
        }
    }

    /// The index of the chosen host in the configuration's slot order.
    fn slot(&self) -> usize {
        self.established().slot
    }

    /// ParameterStatus values reported at startup (and since), in arrival order.
    fn parameters(&self) -> &Parameters {
        &self.established().parameters
    }

    /// One server parameter (`server_version`, `in_hot_standby`, …).
    fn parameter(&self, name: &str) -> Option<&str> {
        self.established().parameters.get(name)
    }

    /// Whether a middleware on this connection consumes middleware messages: it answered
    /// ParameterStatus `middleware_messages` = `on` (asked for with
    /// [`crate::ConnectOptions::middleware`]).
    fn middleware_consumed(&self) -> bool {
        consumes_middleware(self.established())
    }

    /// BackendKeyData, what a cancel request quotes.
    fn backend_key(&self) -> Option<&BackendKey> {
        self.established().backend_key.as_ref()
    }

    /// The protocol version in use (major, minor).
    fn protocol_version(&self) -> (u16, u16) {
        self.established().protocol_version
    }

    /// Whether the connection is encrypted with TLS.
    fn tls(&self) -> bool {
        self.established().tls
    }

    /// The server role, if the session check learned it.
    fn role(&self) -> Option<ServerRole> {
        self.established().role
    }
}
