//! TLS for the adapters (pgyard-blocking and pgyard-tokio): rustls client configurations built
//! from the connection settings, and the certificate checks libpq's `sslmode` values ask for.
//!
//! The machine decides *whether* and *how strictly* to verify ([`TlsVerify`]); this module
//! only carries that out, plus libpq's file rule: a root certificate file that exists turns on
//! chain verification even for `sslmode=require` (libpq loads it and sets `SSL_VERIFY_PEER`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::certnames::{CertificateNames, HostNameMismatch};
pub use crate::client_cert::CertProbe;
use crate::client_cert::{ProbingResolver, VersionWatch};
use crate::client_chain;
use crate::crl::CrlSource;
use crate::keyfile::{self, KeyPassword};
use crate::keylog::KeyLogFile;
use crate::roots::{self, TrustedChain};
use crate::v1chain;
pub use crate::v1chain::ChainPurpose;
use pgyard_connect::{AttemptId, Event, FailureKind, TlsVerify, ALPN_POSTGRESQL};
use pgyard_conninfo::resolve::Environment;
use pgyard_conninfo::typed::{ConnectConfig, SslCertMode, SslMode, TlsVersion};
use pgyard_conninfo::Keyword;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore,
    SignatureScheme,
};

const ROOT_HINT: &str = "Either provide the file, use the system's trusted roots with \
    sslrootcert=system, or change sslmode to disable server certificate verification.";

/// Where the root certificates come from.
#[derive(Clone, Debug)]
enum RootCert {
    /// `sslrootcert=system`: the operating system's store.
    System,
    /// A PEM file (which may not exist).
    File(PathBuf),
    /// No home directory to look in and no `sslrootcert`.
    Unknown,
}

/// The TLS-related settings of one connect, with default file paths filled in.
#[derive(Clone, Debug)]
pub struct TlsSettings {
    root: RootCert,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    sni: bool,
    client_cert: bool,
    min: Option<TlsVersion>,
    max: Option<TlsVersion>,
    /// Revocation lists, consulted when a root certificate file is.
    crl: CrlSource,
    /// `sslpassword` when set and not empty: the pass phrase of an encrypted key.
    password: Option<KeyPassword>,
    /// `sslkeylogfile` when set and not empty.
    keylog: Option<KeyLogFile>,
}

impl TlsSettings {
    /// Reads the settings from `config`, with libpq's defaults under `~/.postgresql/`.
    pub fn new(config: &ConnectConfig, env: &Environment) -> Self {
        // Under sslmode=disable no attempt asks for TLS: the default paths under the home
        // directory (three lossy conversions and joins) would never be looked at.
        let home = (config.sslmode() != SslMode::Disable)
            .then(|| env.home_directory())
            .flatten()
            .map(|h| PathBuf::from(String::from_utf8_lossy(h).into_owned()));
        let path = |kw: Keyword, default: &str| -> Option<PathBuf> {
            match config.raw(kw) {
                Some(v) if !v.is_empty() => {
                    Some(PathBuf::from(String::from_utf8_lossy(v).into_owned()))
                }
                _ => home.as_ref().map(|h| h.join(".postgresql").join(default)),
            }
        };
        let root = match config.raw(Keyword::Sslrootcert) {
            Some(b"system") => RootCert::System,
            _ => path(Keyword::Sslrootcert, "root.crt").map_or(RootCert::Unknown, RootCert::File),
        };
        TlsSettings {
            root,
            cert: path(Keyword::Sslcert, "postgresql.crt"),
            key: path(Keyword::Sslkey, "postgresql.key"),
            sni: config.sslsni(),
            client_cert: config.sslcertmode() != SslCertMode::Disable,
            min: config.ssl_min_protocol_version(),
            max: config.ssl_max_protocol_version(),
            crl: CrlSource::new(config, home.as_deref()),
            password: config
                .raw(Keyword::Sslpassword)
                .filter(|p| !p.is_empty())
                .map(|p| KeyPassword(p.to_vec())),
            keylog: config.raw(Keyword::Sslkeylogfile).and_then(KeyLogFile::new),
        }
    }

    /// A client configuration for one handshake to `host` (the slot's `host` as written, which
    /// `verify-full` compares the certificate's names with), with the probe that tells
    /// afterwards what became of client certificates in it, or libpq's text for why none can
    /// be made.
    pub fn client_config(
        &self,
        verify: TlsVerify,
        host: Option<&str>,
    ) -> Result<(Arc<ClientConfig>, CertProbe), String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let root_file_exists = matches!(&self.root, RootCert::File(p) if p.is_file());
        // libpq verifies the chain whenever the root file exists, whatever the sslmode says.
        let verify = match verify {
            TlsVerify::None if root_file_exists => TlsVerify::Ca,
            v => v,
        };
        // libpq loads revocation lists only beside a root certificate file.
        let crls = if root_file_exists {
            self.crl.load()
        } else {
            None
        };
        let no_list_found = crls.as_ref().is_some_and(Vec::is_empty);
        let revocation = crls.is_some();
        let mut chain = TrustedChain::default();
        // What OpenSSL's store holds: where a client certificate's chain is completed from.
        let mut trusted_certs = Vec::new();
        let inner = match verify {
            TlsVerify::None => None,
            TlsVerify::Ca | TlsVerify::Full => {
                let roots = self.roots()?;
                // Only where a client certificate may be sent (a system store holds hundreds).
                if self.client_cert && self.cert.as_deref().is_some_and(Path::is_file) {
                    trusted_certs.clone_from(&roots);
                }
                let (store, trusted) = TrustedChain::split(roots, UnixTime::now());
                chain = trusted;
                let mut b =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone());
                if let Some(crls) = crls {
                    b = b.with_crls(crls).enforce_revocation_expiration();
                }
                let v = b
                    .build()
                    .map_err(|e| format!("could not set up certificate verification: {e}"))?;
                Some(v)
            }
        };
        let probe = CertProbe::default();
        let verifier = Arc::new(PgVerifier {
            verify,
            inner,
            provider: provider.clone(),
            probe: probe.clone(),
            no_list_found,
            revocation,
            chain,
            host: host.map(str::to_owned),
        });
        let versions = self.versions();
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions)
            .map_err(|e| format!("SSL error: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let identity = match self.client_identity()? {
            Some((chain, key, key_path)) => Some(Arc::new(
                certified_key(
                    chain_to_send(chain, &trusted_certs, UnixTime::now()),
                    key,
                    builder.crypto_provider(),
                )
                .map_err(|e| {
                    // OpenSSL compares the keys as it loads the key file, so libpq words a
                    // mismatch as a failed load.
                    let reason = match e {
                        rustls::Error::InconsistentKeys(_) => "key values mismatch".to_owned(),
                        e => e.to_string(),
                    };
                    format!(
                        "could not load private key file \"{}\": {reason}",
                        key_path.display()
                    )
                })?,
            )),
            None => None,
        };
        let resolver = ProbingResolver::new(identity, probe.clone());
        let mut config = builder.with_client_cert_resolver(Arc::new(resolver));
        config.key_log = Arc::new(VersionWatch::new(probe.clone(), self.keylog.clone()));
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
        config.enable_sni = self.sni;
        Ok((Arc::new(config), probe))
    }

    /// The certificates of the root file, each one a trust anchor webpki can read, or the
    /// system's store.
    fn roots(&self) -> Result<Vec<CertificateDer<'static>>, String> {
        let mut kept = Vec::new();
        match &self.root {
            // A malformed system certificate is skipped, as OpenSSL skips it (webpki's store
            // refuses it when `TrustedChain::split` adds it).
            RootCert::System => kept = rustls_native_certs::load_native_certs().certs,
            RootCert::Unknown => {
                return Err(format!(
                    "could not get home directory to locate root certificate file\n{ROOT_HINT}"
                ))
            }
            RootCert::File(path) => {
                if !path.exists() {
                    return Err(format!(
                        "root certificate file \"{}\" does not exist\n{ROOT_HINT}",
                        path.display()
                    ));
                }
                let unreadable = |e: &dyn std::fmt::Display| {
                    format!(
                        "could not read root certificate file \"{}\": {e}",
                        path.display()
                    )
                };
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| unreadable(&e))?;
                for cert in certs {
                    RootCertStore::empty()
                        .add(cert.clone())
                        .map_err(|e| unreadable(&e))?;
                    kept.push(cert);
                }
            }
        }
        Ok(kept)
    }

    fn client_identity(
        &self,
    ) -> Result<
        Option<(
            Vec<CertificateDer<'static>>,
            PrivateKeyDer<'static>,
            PathBuf,
        )>,
        String,
    > {
        if !self.client_cert {
            return Ok(None);
        }
        // libpq silently goes without a client certificate when the file is missing.
        let Some(cert) = self.cert.as_deref().filter(|p| p.is_file()) else {
            return Ok(None);
        };
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| {
                format!(
                    "could not read certificate file \"{}\": {e}",
                    cert.display()
                )
            })?;
        let key_path = self.key.clone().unwrap_or_default();
        if !key_path.is_file() {
            return Err(format!(
                "certificate present, but not private key file \"{}\"",
                key_path.display()
            ));
        }
        check_key_permissions(&key_path)?;
        let key = keyfile::load(&key_path, self.password.as_ref())?;
        Ok(Some((chain, key, key_path)))
    }

    fn versions(&self) -> Vec<&'static rustls::SupportedProtocolVersion> {
        let rank = |v: TlsVersion| match v {
            TlsVersion::Tls1_0 => 0,
            TlsVersion::Tls1_1 => 1,
            TlsVersion::Tls1_2 => 2,
            TlsVersion::Tls1_3 => 3,
        };
        let min = self.min.map_or(2, rank);
        let max = self.max.map_or(3, rank);
        let mut out = Vec::new();
        if min <= 2 && max >= 2 {
            out.push(&rustls::version::TLS12);
        }
        if min <= 3 && max >= 3 {
            out.push(&rustls::version::TLS13);
        }
        out
    }
}

/// Whether `der` is an X.509 version 1 certificate, which webpki refuses to read and OpenSSL
/// takes (docs/driver.md, "Version 1 certificates"): a verifier built on webpki hands such a
/// certificate to [`verify_v1_chain`] and [`verify_v1_signature`] instead.
pub fn is_v1_certificate(der: &[u8]) -> bool {
    v1chain::is_v1(der)
}

/// Whether the end certificate `der` is one webpki refuses outright and OpenSSL takes
/// (version 1, or a CA certificate): its chain goes to [`verify_v1_chain`].
pub fn is_beyond_webpki(der: &[u8]) -> bool {
    v1chain::beyond_webpki(der)
}

/// The rules OpenSSL applies over a chain that webpki has passed and webpki does not check
/// (each issuer's and the root's CA flags, keyCertSign and `extKeyUsage`, the end's
/// `keyUsage`), for `purpose`, with `roots` the self-signed trusted certificates (whole).
pub fn openssl_chain_rules(
    leaf: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    roots: &[CertificateDer<'static>],
    now: UnixTime,
    algorithms: &rustls::crypto::WebPkiSupportedAlgorithms,
    purpose: ChainPurpose,
) -> Result<(), CertificateError> {
    let mode = v1chain::Mode::AfterWebpki;
    v1chain::verify_counted(leaf, intermediates, roots, now, algorithms, purpose, mode).0
}

/// Whether `der` names itself as its issuer: where OpenSSL lets a chain end (a trusted
/// certificate that does not is used as an intermediate). Unreadable counts as yes.
pub fn is_self_issued(der: &[u8]) -> bool {
    v1chain::self_issued(der)
}

/// Verifies the chain from the version 1 certificate `leaf` through `intermediates` to one of
/// `roots` (whole certificates) at `now` as OpenSSL does, for `purpose`; the error is the
/// kind webpki would give.
pub fn verify_v1_chain(
    leaf: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    roots: &[CertificateDer<'static>],
    now: UnixTime,
    algorithms: &rustls::crypto::WebPkiSupportedAlgorithms,
    purpose: ChainPurpose,
) -> Result<(), CertificateError> {
    let mode = v1chain::Mode::Alone;
    v1chain::verify_counted(leaf, intermediates, roots, now, algorithms, purpose, mode).0
}

/// The handshake's signature over `message` by the key of the version 1 certificate `der`
/// (rustls's own check reads the key through webpki); `tls13` limits the schemes to TLS 1.3's.
pub fn verify_v1_signature(
    der: &[u8],
    message: &[u8],
    dss: &DigitallySignedStruct,
    algorithms: &rustls::crypto::WebPkiSupportedAlgorithms,
    tls13: bool,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    v1chain::verify_handshake_signature(der, message, dss, algorithms, tls13)
}

/// The chain OpenSSL sends for the certificates of a certificate file: the file's own when it
/// holds more than one; for a lone certificate, it and its issuers found among `trusted` (a
/// root or CA file, the system's store) up to and with the self-signed root, as OpenSSL's
/// auto-chaining finds them (by name and key identifier, no signature checked). libpq sends a
/// client's chain so, and PostgreSQL's server its own from `ssl_ca_file`.
pub fn chain_to_send(
    chain: Vec<CertificateDer<'static>>,
    trusted: &[CertificateDer<'static>],
    now: UnixTime,
) -> Vec<CertificateDer<'static>> {
    client_chain::complete(chain, trusted, now)
}

/// A certificate chain and its key as a TLS identity, the key checked against the first
/// certificate as OpenSSL's `SSL_check_private_key` checks it (the two public keys equal) —
/// for X.509 version 1 certificates too, which rustls's own check (`CertifiedKey::from_der`)
/// refuses because it reads the certificate through webpki. A mismatch is
/// `rustls::Error::InconsistentKeys`.
pub fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, rustls::Error> {
    let signing = provider.key_provider.load_private_key(key)?;
    let certified = CertifiedKey::new(chain, signing);
    let leaf = certified.end_entity_cert()?;
    match (v1chain::spki(leaf.as_ref()), certified.key.public_key()) {
        (Some(cert_key), Some(key)) if cert_key == key.as_ref() => Ok(certified),
        (Some(_), Some(_)) => Err(rustls::Error::InconsistentKeys(
            rustls::InconsistentKeys::KeyMismatch,
        )),
        // Not a certificate this reader knows, or a key that cannot say: rustls's own check.
        _ => certified.keys_match().map(|()| certified),
    }
}

/// The `ServerName` rustls needs: the host name, else the address connected to.
pub fn server_name(name: Option<&str>, ip: Option<IpAddr>) -> ServerName<'static> {
    if let Some(n) = name {
        if let Ok(ip) = n.parse::<IpAddr>() {
            return ServerName::IpAddress(ip.into());
        }
        if let Ok(s) = ServerName::try_from(n.to_owned()) {
            return s;
        }
    }
    match ip {
        Some(ip) => ServerName::IpAddress(ip.into()),
        None => ServerName::IpAddress(IpAddr::from([127, 0, 0, 1]).into()),
    }
}

/// The event for a finished handshake: the channel-binding hash of the server's certificate,
/// what the server selected by ALPN, and what `probe` (the handshake's) saw of client
/// certificates, for the machine to judge.
pub fn established(attempt: AttemptId, conn: &ClientConnection, probe: &CertProbe) -> Event {
    Event::TlsEstablished {
        attempt,
        server_end_point: conn
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|cert| pgyard_wire::auth::tls_server_end_point(cert.as_ref()).ok()),
        alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
        client_cert: probe.status(),
    }
}

/// The event for a handshake that failed with `e` (an I/O error that wraps rustls's error, as
/// `StreamOwned` and tokio-rustls report it): libpq's text for `host` and what `probe` saw of
/// client certificates before it failed, or a plain EOF.
pub fn handshake_failed(
    attempt: AttemptId,
    e: &std::io::Error,
    host: &str,
    probe: &CertProbe,
) -> Event {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(te) => Event::TlsFailed {
            attempt,
            message: handshake_error_text(te, host),
            kind: handshake_failure_kind(te),
            client_cert: probe.status(),
        },
        None => Event::Closed { attempt },
    }
}

/// What a failed handshake means, by rustls's error type: a server certificate that does not
/// verify (chain or name) fails the server's authentication; anything else (an alert, a
/// malformed message, an unsupported version) is the connection's and may pass.
pub fn handshake_failure_kind(e: &rustls::Error) -> FailureKind {
    match e {
        rustls::Error::InvalidCertificate(_) => FailureKind::Authentication,
        _ => FailureKind::Transient,
    }
}

/// libpq's text for a failed handshake.
pub fn handshake_error_text(e: &rustls::Error, host: &str) -> String {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => {
            match other.0.downcast_ref::<HostNameMismatch>() {
                Some(mismatch) => mismatch.text.clone(),
                None => "SSL error: certificate verify failed".to_owned(),
            }
        }
        // Only for a certificate the verifier could not read names from (it words every
        // other refusal itself): webpki lists the subjectAltNames but not the Common Name.
        rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            presented,
            ..
        }) => CertificateNames::from_presented(presented).mismatch_text(host),
        rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => {
            format!("server certificate does not match host name \"{host}\"")
        }
        rustls::Error::InvalidCertificate(_) => "SSL error: certificate verify failed".to_owned(),
        rustls::Error::AlertReceived(alert) => match openssl_alert_text(*alert) {
            Some(text) => format!("SSL error: {text}"),
            None => format!("SSL error: {e}"),
        },
        other => format!("SSL error: {other}"),
    }
}

/// What a failed read of a connection tells the machine: an alert the server sent after the
/// handshake (a client certificate refused, which TLS 1.3 tells only then) is libpq's `SSL
/// error: …` ([`Event::Broken`]); anything else — EOF, a reset — is [`Event::Closed`].
pub fn read_failed(attempt: AttemptId, e: Option<&std::io::Error>) -> Event {
    let tls = e
        .and_then(|e| e.get_ref())
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(alert @ rustls::Error::AlertReceived(_)) => Event::Broken {
            attempt,
            message: handshake_error_text(alert, ""),
        },
        _ => Event::Closed { attempt },
    }
}

/// OpenSSL's reason for an alert received from the server (libpq prints OpenSSL's reason).
fn openssl_alert_text(alert: rustls::AlertDescription) -> Option<&'static str> {
    use rustls::AlertDescription as A;
    Some(match alert {
        A::UnexpectedMessage => "sslv3 alert unexpected message",
        A::BadRecordMac => "sslv3 alert bad record mac",
        A::DecryptionFailed => "tlsv1 alert decryption failed",
        A::RecordOverflow => "tlsv1 alert record overflow",
        A::DecompressionFailure => "sslv3 alert decompression failure",
        A::HandshakeFailure => "sslv3 alert handshake failure",
        A::NoCertificate => "sslv3 alert no certificate",
        A::BadCertificate => "sslv3 alert bad certificate",
        A::UnsupportedCertificate => "sslv3 alert unsupported certificate",
        A::CertificateRevoked => "sslv3 alert certificate revoked",
        A::CertificateExpired => "sslv3 alert certificate expired",
        A::CertificateUnknown => "sslv3 alert certificate unknown",
        A::IllegalParameter => "sslv3 alert illegal parameter",
        A::UnknownCA => "tlsv1 alert unknown ca",
        A::AccessDenied => "tlsv1 alert access denied",
        A::DecodeError => "tlsv1 alert decode error",
        A::DecryptError => "tlsv1 alert decrypt error",
        A::ProtocolVersion => "tlsv1 alert protocol version",
        A::InsufficientSecurity => "tlsv1 alert insufficient security",
        A::InternalError => "tlsv1 alert internal error",
        A::InappropriateFallback => "tlsv1 alert inappropriate fallback",
        A::UserCanceled => "tlsv1 alert user cancelled",
        A::NoRenegotiation => "tlsv1 alert no renegotiation",
        A::MissingExtension => "tlsv13 alert missing extension",
        A::UnsupportedExtension => "tlsv1 unsupported extension",
        A::CertificateUnobtainable => "tlsv1 certificate unobtainable",
        A::UnrecognisedName => "tlsv1 unrecognized name",
        A::BadCertificateStatusResponse => "tlsv1 bad certificate status response",
        A::BadCertificateHashValue => "tlsv1 bad certificate hash value",
        A::CertificateRequired => "tlsv13 alert certificate required",
        A::NoApplicationProtocol => "tlsv1 alert no application protocol",
        _ => return None,
    })
}

/// libpq refuses a key file readable by group or others unless root owns it (0640 at most).
fn check_key_permissions(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| {
        format!(
            "could not open private key file \"{}\": {e}",
            path.display()
        )
    })?;
    let mode = meta.mode();
    let ok = if meta.uid() == 0 {
        mode & 0o037 == 0
    } else {
        mode & 0o077 == 0
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "private key file \"{}\" has group or world access; file must have permissions u=rw (0600) or less if owned by the current user, or permissions u=rw,g=r (0640) or less if owned by root",
            path.display()
        ))
    }
}

/// Carries out one [`TlsVerify`] level on top of webpki.
#[derive(Debug)]
struct PgVerifier {
    verify: TlsVerify,
    inner: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
    /// Told when the chain fails (see [`CertProbe`]).
    probe: CertProbe,
    /// Revocation is checked but no list was found: OpenSSL then refuses every chain, as no
    /// certificate's status can be known (rustls's verifier would check nothing).
    no_list_found: bool,
    /// Revocation lists are in play (checked by webpki; a version 1 chain, which this
    /// verifier checks itself, is then refused rather than taken unchecked for revocation).
    revocation: bool,
    /// The root file's certificates as OpenSSL uses them.
    chain: TrustedChain,
    /// The host `verify-full` compares the names with: the slot's `host` as written.
    host: Option<String>,
}

impl PgVerifier {
    /// Over a chain webpki passed (its name aside), the rules OpenSSL applies and webpki
    /// does not: the root's and every issuer's CA flags and `extKeyUsage`, the server's
    /// `keyUsage` (docs/driver.md, "What OpenSSL checks beyond webpki").
    fn openssl_rules(
        &self,
        result: Result<ServerCertVerified, rustls::Error>,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !roots::chain_passed(&result) {
            return result;
        }
        let algorithms = &self.provider.signature_verification_algorithms;
        openssl_chain_rules(
            end_entity,
            intermediates,
            &self.chain.anchors,
            now,
            algorithms,
            ChainPurpose::Server,
        )
        .map_err(rustls::Error::InvalidCertificate)?;
        result
    }

    /// A chain ending in a certificate webpki refuses outright and OpenSSL takes (version 1,
    /// or a CA certificate): checked by `v1chain` as OpenSSL would (see there).
    fn verify_v1_chain(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.revocation {
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownRevocationStatus,
            ));
        }
        let intermediates = self.chain.with_intermediates(intermediates);
        verify_v1_chain(
            end_entity,
            &intermediates,
            &self.chain.anchors,
            now,
            &self.provider.signature_verification_algorithms,
            ChainPurpose::Server,
        )
        .map(|()| ServerCertVerified::assertion())
        .map_err(rustls::Error::InvalidCertificate)
    }
}

impl ServerCertVerifier for PgVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(inner) = &self.inner else {
            return Ok(ServerCertVerified::assertion());
        };
        let result = if v1chain::beyond_webpki(end_entity.as_ref()) {
            self.verify_v1_chain(end_entity, intermediates, now)
        } else {
            let intermediates = self.chain.with_intermediates(intermediates);
            let result = inner.verify_server_cert(
                end_entity,
                &intermediates,
                server_name,
                ocsp_response,
                now,
            );
            self.openssl_rules(
                self.chain.judge_partial(result),
                end_entity,
                &intermediates,
                now,
            )
        };
        let name_error = matches!(
            result,
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ))
        );
        // What OpenSSL checks in the handshake is the chain, revocation included (with no list
        // found no status is known); libpq looks at the name only after the handshake.
        if !(result.is_ok() || name_error) || self.no_list_found {
            self.probe.chain_failed();
            return match result {
                Err(e) if !name_error => Err(e),
                _ => Err(rustls::Error::InvalidCertificate(
                    CertificateError::UnknownRevocationStatus,
                )),
            };
        }
        // The chain passed (webpki checks the name only after it). libpq, not webpki, judges
        // the name: it takes the Common Name when no subjectAltName has the host's kind, a
        // dNSName spelt like the address, inet_aton's forms of IPv4, and compares with the
        // host as written in the connection string (none when connected by hostaddr alone).
        match self.verify {
            TlsVerify::Full => match CertificateNames::from_der(end_entity.as_ref()) {
                Some(names) => match names.check(self.host.as_deref().unwrap_or("")) {
                    Ok(()) => Ok(ServerCertVerified::assertion()),
                    Err(text) => Err(HostNameMismatch::error(text)),
                },
                None => result,
            },
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        // rustls reads the key through webpki, which refuses version 1 certificates.
        if v1chain::is_v1(cert.as_ref()) {
            return v1chain::verify_handshake_signature(
                cert.as_ref(),
                message,
                dss,
                algorithms,
                false,
            );
        }
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        // rustls reads the key through webpki, which refuses version 1 certificates.
        if v1chain::is_v1(cert.as_ref()) {
            return v1chain::verify_handshake_signature(
                cert.as_ref(),
                message,
                dss,
                algorithms,
                true,
            );
        }
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
