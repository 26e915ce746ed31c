//! The libpq 18 keyword table: every connection option, its environment variable and its
//! compiled-in default, in `PQconninfoOptions[]` order (the order `PQconninfo` reports).

/// How a keyword is shown by `PQconndefaults` (libpq's `dispchar`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Display {
    /// Shown as is (`""`).
    Normal,
    /// A secret, shown masked (`"*"`).
    Secret,
    /// A debug option, hidden (`"D"`).
    Debug,
}

/// One row of the keyword table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeywordInfo {
    /// The keyword as it appears in a connection string.
    pub name: &'static str,
    /// The environment variable that supplies a default, if any.
    pub env: Option<&'static str>,
    /// The compiled-in default of an SSL-enabled, GSSAPI-less libpq 18 build.
    pub compiled: Option<&'static str>,
    /// How libpq displays it.
    pub display: Display,
}

macro_rules! keywords {
    ($( $variant:ident = $name:literal, $env:expr, $default:expr, $disp:ident; )*) => {
        /// A libpq 18 connection keyword; the discriminant is its position in libpq's table.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum Keyword {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        /// The table, indexed by `Keyword as usize`.
        pub const TABLE: &[KeywordInfo] = &[
            $( KeywordInfo { name: $name, env: $env, compiled: $default, display: Display::$disp }, )*
        ];

        /// Every keyword in table order.
        pub const ALL: &[Keyword] = &[ $( Keyword::$variant, )* ];

        impl Keyword {
            /// Exact, case-sensitive lookup, as libpq's `conninfo_find`.
            #[inline]
            pub fn from_name(name: &[u8]) -> Option<Keyword> {
                match name {
                    $( n if n == $name.as_bytes() => Some(Keyword::$variant), )*
                    _ => None,
                }
            }
        }
    };
}

keywords! {
    Service = "service", Some("PGSERVICE"), None, Normal;
    User = "user", Some("PGUSER"), None, Normal;
    Password = "password", Some("PGPASSWORD"), None, Secret;
    Passfile = "passfile", Some("PGPASSFILE"), None, Normal;
    ChannelBinding = "channel_binding", Some("PGCHANNELBINDING"), Some("prefer"), Normal;
    ConnectTimeout = "connect_timeout", Some("PGCONNECT_TIMEOUT"), None, Normal;
    Dbname = "dbname", Some("PGDATABASE"), None, Normal;
    Host = "host", Some("PGHOST"), None, Normal;
    Hostaddr = "hostaddr", Some("PGHOSTADDR"), None, Normal;
    Port = "port", Some("PGPORT"), Some("5432"), Normal;
    ClientEncoding = "client_encoding", Some("PGCLIENTENCODING"), None, Normal;
    Options = "options", Some("PGOPTIONS"), Some(""), Normal;
    ApplicationName = "application_name", Some("PGAPPNAME"), None, Normal;
    FallbackApplicationName = "fallback_application_name", None, None, Normal;
    Keepalives = "keepalives", None, None, Normal;
    KeepalivesIdle = "keepalives_idle", None, None, Normal;
    KeepalivesInterval = "keepalives_interval", None, None, Normal;
    KeepalivesCount = "keepalives_count", None, None, Normal;
    TcpUserTimeout = "tcp_user_timeout", None, None, Normal;
    Sslmode = "sslmode", Some("PGSSLMODE"), Some("prefer"), Normal;
    Sslnegotiation = "sslnegotiation", Some("PGSSLNEGOTIATION"), Some("postgres"), Normal;
    Sslcompression = "sslcompression", Some("PGSSLCOMPRESSION"), Some("0"), Normal;
    Sslcert = "sslcert", Some("PGSSLCERT"), None, Normal;
    Sslkey = "sslkey", Some("PGSSLKEY"), None, Normal;
    Sslcertmode = "sslcertmode", Some("PGSSLCERTMODE"), None, Normal;
    Sslpassword = "sslpassword", None, None, Secret;
    Sslrootcert = "sslrootcert", Some("PGSSLROOTCERT"), None, Normal;
    Sslcrl = "sslcrl", Some("PGSSLCRL"), None, Normal;
    Sslcrldir = "sslcrldir", Some("PGSSLCRLDIR"), None, Normal;
    Sslsni = "sslsni", Some("PGSSLSNI"), Some("1"), Normal;
    Requirepeer = "requirepeer", Some("PGREQUIREPEER"), None, Normal;
    RequireAuth = "require_auth", Some("PGREQUIREAUTH"), None, Normal;
    MinProtocolVersion = "min_protocol_version", Some("PGMINPROTOCOLVERSION"), None, Normal;
    MaxProtocolVersion = "max_protocol_version", Some("PGMAXPROTOCOLVERSION"), None, Normal;
    SslMinProtocolVersion = "ssl_min_protocol_version", Some("PGSSLMINPROTOCOLVERSION"), Some("TLSv1.2"), Normal;
    SslMaxProtocolVersion = "ssl_max_protocol_version", Some("PGSSLMAXPROTOCOLVERSION"), None, Normal;
    Gssencmode = "gssencmode", Some("PGGSSENCMODE"), Some("disable"), Normal;
    Krbsrvname = "krbsrvname", Some("PGKRBSRVNAME"), Some("postgres"), Normal;
    Gsslib = "gsslib", Some("PGGSSLIB"), None, Normal;
    Gssdelegation = "gssdelegation", Some("PGGSSDELEGATION"), Some("0"), Normal;
    Replication = "replication", None, None, Debug;
    TargetSessionAttrs = "target_session_attrs", Some("PGTARGETSESSIONATTRS"), Some("any"), Normal;
    LoadBalanceHosts = "load_balance_hosts", Some("PGLOADBALANCEHOSTS"), Some("disable"), Normal;
    ScramClientKey = "scram_client_key", None, None, Debug;
    ScramServerKey = "scram_server_key", None, None, Debug;
    OauthIssuer = "oauth_issuer", None, None, Normal;
    OauthClientId = "oauth_client_id", None, None, Normal;
    OauthClientSecret = "oauth_client_secret", None, None, Secret;
    OauthScope = "oauth_scope", None, None, Normal;
    Sslkeylogfile = "sslkeylogfile", None, None, Debug;
}

/// Number of keywords in libpq 18's table.
pub const COUNT: usize = TABLE.len();

impl Keyword {
    /// The keyword's text.
    pub fn name(self) -> &'static str {
        TABLE[self as usize].name
    }

    /// The keyword's table row.
    pub fn info(self) -> &'static KeywordInfo {
        &TABLE[self as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_fifty_keywords_in_libpq_order() {
        assert_eq!(COUNT, 50);
        assert_eq!(ALL.len(), 50);
        assert_eq!(Keyword::Service.name(), "service");
        assert_eq!(Keyword::Sslkeylogfile as usize, 49);
        for (i, kw) in ALL.iter().enumerate() {
            assert_eq!(*kw as usize, i);
            assert_eq!(Keyword::from_name(kw.name().as_bytes()), Some(*kw));
        }
    }

    #[test]
    fn lookup_is_exact() {
        for bad in ["Host", "tty", "requiressl", "servicefile", "", "host "] {
            assert_eq!(Keyword::from_name(bad.as_bytes()), None, "{bad}");
        }
    }
}
