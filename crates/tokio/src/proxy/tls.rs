//! TLS to the proxy's clients: the certificate chain and key read from PEM files into a
//! rustls server configuration (ALPN `postgresql` offered, as PostgreSQL 17 does), with the
//! mode and the certificate's `tls-server-end-point` hash the client sessions are given.
//! With a CA file the proxy asks every client for a certificate and verifies one that is
//! shown against those roots during the handshake (a client may show none: whether it then
//! may log in is the session's decision, as in PostgreSQL); the verified certificate's
//! Common Name goes to the session ([`client_cert`]).
//! The configuration is part of [`super::ProxyConfig`], so a reload that reads new files
//! applies them to the connections accepted from then on.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pgyard_driver::tls;
use pgyard_proxy::client::ALPN_POSTGRESQL;
use pgyard_proxy::{ClientCert, ClientTls, TlsMode};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
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
    /// The roots client certificates are verified against.
    Ca,
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
    ca_file: Option<PathBuf>,
    verifies_clients: bool,
}

impl fmt::Debug for ProxyTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyTls")
            .field("mode", &self.mode)
            .field("cert_file", &self.cert_file)
            .field("channel_binding", &self.end_point.is_some())
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl ProxyTls {
    /// Reads a PEM certificate chain (the proxy's certificate first) and its PEM private key.
    pub fn from_files(mode: TlsMode, cert: &Path, key: &Path) -> Result<ProxyTls, TlsFileError> {
        ProxyTls::from_files_with_ca(mode, cert, key, None)
    }

    /// The same, and with `ca` the PEM roots that client certificates are verified against
    /// (required by the `verify-*` modes).
    pub fn from_files_with_ca(
        mode: TlsMode,
        cert: &Path,
        key: &Path,
        ca: Option<&Path>,
    ) -> Result<ProxyTls, TlsFileError> {
        let fail = |file, e: String| TlsFileError { file, message: e };
        let cert_pem = read_pem(cert).map_err(|e| fail(TlsFile::Cert, e))?;
        let key_pem = read_pem(key).map_err(|e| fail(TlsFile::Key, e))?;
        let ca_pem = match ca {
            Some(path) => Some(read_pem(path).map_err(|e| fail(TlsFile::Ca, e))?),
            None => None,
        };
        let mut tls = ProxyTls::from_pem_with_ca(mode, &cert_pem, &key_pem, ca_pem.as_deref())
            .map_err(|e| {
                let path = match e.file {
                    TlsFile::Cert => Some(cert),
                    TlsFile::Key => Some(key),
                    TlsFile::Ca => ca,
                };
                match path {
                    Some(p) => fail(e.file, format!("{}: {}", p.display(), e.message)),
                    None => e,
                }
            })?;
        tls.cert_file = Some(cert.to_owned());
        tls.ca_file = ca.map(Path::to_owned);
        Ok(tls)
    }

    /// The same from PEM text in memory.
    pub fn from_pem(mode: TlsMode, cert: &[u8], key: &[u8]) -> Result<ProxyTls, TlsFileError> {
        ProxyTls::from_pem_with_ca(mode, cert, key, None)
    }

    /// The same from PEM text in memory, with the client certificates' roots.
    pub fn from_pem_with_ca(
        mode: TlsMode,
        cert: &[u8],
        key: &[u8],
        ca: Option<&[u8]>,
    ) -> Result<ProxyTls, TlsFileError> {
        let fail = |file, message: String| TlsFileError { file, message };
        let mut chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
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
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(TlsFile::Cert, e.to_string()))?;
        let builder = match ca {
            Some(pem) => {
                let (roots, certs) = client_roots(pem).map_err(|e| fail(TlsFile::Ca, e))?;
                // A certificate file with the server's certificate alone is sent with its
                // issuers from the CA file, as PostgreSQL's server (OpenSSL) sends it.
                chain = pgyard_driver::tls::chain_to_send(chain, &certs, UnixTime::now());
                // A client without a certificate still finishes the handshake: the session
                // refuses it with PostgreSQL's words where one is required.
                let inner = WebPkiClientVerifier::builder_with_provider(roots, provider.clone())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| fail(TlsFile::Ca, e.to_string()))?;
                let verifier = ClientVerifier::new(inner, certs, provider);
                builder.with_client_cert_verifier(Arc::new(verifier))
            }
            None if mode.requires_cert() => {
                let text = format!(
                    "mode {} needs a CA file for client certificates",
                    mode.name()
                );
                return Err(fail(TlsFile::Ca, text));
            }
            None => builder.with_no_client_auth(),
        };
        // The driver's check, not rustls's: it also takes an X.509 version 1 certificate
        // (`openssl x509 -req` without extensions), which PostgreSQL and PgBouncer serve.
        let certified = pgyard_driver::tls::certified_key(chain, key, builder.crypto_provider())
            .map_err(|e| {
                let text = format!("the key does not go with the certificate ({e})");
                fail(TlsFile::Key, text)
            })?;
        let mut config =
            builder.with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
        Ok(ProxyTls {
            mode,
            config: Arc::new(config),
            end_point,
            cert_file: None,
            ca_file: None,
            verifies_clients: ca.is_some(),
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

    /// The CA file client certificates are verified against, when read from one.
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// Whether clients are asked for certificates (a CA was given).
    pub fn verifies_clients(&self) -> bool {
        self.verifies_clients
    }

    /// The acceptor client handshakes run with.
    pub(super) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.clone())
    }
}

/// The roots in a PEM file: every certificate in it, at least one.
fn client_roots(pem: &[u8]) -> Result<(Arc<RootCertStore>, Vec<CertificateDer<'static>>), String> {
    let mut roots = RootCertStore::empty();
    let mut certs = Vec::new();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| e.to_string())?;
        roots
            .add(cert.clone())
            .map_err(|e| format!("not a usable CA certificate ({e})"))?;
        certs.push(cert);
    }
    if roots.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok((Arc::new(roots), certs))
}

/// webpki's client verifier with OpenSSL's rules, as PostgreSQL's server verifies a client:
/// over a chain webpki passed, the CA flags, keyCertSign and `extKeyUsage` of every issuer
/// and of the root, the client's `keyUsage`, and a chain that ends at a self-signed
/// certificate of the CA file (its others are intermediates); and for a client certificate
/// webpki refuses outright (X.509 version 1, what `openssl x509 -req` writes without
/// extensions, PostgreSQL's documented recipe; or a CA certificate) the chain and the
/// handshake signature checked by the driver's reader alone.
#[derive(Debug)]
struct ClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    anchors: Vec<CertificateDer<'static>>,
    intermediates: Vec<CertificateDer<'static>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ClientVerifier {
    fn new(
        inner: Arc<dyn ClientCertVerifier>,
        certs: Vec<CertificateDer<'static>>,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> ClientVerifier {
        let (anchors, intermediates) = certs
            .into_iter()
            .partition(|c| tls::is_self_issued(c.as_ref()));
        ClientVerifier {
            inner,
            anchors,
            intermediates,
            provider,
        }
    }

    fn signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
        tls13: bool,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        tls::verify_v1_signature(cert.as_ref(), message, dss, algorithms, tls13)
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let mut all = intermediates.to_vec();
        all.extend(
            self.intermediates
                .iter()
                .map(|c| CertificateDer::from(c.as_ref())),
        );
        let algorithms = &self.provider.signature_verification_algorithms;
        let purpose = tls::ChainPurpose::Client;
        let verdict = if tls::is_beyond_webpki(end_entity.as_ref()) {
            tls::verify_v1_chain(end_entity, &all, &self.anchors, now, algorithms, purpose)
        } else {
            self.inner
                .verify_client_cert(end_entity, intermediates, now)?;
            // What OpenSSL checks and webpki does not, with PostgreSQL's rule that a chain
            // ends at a self-signed certificate of the CA file.
            tls::openssl_chain_rules(end_entity, &all, &self.anchors, now, algorithms, purpose)
        };
        verdict
            .map(|()| ClientCertVerified::assertion())
            .map_err(rustls::Error::InvalidCertificate)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        if tls::is_v1_certificate(cert.as_ref()) {
            return self.signature(message, cert, dss, false);
        }
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        if tls::is_v1_certificate(cert.as_ref()) {
            return self.signature(message, cert, dss, true);
        }
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// What the session needs of a verified client certificate (DER): its subject's first
/// Common Name, as text. A name that is not a directory string, or that holds a NUL byte
/// (which PostgreSQL refuses as well), counts as none, so it matches no user.
pub fn client_cert(der: &[u8]) -> ClientCert {
    use x509_cert::der::Decode;
    let common_name = x509_cert::Certificate::from_der(der)
        .ok()
        .and_then(|c| c.tbs_certificate().subject().common_name().ok().flatten())
        .map(|cn| cn.value().into_owned())
        .filter(|cn| !cn.contains('\0'));
    ClientCert { common_name }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, DnValue, KeyPair};

    fn der_with(names: &[(DnType, DnValue)]) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        // rcgen names its certificates itself unless told otherwise.
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (kind, value) in names {
            params.distinguished_name.push(kind.clone(), value.clone());
        }
        let key = KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().to_vec()
    }

    #[test]
    fn the_common_name_is_the_subjects_first_and_only_text_counts() {
        let utf8 = |s: &str| DnValue::Utf8String(s.into());
        let cn = |der: &[u8]| client_cert(der).common_name;
        assert_eq!(
            cn(&der_with(&[(DnType::CommonName, utf8("alice"))])),
            Some("alice".into())
        );
        let printable = DnValue::PrintableString("bob".try_into().expect("printable"));
        assert_eq!(
            cn(&der_with(&[(DnType::CommonName, printable)])),
            Some("bob".into())
        );
        // Other attributes are not a user name.
        let org = der_with(&[(DnType::OrganizationName, utf8("alice"))]);
        assert_eq!(cn(&org), None);
        // PostgreSQL refuses a name with a NUL in it; here it matches nobody.
        assert_eq!(
            cn(&der_with(&[(DnType::CommonName, utf8("ali\0ce"))])),
            None
        );
        assert_eq!(cn(b"not a certificate"), None);
        assert_eq!(cn(&[]), None);
    }

    #[test]
    fn a_ca_file_turns_on_client_verification_and_the_verify_modes_need_one() {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec!["localhost".into()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let (c, k) = (cert.pem(), key.serialize_pem());
        let plain = ProxyTls::from_pem(TlsMode::Require, c.as_bytes(), k.as_bytes()).expect("tls");
        assert!(!plain.verifies_clients());
        let with_ca = ProxyTls::from_pem_with_ca(
            TlsMode::VerifyCa,
            c.as_bytes(),
            k.as_bytes(),
            Some(c.as_bytes()),
        )
        .expect("tls with a CA");
        assert!(with_ca.verifies_clients());
        for mode in [TlsMode::VerifyCa, TlsMode::VerifyFull] {
            let e = ProxyTls::from_pem(mode, c.as_bytes(), k.as_bytes()).expect_err("no CA");
            assert_eq!(e.file, TlsFile::Ca);
            assert!(e.message.contains(mode.name()), "{}", e.message);
        }
        let e =
            ProxyTls::from_pem_with_ca(TlsMode::VerifyCa, c.as_bytes(), k.as_bytes(), Some(b"x"))
                .expect_err("no certificate in the CA file");
        assert_eq!(
            (e.file, e.message.as_str()),
            (TlsFile::Ca, "no PEM certificate in it")
        );
    }
}
