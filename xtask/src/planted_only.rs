//! Source lines compiled only with a crate's `planted-bugs` feature: a mutant there changes
//! nothing the scored builds contain (neither the sim nor the pure tests enable the feature),
//! so it is left out of the sample like `planted.rs` is, instead of counting as missed.

use std::collections::BTreeMap;
use std::path::Path;

const ATTRIBUTE: &str = "#[cfg(feature = \"planted-bugs\")]";

/// The 1-based line ranges (inclusive) of the items, statements, blocks and fields that carry
/// the planted-bugs attribute in `source`.
pub fn ranges(source: &str) -> Vec<(usize, usize)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != ATTRIBUTE {
            continue;
        }
        if let Some(end) = item_end(&lines, i + 1) {
            out.push((i + 2, end + 1));
        }
    }
    out
}

/// The index of the last line of the item starting at `start`: where its braces close, or
/// the first line ending a statement, field or expression when no brace opens before it.
fn item_end(lines: &[&str], start: usize) -> Option<usize> {
    let mut depth: i64 = 0;
    let mut opened = false;
    for (j, line) in lines.iter().enumerate().skip(start) {
        let code = line.split("//").next().unwrap_or("");
        for c in code.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
        let t = code.trim_end();
        let attribute_or_doc =
            line.trim_start().starts_with("#[") || line.trim_start().starts_with("///");
        if depth <= 0 && !attribute_or_doc && (opened || t.ends_with(';') || t.ends_with(',')) {
            return Some(j);
        }
    }
    None
}

/// Whether cargo-mutants' `name` (`path:line:col: description`) lies in planted-only code,
/// reading each file once through `cache`.
pub fn is_planted_only(
    root: &Path,
    name: &str,
    cache: &mut BTreeMap<String, Vec<(usize, usize)>>,
) -> bool {
    let mut parts = name.splitn(3, ':');
    let (Some(path), Some(line)) = (parts.next(), parts.next()) else {
        return false;
    };
    let Ok(line) = line.parse::<usize>() else {
        return false;
    };
    let spans = cache.entry(path.to_owned()).or_insert_with(|| {
        std::fs::read_to_string(root.join(path))
            .map(|s| ranges(&s))
            .unwrap_or_default()
    });
    spans.iter().any(|&(a, b)| (a..=b).contains(&line))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"fn kept() -> bool {
    #[cfg(feature = "planted-bugs")]
    return self.bug == Some(Bug::A);
    false
}
#[cfg(feature = "planted-bugs")]
/// Plants a bug.
pub fn with_bug(mut self, bug: Bug) -> Self {
    self.bugs.push(bug);
    self
}
struct S {
    #[cfg(feature = "planted-bugs")]
    bugs: Vec<Bug>,
    real: u8,
}
fn f() {
    #[cfg(feature = "planted-bugs")]
    {
        if x { y(); }
    }
    z();
}
"#;

    #[test]
    fn statements_functions_fields_and_blocks_are_planted_only() {
        assert_eq!(ranges(SOURCE), vec![(3, 3), (7, 11), (14, 14), (19, 21)]);
    }

    #[test]
    fn only_mutants_inside_the_ranges_are_left_out() {
        let dir = std::env::temp_dir().join(format!("pgyard-planted-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("src/a.rs"), SOURCE).unwrap();
        let mut cache = BTreeMap::new();
        let mut left_out = |n: &str| is_planted_only(&dir, n, &mut cache);
        assert!(left_out("src/a.rs:3:21: replace == with != in kept"));
        assert!(left_out(
            "src/a.rs:9:5: replace S::with_bug -> Self with Default::default()"
        ));
        assert!(left_out("src/a.rs:20:12: delete ! in f"));
        assert!(!left_out("src/a.rs:4:5: replace kept -> bool with true"));
        assert!(!left_out("src/a.rs:22:5: replace f with ()"));
        assert!(!left_out("src/b.rs:3:5: replace g with ()"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
