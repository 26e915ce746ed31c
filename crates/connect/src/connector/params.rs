//! What every connection is told from the configuration: the startup parameters and the
//! per-slot connection parameters.

use pgyard_conninfo::typed::{
    ChannelBinding as CfgChannelBinding, ProtocolVersion, SslCertMode, SslNegotiation,
};
use pgyard_wire::auth::ChannelBinding;
use pgyard_wire::frame::ProtocolVersion as WireVersion;

use super::Connector;
use crate::conn::{Check, ConnParams, StartupParams};

impl Connector {
    /// The startup parameters a connection sends (the same for all of them, but for
    /// `application_name` after a server refused it).
    fn startup_params(&self, send_appname: bool) -> StartupParams {
        let c = &self.config;
        let mut startup: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut put = |k: &str, v: Option<&[u8]>| {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                startup.push((k.as_bytes().to_vec(), v.to_vec()));
            }
        };
        put("user", Some(c.user()));
        put("database", Some(c.dbname()));
        put("replication", c.replication());
        put("options", Some(c.options()));
        if send_appname {
            put("application_name", c.startup_application_name());
        }
        put("client_encoding", c.client_encoding());
        for (k, v) in &self.extra_startup {
            if !k.is_empty() && !v.is_empty() {
                startup.push((k.clone(), v.clone()));
            }
        }
        startup.into()
    }

    /// What a connection to `slot` is told, in pass 2 when `second_pass`.
    pub(super) fn conn_params(
        &mut self,
        slot: usize,
        second_pass: bool,
        send_appname: bool,
    ) -> ConnParams {
        let startup = match &self.startup {
            _ if !send_appname => self.startup_params(false),
            Some(s) => s.clone(),
            None => {
                let s = self.startup_params(true);
                self.startup = Some(s.clone());
                s
            }
        };
        let c = &self.config;
        // libpq retries without the name when either keyword is set, even empty.
        let named = c.application_name().is_some() || c.fallback_application_name().is_some();
        let slot_pw = c.slots().get(slot).and_then(|s| s.password());
        let password_from_file = match (slot_pw, c.passfile()) {
            (Some(_), Some(path)) => Some(path.to_vec()),
            _ => None,
        };
        let wire_version = |v: ProtocolVersion| WireVersion(v.code());
        ConnParams {
            user: c.user().to_vec(),
            startup,
            password: c.password_for(slot).map(<[u8]>::to_vec),
            password_from_file,
            secret: self.login_secret.clone(),
            require_auth: c.require_auth().clone(),
            channel_binding: match c.channel_binding() {
                CfgChannelBinding::Disable => ChannelBinding::Disable,
                CfgChannelBinding::Prefer => ChannelBinding::Prefer,
                CfgChannelBinding::Require => ChannelBinding::Require,
            },
            min_version: wire_version(c.min_protocol_version()),
            max_version: wire_version(c.max_protocol_version()),
            direct_ssl: c.sslnegotiation() == SslNegotiation::Direct,
            check: Check::for_pass(c.target_session_attrs(), second_pass),
            appname_retry: send_appname && named,
            cert_required: c.sslcertmode() == SslCertMode::Require,
        }
    }
}
