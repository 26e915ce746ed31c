//! Fuzz entry points built on the `arb` generators: round trips of generated strings and
//! arrays, and the differential check against libpq.

use super::assert_round_trips;
use crate::arb::{
    AdversarialKeywordValue, AdversarialParams, AdversarialUri, ConnString, KeywordValue, Params,
    Uri,
};
use crate::serialize::{to_keyword_value, to_uri};
use crate::{parse, parse_params, ConnInfo};

/// Generated keyword/value strings (`arb`): a well-formed one must parse to the table it was
/// built for, then survive both serializers; an adversarial one must survive them if it
/// parses. The first byte picks the mode.
pub fn roundtrip_kv(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let g = KeywordValue::from_bytes(rest);
        assert_well_formed(&g.text, &g.expected);
    } else if let Ok(info) = parse(AdversarialKeywordValue::from_bytes(rest).0) {
        assert_round_trips(&info);
        assert_serializations_stable(&info);
    }
}

/// [`roundtrip_kv`] for generated URIs.
pub fn roundtrip_uri(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let g = Uri::from_bytes(rest);
        assert_well_formed(&g.text, &g.expected);
    } else if let Ok(info) = parse(AdversarialUri::from_bytes(rest).0) {
        assert_round_trips(&info);
        assert_serializations_stable(&info);
    }
}

/// [`roundtrip_kv`] for generated keyword arrays (`parse_params`, with and without
/// `expand_dbname`).
pub fn roundtrip_arrays(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let g = Params::from_bytes(rest);
        let got = parse_params(&g.entries, g.expand_dbname);
        assert_eq!(
            got.as_ref(),
            Ok(&g.expected),
            "well-formed arrays (expand_dbname={}) {:?}",
            g.expand_dbname,
            g.entries
        );
        assert_round_trips(&g.expected);
        assert_serializations_stable(&g.expected);
    } else {
        let g = AdversarialParams::from_bytes(rest);
        if let Ok(info) = parse_params(&g.entries, g.expand_dbname) {
            assert_round_trips(&info);
            assert_serializations_stable(&info);
        }
    }
}

fn assert_well_formed(text: &[u8], expected: &ConnInfo) {
    let shown = text.escape_ascii().to_string();
    let info = match parse(text) {
        Ok(info) => info,
        Err(e) => panic!("well-formed {shown:?} rejected: {e}"),
    };
    assert_eq!(&info, expected, "well-formed {shown:?}");
    assert_round_trips(&info);
    assert_serializations_stable(&info);
}

/// Serializing what a serialization parses to gives the same bytes again.
fn assert_serializations_stable(info: &ConnInfo) {
    for write in [to_keyword_value, to_uri] {
        let once = write(info);
        let again = parse(&once).map(|i| write(&i));
        assert_eq!(
            again.as_ref(),
            Ok(&once),
            "re-serialized {:?}",
            once.escape_ascii().to_string()
        );
    }
}

/// What libpq's `PQconninfoParse` says about a string: the set keywords in table order with
/// their values, or its error message bytes. The fuzz target and the corpus replay pass
/// `pgyard_testkit::libpq`; this crate cannot depend on it.
pub type Oracle = fn(&[u8]) -> Result<Vec<(String, Vec<u8>)>, Vec<u8>>;

/// Differential check against libpq: `data` becomes a [`ConnString`] (well-formed,
/// adversarial, mutated or raw), which pgyard's [`parse`] and `oracle` must read identically,
/// error messages included. A well-formed string must moreover give the generator's table,
/// which checks the generator against libpq too. Input with a NUL byte cannot reach libpq;
/// pgyard must reject it.
pub fn libpq_diff(data: &[u8], oracle: Oracle) {
    let input = ConnString::from_bytes(data);
    let text = input.text();
    let shown = text.escape_ascii().to_string();
    let ours = parse(text);
    if text.contains(&0) {
        assert!(ours.is_err(), "{shown:?} holds NUL but parsed: {ours:?}");
        return;
    }
    let ours = match ours {
        Ok(info) => Ok(table(&info)),
        Err(e) => Err(e.libpq_message()),
    };
    let theirs = oracle(text);
    if ours != theirs {
        panic!(
            "pgyard disagrees with libpq on \"{shown}\"\n  libpq:  {}\n  pgyard: {}",
            outcome(&theirs),
            outcome(&ours)
        );
    }
    if let Some(expected) = input.expected() {
        assert_eq!(
            theirs,
            Ok(table(expected)),
            "libpq reads the well-formed {shown:?} differently from the generator"
        );
    }
}

fn table(info: &ConnInfo) -> Vec<(String, Vec<u8>)> {
    info.iter()
        .map(|(kw, v)| (kw.name().to_owned(), v.to_vec()))
        .collect()
}

fn outcome(o: &Result<Vec<(String, Vec<u8>)>, Vec<u8>>) -> String {
    match o {
        Ok(kv) => {
            let pairs: Vec<String> = kv
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", v.escape_ascii()))
                .collect();
            format!("Ok [{}]", pairs.join(" "))
        }
        Err(m) => format!("Err \"{}\"", m.escape_ascii()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An oracle that accepts everything and sets nothing.
    fn accepts_all(_: &[u8]) -> Result<Vec<(String, Vec<u8>)>, Vec<u8>> {
        Ok(Vec::new())
    }

    /// pgyard's own answers, so only the generator's promise is checked.
    fn pgyard(input: &[u8]) -> Result<Vec<(String, Vec<u8>)>, Vec<u8>> {
        parse(input)
            .map(|info| table(&info))
            .map_err(|e| e.libpq_message())
    }

    /// A raw input (selector byte 0) that pgyard rejects.
    const RAW_BAD: &[u8] = b"\x00host";

    #[test]
    fn a_disagreeing_oracle_is_a_crash() {
        assert!(matches!(
            ConnString::from_bytes(RAW_BAD),
            ConnString::Raw(_)
        ));
        let caught = std::panic::catch_unwind(|| libpq_diff(RAW_BAD, accepts_all));
        let msg = caught.expect_err("the disagreement is reported");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("pgyard disagrees with libpq on \"host\""),
            "{msg}"
        );
        assert!(msg.contains("libpq:  Ok []"), "{msg}");
        assert!(msg.contains(r#"pgyard: Err "missing \"=\" after"#), "{msg}");
    }

    #[test]
    fn an_agreeing_oracle_passes_and_nul_input_must_be_rejected() {
        for seed in 0u8..=255 {
            let data: Vec<u8> = (0..300u16)
                .map(|i| (i as u8).wrapping_mul(seed) ^ seed)
                .collect();
            libpq_diff(&data, pgyard);
        }
        // Never reaches the oracle: libpq cannot be given a NUL.
        libpq_diff(b"\x00host=a\x00b", accepts_all);
    }
}
