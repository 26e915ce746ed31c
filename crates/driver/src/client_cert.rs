//! What a TLS handshake does with client certificates, seen the way libpq's OpenSSL callback
//! sees it, for `sslcertmode=require` (`pgyard_connect::ClientCert`).
//!
//! libpq latches `ssl_cert_requested` when OpenSSL asks for the client's certificate, which it
//! does as soon as it has read the server's CertificateRequest, and `ssl_cert_sent` when a
//! certificate is loaded to answer with. rustls asks its certificate resolver at the same
//! message, so the resolver records the request. One difference remains: in TLS 1.2 the
//! server's Certificate comes before its CertificateRequest, and OpenSSL checks the chain on
//! reading it, so a chain that fails ends the handshake before any request is seen, where
//! rustls checks the chain only at ServerHelloDone, after asking. A request in TLS 1.2 so
//! counts only when the chain did not fail (a name that does not match is checked by libpq
//! after the handshake, so it does not count as a failure). rustls tells nothing of the
//! version at that point but through its key log, which it asks about TLS 1.3's handshake
//! secrets right after the ServerHello: [`VersionWatch`] answers "do not log" and notes that
//! the handshake is TLS 1.3.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::keylog::KeyLogFile;
use pgyard_connect::ClientCert;
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;
use rustls::{KeyLog, SignatureScheme};

/// What one handshake did with client certificates, read when it ended (either way).
#[derive(Clone, Debug, Default)]
pub struct CertProbe(Arc<AtomicU8>);

impl CertProbe {
    const REQUESTED: u8 = 1;
    const SENT: u8 = 2;
    const TLS13: u8 = 4;
    const CHAIN_FAILED: u8 = 8;

    fn note(&self, bits: u8) {
        self.0.fetch_or(bits, Ordering::AcqRel);
    }

    /// The server's certificate chain did not verify.
    pub(crate) fn chain_failed(&self) {
        self.note(Self::CHAIN_FAILED);
    }

    /// What the handshake has done, as libpq's flags would read.
    pub fn status(&self) -> ClientCert {
        let seen = self.0.load(Ordering::Acquire);
        let counts = seen & Self::TLS13 != 0 || seen & Self::CHAIN_FAILED == 0;
        match (
            seen & Self::REQUESTED != 0 && counts,
            seen & Self::SENT != 0,
        ) {
            (false, _) => ClientCert::NotRequested,
            (true, false) => ClientCert::NoneSent,
            (true, true) => ClientCert::Sent,
        }
    }
}

/// The client's certificate (if one is loaded), handed out whenever the server asks, the
/// asking recorded in the handshake's [`CertProbe`].
#[derive(Debug)]
pub(crate) struct ProbingResolver {
    identity: Option<Arc<CertifiedKey>>,
    probe: CertProbe,
}

impl ProbingResolver {
    /// A resolver answering with `identity`, recording into `probe`.
    pub(crate) fn new(identity: Option<Arc<CertifiedKey>>, probe: CertProbe) -> Self {
        ProbingResolver { identity, probe }
    }
}

impl ResolvesClientCert for ProbingResolver {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        // "Sent" is libpq's meaning: a certificate was loaded to answer with.
        let seen = match self.identity {
            Some(_) => CertProbe::REQUESTED | CertProbe::SENT,
            None => CertProbe::REQUESTED,
        };
        self.probe.note(seen);
        self.identity.clone()
    }

    fn has_certs(&self) -> bool {
        self.identity.is_some()
    }
}

/// A key log that logs nothing and notes whether the handshake is TLS 1.3.
#[derive(Debug)]
pub(crate) struct VersionWatch {
    probe: CertProbe,
    /// `sslkeylogfile`, which is given every secret.
    file: Option<KeyLogFile>,
}

impl VersionWatch {
    /// A watch noting into `probe`, passing the secrets on to `file`.
    pub(crate) fn new(probe: CertProbe, file: Option<KeyLogFile>) -> Self {
        VersionWatch { probe, file }
    }
}

impl KeyLog for VersionWatch {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        if let Some(f) = &self.file {
            f.log(label, client_random, secret);
        }
    }

    fn will_log(&self, label: &str) -> bool {
        // TLS 1.2 logs only `CLIENT_RANDOM`, and only at its end.
        if label.ends_with("_TRAFFIC_SECRET_0") || label.contains("HANDSHAKE_TRAFFIC_SECRET") {
            self.probe.note(CertProbe::TLS13);
        }
        self.file.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(bits: u8) -> CertProbe {
        let p = CertProbe::default();
        p.note(bits);
        p
    }

    #[test]
    fn a_request_counts_unless_a_tls12_chain_failed_first() {
        use CertProbe as P;
        let cases = [
            (0, ClientCert::NotRequested),
            (P::REQUESTED, ClientCert::NoneSent),
            (P::REQUESTED | P::SENT, ClientCert::Sent),
            (P::REQUESTED | P::CHAIN_FAILED, ClientCert::NotRequested),
            (
                P::REQUESTED | P::SENT | P::CHAIN_FAILED,
                ClientCert::NotRequested,
            ),
            (
                P::REQUESTED | P::TLS13 | P::CHAIN_FAILED,
                ClientCert::NoneSent,
            ),
            (
                P::REQUESTED | P::SENT | P::TLS13 | P::CHAIN_FAILED,
                ClientCert::Sent,
            ),
            (P::TLS13 | P::CHAIN_FAILED, ClientCert::NotRequested),
        ];
        for (bits, want) in cases {
            assert_eq!(probe(bits).status(), want, "bits {bits:#b}");
        }
    }

    #[test]
    fn the_version_watch_notes_tls13_and_logs_only_into_a_key_log_file() {
        let p = CertProbe::default();
        let w = VersionWatch::new(p.clone(), None);
        assert!(!w.will_log("CLIENT_RANDOM"));
        assert_eq!(p.0.load(Ordering::Acquire) & CertProbe::TLS13, 0);
        assert!(!w.will_log("CLIENT_HANDSHAKE_TRAFFIC_SECRET"));
        assert_ne!(p.0.load(Ordering::Acquire) & CertProbe::TLS13, 0);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let file = KeyLogFile::new(path.to_str().unwrap().as_bytes());
        let p = CertProbe::default();
        let w = VersionWatch::new(p.clone(), file);
        assert!(w.will_log("SERVER_TRAFFIC_SECRET_0"));
        assert_ne!(p.0.load(Ordering::Acquire) & CertProbe::TLS13, 0);
        w.log("SERVER_TRAFFIC_SECRET_0", &[7], &[8]);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "SERVER_TRAFFIC_SECRET_0 07 08\n"
        );
    }
}
