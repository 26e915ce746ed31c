//! Everything a driver needs before the machine's first action, from a connection string and
//! the adapter options.

use std::time::Duration;

use pgyard_conninfo::configure;
use pgyard_conninfo::typed::ConnectConfig;

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
    let lossy = |b: Vec<u8>| {
        let mut s = String::from_utf8_lossy(&b).into_owned();
        while s.ends_with('\n') {
            s.pop();
        }
        s
    };
    let mut info =
        pgyard_conninfo::parse(conninfo).map_err(|e| Error::Parse(lossy(e.libpq_message())))?;
    for (keyword, value) in &options.overrides {
        info.set(*keyword, value);
    }
    let inputs = match &options.inputs {
        Some(i) => i.clone(),
        None => RealInputs::read_for(&info),
    };
    let configured = configure(info, &inputs.env, &inputs.files)
        .map_err(|e| Error::Config(lossy(e.libpq_message())))?;
    for w in &configured.warnings {
        // libpq prints password-file warnings on standard error itself.
        eprint!("{}", String::from_utf8_lossy(&w.libpq_message()));
    }
    let mut config = configured.config;
    if let Some(s) = options.strategy {
        config.set_strategy(s);
    }
    if options.failover_timeout.is_some() {
        config.set_failover_timeout(options.failover_timeout);
    }
    let mut extra_startup_params = startup_extras(&inputs);
    if options.middleware {
        extra_startup_params.push((crate::MIDDLEWARE_OPTION.as_bytes().to_vec(), b"on".to_vec()));
    }
    Ok(Prepared {
        extra_startup_params,
        tls: TlsSettings::new(&config, &inputs.env),
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
