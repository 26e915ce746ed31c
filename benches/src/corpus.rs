//! The connection strings every `conninfo_parse` benchmark parses, one pass per iteration.
//!
//! Each string is accepted by pgyard, by Debian's libpq 15 (`PQconninfoParse`) and by
//! `tokio_postgres::Config::from_str`, and names only keywords all three know: no keyword newer
//! than libpq 15, no `keepalives_count` (tokio-postgres calls it `keepalives_retries`), and only
//! values tokio-postgres accepts (numeric ports, IP `hostaddr`s, known enum spellings).

/// The mixed corpus: keyword/value and URI forms, quoting, escapes, host lists, IPv6, query
/// parameters and percent escapes, roughly in the proportions real configurations use them.
pub const CONNINFO: &[&str] = &[
    // Keyword/value, plain.
    "host=localhost port=5432 dbname=postgres user=postgres",
    "host=db.internal.example.com port=6432 dbname=orders user=app_rw sslmode=require",
    "dbname=analytics",
    "host=/var/run/postgresql dbname=template1",
    "hostaddr=10.0.3.17 port=5433 user=replicator dbname=postgres connect_timeout=10",
    "host=pg-primary.svc.cluster.local user=svc_billing password=s3cr3t dbname=billing application_name=billing-worker",
    "host=127.0.0.1 port=5432 user=bench dbname=bench sslmode=disable keepalives=1 keepalives_idle=30 keepalives_interval=10",
    "host=db1,db2,db3 port=5432,5433,5434 dbname=app target_session_attrs=read-write",
    "host=pg-a.example.net,pg-b.example.net dbname=reporting target_session_attrs=read-only connect_timeout=3",
    "host=::1 port=5432 dbname=postgres",
    "hostaddr=2001:db8::17 host=db6.example.org dbname=v6 sslmode=prefer",
    "host=10.1.1.1 dbname=metrics user=grafana channel_binding=require sslmode=require",
    "  host = spaced.example.com   port = 5432\tdbname = spaced  ",
    "host=localhost tcp_user_timeout=5000 keepalives=0 application_name=psql",
    "user=postgres dbname=postgres options=-c\\ statement_timeout=5min",
    // Keyword/value, quoted and escaped.
    "host=localhost dbname='my database' user='O\\'Brien'",
    "password='p@ss w0rd with spaces' user=alice host=auth.example.com",
    "application_name='nightly ETL (batch #7)' dbname=warehouse host=wh.example.com",
    "options='-c search_path=app,public -c work_mem=64MB' dbname=app host=localhost",
    "password='it\\'s a \\\\ backslash' user=bob",
    "host='' dbname=empty_host_ok",
    "dbname='' user=nobody host=localhost",
    "password=pa\\ ss\\=word user=carol host=h",
    "host='/tmp' port='5432' dbname='quoted' user='quoted'",
    "application_name='caf\u{e9} \u{2603}' host=unicode.example.com",
    // URIs, plain.
    "postgresql://localhost",
    "postgresql://localhost:5433",
    "postgresql://localhost/mydb",
    "postgresql://user@localhost",
    "postgresql://user:secret@localhost",
    "postgresql://other@localhost/otherdb?connect_timeout=10&application_name=myapp",
    "postgres://app:app@db.example.com:5432/app",
    "postgresql://app_ro@replica-1.example.com:6432/shop?sslmode=require&target_session_attrs=read-only",
    "postgresql:///mydb?host=localhost&port=5433",
    "postgresql://localhost/mydb?user=other&password=secret",
    "postgresql://host1:123,host2:456/somedb?target_session_attrs=any&application_name=myapp",
    "postgresql://node-a:5432,node-b:5432,node-c:5432/ledger?target_session_attrs=read-write&connect_timeout=2",
    // URIs with IPv6.
    "postgresql://[::1]/db",
    "postgresql://[::1]:5433/postgres?sslmode=disable",
    "postgresql://admin@[2001:db8::1234]:5432/admin",
    "postgresql://[2001:db8::1]:5432,[2001:db8::2]:5432/ha?target_session_attrs=read-write",
    "postgresql://[fe80::1ff:fe23:4567:890a]/linklocal",
    // URIs with percent escapes.
    "postgresql://%2Fvar%2Frun%2Fpostgresql/dbname",
    "postgresql:///dbname?host=%2Fvar%2Frun%2Fpostgresql",
    "postgresql://user%40corp:p%40ss%3Aword@db.example.com/prod",
    "postgresql://localhost/my%20database?application_name=space%20app",
    "postgresql://localhost/db?options=-c%20geqo%3Doff%20-c%20statement_timeout%3D5s",
    "postgresql://j%C3%BCrgen:pw@localhost/caf%C3%A9",
    "postgresql://u:p%25percent@h:5432/d?sslmode=prefer&channel_binding=prefer",
    "postgresql://localhost/db?keepalives=1&keepalives_idle=60&keepalives_interval=5&tcp_user_timeout=10000",
    "postgresql://h/d?hostaddr=192.0.2.10&port=5432&user=u&dbname=override",
];
