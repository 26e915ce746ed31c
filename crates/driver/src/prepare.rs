//! Everything a driver needs before the machine's first action, from a connection string and
//! the adapter options.

use std::time::Duration;

use pgyard_conninfo::resolve::PassfileWarning;
use pgyard_conninfo::typed::ConnectConfig;
use pgyard_conninfo::{configure, Configured, ConnInfo};

use crate::env::RealInputs;
use crate::tls::TlsSettings;
use crate::{os_seed, ConnectOptions, Error};

/// What a driver needs before the machine's first action, resolved from a connection string
/// and the adapter options.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The typed configuration for `Connector::new` (strategy override applied).
    pub config: ConnectConfig,
    /// Startup parameters from PGDATESTYLE, PGTZ and PGGEQO, for
    /// `Connector::with_extra_startup_params`.
    pub extra_startup_params: Vec<(Vec<u8>, Vec<u8>)>,
    /// TLS settings (root, client certificate and key files, SNI, protocol versions).
    pub tls: TlsSettings,
    /// Upper bound for one socket `connect()`: `connect_timeout` + 1 s, so the machine's own
    /// deadline always fires first.
    pub connect_bound: Option<Duration>,
    /// The machine's seed (the option's, or one from the operating system).
    pub seed: u64,
    /// The option's login secret, for `Connector::with_login_secret`.
    pub login_secret: Option<pgyard_wire::auth::LoginSecret>,
}

/// Parses and resolves `conninfo` as libpq does (environment, service and password files,
/// from `options.inputs` or the real ones), printing password-file warnings on standard error
/// as libpq prints them.
pub fn prepare(conninfo: &str, options: &ConnectOptions) -> Result<Prepared, Error> {
    let resolved = match &options.inputs {
        Some(inputs) => {
            let info = parse_with(conninfo, options)?;
            Resolved::new(inputs, configure_lossy(info, inputs)?)
        }
        None => memo::resolve(conninfo, options)?,
    };
    for w in &resolved.warnings {
        // libpq prints password-file warnings on standard error itself.
        eprint!("{}", String::from_utf8_lossy(&w.libpq_message()));
    }
    let Resolved {
        mut config,
        mut extra_startup_params,
        tls,
        ..
    } = resolved;
    if let Some(s) = options.strategy {
        config.set_strategy(s);
    }
    if options.failover_timeout.is_some() {
        config.set_failover_timeout(options.failover_timeout);
    }
    if options.middleware {
        extra_startup_params.push((crate::MIDDLEWARE_OPTION.as_bytes().to_vec(), b"on".to_vec()));
    }
    Ok(Prepared {
        extra_startup_params,
        tls,
        connect_bound: config
            .connect_timeout()
            .ok()
            .flatten()
            .map(|d| d + Duration::from_secs(1)),
        seed: options.seed.unwrap_or_else(os_seed),
        login_secret: options.login_secret.clone(),
        config,
    })
}

/// What a connection string and its inputs resolve to, before the adapter options that do
/// not take part in the resolution (strategy, failover budget, middleware, seed, secret).
#[derive(Clone, Debug)]
struct Resolved {
    config: ConnectConfig,
    warnings: Vec<PassfileWarning>,
    extra_startup_params: Vec<(Vec<u8>, Vec<u8>)>,
    tls: TlsSettings,
}

impl Resolved {
    fn new(inputs: &RealInputs, configured: Configured) -> Resolved {
        Resolved {
            extra_startup_params: startup_extras(inputs),
            tls: TlsSettings::new(&configured.config, &inputs.env),
            config: configured.config,
            warnings: configured.warnings,
        }
    }
}

/// libpq's text of an error, without its trailing newlines.
fn lossy(b: Vec<u8>) -> String {
    let mut s = String::from_utf8_lossy(&b).into_owned();
    while s.ends_with('\n') {
        s.pop();
    }
    s
}

/// `conninfo` parsed, with the options' overrides set on it.
fn parse_with(conninfo: &str, options: &ConnectOptions) -> Result<ConnInfo, Error> {
    let mut info =
        pgyard_conninfo::parse(conninfo).map_err(|e| Error::Parse(lossy(e.libpq_message())))?;
    for (keyword, value) in &options.overrides {
        info.set(*keyword, value);
    }
    Ok(info)
}

fn configure_lossy(info: ConnInfo, inputs: &RealInputs) -> Result<Configured, Error> {
    configure(info, &inputs.env, &inputs.files).map_err(|e| Error::Config(lossy(e.libpq_message())))
}

/// The last resolution made from the real environment and files on this thread, reused while
/// the same string meets the same inputs.
///
/// A connect resolves its string as libpq does, every time: the environment and the service
/// and password files are read again, so a change to any of them counts at the next connect.
/// What is skipped on a repeat is only the work those inputs cannot change: parsing the same
/// string and resolving it against inputs equal to the last ones, a pure function of both.
/// That work touched some twenty thousand instructions of cold code before the socket was
/// opened, about 1 % of a trust connect to a local server (docs/connect.md, session 38).
mod memo {
    use std::cell::RefCell;

    use pgyard_conninfo::{ConnInfo, Keyword};

    use super::{configure_lossy, parse_with, Resolved};
    use crate::env::Reading;
    use crate::{ConnectOptions, Error};

    struct Last {
        conninfo: String,
        overrides: Vec<(Keyword, Vec<u8>)>,
        /// The string parsed, overrides set: what the inputs are read for.
        info: ConnInfo,
        /// What was read for it, and how.
        reading: Reading,
        resolved: Resolved,
    }

    thread_local! {
        static LAST: RefCell<Option<Box<Last>>> = const { RefCell::new(None) };
    }

    /// Resolves `conninfo` against the real inputs, reusing the last resolution where the
    /// string, the overrides and everything read are the same.
    pub(super) fn resolve(conninfo: &str, options: &ConnectOptions) -> Result<Resolved, Error> {
        LAST.with_borrow_mut(|last| {
            let same = last
                .as_ref()
                .is_some_and(|l| l.conninfo == conninfo && l.overrides == options.overrides);
            let info = match last.take() {
                Some(l) if same => {
                    if l.reading.unchanged() {
                        let resolved = l.resolved.clone();
                        *last = Some(l);
                        return Ok(resolved);
                    }
                    l.info
                }
                _ => parse_with(conninfo, options)?,
            };
            let (inputs, reading) = Reading::take(&info);
            let resolved = Resolved::new(&inputs, configure_lossy(info.clone(), &inputs)?);
            *last = Some(Box::new(Last {
                conninfo: conninfo.to_owned(),
                overrides: options.overrides.clone(),
                info,
                reading,
                resolved: resolved.clone(),
            }));
            Ok(resolved)
        })
    }
}

/// The startup parameters libpq takes from PGDATESTYLE, PGTZ and PGGEQO (unless `default`).
fn startup_extras(inputs: &RealInputs) -> Vec<(Vec<u8>, Vec<u8>)> {
    crate::env::STARTUP_VARIABLES
        .into_iter()
        .filter_map(|(var, name)| {
            let v = inputs.env.var(var)?;
            (!v.eq_ignore_ascii_case(b"default")).then(|| (name.as_bytes().to_vec(), v.to_vec()))
        })
        .collect()
}

/// Connect-wide settings a driver needs besides the machine.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// TLS settings for [`crate::core::Core`].
    pub tls: TlsSettings,
    /// Upper bound for one socket `connect()`, above the machine's `connect_timeout`.
    pub connect_bound: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgyard_conninfo::resolve::{Environment, MemFiles};
    use pgyard_conninfo::Keyword;

    fn prepared(conninfo: &str, options: ConnectOptions) -> Prepared {
        let inputs = RealInputs {
            env: Environment::default().with_os_user("u"),
            files: MemFiles::default(),
        };
        prepare(conninfo, &options.inputs(inputs).seed(1)).expect("prepares")
    }

    #[test]
    fn an_override_wins_over_the_string_in_both_syntaxes() {
        let set = || ConnectOptions::default().set(Keyword::Replication, "database");
        for conninfo in [
            "host=a dbname=db",
            "host=a replication=false",
            "postgresql://a/db?replication=true",
        ] {
            let p = prepared(conninfo, set());
            assert_eq!(p.config.replication(), Some(&b"database"[..]), "{conninfo}");
        }
        let p = prepared("host=a replication=true", ConnectOptions::default());
        assert_eq!(p.config.replication(), Some(&b"true"[..]));
    }
}
