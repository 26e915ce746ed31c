//! Decisions on what a driver reports from outside the protocol: the TLS library's ALPN
//! selection and the resolver's error. Drivers pass both in raw; the machine decides and words
//! them, so the simulator runs the same decisions as the real adapters.

/// The ALPN protocol a PostgreSQL 17+ server selects.
pub const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// libpq's refusal of a finished TLS handshake for its ALPN selection, or `None` when it is
/// acceptable: direct TLS needs the server to have selected `postgresql`, and any other
/// selection is refused whichever way TLS started.
pub fn alpn_refusal(selected: Option<&[u8]>, direct: bool) -> Option<&'static str> {
    match selected {
        None if direct => Some(
            "direct SSL connection was established without ALPN protocol negotiation extension",
        ),
        None => None,
        Some(p) if p == ALPN_POSTGRESQL => None,
        Some(_) => Some("SSL connection was established with unexpected ALPN protocol"),
    }
}

/// The `gai_strerror` text inside a resolver error as a driver reported it: Rust's
/// `io::Error` for a failed `getaddrinfo` prefixes it, libpq prints it bare.
pub fn resolver_text(reported: &str) -> &str {
    reported
        .strip_prefix("failed to lookup address information: ")
        .unwrap_or(reported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_tls_needs_postgresql_and_nothing_else_is_accepted() {
        let direct_none = alpn_refusal(None, true);
        assert_eq!(
            direct_none,
            Some(
                "direct SSL connection was established without ALPN protocol negotiation extension"
            )
        );
        assert_eq!(alpn_refusal(None, false), None);
        assert_eq!(alpn_refusal(Some(b"postgresql"), true), None);
        assert_eq!(alpn_refusal(Some(b"postgresql"), false), None);
        for direct in [true, false] {
            assert_eq!(
                alpn_refusal(Some(b"http/1.1"), direct),
                Some("SSL connection was established with unexpected ALPN protocol")
            );
            assert_eq!(
                alpn_refusal(Some(b"postgresql\0"), direct),
                Some("SSL connection was established with unexpected ALPN protocol")
            );
        }
    }

    #[test]
    fn resolver_errors_lose_rusts_prefix_only() {
        assert_eq!(
            resolver_text("failed to lookup address information: Name or service not known"),
            "Name or service not known"
        );
        assert_eq!(
            resolver_text("Temporary failure in name resolution"),
            "Temporary failure in name resolution"
        );
    }
}
