//! The middleware message classes pgyard allocates in the proposal's external range
//! (`docs/middleware-message.md`), and what their payloads mean to the proxy.

use pgyard_types::Lsn;

/// `ROUTE`: payload `primary`, `standby` or `any`.
pub const ROUTE: i64 = 2_147_483_649;
/// `MIN_LSN`: payload an LSN as `X/Y`.
pub const MIN_LSN: i64 = 2_147_483_650;
/// `TAG`: payload a UTF-8 label of at most [`TAG_MAX`] bytes.
pub const TAG: i64 = 2_147_483_651;
/// Longest `TAG` payload.
pub const TAG_MAX: usize = 64;

/// Which kind of server a transaction goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Route {
    /// A server that accepts writes (`target_session_attrs=read-write`).
    Primary,
    /// A standby, else the primary (`prefer-standby`).
    Standby,
    /// Any server, load-balanced (`any`, `load_balance_hosts=random`).
    Any,
}

impl Route {
    /// The payload word.
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Primary => "primary",
            Route::Standby => "standby",
            Route::Any => "any",
        }
    }

    /// Parses a payload word.
    pub fn parse(word: &[u8]) -> Option<Route> {
        match word {
            b"primary" => Some(Route::Primary),
            b"standby" => Some(Route::Standby),
            b"any" => Some(Route::Any),
            _ => None,
        }
    }
}

/// What a middleware message asks of the proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Directive {
    /// Route from now on (sticky).
    Route(Route),
    /// The next transaction routed away from the primary needs a server that has replayed
    /// this far.
    MinLsn(Lsn),
    /// A label for the admin console.
    Tag(String),
    /// A class the proxy does not know: counted and dropped.
    Unknown(i64),
}

/// Reads a middleware message of `class`; a malformed payload of a known class gets the
/// error text the client is sent (SQLSTATE 08P01) before it is disconnected.
pub fn directive(class: i64, payload: &[u8]) -> Result<Directive, String> {
    match class {
        ROUTE => Route::parse(payload).map(Directive::Route).ok_or_else(|| {
            format!(
                "invalid ROUTE middleware message: expected \"primary\", \"standby\" or \"any\", got {:?}",
                String::from_utf8_lossy(payload)
            )
        }),
        MIN_LSN => std::str::from_utf8(payload)
            .ok()
            .and_then(|s| s.parse::<Lsn>().ok())
            .map(Directive::MinLsn)
            .ok_or_else(|| {
                format!(
                    "invalid MIN_LSN middleware message: expected an LSN such as 0/16B3748, got {:?}",
                    String::from_utf8_lossy(payload)
                )
            }),
        TAG => match std::str::from_utf8(payload) {
            Ok(s) if s.len() <= TAG_MAX => Ok(Directive::Tag(s.to_owned())),
            Ok(_) => Err(format!(
                "invalid TAG middleware message: longer than {TAG_MAX} bytes"
            )),
            Err(_) => Err("invalid TAG middleware message: not UTF-8".to_owned()),
        },
        other => Ok(Directive::Unknown(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_reads_its_payload_and_names_what_is_wrong() {
        assert_eq!(
            directive(ROUTE, b"standby"),
            Ok(Directive::Route(Route::Standby))
        );
        assert_eq!(
            directive(MIN_LSN, b"1/2A"),
            Ok(Directive::MinLsn(Lsn((1 << 32) | 0x2A)))
        );
        assert_eq!(
            directive(TAG, b"batch-7"),
            Ok(Directive::Tag("batch-7".into()))
        );
        assert_eq!(directive(7, b"x"), Ok(Directive::Unknown(7)));
        let e = directive(ROUTE, b"master").expect_err("unknown route");
        assert!(e.contains("\"master\""), "{e}");
        assert!(directive(MIN_LSN, b"12").is_err());
        assert!(directive(TAG, &[b'x'; 65]).is_err());
        assert!(directive(TAG, &[0xff]).is_err());
    }
}
