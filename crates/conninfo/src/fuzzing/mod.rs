//! Entry points for fuzz targets and corpus replays: each takes arbitrary bytes, must never
//! panic, and checks the properties that hold for every input.

use crate::serialize::{to_keyword_value, to_uri};
use crate::{parse, parse_params, ConnInfo};

#[cfg(feature = "arbitrary")]
mod generated;
#[cfg(feature = "arbitrary")]
pub use generated::{libpq_diff, roundtrip_arrays, roundtrip_kv, roundtrip_uri, Oracle};

/// Parses `data` as a connection string in whichever form it has; a success must re-parse
/// identically after serialization to both forms.
pub fn parse_any(data: &[u8]) {
    if let Ok(info) = parse(data) {
        assert_round_trips(&info);
    }
}

/// Forces the URI form: `data` is put behind the `postgresql://` prefix.
pub fn parse_uri(data: &[u8]) {
    let mut s = b"postgresql://".to_vec();
    s.extend_from_slice(data);
    if let Ok(info) = parse(&s) {
        assert_round_trips(&info);
    }
}

/// Parses `data` in the proposal dialect; its table must survive serialization too.
pub fn parse_proposal(data: &[u8]) {
    if let Ok(p) = crate::proposal::parse(data) {
        assert_round_trips(&p.conninfo);
    }
}

/// Both serializations of `info` parse back to `info`.
pub(crate) fn assert_round_trips(info: &ConnInfo) {
    let kv = to_keyword_value(info);
    assert_eq!(
        parse(&kv).as_ref(),
        Ok(info),
        "keyword/value {:?}",
        kv.escape_ascii().to_string()
    );
    let uri = to_uri(info);
    assert_eq!(
        parse(&uri).as_ref(),
        Ok(info),
        "uri {:?}",
        uri.escape_ascii().to_string()
    );
}

/// Splits `data` into keyword arrays: the first byte picks `expand_dbname`, then entries are
/// separated by `\n`, keyword and value by the first `=`; a line without `=` is a NULL value.
pub fn parse_arrays(data: &[u8]) {
    let Some((&flag, rest)) = data.split_first() else {
        return;
    };
    let pairs: Vec<(&[u8], Option<&[u8]>)> = rest
        .split(|&b| b == b'\n')
        .map(|line| match line.iter().position(|&b| b == b'=') {
            Some(eq) => (&line[..eq], Some(&line[eq + 1..])),
            None => (line, None),
        })
        .collect();
    let _ = parse_params(&pairs, flag & 1 == 1);
}

/// Runs the service-file reader over `data`: the first line (up to `\n`) is the service name,
/// the rest the file. Checks that every reported setting is a keyword other than `service`.
pub fn service_file(data: &[u8]) {
    let (name, contents) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let scan = crate::resolve::parse_service_file(contents, b"fuzz.conf", name);
    assert!(scan.found || scan.settings.is_empty());
    assert!(scan
        .settings
        .iter()
        .all(|(kw, v)| *kw != crate::Keyword::Service && v.len() < 1023));
    if let Some(e) = &scan.error {
        let _ = e.libpq_message();
    }
}

/// Runs the password-file search over `data` with a few fixed keys; a found password is never
/// longer than the file.
pub fn passfile(data: &[u8]) {
    const KEYS: [[&[u8]; 4]; 3] = [
        [b"localhost", b"5432", b"db", b"user"],
        [b"", b"", b"*", b":"],
        [b"h\\", b"1", b"d", b"u"],
    ];
    for [host, port, dbname, user] in KEYS {
        if let Some(pw) = crate::resolve::lookup(data, host, port, dbname, user) {
            assert!(pw.len() <= data.len());
        }
    }
}
