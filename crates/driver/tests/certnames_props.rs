//! A server certificate is untrusted input: reading its names never panics, whatever the bytes,
//! and a certificate cut short or with a byte changed is read or refused, never misread into a
//! panic later.

use pgyard_driver::CertificateNames;
use proptest::prelude::*;

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), host in "[a-z0-9.:]{0,24}") {
        if let Some(names) = CertificateNames::from_der(&bytes) {
            let _ = names.check(&host);
        }
    }

    #[test]
    fn der_shaped_bytes_never_panic(
        parts in proptest::collection::vec((prop_oneof![Just(0x30u8), Just(0x31), Just(0x06), Just(0x04), Just(0x82), Just(0x87), Just(0xa0), Just(0xa3), Just(0x0c)], proptest::collection::vec(any::<u8>(), 0..40)), 0..12),
        host in "[a-z0-9.:]{0,24}",
    ) {
        // Nested TLVs with real tags reach deeper into the reader than random bytes do.
        let mut der = Vec::new();
        for (tag, body) in parts.iter().rev() {
            let mut inner = body.clone();
            inner.extend_from_slice(&der);
            der = vec![*tag];
            if inner.len() < 0x80 {
                der.push(inner.len() as u8);
            } else {
                der.push(0x82);
                der.extend_from_slice(&(inner.len() as u16).to_be_bytes());
            }
            der.extend_from_slice(&inner);
        }
        if let Some(names) = CertificateNames::from_der(&der) {
            let _ = names.check(&host);
        }
    }
}
