//! TLS to the proxy's clients: the certificate chain and key read from PEM files into a
//! rustls server configuration (ALPN `postgresql` offered, as PostgreSQL 17 does), with the
//! mode and the certificate's `tls-server-end-point` hash the client sessions are given.
//! The configuration is part of [`super::ProxyConfig`], so a reload that reads new files
//! applies them to the connections accepted from then on.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pgyard_proxy::client::ALPN_POSTGRESQL;
use pgyard_proxy::{ClientTls, TlsMode};
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Largest certificate or key file read (bytes).
const PEM_MAX: u64 = 1 << 20;

/// Which of the two files a [`TlsFileError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsFile {
    /// The certificate chain.
    Cert,
    /// The private key.
    Key,
}

/// Why the certificate and key cannot be served; the message names the file's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFileError {
    /// The file at fault.
    pub file: TlsFile,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for TlsFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// TLS to clients: the mode, and the rustls configuration of the certificate shown.
#[derive(Clone)]
pub struct ProxyTls {
    /// When TLS is used (PgBouncer's `client_tls_sslmode`, `disable` to `require`).
    pub mode: TlsMode,
    config: Arc<ServerConfig>,
    end_point: Option<Arc<[u8]>>,
    cert_file: Option<PathBuf>,
}

impl fmt::Debug for ProxyTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyTls")
            .field("mode", &self.mode)
            .field("cert_file", &self.cert_file)
            .field("channel_binding", &self.end_point.is_some())
            .finish_non_exhaustive()
    }
}

impl ProxyTls {
    /// Reads a PEM certificate chain (the proxy's certificate first) and its PEM private key.
    pub fn from_files(mode: TlsMode, cert: &Path, key: &Path) -> Result<ProxyTls, TlsFileError> {
        let fail = |file, e: String| TlsFileError { file, message: e };
        let cert_pem = read_pem(cert).map_err(|e| fail(TlsFile::Cert, e))?;
        let key_pem = read_pem(key).map_err(|e| fail(TlsFile::Key, e))?;
        let mut tls = ProxyTls::from_pem(mode, &cert_pem, &key_pem).map_err(|e| {
            let path = match e.file {
                TlsFile::Cert => cert,
                TlsFile::Key => key,
            };
            fail(e.file, format!("{}: {}", path.display(), e.message))
        })?;
        tls.cert_file = Some(cert.to_owned());
        Ok(tls)
    }

    /// The same from PEM text in memory.
    pub fn from_pem(mode: TlsMode, cert: &[u8], key: &[u8]) -> Result<ProxyTls, TlsFileError> {
        let fail = |file, message: String| TlsFileError { file, message };
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<_, _>>()
            .map_err(|e| fail(TlsFile::Cert, e.to_string()))?;
        let Some(leaf) = chain.first() else {
            return Err(fail(TlsFile::Cert, "no PEM certificate in it".into()));
        };
        // An Ed25519 certificate has no hash for tls-server-end-point: then SCRAM is offered
        // without -PLUS, as PostgreSQL's own server cannot bind to it either.
        let end_point = pgyard_wire::auth::tls_server_end_point(leaf)
            .ok()
            .map(Arc::from);
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| fail(TlsFile::Key, format!("no PEM private key in it ({e})")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(TlsFile::Cert, e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| {
                let text = format!("the key does not go with the certificate ({e})");
                fail(TlsFile::Key, text)
            })?;
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
        Ok(ProxyTls {
            mode,
            config: Arc::new(config),
            end_point,
            cert_file: None,
        })
    }

    /// What each client session is told.
    pub fn client(&self) -> ClientTls {
        ClientTls {
            mode: self.mode,
            end_point: self.end_point.clone(),
        }
    }

    /// Whether SCRAM-SHA-256-PLUS is offered over TLS (the certificate has an end-point hash).
    pub fn channel_binding(&self) -> bool {
        self.end_point.is_some()
    }

    /// The certificate file it was read from (`None`: built from PEM in memory).
    pub fn cert_file(&self) -> Option<&Path> {
        self.cert_file.as_deref()
    }

    /// The acceptor client handshakes run with.
    pub(super) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.clone())
    }
}

/// Reads at most [`PEM_MAX`] bytes of `path`.
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let name = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let mut text = Vec::new();
    file.take(PEM_MAX + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("cannot read {name}: {e}"))?;
    if text.len() as u64 > PEM_MAX {
        return Err(format!("{name}: larger than {PEM_MAX} bytes"));
    }
    Ok(text)
}
