//! What each failure means ([`FailureKind`]), decided where the failure is met so that callers
//! never read libpq's texts. Texts from outside the machine (the TLS library's, through the
//! driver) are the one place a text is read, because that is all a driver hands in.

use pgyard_wire::auth::{AuthError, ScramError};
use pgyard_wire::error_fields::SqlState;

use crate::report::FailureKind;

/// The kind of a server ErrorResponse with `sqlstate`: class 28 is the server refusing the
/// credentials, anything else a refusal with its code. A message without a (well-formed)
/// SQLSTATE breaks the protocol: a 3.0 server always sends one.
pub(crate) fn server_error(sqlstate: Option<SqlState>) -> FailureKind {
    match sqlstate {
        Some(s) if s.class() == *b"28" => FailureKind::Authentication,
        Some(s) => FailureKind::Refused(s),
        None => FailureKind::Protocol,
    }
}

/// The kind of a client-side authentication failure: a malformed or out-of-order exchange is
/// the server's protocol error; everything else is authentication that cannot proceed.
pub(crate) fn auth_error(e: &AuthError) -> FailureKind {
    match e {
        AuthError::Scram(s) => scram_error(s),
        AuthError::DuplicateSasl
        | AuthError::SaslContinueWithoutSasl
        | AuthError::SaslFinalWithoutSasl
        | AuthError::SaslFinalTooEarly
        | AuthError::AfterAuthenticated => FailureKind::Protocol,
        // No password, channel binding unmet, the server skipping its proof, a method this
        // client cannot do: authentication cannot succeed as configured.
        _ => FailureKind::Authentication,
    }
}

fn scram_error(e: &ScramError) -> FailureKind {
    match e {
        ScramError::EmptyMessage
        | ScramError::LengthMismatch
        | ScramError::AttributeExpected(_)
        | ScramError::EqualsExpected(_)
        | ScramError::MandatoryExtension
        | ScramError::NonceMismatch
        | ScramError::InvalidNonce
        | ScramError::InvalidSalt
        | ScramError::InvalidIterationCount
        | ScramError::GarbageAfterServerFirst
        | ScramError::GarbageAfterServerFinal
        | ScramError::InvalidServerSignature
        | ScramError::InvalidState => FailureKind::Protocol,
        // Channel binding refusals, an unproven server (signature mismatch), the server's
        // own `e=`, an iteration count over the cap: the exchange is refused, not garbled.
        _ => FailureKind::Authentication,
    }
}

/// The kind of a failed TLS handshake from the driver's `message` (`Event::TlsFailed`).
pub(crate) fn tls_failure(message: &str) -> FailureKind {
    let m = message.trim_end_matches('\n');
    if is_verification_failure(m) {
        return FailureKind::Authentication;
    }
    // The machine's own ALPN refusals, should a driver hand them back.
    let alpn = [
        crate::alpn_refusal(None, true),
        crate::alpn_refusal(Some(b""), false),
    ];
    if alpn.contains(&Some(m)) {
        return FailureKind::Protocol;
    }
    if m.starts_with("SSL error:") || m.starts_with("SSL SYSCALL error:") {
        // Handshake alerts, resets and EOFs: the network or the server's state.
        return FailureKind::Transient;
    }
    if is_local_file_problem(m) {
        return FailureKind::Configuration;
    }
    // Anything else a driver may word (a socket error mid-handshake) is the network's.
    FailureKind::Transient
}

/// libpq's texts for a server certificate that does not prove the server's identity.
fn is_verification_failure(m: &str) -> bool {
    m == "SSL error: certificate verify failed"
        || m == "could not get server's host name from server certificate"
        || (m.starts_with("server certificate ") && m.contains(" does not match host name \""))
}

/// The texts libpq (and the adapters after it) give for certificate and key files that are
/// missing, unreadable or unsafe: settings that cannot work, whatever the server does.
fn is_local_file_problem(m: &str) -> bool {
    const PREFIXES: [&str; 8] = [
        "root certificate file \"",
        "could not get home directory to locate root certificate file",
        "could not read root certificate file \"",
        "could not read certificate file \"",
        "certificate present, but not private key file \"",
        "could not load private key file",
        "could not open private key file \"",
        "private key file \"",
    ];
    PREFIXES.iter().any(|p| m.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_28_is_authentication_and_other_codes_are_refusals() {
        let s = |c: &[u8]| SqlState::from_bytes(c);
        assert_eq!(server_error(s(b"28P01")), FailureKind::Authentication);
        assert_eq!(server_error(s(b"28000")), FailureKind::Authentication);
        let too_many = s(b"53300").expect("valid code");
        assert_eq!(server_error(Some(too_many)), FailureKind::Refused(too_many));
        assert_eq!(server_error(None), FailureKind::Protocol);
    }

    #[test]
    fn auth_errors_split_into_refusals_and_protocol_breaks() {
        use FailureKind::{Authentication, Protocol};
        assert_eq!(auth_error(&AuthError::NoPasswordSupplied), Authentication);
        assert_eq!(
            auth_error(&AuthError::ChannelBindingNotUsed),
            Authentication
        );
        assert_eq!(auth_error(&AuthError::IncompleteSasl), Authentication);
        assert_eq!(auth_error(&AuthError::Unsupported(99)), Authentication);
        assert_eq!(auth_error(&AuthError::SaslFinalTooEarly), Protocol);
        let scram = |e| auth_error(&AuthError::Scram(e));
        assert_eq!(scram(ScramError::ServerSignatureMismatch), Authentication);
        assert_eq!(scram(ScramError::ChannelBindingSslNotInUse), Authentication);
        assert_eq!(scram(ScramError::InvalidSalt), Protocol);
    }

    #[test]
    fn tls_texts_by_meaning() {
        use FailureKind::*;
        let cases = [
            ("SSL error: certificate verify failed", Authentication),
            (
                "server certificate for \"a.example\" does not match host name \"db\"",
                Authentication,
            ),
            (
                "server certificate for \"a\" (and 2 other names) does not match host name \"db\"",
                Authentication,
            ),
            ("server certificate does not match host name \"db\"", Authentication),
            ("could not get server's host name from server certificate", Authentication),
            ("SSL SYSCALL error: EOF detected", Transient),
            ("SSL error: received fatal alert: HandshakeFailure", Transient),
            (
                "direct SSL connection was established without ALPN protocol negotiation extension",
                Protocol,
            ),
            ("SSL connection was established with unexpected ALPN protocol", Protocol),
            (
                "root certificate file \"/h/.postgresql/root.crt\" does not exist\nEither provide the file",
                Configuration,
            ),
            ("could not load private key file \"/k\": bad", Configuration),
            ("Connection reset by peer", Transient),
        ];
        for (text, kind) in cases {
            assert_eq!(tls_failure(text), kind, "{text}");
            assert_eq!(
                tls_failure(&format!("{text}\n")),
                kind,
                "{text} with newline"
            );
        }
    }
}
