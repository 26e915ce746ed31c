//! The chain a client certificate is sent with. When the certificate file holds the client's
//! certificate alone, OpenSSL (so libpq) completes the chain from the certificates it trusts
//! — the root file, or the system's store — before sending it: it looks up the issuer of each
//! certificate by name among them, as it does when it verifies a chain, and sends what it
//! found, up to and with the self-signed root (`ssl_add_cert_chain` with auto-chaining, which
//! libpq leaves on). So a client certificate issued by an intermediate CA logs in when that
//! intermediate is in the root file, as the PostgreSQL documentation tells users to put it
//! there for the server's chain; without this, pgyard sent the certificate alone and the
//! server refused it. A certificate file that holds more than one certificate is sent as it
//! is, as OpenSSL sends it. PostgreSQL's server completes its own certificate's chain the
//! same way from `ssl_ca_file`, and so does `pgyard proxy` from its CA file
//! (`tls::chain_to_send`).

use rustls::pki_types::{CertificateDer, UnixTime};

use crate::v1chain::Cert;

/// The longest chain looked for above the client's certificate.
const MAX_DEPTH: usize = 8;

/// The chain to send for the certificate file's `chain`: the file's own when it holds more
/// than one certificate (or none), else its certificate followed by the issuers found among
/// `trusted`.
pub(crate) fn complete(
    chain: Vec<CertificateDer<'static>>,
    trusted: &[CertificateDer<'static>],
    now: UnixTime,
) -> Vec<CertificateDer<'static>> {
    let [leaf] = chain.as_slice() else {
        return chain;
    };
    let candidates: Vec<(usize, Cert<'_>)> = trusted
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Cert::parse(c.as_ref()).map(|p| (i, p)))
        .collect();
    let mut out = vec![leaf.clone()];
    let Some(mut current) = Cert::parse(leaf.as_ref()) else {
        return out;
    };
    let mut used = Vec::new();
    while current.subject != current.issuer && out.len() <= MAX_DEPTH {
        let Some((i, issuer)) = issuer_of(&current, &candidates, &used, now) else {
            break;
        };
        used.push(i);
        out.push(trusted[i].clone());
        current = issuer;
    }
    out
}

/// The issuer of `cert` among `candidates` as OpenSSL's lookup finds it: subject named as the
/// issuer, key identifiers that agree where both are given, `keyUsage` (if any) allowing
/// certificate signing; of several, the first within its validity at `now`, else the last.
fn issuer_of<'a>(
    cert: &Cert<'_>,
    candidates: &[(usize, Cert<'a>)],
    used: &[usize],
    now: UnixTime,
) -> Option<(usize, Cert<'a>)> {
    let wanted = cert.authority_key_id();
    let mut fallback = None;
    for (i, c) in candidates {
        if used.contains(i) || c.subject != cert.issuer {
            continue;
        }
        if let (Some(wanted), Some(have)) = (wanted, c.subject_key_id()) {
            if wanted != have {
                continue;
            }
        }
        let ext = c.extensions().unwrap_or_default();
        if ext.key_usage.is_some_and(|ku| ku & 0x04 == 0) {
            continue;
        }
        let found = (*i, c.clone());
        if c.within_validity(now) {
            return Some(found);
        }
        fallback = Some(found);
    }
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    use std::time::Duration;

    struct Ca {
        cert: rcgen::Certificate,
        key: KeyPair,
    }

    fn params(name: &str, ca: bool) -> CertificateParams {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        if ca {
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        }
        p
    }

    fn root(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let cert = params(name, true).self_signed(&key).unwrap();
        Ca { cert, key }
    }

    fn signed(p: CertificateParams, by: &Ca) -> Ca {
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &by.cert, &by.key).unwrap();
        Ca { cert, key }
    }

    fn der(c: &Ca) -> CertificateDer<'static> {
        c.cert.der().clone()
    }

    fn now() -> UnixTime {
        UnixTime::since_unix_epoch(Duration::from_secs(1_800_000_000))
    }

    #[test]
    fn a_lone_certificate_gets_its_issuers_from_the_trusted_ones_up_to_the_root() {
        let r = root("root");
        let int = signed(params("int", true), &r);
        let leaf = signed(params("certuser", false), &int);
        let other = root("other");
        let trusted = [der(&other), der(&r), der(&int)];
        let sent = complete(vec![der(&leaf)], &trusted, now());
        assert_eq!(sent, vec![der(&leaf), der(&int), der(&r)]);
        // The issuer missing: as much as was found.
        assert_eq!(
            complete(vec![der(&leaf)], &[der(&r)], now()),
            vec![der(&leaf)]
        );
        assert_eq!(
            complete(vec![der(&leaf)], &[der(&int)], now()),
            vec![der(&leaf), der(&int)]
        );
        // A file with more than one certificate is sent as it is.
        assert_eq!(
            complete(vec![der(&leaf), der(&int)], &trusted, now()),
            vec![der(&leaf), der(&int)]
        );
        // A self-signed client certificate needs nothing.
        assert_eq!(complete(vec![der(&r)], &trusted, now()), vec![der(&r)]);
    }

    #[test]
    fn key_identifiers_and_key_usage_pick_the_issuer() {
        let r = root("root");
        // Two CAs of the same name under the root: the leaf's authorityKeyIdentifier names
        // the one whose key signed it.
        let int_a = signed(params("int", true), &r);
        let int_b = signed(params("int", true), &r);
        let mut p = params("certuser", false);
        p.use_authority_key_identifier_extension = true;
        let leaf = signed(p, &int_b);
        let trusted = [der(&int_a), der(&int_b), der(&r)];
        let sent = complete(vec![der(&leaf)], &trusted, now());
        assert_eq!(sent, vec![der(&leaf), der(&int_b), der(&r)]);
        // Without the identifier, OpenSSL takes the first of the name (no signature is
        // checked while the chain is built; the server then judges it).
        let bare = signed(params("certuser", false), &int_b);
        let sent = complete(vec![der(&bare)], &trusted, now());
        assert_eq!(sent, vec![der(&bare), der(&int_a), der(&r)]);
        // A CA of the name whose keyUsage forbids signing certificates is passed over.
        let mut no_sign = params("int", true);
        no_sign.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let no_sign = signed(no_sign, &r);
        let leaf2 = signed(params("certuser", false), &int_a);
        let sent = complete(vec![der(&leaf2)], &[der(&no_sign), der(&int_a)], now());
        assert_eq!(sent, vec![der(&leaf2), der(&int_a)]);
    }

    #[test]
    fn issuers_that_name_each_other_end_the_search() {
        // Two CAs issued by each other (same names, crossed): each is used once.
        let a = root("a");
        let mut pb = params("b", true);
        pb.use_authority_key_identifier_extension = false;
        let b = signed(pb, &a);
        let mut pa = params("a", true);
        pa.use_authority_key_identifier_extension = false;
        let a_by_b = signed(pa, &b);
        let mut pl = params("certuser", false);
        pl.use_authority_key_identifier_extension = false;
        let leaf = signed(pl, &a_by_b);
        let sent = complete(vec![der(&leaf)], &[der(&a_by_b), der(&b)], now());
        assert_eq!(sent, vec![der(&leaf), der(&a_by_b), der(&b)]);
    }
}
