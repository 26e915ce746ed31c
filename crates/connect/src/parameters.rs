//! The ParameterStatus values of a session, kept in one buffer.
//!
//! A server reports about fifteen parameters at startup. Held as a vector of owned string
//! pairs they cost thirty allocations and frees per connect, about a fifth of the
//! instructions a trust connect spends outside the kernel; here they are one `String` of
//! names and values side by side and one vector of where each lies, which the connect
//! machine fills as the server reports them and hands over whole.

use std::fmt;

/// ParameterStatus values: each name once, in the order names first came, with the latest
/// value reported for it.
#[derive(Clone, Default)]
pub struct Parameters {
    /// Every name followed by its value, nothing between.
    text: String,
    /// Per parameter, in order: where its name starts, where its value starts (the name's
    /// end) and where the value ends.
    spans: Vec<[usize; 3]>,
}

impl Parameters {
    /// No parameters.
    pub fn new() -> Self {
        Parameters::default()
    }

    /// The value of `name`, if reported.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.find(name).map(|i| self.value(i))
    }

    /// Every (name, value), in the order the names first came.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            text: &self.text,
            spans: self.spans.iter(),
        }
    }

    /// How many parameters there are.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Sets `name` to `value`: a known name keeps its position, a new one goes last. Each is
    /// cut at its first NUL, as the protocol's strings end there.
    pub fn set(&mut self, name: &str, value: &str) {
        self.set_cut(before_nul(name), before_nul(value));
    }

    /// [`Parameters::set`] for a name and value that hold no NUL (cut from a message at its
    /// NULs already).
    fn set_cut(&mut self, name: &str, value: &str) {
        debug_assert!(!name.contains('\0') && !value.contains('\0'));
        match self.find(name) {
            Some(i) => {
                let [_, start, end] = self.spans[i];
                self.text.replace_range(start..end, value);
                self.spans[i][2] = start + value.len();
                // The parameters after it move by the change in length.
                for span in &mut self.spans[i + 1..] {
                    for at in span.iter_mut() {
                        *at = *at - (end - start) + value.len();
                    }
                }
            }
            None => {
                let at = self.text.len();
                self.text.push_str(name);
                self.text.push_str(value);
                self.spans.push([at, at + name.len(), self.text.len()]);
            }
        }
    }

    /// [`Parameters::set`] for a ParameterStatus's bytes: text that is not UTF-8 is taken
    /// lossily.
    pub fn set_lossy(&mut self, name: &[u8], value: &[u8]) {
        self.set_reported(bytes_before_nul(name), bytes_before_nul(value));
    }

    /// [`Parameters::set_lossy`] for a name and value cut from a ParameterStatus at its NULs.
    pub(crate) fn set_reported(&mut self, name: &[u8], value: &[u8]) {
        let text = |b| match std::str::from_utf8(b) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => String::from_utf8_lossy(b),
        };
        self.set_cut(&text(name), &text(value));
    }

    /// The parameters as owned pairs.
    pub fn to_vec(&self) -> Vec<(String, String)> {
        self.iter()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect()
    }

    /// Room for `params` more parameters of `bytes` bytes in all without growing.
    pub(crate) fn reserve(&mut self, params: usize, bytes: usize) {
        self.spans.reserve(params);
        self.text.reserve(bytes);
    }

    /// The index of `name`.
    fn find(&self, name: &str) -> Option<usize> {
        let (text, name) = (self.text.as_bytes(), name.as_bytes());
        self.spans
            .iter()
            .position(|&[n, v, _]| v - n == name.len() && text[n..v] == *name)
    }

    fn value(&self, i: usize) -> &str {
        let [_, v, end] = self.spans[i];
        &self.text[v..end]
    }
}

impl PartialEq for Parameters {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Parameters {}

/// The bytes before the first NUL (all of them when there is none). A plain byte search:
/// names and values are short, where `str::find`'s searcher costs more to set up than it saves.
fn bytes_before_nul(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(nul) => &b[..nul],
        None => b,
    }
}

fn before_nul(s: &str) -> &str {
    // A NUL is one byte in UTF-8, so the cut falls on a character boundary.
    &s[..bytes_before_nul(s.as_bytes()).len()]
}

impl fmt::Debug for Parameters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Parameters {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for Parameters {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Self {
        let mut out = Parameters::new();
        for (n, v) in pairs {
            out.set(n.as_ref(), v.as_ref());
        }
        out
    }
}

/// The (name, value) pairs of [`Parameters`], in order.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    text: &'a str,
    spans: std::slice::Iter<'a, [usize; 3]>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let &[n, v, end] = self.spans.next()?;
        Some((&self.text[n..v], &self.text[v..end]))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &Parameters) -> Vec<(&str, &str)> {
        p.iter().collect()
    }

    #[test]
    fn a_name_keeps_its_place_and_takes_the_latest_value() {
        let mut p = Parameters::new();
        assert!(p.is_empty());
        p.set("TimeZone", "UTC");
        p.set("DateStyle", "ISO, MDY");
        p.set("TimeZone", "Europe/Berlin");
        p.set("TimeZone", "");
        p.set("application_name", "x");
        assert_eq!(
            pairs(&p),
            [
                ("TimeZone", ""),
                ("DateStyle", "ISO, MDY"),
                ("application_name", "x")
            ]
        );
        assert_eq!(p.len(), 3);
        assert_eq!(p.get("DateStyle"), Some("ISO, MDY"));
        assert_eq!(p.get("TimeZone"), Some(""));
        assert_eq!(p.get("timezone"), None, "names are compared exactly");
        p.set("DateStyle", "Postgres, DMY");
        assert_eq!(p.get("DateStyle"), Some("Postgres, DMY"));
        assert_eq!(p.get("application_name"), Some("x"));
    }

    #[test]
    fn a_nul_ends_a_name_or_a_value() {
        let mut p = Parameters::new();
        p.set("a\0b", "1\0x");
        p.set("", "empty name");
        assert_eq!(pairs(&p), [("a", "1"), ("", "empty name")]);
        p.set("", "still empty");
        assert_eq!(pairs(&p), [("a", "1"), ("", "still empty")]);
        p.set_lossy(b"a\0z", b"2\0z");
        assert_eq!(pairs(&p), [("a", "2"), ("", "still empty")]);
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn reported_bytes_that_are_not_utf8_are_taken_lossily() {
        let mut p = Parameters::new();
        p.set_lossy(b"server_version", b"18.4");
        p.set_lossy(b"a\xff", b"b\xfe");
        p.set_lossy(b"server_version", b"18.5");
        assert_eq!(
            pairs(&p),
            [("server_version", "18.5"), ("a\u{fffd}", "b\u{fffd}")]
        );
        p.set_lossy(b"a\xfe", b"c");
        assert_eq!(
            p.get("a\u{fffd}"),
            Some("c"),
            "names compare after conversion"
        );
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn equal_contents_compare_equal_whatever_the_history() {
        let mut a = Parameters::new();
        a.set("x", "a much longer first value");
        a.set("y", "2");
        a.set("x", "1");
        let b: Parameters = [("x", "1"), ("y", "2")].into_iter().collect();
        assert_eq!(a, b);
        assert_eq!(format!("{b:?}"), r#"{"x": "1", "y": "2"}"#);
        assert_eq!(
            b.to_vec(),
            vec![("x".into(), "1".into()), ("y".into(), "2".into())]
        );
    }

    proptest::proptest! {
        /// Any sequence of sets ends where a list of owned pairs updated in place would.
        #[test]
        fn sets_match_a_list_of_pairs(
            steps in proptest::collection::vec(("[abc]{0,2}", "[xyzé]{0,6}"), 0..40)
        ) {
            let mut p = Parameters::new();
            let mut model: Vec<(String, String)> = Vec::new();
            for (name, value) in &steps {
                p.set(name, value);
                match model.iter_mut().find(|(n, _)| n == name) {
                    Some(slot) => slot.1 = value.clone(),
                    None => model.push((name.clone(), value.clone())),
                }
                proptest::prop_assert_eq!(p.get(name), Some(value.as_str()));
            }
            proptest::prop_assert_eq!(p.to_vec(), model.clone());
            proptest::prop_assert_eq!(p.len(), model.len());
            let rebuilt: Parameters = model.into_iter().collect();
            proptest::prop_assert_eq!(p, rebuilt);
        }
    }
}
