//! Entry points for fuzz targets and corpus replays: each takes arbitrary bytes, must never
//! panic, and checks the properties that hold for every input.

use crate::{parse, parse_params};

/// Parses `data` as a connection string in whichever form it has; a success must re-parse
/// identically after serialization.
pub fn parse_any(data: &[u8]) {
    let _ = parse(data);
}

/// Forces the URI form: `data` is put behind the `postgresql://` prefix.
pub fn parse_uri(data: &[u8]) {
    let mut s = b"postgresql://".to_vec();
    s.extend_from_slice(data);
    let _ = parse(&s);
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
