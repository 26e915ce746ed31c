//! What the servers receive, judged on the judging side: the StartupMessage must carry what
//! the client's connection string asks libpq to send (`build_startup_packet`'s rule, written
//! here on its own from the keyword values the scenario chose, not from the machine's
//! configuration), and a session the client closed at a ReadyForQuery boundary must have
//! received a Terminate first, as libpq sends one whenever it closes such a connection (a
//! rejected server, a failed check query, `PQfinish`, `PQreset`).

use pgyard_wire::frame::ProtocolVersion;

use super::invariants::{violation, CheckResult};
use super::pg::StartupSeen;
use super::sockets::{ServerEnd, Sock};
use super::World;

/// The connection-string keywords that decide a startup packet, as the scenario wrote them
/// (`None`: not in the string at all).
#[derive(Clone, Debug, Default)]
pub struct StartupKeywords {
    /// `user` (always given).
    pub user: String,
    /// `dbname`.
    pub dbname: Option<String>,
    /// `replication`.
    pub replication: Option<String>,
    /// `options`.
    pub options: Option<String>,
    /// `application_name`.
    pub application_name: Option<String>,
    /// `fallback_application_name`.
    pub fallback_application_name: Option<String>,
    /// `client_encoding` (never `auto`, which libpq resolves from the locale).
    pub client_encoding: Option<String>,
    /// `min_protocol_version`.
    pub min_protocol_version: Option<&'static str>,
    /// `max_protocol_version`.
    pub max_protocol_version: Option<&'static str>,
}

/// What every startup packet of a client must be.
#[derive(Clone, Debug)]
pub struct StartupSpec {
    /// The parameters, in libpq's order.
    pub expected: Vec<(Vec<u8>, Vec<u8>)>,
    /// What the application hands the machine besides the configuration (the adapters'
    /// PGDATESTYLE, PGTZ and PGGEQO values, the middleware option), sent after the rest.
    pub extras: Vec<(Vec<u8>, Vec<u8>)>,
    /// The version word: `max_protocol_version`, else 3.2 when `min_protocol_version` asks
    /// for more than 3.0, else 3.0.
    pub version: ProtocolVersion,
    /// The lowest version the client accepts (`min_protocol_version`, 3.0 by default).
    pub min_version: ProtocolVersion,
}

impl StartupKeywords {
    /// Appends the keywords to a connection string (values never hold quotes or
    /// backslashes; those with spaces are quoted).
    pub fn write_conninfo(&self, text: &mut String) {
        let mut put = |k: &str, v: Option<&str>| {
            if let Some(v) = v {
                for piece in [" ", k, "='", v, "'"] {
                    text.push_str(piece);
                }
            }
        };
        put("user", Some(&self.user));
        put("dbname", self.dbname.as_deref());
        put("replication", self.replication.as_deref());
        put("options", self.options.as_deref());
        put("application_name", self.application_name.as_deref());
        put(
            "fallback_application_name",
            self.fallback_application_name.as_deref(),
        );
        put("client_encoding", self.client_encoding.as_deref());
        put("min_protocol_version", self.min_protocol_version);
        put("max_protocol_version", self.max_protocol_version);
    }

    /// libpq's startup packet for these keywords, then `extras`: `user`, `database` (the
    /// user when `dbname` is empty or unset), `replication`, `options`, `application_name` (the
    /// `application_name` value when the keyword is given, else the fallback), and
    /// `client_encoding`, each only when its value is non-empty.
    pub fn spec(&self, extras: Vec<(Vec<u8>, Vec<u8>)>) -> StartupSpec {
        let mut expected: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut put = |k: &str, v: Option<&str>| {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                expected.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
            }
        };
        put("user", Some(&self.user));
        let db = self.dbname.as_deref().filter(|d| !d.is_empty());
        put("database", db.or(Some(&self.user)));
        put("replication", self.replication.as_deref());
        put("options", self.options.as_deref());
        let app = self
            .application_name
            .as_deref()
            .or(self.fallback_application_name.as_deref());
        put("application_name", app);
        put("client_encoding", self.client_encoding.as_deref());
        expected.extend(extras.iter().cloned());
        let version_of = |v: &str| match v {
            "3.0" => ProtocolVersion::V3_0,
            _ => ProtocolVersion::V3_2,
        };
        let min_version = self
            .min_protocol_version
            .map_or(ProtocolVersion::V3_0, version_of);
        let version = match self.max_protocol_version {
            Some(v) => version_of(v),
            None if min_version > ProtocolVersion::V3_0 => ProtocolVersion::V3_2,
            None => ProtocolVersion::V3_0,
        };
        StartupSpec {
            expected,
            extras,
            version,
            min_version,
        }
    }
}

impl StartupSpec {
    /// A plain libpq client: `user` and `dbname` only, protocol 3.0.
    pub fn plain(user: &str, dbname: &str) -> StartupSpec {
        StartupKeywords {
            user: user.to_owned(),
            dbname: Some(dbname.to_owned()),
            ..StartupKeywords::default()
        }
        .spec(Vec::new())
    }
}

impl World {
    /// The StartupMessage socket `id` carried to its server is the one client `i`'s
    /// connection string asks libpq to send.
    pub(super) fn check_startup(&self, i: usize, id: u64, seen: &StartupSeen) -> CheckResult {
        let want = &self.clients[i].spec.startup;
        let expected = || {
            want.expected
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
        };
        if seen.version == want.version && seen.params().eq(expected()) {
            return Ok(());
        }
        let text = |p: &mut dyn Iterator<Item = (&[u8], &[u8])>| {
            p.map(|(k, v)| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(v)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
        };
        Err(violation(
            "startup-packet-as-libpq",
            format!(
                "client {i} socket {id}: the server received version {:#x} [{}], libpq sends \
                 {:#x} [{}]",
                seen.version.0,
                text(&mut seen.params()),
                want.version.0,
                text(&mut expected())
            ),
        ))
    }

    /// A won session runs on socket `id` at no lower a protocol version than client `i`'s
    /// `min_protocol_version`, by what its server runs.
    pub(super) fn check_protocol_floor(&self, i: usize, id: u64) -> CheckResult {
        let min = self.clients[i].spec.startup.min_version;
        let runs = self.socks.get(&id).and_then(|s| s.session.protocol);
        if runs.is_none_or(|v| v >= min) {
            return Ok(());
        }
        Err(violation(
            "protocol-at-least-min",
            format!(
                "client {i} won on socket {id}, whose server runs {runs:?}, below \
                 min_protocol_version {min:?}"
            ),
        ))
    }

    /// A session whose server answered with ReadyForQuery, all of which reached the
    /// client, and which the client then closed, received a well-formed Terminate before
    /// the FIN: libpq closes a connection at that point only after sending one. A client
    /// that had not heard the last answer (a `connect_timeout` while a check query was on its
    /// way, an abandoned connect), one that stopped reading at what it refuses (a protocol
    /// version below its minimum, an authentication its `require_auth` refuses), or a server already gone (a crash, a reset) owes nothing.
    pub(super) fn check_terminated(&self, s: &Sock) -> CheckResult {
        let owed = s.server_end == ServerEnd::Answering
            && !s.stopped
            && s.session.readies > 0
            && s.ready_heard == s.session.readies;
        if !owed || s.session.terminated {
            return Ok(());
        }
        Err(violation(
            "terminate-before-close",
            format!(
                "client {} closed a{} to {} after hearing all {} ReadyForQuery without a \
                 Terminate",
                s.client, s.attempt.0, self.nodes[s.node].name, s.session.readies
            ),
        ))
    }
}
