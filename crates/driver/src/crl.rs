//! Certificate revocation lists as libpq 18 loads them (`sslcrl`, `sslcrldir`, the default
//! `~/.postgresql/root.crl`), for the verification that a root certificate file turns on.
//!
//! libpq hands the file and the folder to OpenSSL's `X509_STORE_load_locations` and, when that
//! succeeds, checks revocation for the whole chain (`X509_V_FLAG_CRL_CHECK_ALL`); when it
//! fails the lists are silently left out ("we do not require CRL"). It succeeds when the file
//! (if one is named) holds at least one PEM certificate or CRL, and a folder is only ever
//! remembered, never read up front, so a named folder turns the checks on even when it holds
//! nothing. With the checks on, a certificate whose issuer has no list among those loaded does
//! not verify, a revoked one does not, and neither does one vouched for by an expired list.
//! rustls's verifier does the same with the lists it is given (revocation checked for every
//! certificate of the chain, an unknown status refused, expiry enforced). OpenSSL reads a
//! folder's lists by the issuer's name hash (`<hash>.r<n>`); every file so named is loaded here,
//! which can only add lists OpenSSL would also find under their issuers' names, unless a file
//! is named for an issuer it does not hold. Where the file and the folder both hold a list for
//! one issuer, the file's decides, in both: OpenSSL finds it in its store before it looks in
//! the folder, and the verifier here takes the first list for an issuer, the file's coming
//! first.

use std::path::{Path, PathBuf};

use pgyard_conninfo::typed::ConnectConfig;
use pgyard_conninfo::Keyword;
use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::CertificateRevocationListDer;

/// Where a connect's revocation lists come from.
#[derive(Clone, Debug, Default)]
pub(crate) struct CrlSource {
    file: Option<PathBuf>,
    dir: Option<PathBuf>,
}

/// The lists to check with: `None` when revocation is not checked at all.
pub(crate) type Crls = Option<Vec<CertificateRevocationListDer<'static>>>;

impl CrlSource {
    /// `sslcrl` and `sslcrldir` when set and not empty, else the default file under `home`.
    pub(crate) fn new(config: &ConnectConfig, home: Option<&Path>) -> Self {
        let set = |kw: Keyword| {
            config
                .raw(kw)
                .filter(|v| !v.is_empty())
                .map(|v| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
        };
        let (file, dir) = (set(Keyword::Sslcrl), set(Keyword::Sslcrldir));
        let file = match (&file, &dir) {
            (None, None) => home.map(|h| h.join(".postgresql").join("root.crl")),
            _ => file,
        };
        CrlSource { file, dir }
    }

    /// The lists, read now (libpq reads them at every connect), or `None` where libpq would
    /// check no revocation.
    pub(crate) fn load(&self) -> Crls {
        if self.file.is_none() && self.dir.is_none() {
            return None;
        }
        let mut crls = Vec::new();
        if let Some(file) = &self.file {
            let contents = std::fs::read(file).ok()?;
            let (loaded, found) = read_pem(&contents);
            if loaded == 0 {
                return None;
            }
            crls.extend(found);
        }
        if let Some(dir) = &self.dir {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if is_hash_name(&entry.file_name().to_string_lossy()) {
                    if let Ok(contents) = std::fs::read(entry.path()) {
                        crls.extend(read_pem(&contents).1);
                    }
                }
            }
        }
        Some(crls)
    }
}

/// How many certificates and lists a PEM text holds, and the lists.
fn read_pem(contents: &[u8]) -> (usize, Vec<CertificateRevocationListDer<'static>>) {
    let mut loaded = 0;
    let mut crls = Vec::new();
    for (kind, der) in <(SectionKind, Vec<u8>)>::pem_slice_iter(contents).flatten() {
        match kind {
            SectionKind::Crl => {
                loaded += 1;
                crls.push(CertificateRevocationListDer::from(der));
            }
            SectionKind::Certificate => loaded += 1,
            _ => {}
        }
    }
    (loaded, crls)
}

/// `<8 hex digits>.r<digits>`: how OpenSSL's hashed folders name revocation lists.
fn is_hash_name(name: &str) -> bool {
    let Some((hash, n)) = name.split_once(".r") else {
        return false;
    };
    hash.len() == 8
        && hash.bytes().all(|b| b.is_ascii_hexdigit())
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_files_are_taken_by_openssls_hash_names() {
        for (name, taken) in [
            ("0a1b2c3d.r0", true),
            ("0A1B2C3D.r12", true),
            ("0a1b2c3d.0", false),
            ("0a1b2c3.r0", false),
            ("0a1b2c3d.r", false),
            ("0a1b2c3d.rx", false),
            ("root.crl", false),
        ] {
            assert_eq!(is_hash_name(name), taken, "{name}");
        }
    }

    #[test]
    fn a_file_without_certificates_or_lists_turns_nothing_on() {
        let dir = std::env::temp_dir().join(format!("pgyard-crl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        let junk = dir.join("junk.crl");
        std::fs::write(&junk, "not a PEM file\n").expect("written");
        let source = CrlSource {
            file: Some(junk),
            dir: None,
        };
        assert!(source.load().is_none());
        // A folder alone turns the checks on, even an empty or missing one.
        let source = CrlSource {
            file: None,
            dir: Some(dir.join("missing")),
        };
        assert_eq!(source.load().map(|c| c.len()), Some(0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
