//! The connection string a pool's servers are opened with.

use pgyard_proxy::{PoolKey, Route};

use crate::proxy::ProxyConfig;

/// The connection string of a pool's servers: its database's backend with the pool's user,
/// the client's database name (unless the database's own entry names one), and the route's
/// settings; the auth file's plain password is used only when the string names none.
pub fn server_conninfo(
    config: &ProxyConfig,
    key: &PoolKey,
    password: Option<&str>,
) -> Result<String, String> {
    use pgyard_conninfo::Keyword;
    let Some((backend, own)) = config.backend_of(&key.database) else {
        return Err(format!("no such database: {}", key.database));
    };
    let mut info = pgyard_conninfo::parse(backend.as_bytes()).map_err(|e| {
        String::from_utf8_lossy(&e.libpq_message())
            .trim_end()
            .to_owned()
    })?;
    info.set(Keyword::User, &key.user);
    if !own || info.get(Keyword::Dbname).is_none() {
        info.set(Keyword::Dbname, &key.database);
    }
    let tsa = match key.route {
        Route::Primary => "read-write",
        Route::Standby => "prefer-standby",
        Route::Any => "any",
    };
    info.set(Keyword::TargetSessionAttrs, tsa);
    if key.route == Route::Any {
        info.set(Keyword::LoadBalanceHosts, "random");
    }
    if let (Some(p), None) = (password, info.get(Keyword::Password)) {
        info.set(Keyword::Password, p);
    }
    if !key.options.is_empty() {
        // After the backend's own: a server lets a later setting of a name win, so the
        // client's `options` count as its own `SET` over the operator's defaults.
        let mut options = info.get(Keyword::Options).unwrap_or_default().to_vec();
        if !options.is_empty() {
            options.push(b' ');
        }
        options.extend_from_slice(key.options.as_bytes());
        info.set(Keyword::Options, &options);
    }
    let text = pgyard_conninfo::serialize::to_keyword_value(&info);
    Ok(String::from_utf8_lossy(&text).into_owned())
}

#[cfg(test)]
mod tests {
    use pgyard_conninfo::Keyword;
    use pgyard_proxy::{ClientAuth, ClientConfig, PoolMode};

    use super::*;

    fn conninfo_of(backend: &str, route: Route, options: &str) -> pgyard_conninfo::ConnInfo {
        let client = ClientConfig::new(ClientAuth::Trust, PoolMode::Transaction);
        let config = ProxyConfig::new(backend.to_owned(), client);
        let key = PoolKey {
            database: "shop".into(),
            user: "app".into(),
            route,
            options: options.into(),
        };
        let text = server_conninfo(&config, &key, Some("pw")).expect("conninfo");
        pgyard_conninfo::parse(text.as_bytes()).expect("parses again")
    }

    fn get(info: &pgyard_conninfo::ConnInfo, kw: Keyword) -> Option<String> {
        info.get(kw)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    #[test]
    fn a_pools_options_follow_the_backends_own_and_cannot_name_other_keywords() {
        // A client's `options` may hold quotes, backslashes and what looks like keywords.
        let sneaky = r"-c app.x=it\'s\ host=evil -c a.b=c\\";
        let info = conninfo_of(
            "host=db1,db2 options='-c lock_timeout=7s'",
            Route::Standby,
            sneaky,
        );
        let both = format!("-c lock_timeout=7s {sneaky}");
        assert_eq!(get(&info, Keyword::Options).as_deref(), Some(both.as_str()));
        assert_eq!(get(&info, Keyword::Host).as_deref(), Some("db1,db2"));
        assert_eq!(get(&info, Keyword::User).as_deref(), Some("app"));
        assert_eq!(get(&info, Keyword::Dbname).as_deref(), Some("shop"));
        assert_eq!(get(&info, Keyword::Password).as_deref(), Some("pw"));
        let tsa = get(&info, Keyword::TargetSessionAttrs);
        assert_eq!(tsa.as_deref(), Some("prefer-standby"));
        let alone = conninfo_of("host=db1", Route::Primary, "-c statement_timeout=5s");
        let options = get(&alone, Keyword::Options);
        assert_eq!(options.as_deref(), Some("-c statement_timeout=5s"));
        let none = conninfo_of("host=db1 options='-e'", Route::Primary, "");
        assert_eq!(get(&none, Keyword::Options).as_deref(), Some("-e"));
        assert_eq!(
            get(&conninfo_of("host=db1", Route::Any, ""), Keyword::Options),
            None
        );
    }
}
