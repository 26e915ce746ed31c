//! The root file's certificates as OpenSSL uses them (libpq sets no
//! `X509_V_FLAG_PARTIAL_CHAIN`): a chain ends only at a self-signed certificate of the file,
//! valid now, and the file's other certificates are intermediates on the way.

use rustls::client::danger::ServerCertVerified;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::{CertificateError, RootCertStore};

use crate::v1chain;

/// The root file's certificates as OpenSSL (without `X509_V_FLAG_PARTIAL_CHAIN`, as libpq
/// leaves it) uses them: a chain must end at a self-signed one; the others serve as
/// intermediates on the way. webpki would end a chain at any certificate of the store, so
/// a root file that holds only an intermediate CA would verify what libpq refuses.
#[derive(Debug, Default)]
pub(crate) struct TrustedChain {
    /// The self-signed certificates: the trust anchors.
    pub(crate) anchors: Vec<CertificateDer<'static>>,
    /// The rest, offered as intermediates.
    intermediates: Vec<CertificateDer<'static>>,
    /// No self-signed certificate is there and valid now: webpki's store then holds the
    /// others (it cannot be built empty), and any chain it passes ended at one OpenSSL
    /// would not end it at.
    refuse_passed: bool,
}

impl TrustedChain {
    /// webpki's store of anchors at `now`, and the split. OpenSSL checks the root's own
    /// validity too, where webpki takes an anchor as a bare name and key: a self-signed
    /// certificate out of its validity is left out of the store.
    pub(crate) fn split(
        certs: Vec<CertificateDer<'static>>,
        now: UnixTime,
    ) -> (RootCertStore, TrustedChain) {
        let (anchors, intermediates): (Vec<_>, Vec<_>) = certs
            .into_iter()
            .partition(|c| v1chain::self_issued(c.as_ref()));
        let valid: Vec<_> = anchors
            .iter()
            .filter(|c| v1chain::valid_at(c.as_ref(), now))
            .collect();
        let refuse_passed = valid.is_empty();
        let in_store: Vec<_> = if !refuse_passed {
            valid
        } else if anchors.is_empty() {
            intermediates.iter().collect()
        } else {
            anchors.iter().collect()
        };
        let mut store = RootCertStore::empty();
        for c in in_store {
            // Each was read as an anchor already (`roots`).
            let _ = store.add(c.clone());
        }
        let chain = TrustedChain {
            anchors,
            intermediates,
            refuse_passed,
        };
        (store, chain)
    }

    /// The server's intermediates, then the root file's.
    pub(crate) fn with_intermediates<'a>(
        &'a self,
        sent: &[CertificateDer<'a>],
    ) -> Vec<CertificateDer<'a>> {
        let mut all = sent.to_vec();
        all.extend(
            self.intermediates
                .iter()
                .map(|c| CertificateDer::from(c.as_ref())),
        );
        all
    }

    /// webpki's verdict, refused where the chain can only have ended at a certificate that
    /// is not self-signed or not valid now (its name checked only after the chain passed).
    pub(crate) fn judge_partial(
        &self,
        result: Result<ServerCertVerified, rustls::Error>,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.refuse_passed && chain_passed(&result) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            ))
        } else {
            result
        }
    }
}

/// Whether webpki's verdict says the chain passed: it did, or only the name failed (webpki
/// checks the name after the chain).
pub(crate) fn chain_passed(result: &Result<ServerCertVerified, rustls::Error>) -> bool {
    match result {
        Ok(_) => true,
        Err(rustls::Error::InvalidCertificate(e)) => matches!(
            e,
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
        ),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn der(name: &str) -> CertificateDer<'static> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/v1chain")
            .join(format!("{name}.der"));
        CertificateDer::from(std::fs::read(path).unwrap())
    }

    fn at(secs: u64) -> UnixTime {
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs))
    }

    #[test]
    fn chains_end_only_at_self_signed_certificates_valid_now() {
        // The fixtures are valid from 2026 to 2126.
        let (in_2030, in_2200) = (at(1_893_456_000), at(7_258_118_400));
        let (store, chain) = TrustedChain::split(vec![der("int"), der("root")], in_2030);
        assert_eq!((store.len(), chain.anchors.len()), (1, 1));
        assert_eq!(chain.intermediates, vec![der("int")]);
        assert!(!chain.refuse_passed);
        let passed = Ok(ServerCertVerified::assertion());
        assert!(chain.judge_partial(passed).is_ok());

        for (certs, when) in [
            (vec![der("int")], in_2030),
            (vec![der("int"), der("root")], in_2200),
        ] {
            let (store, chain) = TrustedChain::split(certs, when);
            assert!(!store.is_empty(), "webpki needs a store");
            assert!(chain.refuse_passed);
            let refused = chain.judge_partial(Ok(ServerCertVerified::assertion()));
            assert!(matches!(
                refused,
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer
                ))
            ));
            // A chain that failed keeps its own error.
            let failed = Err(rustls::Error::InvalidCertificate(CertificateError::Expired));
            assert!(matches!(
                chain.judge_partial(failed),
                Err(rustls::Error::InvalidCertificate(CertificateError::Expired))
            ));
        }
    }
}
