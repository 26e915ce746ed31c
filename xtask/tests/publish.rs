//! What `cargo xtask publish-check` publishes: exactly the library crates, every folder under
//! `crates/` but the CLI and the test kit, each with the metadata crates.io asks for, and
//! every dependency between published crates carrying a version.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The folders under `crates/` that hold no library to publish.
const NOT_LIBRARIES: [&str; 2] = ["cli", "testkit"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

fn metadata() -> Value {
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
    serde_json::from_slice(&out.stdout).expect("metadata JSON")
}

/// `publish = false` shows as an empty registry list; anything else may be published.
fn publishable(package: &Value) -> bool {
    package["publish"]
        .as_array()
        .is_none_or(|registries| !registries.is_empty())
}

#[test]
fn exactly_the_library_crates_are_publishable() {
    let meta = metadata();
    let packages = meta["packages"].as_array().expect("packages");
    let crates_dir = root().join("crates");
    let mut expected = BTreeSet::new();
    for package in packages {
        let manifest = Path::new(package["manifest_path"].as_str().expect("manifest path"));
        let folder = manifest.parent().expect("a manifest sits in a folder");
        let name = folder.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if folder.parent() == Some(crates_dir.as_path()) && !NOT_LIBRARIES.contains(&name) {
            expected.insert(package["name"].as_str().expect("name").to_string());
        }
    }
    let published: BTreeSet<String> = packages
        .iter()
        .filter(|p| publishable(p))
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect();
    assert!(expected.len() >= 10, "library crates found: {expected:?}");
    assert_eq!(published, expected);
}

#[test]
fn every_published_crate_has_its_metadata_and_versioned_dependencies() {
    let meta = metadata();
    let packages = meta["packages"].as_array().expect("packages");
    let members: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut faults = Vec::new();
    for package in packages.iter().filter(|p| publishable(p)) {
        let name = package["name"].as_str().expect("name");
        for field in [
            "description",
            "license",
            "repository",
            "rust_version",
            "readme",
        ] {
            if package[field].as_str().is_none_or(str::is_empty) {
                faults.push(format!("{name}: no {field}"));
            }
        }
        let keywords = package["keywords"].as_array().map_or(0, Vec::len);
        let categories = package["categories"].as_array().map_or(0, Vec::len);
        if !(1..=5).contains(&keywords) || categories == 0 {
            faults.push(format!(
                "{name}: {keywords} keywords, {categories} categories"
            ));
        }
        // A dev-dependency on a member without a version is dropped from the published
        // manifest, which is what the test kit needs; a normal one would not build.
        for dep in package["dependencies"].as_array().expect("dependencies") {
            let dep_name = dep["name"].as_str().expect("dependency name");
            let versionless = dep["req"].as_str() == Some("*");
            if members.contains(dep_name) && dep["kind"].is_null() && versionless {
                faults.push(format!("{name}: depends on {dep_name} by path alone"));
            }
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}
