//! The key files under `testdata/keys` were written by OpenSSL 3's command-line tool from
//! one EC key and one RSA key (pass phrase `pw1`), so they check this reader against the
//! writer libpq's own library pairs with: every encrypted form must decrypt to the very key
//! OpenSSL wrote in the clear.

use super::*;

fn data(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/keys")
        .join(name)
}

fn pw(p: &str) -> KeyPassword {
    KeyPassword(p.as_bytes().to_vec())
}

fn der(key: &PrivateKeyDer<'_>) -> Vec<u8> {
    key.secret_der().to_vec()
}

#[test]
fn encrypted_pkcs8_decrypts_to_the_key_in_the_clear() {
    let clear = load(&data("plain-pkcs8.pem"), None).unwrap();
    assert!(matches!(clear, PrivateKeyDer::Pkcs8(_)));
    assert_eq!(
        der(&clear),
        std::fs::read(data("plain-pkcs8.der")).unwrap(),
        "the PEM and the DER OpenSSL wrote hold the same key"
    );
    for name in [
        "pbes2-aes256-sha256.pem",
        "pbes2-aes128-sha1.pem",
        "pbes2-scrypt.pem",
        "pbes2-des3.pem",
        "cert-then-key.pem",
    ] {
        let key = load(&data(name), Some(&pw("pw1"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(matches!(key, PrivateKeyDer::Pkcs8(_)), "{name}");
        assert_eq!(der(&key), der(&clear), "{name}");
    }
}

#[test]
fn openssls_older_pem_encryption_decrypts_to_the_key_in_the_clear() {
    let ec = load(&data("plain-sec1.pem"), None).unwrap();
    assert_eq!(der(&ec), std::fs::read(data("plain-sec1.der")).unwrap());
    for name in ["legacy-ec-aes256.pem", "legacy-ec-des3.pem"] {
        let key = load(&data(name), Some(&pw("pw1"))).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(matches!(key, PrivateKeyDer::Sec1(_)), "{name}");
        assert_eq!(der(&key), der(&ec), "{name}");
    }
    let rsa = load(&data("plain-rsa.pem"), None).unwrap();
    assert_eq!(der(&rsa), std::fs::read(data("plain-rsa.der")).unwrap());
    let key = load(&data("legacy-rsa-aes128.pem"), Some(&pw("pw1"))).unwrap();
    assert!(matches!(key, PrivateKeyDer::Pkcs1(_)));
    assert_eq!(der(&key), der(&rsa));
}

#[test]
fn a_password_is_ignored_for_a_key_in_the_clear_and_der_is_read_when_pem_is_not_there() {
    for name in [
        "plain-pkcs8.pem",
        "plain-sec1.pem",
        "plain-pkcs8.der",
        "plain-sec1.der",
        "plain-rsa.der",
    ] {
        let with = load(&data(name), Some(&pw("anything"))).unwrap();
        let without = load(&data(name), None).unwrap();
        assert_eq!(der(&with), der(&without), "{name}");
    }
    assert!(matches!(
        load(&data("plain-sec1.der"), None).unwrap(),
        PrivateKeyDer::Sec1(_)
    ));
}

#[test]
fn libpqs_reasons_for_a_wrong_or_missing_pass_phrase_and_no_key() {
    let reason = |name: &str, password: Option<&str>| {
        let path = data(name);
        let e = load(&path, password.map(pw).as_ref()).unwrap_err();
        let prefix = format!("could not load private key file \"{}\": ", path.display());
        e.strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{name}: {e}"))
            .to_owned()
    };
    for name in [
        "pbes2-aes256-sha256.pem",
        "pbes2-aes128-sha1.pem",
        "pbes2-scrypt.pem",
        "pbes2-des3.pem",
        "legacy-ec-aes256.pem",
        "legacy-ec-des3.pem",
        "legacy-rsa-aes128.pem",
    ] {
        assert_eq!(reason(name, Some("bad")), "bad decrypt", "{name}");
        assert_eq!(reason(name, None), "processing error", "{name}");
    }
    assert_eq!(reason("empty.pem", Some("pw1")), "no start line");
    assert_eq!(reason("garbage.bin", None), "no start line");
    // PKCS#12's password-based encryption (`openssl pkcs8 -v1 PBE-SHA1-3DES`), which
    // OpenSSL reads and pgyard does not: said so, not taken for a wrong pass phrase.
    assert!(reason("pkcs12-pbe-3des.pem", Some("pw1")).starts_with("unsupported encrypted key"));
}

/// Rewrites the scrypt block size `r` of `pbes2-scrypt.pem` (8 as OpenSSL writes it) to 127,
/// which asks for 127 × 16 MiB ÷ 8 of memory.
fn scrypt_file_with_block_size_127(dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(data("pbes2-scrypt.pem")).unwrap();
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    let mut der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap();
    const SCRYPT_OID: [u8; 11] = [
        0x06, 0x09, 0x2b, 0x06, 0x01, 0x04, 0x01, 0xda, 0x47, 0x04, 0x0b,
    ];
    let at = der
        .windows(SCRYPT_OID.len())
        .position(|w| w == SCRYPT_OID)
        .expect("the scrypt identifier");
    let r = at
        + der[at..]
            .windows(3)
            .position(|w| w == [0x02, 0x01, 0x08])
            .expect("r = 8");
    der[r + 2] = 0x7f;
    let pem = format!(
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\n{}\n-----END ENCRYPTED PRIVATE KEY-----\n",
        base64::engine::general_purpose::STANDARD.encode(&der)
    );
    let path = dir.join("scrypt-r127.pem");
    std::fs::write(&path, pem).unwrap();
    path
}

#[test]
fn key_derivation_costs_and_file_sizes_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let huge = scrypt_file_with_block_size_127(dir.path());
    let e = load(&huge, Some(&pw("pw1"))).unwrap_err();
    assert!(e.ends_with(": memory limit exceeded"), "{e}");
    let big = dir.path().join("big.pem");
    std::fs::write(&big, vec![b'A'; (MAX_FILE + 1) as usize]).unwrap();
    let e = load(&big, None).unwrap_err();
    assert!(e.contains("file too large"), "{e}");
}

#[test]
fn evp_bytes_to_key_and_pem_blocks() {
    // `openssl enc -aes-256-cbc -md md5 -pass pass:pw1 -S 0102030405060708 -P` prints the
    // key and IV that EVP_BytesToKey derives: 48 bytes of the same stream.
    let k = bytes_to_key(b"pw1", &[1, 2, 3, 4, 5, 6, 7, 8], 48);
    assert_eq!(
        k,
        hex(
            "E14D4EF8F4CA1B2D231B153966A369201DB2CC315071CE22F9D047B30B7064EA\
             5759655B28D24AF8C18D50BAC7555F37"
        )
        .unwrap()
    );
    assert_eq!(bytes_to_key(b"pw1", &[1, 2, 3, 4, 5, 6, 7, 8], 24), k[..24]);
    assert_eq!(hex("0aFf"), Some(vec![0x0a, 0xff]));
    assert_eq!(hex("0a f"), None);
    assert_eq!(hex("é1"), None);
    let block = first_key_block(
        b"junk\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n\
          -----BEGIN EC PRIVATE KEY-----\r\nProc-Type: 4,ENCRYPTED\r\nDEK-Info: X,00\r\n\r\nQUJD\r\nREVG\r\n\
          -----END EC PRIVATE KEY-----\n",
    )
    .unwrap();
    assert_eq!(block.label, "EC PRIVATE KEY");
    assert_eq!(block.headers.len(), 2);
    assert_eq!(block.body, "QUJDREVG");
    assert_eq!(
        first_key_block(b"-----BEGIN PRIVATE KEY-----\nQUJD\n"),
        None,
        "an unended block is not a key"
    );
}
