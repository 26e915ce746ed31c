//! Channel-binding data of type `tls-server-end-point` (RFC 5929 §4.1): a hash of the server's
//! DER certificate, with the hash function taken from the certificate's signature algorithm
//! and MD5/SHA-1 replaced by SHA-256.
//!
//! Only the few DER elements on the path to the signature algorithm are parsed; the rest of
//! the certificate is hashed as it is.

use sha2::{Digest, Sha224, Sha256, Sha384, Sha512};

/// Why no `tls-server-end-point` hash can be made from a certificate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CertHashError {
    /// The bytes are not a DER `Certificate` (as far as the parser looks).
    #[error("could not parse server certificate: {0}")]
    Malformed(&'static str),
    /// The signature algorithm has no separate digest (Ed25519, Ed448, ML-DSA) or is unknown;
    /// the text is what libpq and the server report for such certificates.
    #[error("could not find digest for NID UNDEF")]
    NoDigest,
}

/// The hash function chosen for a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndPointHash {
    /// SHA-224.
    Sha224,
    /// SHA-256 (also used for MD5- and SHA-1-signed certificates).
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

/// The `tls-server-end-point` channel-binding data for the server certificate `cert_der`.
pub fn tls_server_end_point(cert_der: &[u8]) -> Result<Vec<u8>, CertHashError> {
    let hash = end_point_hash(cert_der)?;
    Ok(match hash {
        EndPointHash::Sha224 => Sha224::digest(cert_der).to_vec(),
        EndPointHash::Sha256 => Sha256::digest(cert_der).to_vec(),
        EndPointHash::Sha384 => Sha384::digest(cert_der).to_vec(),
        EndPointHash::Sha512 => Sha512::digest(cert_der).to_vec(),
    })
}

/// Which hash [`tls_server_end_point`] uses for `cert_der`, from its signature algorithm.
pub fn end_point_hash(cert_der: &[u8]) -> Result<EndPointHash, CertHashError> {
    // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }
    let (certificate, _) = der_element(cert_der, TAG_SEQUENCE)?;
    let (_tbs, rest) = der_any(certificate)?;
    let (algorithm, _) = der_element(rest, TAG_SEQUENCE)?;
    // AlgorithmIdentifier ::= SEQUENCE { algorithm OBJECT IDENTIFIER, parameters ANY OPTIONAL }
    let (oid, params) = der_element(algorithm, TAG_OID)?;
    hash_for_signature(oid, params)
}

const TAG_SEQUENCE: u8 = 0x30;
const TAG_OID: u8 = 0x06;
const TAG_CONTEXT_0: u8 = 0xa0;

// Signature algorithms, as the DER contents of their OBJECT IDENTIFIER.
const MD5_WITH_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04];
const SHA1_WITH_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05];
const RSASSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];
const SHA256_WITH_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
const SHA384_WITH_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c];
const SHA512_WITH_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d];
const SHA224_WITH_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0e];
const ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];
const ECDSA_SHA224: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x01];
const ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const ECDSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04];
const DSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x03];
const DSA_SHA224: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x01];
const DSA_SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x02];
// Hash algorithms (inside RSASSA-PSS parameters).
const HASH_MD5: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x02, 0x05];
const HASH_SHA1: &[u8] = &[0x2b, 0x0e, 0x03, 0x02, 0x1a];
const HASH_SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
const HASH_SHA384: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02];
const HASH_SHA512: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03];
const HASH_SHA224: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x04];

fn hash_for_signature(oid: &[u8], params: &[u8]) -> Result<EndPointHash, CertHashError> {
    use EndPointHash::*;
    Ok(match oid {
        MD5_WITH_RSA | SHA1_WITH_RSA | ECDSA_SHA1 | DSA_SHA1 => Sha256,
        SHA224_WITH_RSA | ECDSA_SHA224 | DSA_SHA224 => Sha224,
        SHA256_WITH_RSA | ECDSA_SHA256 | DSA_SHA256 => Sha256,
        SHA384_WITH_RSA | ECDSA_SHA384 => Sha384,
        SHA512_WITH_RSA | ECDSA_SHA512 => Sha512,
        RSASSA_PSS => pss_hash(params)?,
        _ => return Err(CertHashError::NoDigest),
    })
}

/// RSASSA-PSS-params ::= SEQUENCE { hashAlgorithm [0] AlgorithmIdentifier DEFAULT sha1, … }
fn pss_hash(params: &[u8]) -> Result<EndPointHash, CertHashError> {
    if params.is_empty() {
        return Ok(EndPointHash::Sha256); // absent parameters: SHA-1, upgraded
    }
    let (seq, _) = der_element(params, TAG_SEQUENCE)?;
    if seq.first() != Some(&TAG_CONTEXT_0) {
        return Ok(EndPointHash::Sha256); // default hash SHA-1, upgraded
    }
    let (explicit, _) = der_element(seq, TAG_CONTEXT_0)?;
    let (algorithm, _) = der_element(explicit, TAG_SEQUENCE)?;
    let (oid, _) = der_element(algorithm, TAG_OID)?;
    Ok(match oid {
        HASH_MD5 | HASH_SHA1 | HASH_SHA256 => EndPointHash::Sha256,
        HASH_SHA224 => EndPointHash::Sha224,
        HASH_SHA384 => EndPointHash::Sha384,
        HASH_SHA512 => EndPointHash::Sha512,
        _ => return Err(CertHashError::NoDigest),
    })
}

/// Reads one element with tag `tag`; returns its contents and what follows it.
fn der_element(input: &[u8], tag: u8) -> Result<(&[u8], &[u8]), CertHashError> {
    crate::der::expect(input, tag).map_err(|e| CertHashError::Malformed(e.text()))
}

/// Reads one element of any single-byte tag; returns its contents and what follows it.
fn der_any(input: &[u8]) -> Result<(&[u8], &[u8]), CertHashError> {
    crate::der::element(input)
        .map(|(_, contents, after)| (contents, after))
        .map_err(|e| CertHashError::Malformed(e.text()))
}
