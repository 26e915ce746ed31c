//! Phases 2 and 3 chained, as `PQconnectdb` chains them before it connects: defaults from the
//! supplied environment and service files, the password file per host slot, then the typed
//! view. Still pure: the caller supplies the environment and the files.

use std::cell::RefCell;

use crate::resolve::{
    add_defaults, passfile_path, password_from_file, slot_key, Environment, FileSource,
    PassfileWarning, ServiceError, Sources,
};
use crate::typed::{ConfigError, ConnectConfig, Context, HostSlotKey};
use crate::{ConnInfo, Keyword};

/// A connection string made ready to connect with.
#[derive(Clone, Debug)]
pub struct Configured {
    /// The typed configuration.
    pub config: ConnectConfig,
    /// Where each resolved value came from.
    pub sources: Sources,
    /// Password-file warnings, once per host slot as libpq prints them.
    pub warnings: Vec<PassfileWarning>,
}

/// Why a parsed connection string cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigureError {
    /// The service file could not supply the named service.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// libpq's phase-3 validation rejected a value.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl ConfigureError {
    /// The exact bytes libpq 18 reports, trailing newline included.
    pub fn libpq_message(&self) -> Vec<u8> {
        match self {
            ConfigureError::Service(e) => e.libpq_message(),
            ConfigureError::Config(e) => e.libpq_message(),
        }
    }
}

/// Fills defaults into `info`, consults the password file for every host slot, and validates.
pub fn configure(
    mut info: ConnInfo,
    env: &Environment,
    files: &impl FileSource,
) -> Result<Configured, ConfigureError> {
    let sources = add_defaults(&mut info, env, files)?;
    let passfile = passfile_path(info.get(Keyword::Passfile), env);
    let warnings = RefCell::new(Vec::new());
    let lookup = |key: &HostSlotKey<'_>| -> Option<Vec<u8>> {
        let path = passfile.as_deref()?;
        let k = slot_key(
            key.host.unwrap_or_default(),
            key.hostaddr.unwrap_or_default(),
            key.port.unwrap_or_default(),
            &env.default_socket_dir,
        );
        let out = password_from_file(files, path, k, key.dbname, key.user);
        if let Some(w) = out.warning {
            warnings.borrow_mut().push(w);
        }
        out.password
    };
    let mut ctx = Context::new().with_default_socket_dir(env.default_socket_dir.clone());
    if let Some(user) = &env.os_user {
        ctx = ctx.with_os_user(user.clone());
    }
    if passfile.is_some() {
        ctx = ctx.with_password_lookup(&lookup);
    }
    let config = ConnectConfig::from_resolved(&info, &ctx)?;
    Ok(Configured {
        config,
        sources,
        warnings: warnings.into_inner(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;
    use crate::resolve::{MemFile, MemFiles};
    use crate::typed::SlotKind;

    #[test]
    fn environment_service_and_passfile_meet_in_the_host_list() {
        let env = Environment::new()
            .with_var("PGSERVICEFILE", "/svc.conf")
            .with_var("PGPORT", "6000")
            .with_var("HOME", "/home/me")
            .with_os_user("me");
        let files = MemFiles::new()
            .with(
                "/svc.conf",
                MemFile::regular("[shop]\nhost=db1,db2\ndbname=orders\n"),
            )
            .with(
                "/home/me/.pgpass",
                MemFile::regular("db2:6000:orders:me:secret2\n*:*:*:*:other\n").with_mode(0o600),
            );
        let c = configure(parse("service=shop").unwrap(), &env, &files).unwrap();
        let slots = c.config.slots();
        assert_eq!(slots.len(), 2);
        assert_eq!(slots[0].host(), Some(&b"db1"[..]));
        assert_eq!(slots[0].kind(), SlotKind::HostName);
        assert_eq!(slots[1].port(), Ok(6000));
        assert_eq!(slots[0].password(), Some(&b"other"[..]));
        assert_eq!(slots[1].password(), Some(&b"secret2"[..]));
        assert_eq!(c.config.user(), b"me");
        assert_eq!(c.config.dbname(), b"orders");
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn loose_passfile_permissions_warn_once_per_slot_and_give_no_password() {
        let env = Environment::new().with_var("HOME", "/h").with_os_user("u");
        let files = MemFiles::new().with(
            "/h/.pgpass",
            MemFile::regular("*:*:*:*:pw\n").with_mode(0o644),
        );
        let c = configure(parse("host=a,b").unwrap(), &env, &files).unwrap();
        assert_eq!(c.warnings.len(), 2);
        assert!(c.config.slots().iter().all(|s| s.password().is_none()));
    }

    #[test]
    fn errors_keep_libpq_texts() {
        let env = Environment::new().with_os_user("u");
        let files = MemFiles::new();
        let e = configure(parse("service=nosuch").unwrap(), &env, &files).unwrap_err();
        assert_eq!(
            e.libpq_message(),
            b"definition of service \"nosuch\" not found\n"
        );
        let e = configure(parse("host=a port=1,2").unwrap(), &env, &files).unwrap_err();
        assert_eq!(e.to_string(), "could not match 2 port numbers to 1 hosts");
    }
}
