//! How handshake failures are worded and classed (OpenSSL's texts, libpq's kinds).

use super::*;
use pgyard_connect::ClientCert;

#[test]
fn alerts_from_the_server_are_worded_as_openssl_words_them() {
    let text = |a| handshake_error_text(&rustls::Error::AlertReceived(a), "db");
    assert_eq!(
        text(rustls::AlertDescription::HandshakeFailure),
        "SSL error: sslv3 alert handshake failure"
    );
    assert_eq!(
        text(rustls::AlertDescription::UnknownCA),
        "SSL error: tlsv1 alert unknown ca"
    );
    assert_eq!(
        text(rustls::AlertDescription::CertificateRequired),
        "SSL error: tlsv13 alert certificate required"
    );
    assert_eq!(
        text(rustls::AlertDescription::Unknown(0xee)),
        "SSL error: received fatal alert: AlertDescription(0xee)"
    );
}

#[test]
fn a_certificate_that_does_not_verify_is_authentication_anything_else_transient() {
    let bad = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
    assert_eq!(handshake_failure_kind(&bad), FailureKind::Authentication);
    let alert = rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure);
    assert_eq!(handshake_failure_kind(&alert), FailureKind::Transient);
    let io = std::io::Error::new(std::io::ErrorKind::InvalidData, bad);
    let probe = CertProbe::default();
    let ev = handshake_failed(AttemptId(3), &io, "db", &probe);
    assert_eq!(
        ev,
        Event::TlsFailed {
            attempt: AttemptId(3),
            message: "SSL error: certificate verify failed".into(),
            kind: FailureKind::Authentication,
            client_cert: ClientCert::NotRequested,
        }
    );
    let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
    assert_eq!(
        handshake_failed(AttemptId(3), &eof, "db", &probe),
        Event::Closed {
            attempt: AttemptId(3)
        }
    );
}
