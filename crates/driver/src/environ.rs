//! Named lookups in the process environment, all in one pass over `environ`.
//!
//! A connect reads some forty variables by name, as libpq's `getenv`s do. Asked one at a
//! time (`std::env::var_os`, or libc's `getenv`), each lookup scans the whole environment:
//! with the hundred variables `cargo` passes down, that was a fifth of the instructions a
//! trust connect spends outside the kernel. One pass that sets aside the entries whose names
//! are asked for costs about one comparison per variable instead.
//!
//! The pass reads libc's `environ` as `getenv` does, without the lock `std::env` takes
//! around its own reads. That is the contract `std::env::set_var` states: in a program with
//! more than one thread, nothing may change the environment while anything reads it, since
//! libc's own readers (`getenv` inside libpq, `getaddrinfo`, `mktime`) take no lock either.
//! A connect already calls such readers, so this pass adds no hazard a program could avoid.

#![allow(unsafe_code)]

use std::ffi::{c_char, CStr};

extern "C" {
    /// libc's environment: a NULL-terminated array of `NAME=value` C strings. Mutable, as
    /// `setenv` may replace the array: it is read by value, once per lookup.
    static mut environ: *const *const c_char;
}

/// The values of `names` in the process environment, in the order of `names` (`None` for a
/// variable that is unset). Where a name occurs twice, the first occurrence counts, as for
/// `getenv`. A name holding `=` or NUL is never found, as for `std::env::var_os`.
pub(crate) fn lookup(names: &[&str]) -> Vec<Option<Vec<u8>>> {
    let mut values: Vec<Option<Vec<u8>>> = vec![None; names.len()];
    scan(names, |entry| take(names, entry, &mut values));
    values
}

/// Whether [`lookup`] of `names` would give `values` now, without copying anything: how a
/// connect that resolved the same string before finds its environment unchanged.
pub(crate) fn holds(names: &[&str], values: &[Option<Vec<u8>>]) -> bool {
    // A bit per name: which were found (at their first occurrence) so far.
    if names.len() > 128 || values.len() != names.len() {
        return lookup(names) == values;
    }
    let mut found = 0u128;
    let mut same = true;
    scan(names, |entry| {
        let Some(eq) = entry.iter().position(|&b| b == b'=') else {
            return;
        };
        let (name, value) = (&entry[..eq], &entry[eq + 1..]);
        for (i, (n, v)) in names.iter().zip(values).enumerate() {
            if found & (1 << i) == 0 && n.as_bytes() == name {
                found |= 1 << i;
                same &= v.as_deref() == Some(value);
            }
        }
    });
    let unset = names
        .iter()
        .enumerate()
        .filter(|(i, _)| found & (1 << i) == 0);
    same && unset.map(|(i, _)| i).all(|i| values[i].is_none())
}

/// Calls `visit` with every `NAME=value` entry of the process environment that may name one
/// of `names`, in the environment's order.
fn scan(names: &[&str], mut visit: impl FnMut(&[u8])) {
    // Nearly every variable starts otherwise than every asked name (all but `HOME` begin with
    // `PG`): a test of an entry's first two bytes sets it aside. A one-byte name's entry has
    // `=` second. Past a few distinct prefixes every entry is compared.
    let mut prefixes = [[0u8; 2]; 6];
    let mut distinct = 0;
    for n in names {
        if let [a, rest @ ..] = n.as_bytes() {
            let p = [*a, rest.first().copied().unwrap_or(b'=')];
            if !prefixes[..distinct.min(prefixes.len())].contains(&p) {
                if distinct < prefixes.len() {
                    prefixes[distinct] = p;
                }
                distinct += 1;
            }
        }
    }
    let every = distinct > prefixes.len();
    let prefixes = &prefixes[..distinct.min(prefixes.len())];
    // SAFETY: `environ` is libc's, valid for reading and NULL-terminated; each entry is a
    // NUL-terminated string that lives as long as the array does, and both stay unchanged
    // while this loop runs under `set_var`'s contract (see the module's comment). An entry's
    // second byte is read only when its first is not the terminating NUL. `visit` sees the
    // entry only while the loop is at it.
    unsafe {
        let mut entry = environ;
        if entry.is_null() {
            return;
        }
        while !(*entry).is_null() {
            let at = (*entry).cast::<u8>();
            let first = *at;
            if first != 0 && (every || prefixes.contains(&[first, *at.add(1)])) {
                visit(CStr::from_ptr(*entry).to_bytes());
            }
            entry = entry.add(1);
        }
    }
}

/// Records `NAME=value` under each unset name of `names` it names.
fn take(names: &[&str], entry: &[u8], values: &mut [Option<Vec<u8>>]) {
    let Some(eq) = entry.iter().position(|&b| b == b'=') else {
        return;
    };
    let (name, value) = (&entry[..eq], &entry[eq + 1..]);
    for (n, v) in names.iter().zip(values.iter_mut()) {
        if v.is_none() && n.as_bytes() == name {
            *v = Some(value.to_vec());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    /// Every variable of this process (the test harness runs with cargo's large environment)
    /// is found with the value `std::env` reads, and names it lacks are not.
    #[test]
    fn the_pass_finds_what_var_os_finds() {
        let mut names: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .collect();
        assert!(names.len() > 5, "the test expects a populated environment");
        names.extend(["PGYARD_NOT_SET_ANYWHERE", "", "P", "PATH=", "HOME\0"].map(String::from));
        // Names one byte short of and one byte longer than real ones are not found.
        let real = names
            .iter()
            .find(|n| n.len() > 1 && n.is_ascii())
            .expect("an ASCII variable name")
            .clone();
        names.push(real[..real.len() - 1].to_owned());
        names.push(format!("{real}X"));
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let got = lookup(&refs);
        for (name, value) in refs.iter().zip(&got) {
            let want = if name.is_empty() || name.contains(['=', '\0']) {
                None
            } else {
                std::env::var_os(name).map(|v| v.as_bytes().to_vec())
            };
            assert_eq!(value, &want, "variable {name:?}");
        }
        assert!(got.iter().filter(|v| v.is_some()).count() > 5);
    }

    /// A few names (the prefix test on) find what `std::env` finds.
    #[test]
    fn a_few_names_are_found_by_their_prefixes() {
        let names = ["HOME", "PATH", "PGYARD_NOT_SET_ANYWHERE", "X"];
        for (name, value) in names.iter().zip(lookup(&names)) {
            assert_eq!(
                value,
                std::env::var_os(name).map(|v| v.as_bytes().to_vec()),
                "variable {name:?}"
            );
        }
        assert!(
            std::env::var_os("PATH").is_some(),
            "the test expects PATH set"
        );
    }

    #[test]
    fn an_entry_is_split_at_its_first_equals_sign() {
        let names = ["A", "B", "C", "A=B"];
        let mut values = vec![None; names.len()];
        take(&names, b"A=B=C", &mut values);
        take(&names, b"A=second", &mut values);
        take(&names, b"C", &mut values);
        take(&names, b"B=", &mut values);
        assert_eq!(
            values,
            vec![Some(b"B=C".to_vec()), Some(Vec::new()), None, None]
        );
    }

    /// `holds` agrees with `lookup`: true for what `lookup` gives, false for any one value
    /// changed, set or unset, duplicates and names `lookup` never finds included.
    #[test]
    fn holds_is_true_exactly_for_what_lookup_gives() {
        let real = std::env::vars_os()
            .find_map(|(k, _)| k.into_string().ok().filter(|k| !k.is_empty()))
            .expect("a variable");
        let names = [
            real.as_str(),
            "PGYARD_NOT_SET_ANYWHERE",
            real.as_str(),
            "A=B",
            "PATH",
        ];
        let values = lookup(&names);
        assert!(holds(&names, &values));
        for i in 0..names.len() {
            let mut changed = values.clone();
            changed[i] = match &changed[i] {
                Some(v) if v.is_empty() => Some(b"x".to_vec()),
                Some(v) => Some(v[..v.len() - 1].to_vec()),
                None => Some(Vec::new()),
            };
            assert!(!holds(&names, &changed), "value {i} changed");
            if values[i].is_some() {
                changed[i] = None;
                assert!(!holds(&names, &changed), "value {i} unset");
            }
        }
        assert!(!holds(&names, &values[1..]), "one value short");
    }
}
