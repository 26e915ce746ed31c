//! Chains that end in an X.509 **version 1** server certificate, which webpki refuses outright
//! and OpenSSL (so libpq) accepts. `openssl x509 -req` writes a version 1 certificate unless
//! given extensions, and the PostgreSQL documentation's own recipe for a server certificate
//! signed by a root or an intermediate CA does exactly that, so without this a `verify-ca`
//! or `verify-full` connection — or `require` with a root file present — fails against a
//! server set up by the book.
//!
//! Only the version 1 leaf is what webpki cannot take; everything above it is checked here as
//! OpenSSL checks it, failing closed on anything this reader does not handle: each signature
//! with the provider's algorithms (the ones webpki would use), every certificate's validity
//! (the root's too), each issuer a CA (version 3 with `basicConstraints` cA, its
//! `pathLenConstraint` and `keyUsage` keyCertSign honoured, or a self-signed version 1 root),
//! an issuer's `extKeyUsage`, if any, naming serverAuth (clientAuth for a client's chain); name constraints, unknown critical
//! extensions and revocation lists are refused rather than half-checked. A version 1 leaf has
//! no extensions, so nothing about its own purpose or names is left for the chain to check.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, PeerMisbehaved, SignatureScheme};

/// The longest chain looked for above the leaf.
const MAX_DEPTH: usize = 8;
/// The most server-sent intermediates considered.
const MAX_INTERMEDIATES: usize = 16;
/// The most signatures checked for one chain: a server that sends issuers signing each other
/// cannot make the search take longer than this.
const MAX_SIGNATURES: u32 = 64;

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const BOOLEAN: u8 = 0x01;
const OID: u8 = 0x06;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const VERSION: u8 = 0xa0;
const EXTENSIONS: u8 = 0xa3;

const OID_BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const OID_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
const OID_EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
const OID_NAME_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x1e];
const OID_AUTHORITY_KEY_ID: &[u8] = &[0x55, 0x1d, 0x23];
const OID_SUBJECT_KEY_ID: &[u8] = &[0x55, 0x1d, 0x0e];
/// authorityKeyIdentifier's `[0] IMPLICIT KeyIdentifier`.
const KEY_IDENTIFIER: u8 = 0x80;
/// 1.3.6.1.5.5.7.3.1, id-kp-serverAuth.
const OID_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
/// 1.3.6.1.5.5.7.3.2, id-kp-clientAuth.
const OID_CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];

/// What the end of the chain authenticates: an issuer's `extKeyUsage`, if any, must allow it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainPurpose {
    /// A server (the driver's connections).
    Server,
    /// A client (the proxy's clients' certificates).
    Client,
}

/// Whether `der` is a version 1 certificate (its `version` field absent or 0): the case this
/// module handles. Anything unreadable is not, and is left to webpki's error.
pub(crate) fn is_v1(der: &[u8]) -> bool {
    Cert::parse(der).is_some_and(|c| c.version == 0)
}

/// Whether the server certificate `der` is one webpki refuses outright and OpenSSL takes, so
/// that this module checks its chain alone: version 1, or a CA certificate (OpenSSL lets the
/// end of a chain be a CA; webpki refuses it as `CaUsedAsEndEntity`).
pub(crate) fn beyond_webpki(der: &[u8]) -> bool {
    Cert::parse(der).is_some_and(|c| {
        c.version == 0
            || c.extensions()
                .is_ok_and(|e| matches!(e.basic, Some((true, _))))
    })
}

/// Whether `der` is a certificate whose issuer is its subject (as OpenSSL finds a chain's
/// self-signed end: by name). One this reader cannot read counts as such, leaving it to
/// webpki as a trust anchor.
pub(crate) fn self_issued(der: &[u8]) -> bool {
    Cert::parse(der).is_none_or(|c| c.subject == c.issuer)
}

/// Whether the certificate `der` is within its validity at `now`; one this reader cannot read
/// counts as valid, leaving it to webpki.
pub(crate) fn valid_at(der: &[u8], now: UnixTime) -> bool {
    Cert::parse(der).is_none_or(|c| c.check_time(now).is_ok())
}

/// The whole `subjectPublicKeyInfo` of the certificate `der`, if this reader can read it.
pub(crate) fn spki(der: &[u8]) -> Option<&[u8]> {
    Cert::parse(der).map(|c| c.spki)
}

/// Verifies the chain from `leaf` through `intermediates` to one of `roots` at `now` as
/// OpenSSL would, for `purpose` (the error is the kind webpki would have given), and says how
/// many signatures it checked. `Mode::Alone`: a chain webpki cannot take (a version 1 or CA
/// end certificate), checked wholly here. `Mode::AfterWebpki`: the rules OpenSSL applies that
/// webpki does not, over a chain webpki has passed — the end's purpose (`keyUsage` for TLS),
/// and for each issuer up to and with the root OpenSSL's CA rules and its `extKeyUsage`; the
/// path is searched again, signatures checked where names leave it ambiguous.
pub(crate) fn verify_counted(
    leaf: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    roots: &[CertificateDer<'static>],
    now: UnixTime,
    algorithms: &WebPkiSupportedAlgorithms,
    purpose: ChainPurpose,
    mode: Mode,
) -> (Result<(), CertificateError>, u32) {
    let Some(cert) = Cert::parse(leaf.as_ref()) else {
        return (Err(CertificateError::BadEncoding), 0);
    };
    if let Err(e) = cert.check_time(now).and_then(|()| cert.check_end(purpose)) {
        return (Err(e), 0);
    }
    // A trusted certificate is trusted as it is, as OpenSSL finds it in its store.
    if roots.iter().any(|r| r.as_ref() == leaf.as_ref()) {
        return (Ok(()), 0);
    }
    let chain = Chain {
        intermediates: parsed(&intermediates[..intermediates.len().min(MAX_INTERMEDIATES)]),
        roots: parsed(roots),
        now,
        algorithms,
        purpose,
        mode,
        budget: std::cell::Cell::new(MAX_SIGNATURES),
    };
    let result = chain.issue(&cert, 0);
    (result, MAX_SIGNATURES - chain.budget.get())
}

struct Chain<'a> {
    /// Parsed once (the search visits them at every step); unreadable ones left out.
    intermediates: Vec<Cert<'a>>,
    roots: Vec<Cert<'a>>,
    now: UnixTime,
    algorithms: &'a WebPkiSupportedAlgorithms,
    purpose: ChainPurpose,
    mode: Mode,
    /// Signatures left to check.
    budget: std::cell::Cell<u32>,
}

impl Chain<'_> {
    /// Finds an issuer for `cert` (which has `below` CA certificates under it) that signed
    /// it, is a CA that may issue at that depth, and reaches a root.
    fn issue(&self, cert: &Cert<'_>, below: usize) -> Result<(), CertificateError> {
        let mut error = CertificateError::UnknownIssuer;
        // After webpki, an issuer that is the only certificate of its name is the one
        // webpki's path went through, whose signature webpki has checked; where several
        // share the name, the signatures pick the path.
        let check_signature = self.mode == Mode::Alone || self.named(cert.issuer) > 1;
        for issuer in &self.roots {
            if issuer.subject != cert.issuer {
                continue;
            }
            match self.signed_by_ca(cert, issuer, below, check_signature) {
                Ok(()) => return Ok(()),
                Err(e) => error = e,
            }
        }
        if below + 1 >= MAX_DEPTH {
            return Err(error);
        }
        for issuer in &self.intermediates {
            if issuer.subject != cert.issuer || issuer.subject == cert.subject {
                continue;
            }
            match self
                .signed_by_ca(cert, issuer, below, check_signature)
                .and_then(|()| self.issue(issuer, below + 1))
            {
                Ok(()) => return Ok(()),
                Err(e) => error = e,
            }
        }
        Err(error)
    }

    /// How many of the roots and intermediates have the subject `name`.
    fn named(&self, name: &[u8]) -> usize {
        self.roots
            .iter()
            .chain(&self.intermediates)
            .filter(|c| c.subject == name)
            .count()
    }

    fn signed_by_ca(
        &self,
        cert: &Cert<'_>,
        issuer: &Cert<'_>,
        below: usize,
        check_signature: bool,
    ) -> Result<(), CertificateError> {
        let left = self.budget.get();
        if left == 0 {
            return Err(CertificateError::UnknownIssuer);
        }
        self.budget.set(left - 1);
        if check_signature {
            verify_signature(cert, issuer, self.algorithms)?;
        }
        issuer.check_time(self.now)?;
        issuer.check_ca(below, self.purpose, self.mode)
    }
}

/// The server's signature in the handshake (over `message`, by the key of the version 1
/// certificate `der`), which rustls's own check cannot take either: it reads the key through
/// webpki. Each of the provider's algorithms for the scheme whose key type is the key's is
/// tried, as rustls tries them; TLS 1.3 allows only its own schemes.
pub(crate) fn verify_handshake_signature(
    der: &[u8],
    message: &[u8],
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
    tls13: bool,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    verify_scheme_signature(der, message, dss.scheme, dss.signature(), algorithms, tls13)
}

/// [`verify_handshake_signature`] with the scheme and the signature apart (rustls makes a
/// `DigitallySignedStruct` only inside itself; the fuzz target draws both).
pub(crate) fn verify_scheme_signature(
    der: &[u8],
    message: &[u8],
    scheme: SignatureScheme,
    signature: &[u8],
    algorithms: &WebPkiSupportedAlgorithms,
    tls13: bool,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let unadvertised =
        || rustls::Error::PeerMisbehaved(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme);
    let tls13_scheme = matches!(
        scheme,
        SignatureScheme::ECDSA_NISTP256_SHA256
            | SignatureScheme::ECDSA_NISTP384_SHA384
            | SignatureScheme::ECDSA_NISTP521_SHA512
            | SignatureScheme::RSA_PSS_SHA256
            | SignatureScheme::RSA_PSS_SHA384
            | SignatureScheme::RSA_PSS_SHA512
            | SignatureScheme::ED25519
            | SignatureScheme::ED448
    );
    if tls13 && !tls13_scheme {
        return Err(unadvertised());
    }
    let cert = Cert::parse(der).ok_or(rustls::Error::InvalidCertificate(
        CertificateError::BadEncoding,
    ))?;
    let (_, candidates) = algorithms
        .mapping
        .iter()
        .find(|(s, _)| *s == scheme)
        .ok_or_else(unadvertised)?;
    let alg = candidates
        .iter()
        .find(|a| a.public_key_alg_id().as_ref() == cert.key_alg)
        .ok_or_else(|| {
            rustls::Error::InvalidCertificate(
                CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext {
                    signature_algorithm_id: Vec::new(),
                    public_key_algorithm_id: cert.key_alg.to_vec(),
                },
            )
        })?;
    alg.verify_signature(cert.key, message, signature)
        .map(|()| HandshakeSignatureValid::assertion())
        .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadSignature))
}

/// The signature on `cert` by `issuer`'s key, with the provider's algorithm for the pair.
fn verify_signature(
    cert: &Cert<'_>,
    issuer: &Cert<'_>,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<(), CertificateError> {
    let alg = algorithms
        .all
        .iter()
        .find(|a| {
            a.signature_alg_id().as_ref() == cert.signature_alg
                && a.public_key_alg_id().as_ref() == issuer.key_alg
        })
        .ok_or_else(|| CertificateError::UnsupportedSignatureAlgorithmContext {
            signature_algorithm_id: cert.signature_alg.to_vec(),
            supported_algorithms: algorithms
                .all
                .iter()
                .map(|a| a.signature_alg_id())
                .collect(),
        })?;
    alg.verify_signature(issuer.key, cert.tbs, cert.signature)
        .map_err(|_| CertificateError::BadSignature)
}

/// The parts of a certificate the chain needs, borrowed from its DER.
#[derive(Clone)]
pub(crate) struct Cert<'a> {
    /// The whole `tbsCertificate` element: what the signature covers.
    pub(crate) tbs: &'a [u8],
    /// The contents of `signatureAlgorithm`.
    pub(crate) signature_alg: &'a [u8],
    /// `signatureValue`'s bits.
    pub(crate) signature: &'a [u8],
    /// 0 for version 1, 2 for version 3.
    pub(crate) version: u8,
    /// The whole `issuer` and `subject` elements (compared byte for byte, as webpki does).
    pub(crate) issuer: &'a [u8],
    pub(crate) subject: &'a [u8],
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
    /// The contents of the key's `AlgorithmIdentifier`, and its bits.
    pub(crate) key_alg: &'a [u8],
    pub(crate) key: &'a [u8],
    /// The whole `subjectPublicKeyInfo` element.
    pub(crate) spki: &'a [u8],
    /// The contents of the `extensions` SEQUENCE.
    pub(crate) extensions: Option<&'a [u8]>,
}

impl<'a> Cert<'a> {
    pub(crate) fn parse(der: &'a [u8]) -> Option<Cert<'a>> {
        let mut outer = der;
        let mut cert = expect(&mut outer, SEQUENCE)?;
        if !outer.is_empty() {
            return None;
        }
        let (tbs, mut body) = element_whole(&mut cert, SEQUENCE)?;
        let signature_alg = expect(&mut cert, SEQUENCE)?;
        let signature = bits(expect(&mut cert, BIT_STRING)?)?;
        if !cert.is_empty() {
            return None;
        }
        let mut version = 0;
        if body.first() == Some(&VERSION) {
            let mut v = expect(&mut body, VERSION)?;
            version = match expect(&mut v, INTEGER)? {
                [n @ (0..=2)] => *n,
                _ => return None,
            };
        }
        expect(&mut body, INTEGER)?;
        let inner_alg = expect(&mut body, SEQUENCE)?;
        if inner_alg != signature_alg {
            return None;
        }
        let (issuer, _) = element_whole(&mut body, SEQUENCE)?;
        let mut validity = expect(&mut body, SEQUENCE)?;
        let not_before = time(&mut validity)?;
        let not_after = time(&mut validity)?;
        let (subject, _) = element_whole(&mut body, SEQUENCE)?;
        let (spki, mut key_info) = element_whole(&mut body, SEQUENCE)?;
        let key_alg = expect(&mut key_info, SEQUENCE)?;
        let key = bits(expect(&mut key_info, BIT_STRING)?)?;
        let mut extensions = None;
        while !body.is_empty() {
            let (tag, contents, after) = pgyard_wire::der::element(body).ok()?;
            body = after;
            if tag == EXTENSIONS {
                let mut c = contents;
                extensions = Some(expect(&mut c, SEQUENCE)?);
            }
        }
        Some(Cert {
            tbs,
            signature_alg,
            signature,
            version,
            issuer,
            subject,
            not_before,
            not_after,
            key_alg,
            key,
            spki,
            extensions,
        })
    }

    /// Whether `now` is within the certificate's validity.
    pub(crate) fn within_validity(&self, now: UnixTime) -> bool {
        self.check_time(now).is_ok()
    }

    /// The value (the OCTET STRING's contents) of the extension `oid`, if present once or
    /// more (the first).
    fn extension(&self, oid: &[u8]) -> Option<&'a [u8]> {
        let mut list = self.extensions?;
        while !list.is_empty() {
            let mut ext = expect(&mut list, SEQUENCE)?;
            let id = expect(&mut ext, OID)?;
            if ext.first() == Some(&BOOLEAN) {
                expect(&mut ext, BOOLEAN)?;
            }
            let value = expect(&mut ext, OCTET_STRING)?;
            if id == oid {
                return Some(value);
            }
        }
        None
    }

    /// The `keyIdentifier` of the authorityKeyIdentifier extension.
    pub(crate) fn authority_key_id(&self) -> Option<&'a [u8]> {
        let mut value = self.extension(OID_AUTHORITY_KEY_ID)?;
        let mut akid = expect(&mut value, SEQUENCE)?;
        expect(&mut akid, KEY_IDENTIFIER)
    }

    /// The subjectKeyIdentifier extension's identifier.
    pub(crate) fn subject_key_id(&self) -> Option<&'a [u8]> {
        let mut value = self.extension(OID_SUBJECT_KEY_ID)?;
        expect(&mut value, OCTET_STRING)
    }

    fn check_time(&self, now: UnixTime) -> Result<(), CertificateError> {
        let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        if now < self.not_before {
            Err(CertificateError::NotValidYet)
        } else if now > self.not_after {
            Err(CertificateError::Expired)
        } else {
            Ok(())
        }
    }

    /// The extensions OpenSSL's chain rules read.
    pub(crate) fn extensions(&self) -> Result<Extensions, CertificateError> {
        let bad = CertificateError::BadEncoding;
        let mut out = Extensions::default();
        let Some(mut list) = self.extensions else {
            return Ok(out);
        };
        while !list.is_empty() {
            let mut ext = expect(&mut list, SEQUENCE).ok_or(bad.clone())?;
            let oid = expect(&mut ext, OID).ok_or(bad.clone())?;
            let mut critical = false;
            if ext.first() == Some(&BOOLEAN) {
                critical = expect(&mut ext, BOOLEAN) == Some(&[0xff][..]);
            }
            let mut value = expect(&mut ext, OCTET_STRING).ok_or(bad.clone())?;
            match oid {
                OID_BASIC_CONSTRAINTS => {
                    let mut bc = expect(&mut value, SEQUENCE).ok_or(bad.clone())?;
                    let mut ca = false;
                    if bc.first() == Some(&BOOLEAN) {
                        ca = expect(&mut bc, BOOLEAN) == Some(&[0xff][..]);
                    }
                    let mut path_len = None;
                    if bc.first() == Some(&INTEGER) {
                        path_len = Some(match expect(&mut bc, INTEGER).ok_or(bad.clone())? {
                            [n] if *n < 0x80 => usize::from(*n),
                            // A path length this large limits nothing here.
                            _ => usize::MAX,
                        });
                    }
                    out.basic = Some((ca, path_len));
                }
                OID_KEY_USAGE => {
                    let usage = expect(&mut value, BIT_STRING).ok_or(bad.clone())?;
                    out.key_usage = Some(key_usage_byte(usage));
                }
                OID_EXT_KEY_USAGE => {
                    let mut oids = expect(&mut value, SEQUENCE).ok_or(bad.clone())?;
                    let (mut server, mut client) = (false, false);
                    while !oids.is_empty() {
                        let oid = expect(&mut oids, OID).ok_or(bad.clone())?;
                        server |= oid == OID_SERVER_AUTH;
                        client |= oid == OID_CLIENT_AUTH;
                    }
                    out.ext_key_usage = Some((server, client));
                }
                OID_NAME_CONSTRAINTS => out.unchecked = true,
                _ if critical => out.unchecked = true,
                _ => {}
            }
        }
        Ok(out)
    }

    /// Whether this certificate may issue one with `below` CA certificates under it, by
    /// OpenSSL's `check_ca` and its purpose check for a CA.
    fn check_ca(
        &self,
        below: usize,
        purpose: ChainPurpose,
        mode: Mode,
    ) -> Result<(), CertificateError> {
        let not_ca = Err(CertificateError::UnknownIssuer);
        let ext = self.extensions()?;
        // Constraints only webpki enforces: a chain it did not check is refused, not taken.
        if ext.unchecked && mode == Mode::Alone {
            return not_ca;
        }
        ext.check_purpose(purpose)?;
        // keyUsage, where present, must allow signing certificates.
        if ext.key_usage.is_some_and(|ku| ku & KU_KEY_CERT_SIGN == 0) {
            return not_ca;
        }
        // OpenSSL skips the path length of a self-issued certificate (a root's included).
        let self_issued = self.subject == self.issuer;
        let ca = match ext.basic {
            Some((ca, path_len)) => {
                ca && (self_issued || path_len.is_none_or(|limit| below <= limit))
            }
            // Without basicConstraints: a self-signed version 1 root, or a certificate
            // whose keyUsage allows signing certificates.
            None => (self.version == 0 && self.subject == self.issuer) || ext.key_usage.is_some(),
        };
        if ca {
            Ok(())
        } else {
            not_ca
        }
    }

    /// The end of the chain, by OpenSSL's purpose check for it: `extKeyUsage`, where
    /// present, must allow the purpose, and a server's `keyUsage` a TLS use of the key.
    fn check_end(&self, purpose: ChainPurpose) -> Result<(), CertificateError> {
        let ext = self.extensions()?;
        ext.check_purpose(purpose)?;
        // PostgreSQL's server (OpenSSL 1.1) takes a client certificate whatever its
        // keyUsage says (held to it by the proxy's tests); libpq refuses a server's that
        // allows no TLS use.
        if purpose == ChainPurpose::Server && ext.key_usage.is_some_and(|ku| ku & KU_SERVER == 0) {
            return Err(CertificateError::InvalidPurpose);
        }
        Ok(())
    }
}

/// keyUsage bits in its first byte: keyCertSign, and those libpq accepts for a TLS server
/// (digitalSignature, keyEncipherment, keyAgreement).
const KU_KEY_CERT_SIGN: u8 = 0x04;
const KU_SERVER: u8 = 0x80 | 0x20 | 0x08;

/// What a chain check is for: a version 1 chain webpki never saw, or the rules OpenSSL
/// adds over a chain webpki has passed (name constraints and critical extensions are
/// webpki's there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Alone,
    AfterWebpki,
}

/// The extensions of one certificate that OpenSSL's chain rules read.
#[derive(Debug, Default)]
pub(crate) struct Extensions {
    /// basicConstraints: cA and the path length.
    pub(crate) basic: Option<(bool, Option<usize>)>,
    /// keyUsage's first byte.
    pub(crate) key_usage: Option<u8>,
    /// extKeyUsage: whether it names serverAuth, clientAuth.
    pub(crate) ext_key_usage: Option<(bool, bool)>,
    /// Name constraints or an unknown critical extension.
    pub(crate) unchecked: bool,
}

impl Extensions {
    fn check_purpose(&self, purpose: ChainPurpose) -> Result<(), CertificateError> {
        match (self.ext_key_usage, purpose) {
            (Some((false, _)), ChainPurpose::Server) | (Some((_, false)), ChainPurpose::Client) => {
                Err(CertificateError::InvalidPurpose)
            }
            _ => Ok(()),
        }
    }
}

/// The certificates this reader can read, parsed.
fn parsed<'a>(certs: &'a [CertificateDer<'_>]) -> Vec<Cert<'a>> {
    certs
        .iter()
        .filter_map(|c| Cert::parse(c.as_ref()))
        .collect()
}

/// The contents of the next element of `input`, which must have `tag`.
fn expect<'a>(input: &mut &'a [u8], tag: u8) -> Option<&'a [u8]> {
    let (contents, after) = pgyard_wire::der::expect(input, tag).ok()?;
    *input = after;
    Some(contents)
}

/// The next element of `input` (which must have `tag`) whole, and its contents.
fn element_whole<'a>(input: &mut &'a [u8], tag: u8) -> Option<(&'a [u8], &'a [u8])> {
    let start = *input;
    let contents = expect(input, tag)?;
    Some((&start[..start.len() - input.len()], contents))
}

/// A BIT STRING's bits, which must be whole bytes for a key or a signature.
fn bits(contents: &[u8]) -> Option<&[u8]> {
    match contents.split_first() {
        Some((0, rest)) => Some(rest),
        // keyUsage may leave bits unused in its last byte.
        Some((n, rest)) if *n < 8 && !rest.is_empty() => Some(rest),
        _ => None,
    }
}

/// keyUsage's first byte from its BIT STRING's contents, with the bits the encoding marks
/// unused cleared, as OpenSSL clears them when it reads a BIT STRING (so a stray bit there
/// grants nothing); 0 for a malformed one, which grants nothing either.
fn key_usage_byte(contents: &[u8]) -> u8 {
    match bits(contents) {
        Some([only]) => only & (0xff << contents[0]),
        Some([first, ..]) => *first,
        _ => 0,
    }
}

/// A `Time` (UTCTime `YYMMDDHHMMSSZ`, years 1950–2049, or GeneralizedTime
/// `YYYYMMDDHHMMSSZ`), as seconds since the Unix epoch.
fn time(input: &mut &[u8]) -> Option<i64> {
    let (tag, text, after) = pgyard_wire::der::element(input).ok()?;
    *input = after;
    let digits = |s: &[u8]| -> Option<i64> {
        s.iter().try_fold(0i64, |n, &b| {
            b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
        })
    };
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(&text[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 15) => (digits(&text[..4])?, &text[4..]),
        _ => return None,
    };
    if rest.last() != Some(&b'Z') {
        return None;
    }
    let field = |i: usize| digits(&rest[i..i + 2]);
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Days from 1970-01-01 to the given date (proleptic Gregorian; years 0 to 9999).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[path = "v1chain_tests.rs"]
mod tests;
