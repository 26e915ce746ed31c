//! The root file's certificates as OpenSSL uses them (libpq sets no
//! `X509_V_FLAG_PARTIAL_CHAIN`): a chain ends only at a self-signed certificate of the file,
//! and the file's other certificates are intermediates on the way.

use rustls::client::danger::ServerCertVerified;
use rustls::pki_types::CertificateDer;
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
    /// No certificate is self-signed: webpki's store then holds the others, and any chain
    /// it verifies ended at one of them, which OpenSSL refuses.
    partial_only: bool,
}

impl TrustedChain {
    /// webpki's store of anchors, and the split.
    pub(crate) fn split(certs: Vec<CertificateDer<'static>>) -> (RootCertStore, TrustedChain) {
        let (anchors, intermediates): (Vec<_>, Vec<_>) = certs
            .into_iter()
            .partition(|c| v1chain::self_issued(c.as_ref()));
        let partial_only = anchors.is_empty();
        let mut store = RootCertStore::empty();
        let in_store = if partial_only {
            &intermediates
        } else {
            &anchors
        };
        for c in in_store {
            // Each was read as an anchor already (`roots`).
            let _ = store.add(c.clone());
        }
        let chain = TrustedChain {
            anchors,
            intermediates,
            partial_only,
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
    /// is not self-signed (its name checked only after the chain passed).
    pub(crate) fn judge_partial(
        &self,
        result: Result<ServerCertVerified, rustls::Error>,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let chain_passed = match &result {
            Ok(_) => true,
            Err(rustls::Error::InvalidCertificate(e)) => matches!(
                e,
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            ),
            Err(_) => false,
        };
        if self.partial_only && chain_passed {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            ))
        } else {
            result
        }
    }
}
