//! The limits every source file keeps (issue #18, and the brief's house rules for new code):
//! no file over 800 lines outside `tests/` directories and `tests.rs` modules, and no
//! function over 150 lines anywhere. A test rather than a habit, so that no session's change
//! slips past them unnoticed (one did: `crates/driver/src/tls.rs` reached 801 lines).

use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Longest source file outside the test files.
const FILE_LINES_MAX: usize = 800;
/// Longest function, test code included.
const FN_LINES_MAX: usize = 150;

/// The folders that hold the workspace's Rust code.
const SOURCE_DIRS: [&str; 6] = ["crates", "sim", "benches", "xtask", "fuzz", "examples"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

/// Every `.rs` file below `dir`, build output left out.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn workspace_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        rust_files(&root.join(dir), &mut files);
    }
    files.sort();
    assert!(
        files.len() > 100,
        "only {} Rust files found under {}",
        files.len(),
        root.display()
    );
    files
}

/// A file of tests, which may be longer: one in a `tests/` folder, or a `tests.rs` module.
fn is_test_file(rel: &Path) -> bool {
    rel.file_name().is_some_and(|n| n == "tests.rs")
        || rel.components().any(|c| c.as_os_str() == "tests")
}

/// A function's name and its first and last line.
struct Span {
    name: String,
    first: usize,
    last: usize,
}

impl Span {
    fn lines(&self) -> usize {
        self.last + 1 - self.first
    }
}

/// Every function with a body: free functions, methods, trait methods with a default body,
/// and functions nested in them or in modules.
#[derive(Default)]
struct Functions {
    found: Vec<Span>,
}

impl Functions {
    fn note(&mut self, name: &syn::Ident, whole: proc_macro2::Span) {
        self.found.push(Span {
            name: name.to_string(),
            first: whole.start().line,
            last: whole.end().line,
        });
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        let whole = spanned(&f.sig.fn_token.span, &f.block.brace_token.span.close());
        self.note(&f.sig.ident, whole);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        let whole = spanned(&f.sig.fn_token.span, &f.block.brace_token.span.close());
        self.note(&f.sig.ident, whole);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(body) = &f.default {
            let whole = spanned(&f.sig.fn_token.span, &body.brace_token.span.close());
            self.note(&f.sig.ident, whole);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// From the start of `first` to the end of `last` (the signature's `fn` to the closing brace:
/// attributes and doc comments above a function do not count against it). Joining needs
/// proc-macro2's `span-locations`; without it the join fails, every function would measure
/// one line, and `function_lengths_are_measured_from_fn_to_the_closing_brace` fails.
fn spanned(first: &proc_macro2::Span, last: &proc_macro2::Span) -> proc_macro2::Span {
    first.join(*last).unwrap_or(*first)
}

/// Every function with a body in `text`, the source of `rel`.
fn functions_of(text: &str, rel: &Path) -> Vec<Span> {
    let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{}: {e}", rel.display()));
    let mut v = Functions::default();
    v.visit_file(&file);
    v.found
}

#[test]
fn no_source_file_is_over_800_lines_outside_the_tests() {
    let root = root();
    let mut long = Vec::new();
    for path in workspace_files() {
        let rel = path.strip_prefix(&root).expect("below the root");
        if is_test_file(rel) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
        let lines = text.lines().count();
        if lines > FILE_LINES_MAX {
            long.push(format!("{} ({lines} lines)", rel.display()));
        }
    }
    assert!(
        long.is_empty(),
        "source files over {FILE_LINES_MAX} lines: {long:?}"
    );
}

#[test]
fn no_function_is_over_150_lines() {
    let root = root();
    let mut long = Vec::new();
    let mut counted = 0;
    for path in workspace_files() {
        let rel = path.strip_prefix(&root).expect("below the root");
        let text = std::fs::read_to_string(&path).expect("readable source");
        for f in functions_of(&text, rel) {
            counted += 1;
            if f.lines() > FN_LINES_MAX {
                long.push(format!(
                    "{}:{} {} ({} lines)",
                    rel.display(),
                    f.first,
                    f.name,
                    f.lines()
                ));
            }
        }
    }
    assert!(counted > 1000, "only {counted} functions found");
    assert!(
        long.is_empty(),
        "functions over {FN_LINES_MAX} lines: {long:#?}"
    );
}

/// The measure itself: a function's lines run from `fn` to its closing brace, nested ones
/// are counted on their own, and a span that did not join (which would make every function
/// one line long and the check toothless) is caught here.
#[test]
fn function_lengths_are_measured_from_fn_to_the_closing_brace() {
    let text = "/// doc\n#[inline]\nfn outer() {\n    fn inner() {\n        let _ = 1;\n    }\n    inner();\n}\n\nimpl S {\n    pub fn m(&self) -> u8 {\n        7\n    }\n}\n\ntrait T {\n    fn d() {}\n    fn r();\n}\n";
    let found = functions_of(text, Path::new("example.rs"));
    let got: Vec<(String, usize, usize)> = found
        .iter()
        .map(|s| (s.name.clone(), s.first, s.lines()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("outer".to_owned(), 3, 6),
            ("inner".to_owned(), 4, 3),
            ("m".to_owned(), 11, 3),
            ("d".to_owned(), 17, 1),
        ]
    );
}

#[test]
fn test_files_are_told_apart() {
    assert!(is_test_file(Path::new("crates/wire/tests/messages.rs")));
    assert!(is_test_file(Path::new("crates/delayq/src/tests.rs")));
    assert!(is_test_file(Path::new("crates/delayq/src/tests/large.rs")));
    assert!(!is_test_file(Path::new(
        "crates/delayq/src/apply/machine_tests.rs"
    )));
    assert!(!is_test_file(Path::new("crates/driver/src/tls.rs")));
}
