//! A client's private key file read as libpq reads it through OpenSSL: the first PEM block
//! that holds a private key (PKCS#8, PKCS#1 RSA or SEC1 EC), encrypted with PKCS#8's PBES2
//! (PBKDF2 or scrypt, AES or 3DES) or OpenSSL's older `Proc-Type: 4,ENCRYPTED` headers, the
//! pass phrase from `sslpassword`; failing PEM, the file as DER. A key file is input from
//! disk: its size and its key-derivation costs are bounded, and nothing in it panics.

use std::path::Path;

use base64::Engine as _;
use md5::{Digest as _, Md5};
use pkcs8::pkcs5::pbes2::Kdf;
use pkcs8::pkcs5::EncryptionScheme;
use pkcs8::EncryptedPrivateKeyInfoRef;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};

/// Key files larger than this are refused unread (a key is a few kilobytes).
const MAX_FILE: u64 = 1 << 20;
/// The most memory a file's scrypt parameters may ask for: OpenSSL's own default bound.
const MAX_SCRYPT_MEMORY: u64 = 32 << 20;
/// The most PBKDF2 iterations a file may ask for (OpenSSL writes 2,048; this is seconds).
const MAX_PBKDF2_ITERATIONS: u32 = 10_000_000;

/// The pass phrase of an encrypted key (`sslpassword`); never printed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct KeyPassword(pub(crate) Vec<u8>);

impl std::fmt::Debug for KeyPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPassword(..)")
    }
}

/// Reads the private key at `path`, decrypting it with `password` where it is encrypted;
/// the error is libpq's `could not load private key file "…": …` with OpenSSL's reason where
/// libpq's would give one (`bad decrypt` for a wrong pass phrase, `processing error` for none).
pub(crate) fn load(
    path: &Path,
    password: Option<&KeyPassword>,
) -> Result<PrivateKeyDer<'static>, String> {
    let fail = |reason: &str| {
        format!(
            "could not load private key file \"{}\": {reason}",
            path.display()
        )
    };
    let size = std::fs::metadata(path)
        .map_err(|e| fail(&e.to_string()))?
        .len();
    if size > MAX_FILE {
        return Err(fail(&format!("file too large ({size} bytes)")));
    }
    let bytes = std::fs::read(path).map_err(|e| fail(&e.to_string()))?;
    decode(bytes, password, &Limits::FILE).map_err(|r| fail(&r))
}

/// What a key file may ask of the key derivation.
pub(crate) struct Limits {
    pub(crate) pbkdf2_iterations: u32,
    pub(crate) scrypt_memory: u64,
}

impl Limits {
    /// The bounds for a key file (OpenSSL's scrypt bound; PBKDF2 bounded to seconds).
    pub(crate) const FILE: Limits = Limits {
        pbkdf2_iterations: MAX_PBKDF2_ITERATIONS,
        scrypt_memory: MAX_SCRYPT_MEMORY,
    };
}

/// A key file's contents decoded (and decrypted with `password`) as [`load`] decodes them;
/// the error is OpenSSL's reason alone.
pub(crate) fn decode(
    bytes: Vec<u8>,
    password: Option<&KeyPassword>,
    limits: &Limits,
) -> Result<PrivateKeyDer<'static>, String> {
    match first_key_block(&bytes) {
        Some(block) => decode_block(&block, password, limits),
        // libpq tries the file as DER when PEM finds nothing, and reports the PEM error if
        // that fails too.
        None => PrivateKeyDer::try_from(bytes).map_err(|_| "no start line".to_owned()),
    }
}

/// One PEM block: its label, its headers (`Name: value` lines before the body) and body.
#[derive(Debug, PartialEq, Eq)]
struct PemBlock {
    label: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// The first PEM block whose label names a private key, as OpenSSL's `PEM_read_bio_PrivateKey`
/// looks for one (other blocks, such as a certificate before it, are skipped).
fn first_key_block(bytes: &[u8]) -> Option<PemBlock> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines();
    loop {
        let line = lines.next()?.trim_end();
        let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut headers = Vec::new();
        let mut body = String::new();
        let mut in_headers = true;
        let mut ended = false;
        for line in lines.by_ref() {
            let line = line.trim_end();
            if line == end {
                ended = true;
                break;
            }
            if in_headers {
                if let Some((name, value)) = line.split_once(':') {
                    headers.push((name.trim().to_owned(), value.trim().to_owned()));
                    continue;
                }
                in_headers = false;
                if line.is_empty() {
                    continue;
                }
            }
            body.push_str(line.trim());
        }
        if ended && is_key_label(label) {
            return Some(PemBlock {
                label: label.to_owned(),
                headers,
                body,
            });
        }
        if !ended {
            return None;
        }
    }
}

fn is_key_label(label: &str) -> bool {
    label == "PRIVATE KEY" || label == "ENCRYPTED PRIVATE KEY" || label.ends_with(" PRIVATE KEY")
}

/// The key in `block`, decrypted where it is encrypted; the error is OpenSSL's reason.
fn decode_block(
    block: &PemBlock,
    password: Option<&KeyPassword>,
    limits: &Limits,
) -> Result<PrivateKeyDer<'static>, String> {
    let der = base64::engine::general_purpose::STANDARD
        .decode(block.body.as_bytes())
        .map_err(|_| "bad base64 decode".to_owned())?;
    if block.label == "ENCRYPTED PRIVATE KEY" {
        return decrypt_pkcs8(&der, need(password)?, limits).map(PrivateKeyDer::Pkcs8);
    }
    let header = |name: &str| {
        block
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let der = match header("Proc-Type") {
        Some(v) if v.replace(' ', "") == "4,ENCRYPTED" => {
            let info = header("DEK-Info").ok_or("not dek info")?;
            decrypt_legacy(info, &der, need(password)?)?
        }
        _ => der,
    };
    match block.label.as_str() {
        "PRIVATE KEY" => Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der))),
        "RSA PRIVATE KEY" => Ok(PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(der))),
        "EC PRIVATE KEY" => Ok(PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(der))),
        other => Err(format!("unsupported private key type ({other})")),
    }
}

/// The pass phrase, or OpenSSL's reason when libpq has none to give it: libpq then lets
/// OpenSSL prompt on the terminal, and with nothing read there reports `processing error`.
/// pgyard never prompts (a library has no terminal of its own).
fn need(password: Option<&KeyPassword>) -> Result<&[u8], String> {
    password
        .map(|p| p.0.as_slice())
        .ok_or_else(|| "processing error".to_owned())
}

/// A PKCS#8 `EncryptedPrivateKeyInfo` decrypted into a PKCS#8 `PrivateKeyInfo`.
fn decrypt_pkcs8(
    der: &[u8],
    password: &[u8],
    limits: &Limits,
) -> Result<PrivatePkcs8KeyDer<'static>, String> {
    let info = EncryptedPrivateKeyInfoRef::try_from(der)
        .map_err(|e| format!("unsupported encrypted key ({e})"))?;
    if let EncryptionScheme::Pbes2(params) = &info.encryption_algorithm {
        match &params.kdf {
            Kdf::Pbkdf2(p) if p.iteration_count > limits.pbkdf2_iterations => {
                return Err(format!(
                    "PBKDF2 iteration count {} above the limit of {}",
                    p.iteration_count, limits.pbkdf2_iterations
                ))
            }
            Kdf::Scrypt(p) => {
                let memory = 128u64
                    .saturating_mul(u64::from(p.block_size))
                    .saturating_mul(p.cost_parameter)
                    .saturating_mul(u64::from(p.parallelization.max(1)));
                if memory > limits.scrypt_memory {
                    return Err("memory limit exceeded".to_owned());
                }
            }
            _ => {}
        }
    }
    let plain = info.decrypt(password).map_err(|e| match e {
        pkcs8::Error::EncryptedPrivateKey(pkcs8::pkcs5::Error::DecryptFailed)
        | pkcs8::Error::Asn1(_)
        | pkcs8::Error::KeyMalformed(_) => "bad decrypt".to_owned(),
        other => format!("unsupported encrypted key ({other})"),
    })?;
    Ok(PrivatePkcs8KeyDer::from(plain.as_bytes().to_vec()))
}

/// OpenSSL's older PEM encryption: `DEK-Info: CIPHER,IV-IN-HEX`, the key derived from the
/// pass phrase and the IV's first eight bytes by `EVP_BytesToKey` with MD5 and one round.
fn decrypt_legacy(dek_info: &str, data: &[u8], password: &[u8]) -> Result<Vec<u8>, String> {
    let (cipher, iv_hex) = dek_info.split_once(',').ok_or("not dek info")?;
    let iv = hex(iv_hex.trim()).ok_or("bad iv chars")?;
    let cipher = LegacyCipher::named(cipher.trim()).ok_or("unsupported encryption")?;
    if iv.len() != cipher.iv_len() {
        return Err("bad iv chars".to_owned());
    }
    let key = bytes_to_key(password, &iv[..8], cipher.key_len());
    cipher
        .decrypt(&key, &iv, data)
        .ok_or_else(|| "bad decrypt".to_owned())
}

/// The ciphers of OpenSSL's older PEM encryption that pgyard reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LegacyCipher {
    Aes128,
    Aes192,
    Aes256,
    DesEde3,
}

impl LegacyCipher {
    fn named(name: &str) -> Option<LegacyCipher> {
        match name.to_ascii_uppercase().as_str() {
            "AES-128-CBC" => Some(LegacyCipher::Aes128),
            "AES-192-CBC" => Some(LegacyCipher::Aes192),
            "AES-256-CBC" => Some(LegacyCipher::Aes256),
            "DES-EDE3-CBC" => Some(LegacyCipher::DesEde3),
            _ => None,
        }
    }

    fn key_len(self) -> usize {
        match self {
            LegacyCipher::Aes128 => 16,
            LegacyCipher::Aes192 | LegacyCipher::DesEde3 => 24,
            LegacyCipher::Aes256 => 32,
        }
    }

    fn iv_len(self) -> usize {
        match self {
            LegacyCipher::DesEde3 => 8,
            _ => 16,
        }
    }

    /// CBC decryption with PKCS#7 padding; `None` when the padding is wrong (a wrong pass
    /// phrase, nearly always) or the data is not whole blocks.
    fn decrypt(self, key: &[u8], iv: &[u8], data: &[u8]) -> Option<Vec<u8>> {
        use cbc::cipher::{
            block_padding::Pkcs7, BlockCipherDecrypt, BlockModeDecrypt, KeyInit, KeyIvInit,
        };
        fn run<C: BlockCipherDecrypt + KeyInit>(
            key: &[u8],
            iv: &[u8],
            data: &[u8],
        ) -> Option<Vec<u8>> {
            cbc::Decryptor::<C>::new_from_slices(key, iv)
                .ok()?
                .decrypt_padded_vec::<Pkcs7>(data)
                .ok()
        }
        match self {
            LegacyCipher::Aes128 => run::<aes::Aes128>(key, iv, data),
            LegacyCipher::Aes192 => run::<aes::Aes192>(key, iv, data),
            LegacyCipher::Aes256 => run::<aes::Aes256>(key, iv, data),
            LegacyCipher::DesEde3 => run::<des::TdesEde3>(key, iv, data),
        }
    }
}

/// `EVP_BytesToKey` with MD5, one round: D₁ = MD5(pass ‖ salt), Dᵢ = MD5(Dᵢ₋₁ ‖ pass ‖ salt),
/// the key their concatenation cut to `len`.
fn bytes_to_key(password: &[u8], salt: &[u8], len: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(len + 16);
    let mut last: Option<[u8; 16]> = None;
    while key.len() < len {
        let mut h = Md5::new();
        if let Some(d) = &last {
            h.update(d);
        }
        h.update(password);
        h.update(salt);
        let d: [u8; 16] = h.finalize().into();
        key.extend_from_slice(&d);
        last = Some(d);
    }
    key.truncate(len);
    key
}

fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
#[path = "keyfile_tests.rs"]
mod tests;
