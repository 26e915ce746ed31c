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
            /// The plain linear lookup, kept as the oracle for the fast one.
            #[cfg(test)]
            fn from_name_scan(name: &[u8]) -> Option<Keyword> {
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

impl Keyword {
    /// Exact, case-sensitive lookup, as libpq's `conninfo_find`; dispatches on the length
    /// first so a lookup compares against at most a handful of names.
    #[inline]
    pub fn from_name(name: &[u8]) -> Option<Keyword> {
        match name.len() {
            4 => match name {
                b"user" => Some(Keyword::User),
                b"host" => Some(Keyword::Host),
                b"port" => Some(Keyword::Port),
                _ => None,
            },
            6 => match name {
                b"dbname" => Some(Keyword::Dbname),
                b"sslkey" => Some(Keyword::Sslkey),
                b"sslcrl" => Some(Keyword::Sslcrl),
                b"sslsni" => Some(Keyword::Sslsni),
                b"gsslib" => Some(Keyword::Gsslib),
                _ => None,
            },
            7 => match name {
                b"service" => Some(Keyword::Service),
                b"options" => Some(Keyword::Options),
                b"sslmode" => Some(Keyword::Sslmode),
                b"sslcert" => Some(Keyword::Sslcert),
                _ => None,
            },
            8 => match name {
                b"password" => Some(Keyword::Password),
                b"passfile" => Some(Keyword::Passfile),
                b"hostaddr" => Some(Keyword::Hostaddr),
                _ => None,
            },
            9 => match name {
                b"sslcrldir" => Some(Keyword::Sslcrldir),
                _ => None,
            },
            10 => match name {
                b"keepalives" => Some(Keyword::Keepalives),
                b"gssencmode" => Some(Keyword::Gssencmode),
                b"krbsrvname" => Some(Keyword::Krbsrvname),
                _ => None,
            },
            11 => match name {
                b"sslcertmode" => Some(Keyword::Sslcertmode),
                b"sslpassword" => Some(Keyword::Sslpassword),
                b"sslrootcert" => Some(Keyword::Sslrootcert),
                b"requirepeer" => Some(Keyword::Requirepeer),
                b"replication" => Some(Keyword::Replication),
                b"oauth_scope" => Some(Keyword::OauthScope),
                _ => None,
            },
            12 => match name {
                b"require_auth" => Some(Keyword::RequireAuth),
                b"oauth_issuer" => Some(Keyword::OauthIssuer),
                _ => None,
            },
            13 => match name {
                b"gssdelegation" => Some(Keyword::Gssdelegation),
                b"sslkeylogfile" => Some(Keyword::Sslkeylogfile),
                _ => None,
            },
            14 => match name {
                b"sslnegotiation" => Some(Keyword::Sslnegotiation),
                b"sslcompression" => Some(Keyword::Sslcompression),
                _ => None,
            },
            15 => match name {
                b"channel_binding" => Some(Keyword::ChannelBinding),
                b"connect_timeout" => Some(Keyword::ConnectTimeout),
                b"client_encoding" => Some(Keyword::ClientEncoding),
                b"keepalives_idle" => Some(Keyword::KeepalivesIdle),
                b"oauth_client_id" => Some(Keyword::OauthClientId),
                _ => None,
            },
            16 => match name {
                b"application_name" => Some(Keyword::ApplicationName),
                b"keepalives_count" => Some(Keyword::KeepalivesCount),
                b"tcp_user_timeout" => Some(Keyword::TcpUserTimeout),
                b"scram_client_key" => Some(Keyword::ScramClientKey),
                b"scram_server_key" => Some(Keyword::ScramServerKey),
                _ => None,
            },
            18 => match name {
                b"load_balance_hosts" => Some(Keyword::LoadBalanceHosts),
                _ => None,
            },
            19 => match name {
                b"keepalives_interval" => Some(Keyword::KeepalivesInterval),
                b"oauth_client_secret" => Some(Keyword::OauthClientSecret),
                _ => None,
            },
            20 => match name {
                b"min_protocol_version" => Some(Keyword::MinProtocolVersion),
                b"max_protocol_version" => Some(Keyword::MaxProtocolVersion),
                b"target_session_attrs" => Some(Keyword::TargetSessionAttrs),
                _ => None,
            },
            24 => match name {
                b"ssl_min_protocol_version" => Some(Keyword::SslMinProtocolVersion),
                b"ssl_max_protocol_version" => Some(Keyword::SslMaxProtocolVersion),
                _ => None,
            },
            25 => match name {
                b"fallback_application_name" => Some(Keyword::FallbackApplicationName),
                _ => None,
            },
            _ => None,
        }
    }
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
    fn fast_lookup_agrees_with_the_table() {
        for kw in ALL {
            let name = kw.name().as_bytes();
            assert_eq!(Keyword::from_name(name), Keyword::from_name_scan(name));
            for cut in 0..name.len() {
                assert_eq!(
                    Keyword::from_name(&name[..cut]),
                    Keyword::from_name_scan(&name[..cut])
                );
            }
        }
    }

    #[test]
    fn lookup_is_exact() {
        for bad in ["Host", "tty", "requiressl", "servicefile", "", "host "] {
            assert_eq!(Keyword::from_name(bad.as_bytes()), None, "{bad}");
        }
    }
}
