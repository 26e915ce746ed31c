//! The documentation stands alone and stays true: the dependency lines of
//! `docs/architecture.md` match the workspace's real graph, every code fence in the Markdown
//! files is closed where its author meant it to be, and no document cites a file outside the
//! project.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The heading the dependency lines sit under in `docs/architecture.md`.
const DEPS_HEADING: &str = "## Dependencies between packages";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The short name the docs use: `pgyard-wire` is `wire`, `xtask` stays `xtask`.
fn short(name: &str) -> &str {
    name.strip_prefix("pgyard-").unwrap_or(name)
}

/// Direct normal dependencies between workspace members, as `cargo metadata` reports them
/// (a dependency under `[target.…]` counts; dev- and build-dependencies do not).
fn real_graph() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root())
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let members: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut graph = Graph::new();
    for p in packages {
        let name = p["name"].as_str().expect("package name");
        let deps = graph.entry(short(name).to_string()).or_default();
        for d in p["dependencies"].as_array().expect("dependencies") {
            let dep = d["name"].as_str().expect("dependency name");
            if d["kind"].is_null() && members.contains(dep) {
                deps.insert(short(dep).to_string());
            }
        }
    }
    graph
}

/// The lines of the first code fence under [`DEPS_HEADING`]: `package: dep dep …`.
fn documented_graph(doc: &str) -> Result<Graph, String> {
    let mut lines = doc.lines().skip_while(|l| l.trim() != DEPS_HEADING);
    if lines.next().is_none() {
        return Err(format!("no heading {DEPS_HEADING:?}"));
    }
    if lines.find(|l| l.starts_with("```")).is_none() {
        return Err(format!("no code fence under {DEPS_HEADING:?}"));
    }
    let mut graph = Graph::new();
    for line in lines.take_while(|l| !l.starts_with("```")) {
        let (name, deps) = line
            .split_once(':')
            .ok_or_else(|| format!("not `package: deps…`: {line:?}"))?;
        let deps: BTreeSet<String> = deps.split_whitespace().map(str::to_string).collect();
        if graph.insert(name.trim().to_string(), deps).is_some() {
            return Err(format!("{} listed twice", name.trim()));
        }
    }
    Ok(graph)
}

/// Every difference between the documented and the real graph, one line each.
fn differences(documented: &Graph, real: &Graph) -> Vec<String> {
    let names: BTreeSet<&String> = documented.keys().chain(real.keys()).collect();
    let mut out = Vec::new();
    for name in names {
        match (documented.get(name), real.get(name)) {
            (None, _) => out.push(format!("{name}: not listed")),
            (_, None) => out.push(format!("{name}: listed, but no such package")),
            (Some(doc), Some(real)) => {
                for d in real.difference(doc) {
                    out.push(format!("{name}: depends on {d}, not listed"));
                }
                for d in doc.difference(real) {
                    out.push(format!("{name}: listed as depending on {d}, but does not"));
                }
            }
        }
    }
    out
}

#[test]
fn the_documented_dependency_lines_match_cargo_metadata() {
    let documented = documented_graph(&read("docs/architecture.md"))
        .unwrap_or_else(|e| panic!("docs/architecture.md: {e}"));
    let diff = differences(&documented, &real_graph());
    assert!(
        diff.is_empty(),
        "docs/architecture.md, {DEPS_HEADING:?}, disagrees with the Cargo.toml files:\n  {}",
        diff.join("\n  ")
    );
}

#[test]
fn the_comparison_sees_every_kind_of_drift() {
    let doc = format!("{DEPS_HEADING}\n\n```text\na: b\nb:\nc: a\n```\n");
    let documented = documented_graph(&doc).expect("parses");
    let set = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
    let real: Graph = [
        ("a".to_string(), set(&["b", "d"])),
        ("b".to_string(), set(&[])),
        ("d".to_string(), set(&[])),
    ]
    .into();
    assert_eq!(
        differences(&documented, &real),
        [
            "a: depends on d, not listed",
            "c: listed, but no such package",
            "d: not listed",
        ]
    );
    let twice = format!("{DEPS_HEADING}\n```text\na:\na: b\n```\n");
    assert_eq!(documented_graph(&twice), Err("a listed twice".into()));
    assert!(documented_graph("# nothing\n").is_err());
}

/// The project's Markdown files.
fn markdown_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string()];
    let docs = std::fs::read_dir(root().join("docs")).expect("docs/");
    for entry in docs {
        let name = entry.expect("docs/ entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") {
            files.push(format!("docs/{name}"));
        }
    }
    files.sort();
    files
}

/// A fence opener or closer (CommonMark): up to three spaces, then three or more backticks
/// or tildes. Returns the character, the run's length and what follows it.
fn fence(line: &str) -> Option<(char, usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let c = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run = rest.len() - rest.trim_start_matches(c).len();
    (indent <= 3 && run >= 3).then(|| (c, run, rest[run..].trim()))
}

/// A shell command of the examples: `pgyard` or `cargo` and one of their subcommands (prose
/// such as "pgyard is …" is not one).
fn is_command(line: &str) -> bool {
    const PGYARD: [&str; 7] = [
        "sim", "connect", "conninfo", "delayq", "proxy", "slotsync", "wire",
    ];
    const CARGO: [&str; 8] = [
        "run", "test", "xtask", "bench", "build", "install", "clippy", "fmt",
    ];
    let mut words = line.split_whitespace();
    match (words.next(), words.next()) {
        (Some("pgyard"), Some(sub)) => PGYARD.contains(&sub),
        (Some("cargo"), Some(sub)) => CARGO.contains(&sub),
        _ => false,
    }
}

/// Where each fence of `text` is left open, or a command line is left outside any fence.
fn fence_faults(text: &str) -> Vec<String> {
    let mut faults = Vec::new();
    let mut open: Option<(char, usize, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        match (open, fence(line)) {
            (None, Some((c, run, _))) => open = Some((c, run, n)),
            (Some((c, run, _)), Some((c2, run2, info)))
                if c2 == c && run2 >= run && info.is_empty() =>
            {
                open = None
            }
            (None, None) if is_command(line) => {
                faults.push(format!("line {n}: a command outside a code fence"))
            }
            _ => {}
        }
    }
    if let Some((_, _, n)) = open {
        faults.push(format!("line {n}: a code fence never closed"));
    }
    faults
}

#[test]
fn every_code_fence_closes_where_it_should() {
    let mut faults = Vec::new();
    for file in markdown_files() {
        for f in fence_faults(&read(&file)) {
            faults.push(format!("{file}: {f}"));
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));

    // An early close leaves the example lines after it outside the block, where a `# `
    // comment renders as a heading; an odd count leaves the rest of the file inside one.
    let early = "```sh\npgyard sim\n```\n# comment\npgyard wire decode x\n```\n";
    assert_eq!(
        fence_faults(early),
        [
            "line 5: a command outside a code fence",
            "line 6: a code fence never closed"
        ]
    );
    assert!(fence_faults("````md\n```\n````\n~~~\n~~~\n").is_empty());
}

#[test]
fn no_document_cites_a_file_outside_the_project() {
    for file in markdown_files() {
        let text = read(&file);
        for (i, line) in text.lines().enumerate() {
            // The development machine's reference material lived under /work; a reader of
            // the repository has none of it.
            assert!(
                !line.contains("/work/"),
                "{file}:{}: cites a file outside the project: {line}",
                i + 1
            );
        }
    }
}
