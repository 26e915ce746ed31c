//! What each failure means ([`FailureKind`]), decided where the failure is met so that callers
//! never read libpq's texts. A failed TLS handshake arrives with its kind, which the driver
//! reads from the TLS library's error type; no text is read anywhere.

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
}
