//! The layering rules of ARCHITECTURE.md, checked against what Cargo sees:
//! `cargo metadata` lists every crate of the workspace and its dependencies
//! (normal, dev and build alike), and any edge between our crates that the
//! table below does not allow fails the test. Cargo already rejects a cycle;
//! this rejects the edges that would make one possible, or that would let the
//! reference share code with what it checks.
//!
//! Inside every crate, with the structure tests' one source reader
//! (support/modules.rs): the top-level modules form no cycle, and no source
//! file is over 600 lines outside its tests. ARCHITECTURE.md's code map
//! names every crate, and its entry points every binary and gate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;

#[path = "support/modules.rs"]
mod modules;

/// Each crate of ours, and the crates of ours it may depend on.
const ALLOWED: &[(&str, &[&str])] = &[
    // The leaf: depends on nothing of ours.
    ("clink-basics", &[]),
    // The external systems' clients know no row, no job and no check.
    ("clink-connectors", &["clink-basics"]),
    // The system under test never depends on what judges it.
    ("clink-engine", &["clink-basics", "clink-connectors"]),
    // Bundles know the engine's formats, never replay, the formal side or the checks.
    ("clink-bundle", &["clink-basics", "clink-engine"]),
    // Replay reads bundles and runs the engine's operators; it never judges.
    ("clink-replay", &["clink-basics", "clink-engine", "clink-bundle"]),
    // The formal side runs TLC on files; it knows no engine type and no bundle.
    ("clink-formal", &["clink-basics"]),
    // The HTML report frame draws merged traces; it knows no engine type, no bundle and no check.
    ("clink-html", &["clink-basics", "clink-formal"]),
    // The checks sit on top of the libraries.
    ("clink-verify", &["clink-basics", "clink-engine", "clink-bundle", "clink-replay", "clink-formal", "clink-html"]),
    // The isolation proof knows nothing but the leaf helpers: whatever runs
    // isolated (upgrade builds, verification, a candidate's replay) uses it.
    ("clink-isolation", &["clink-basics"]),
    // Upgrade validation runs builds as processes: it links no engine code,
    // only the leaf helpers, the isolation proof and the independent reference.
    ("clink-upgrade", &["clink-basics", "clink-isolation", "clink-reference", "clink-html"]),
    // Reconciliation reads bundles and a destination (through the connectors'
    // client) and reuses the bundle.* checks and the report frame; it never
    // replays and knows no TLC.
    (
        "clink-reconcile",
        &["clink-basics", "clink-engine", "clink-connectors", "clink-bundle", "clink-verify", "clink-html"],
    ),
    // The capture store moves files by digest; it parses no capture, snapshot
    // or bundle (the command line says which trees a source is).
    ("clink-store", &["clink-basics"]),
    // The broker probe uses the transactional client it measures; nothing of
    // ours depends on it.
    ("clink-kafka-probe", &["clink-connectors"]),
    // The continuous audit runner adds no check: it runs the real clink and
    // reference processes (through clink-upgrade's one process runner) and
    // reads their JSON, so it links no engine, bundle, verify or reconcile
    // code that could decide a verdict in-process; clink-html draws status.
    ("clink-audit", &["clink-basics", "clink-upgrade", "clink-html"]),
    // The bundle mutants edit bundles in the engine's own formats; they
    // verify nothing (the suite does).
    ("clink-bundle-mutants", &["clink-basics", "clink-engine", "clink-bundle"]),
    // The independent reference shares no code with anything it checks.
    ("clink-reference", &[]),
    // Nor does the audit's reference implementation: it reads Kafka with
    // rdkafka itself, never through clink-connectors.
    ("clink-reference-audit", &[]),
    // The command line and the generated suites may use everything.
    (
        "clink-harness",
        &[
            "clink-basics",
            "clink-connectors",
            "clink-engine",
            "clink-bundle",
            "clink-bundle-mutants",
            "clink-replay",
            "clink-formal",
            "clink-verify",
            "clink-html",
            "clink-reconcile",
            "clink-store",
            "clink-audit",
            "clink-reference",
            "clink-upgrade",
            "clink-isolation",
            "clink-reference-audit",
        ],
    ),
];

/// The workspace's packages, as `cargo metadata` lists them.
fn packages() -> Vec<Json> {
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let doc: Json = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    doc["packages"].as_array().expect("a package list").clone()
}

/// Our crates and the crates of ours each depends on, by `cargo metadata`.
fn workspace_edges() -> BTreeMap<String, BTreeSet<String>> {
    let packages = packages();
    let ours: BTreeSet<String> = packages.iter().filter_map(|p| p["name"].as_str().map(str::to_string)).collect();
    packages
        .iter()
        .map(|p| {
            let name = p["name"].as_str().unwrap_or_default().to_string();
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["name"].as_str())
                .filter(|d| ours.contains(*d))
                .map(str::to_string)
                .collect();
            (name, deps)
        })
        .collect()
}

/// Every edge the table does not allow, and every crate it does not know.
fn violations(edges: &BTreeMap<String, BTreeSet<String>>, allowed: &[(&str, &[&str])]) -> Vec<String> {
    let table: BTreeMap<&str, BTreeSet<&str>> =
        allowed.iter().map(|(name, deps)| (*name, deps.iter().copied().collect())).collect();
    let mut problems = Vec::new();
    for (name, deps) in edges {
        let Some(may) = table.get(name.as_str()) else {
            problems.push(format!("{name} is not in the layering table: add it, with the crates it may use"));
            continue;
        };
        for dep in deps {
            if !may.contains(dep.as_str()) {
                problems.push(format!("{name} depends on {dep}, which ARCHITECTURE.md's rules forbid"));
            }
        }
    }
    problems
}

#[test]
fn no_crate_depends_on_a_crate_its_layer_forbids() {
    let edges = workspace_edges();
    assert!(edges.len() >= ALLOWED.len(), "cargo metadata listed only {edges:?}");
    let problems = violations(&edges, ALLOWED);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_forbidden_edge_is_caught() {
    // The real graph, plus the edge that would let the engine reach the verifier.
    let mut edges = workspace_edges();
    edges.entry("clink-engine".into()).or_default().insert("clink-verify".into());
    edges.entry("clink-reference".into()).or_default().insert("clink-basics".into());
    edges.entry("clink-reference-audit".into()).or_default().insert("clink-connectors".into());
    edges.entry("clink-isolation".into()).or_default().insert("clink-engine".into());
    edges.entry("clink-audit".into()).or_default().insert("clink-verify".into());
    let problems = violations(&edges, ALLOWED);
    assert!(problems.iter().any(|p| p.contains("clink-isolation depends on clink-engine")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("clink-reference-audit depends on clink-connectors")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("clink-engine depends on clink-verify")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("clink-reference depends on clink-basics")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("clink-audit depends on clink-verify")), "{problems:?}");
    edges.insert("clink-new".into(), BTreeSet::new());
    assert!(violations(&edges, ALLOWED).iter().any(|p| p.contains("clink-new is not in the layering table")));
}

/// Each crate of the workspace and its source directory.
fn crate_sources() -> BTreeMap<String, PathBuf> {
    packages()
        .iter()
        .map(|p| {
            let name = p["name"].as_str().expect("a package name").to_string();
            let manifest = PathBuf::from(p["manifest_path"].as_str().expect("a manifest path"));
            (name, manifest.parent().expect("a package directory").join("src"))
        })
        .collect()
}

/// The repository's root (the harness is one of its members).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

#[test]
fn no_crate_has_a_module_cycle_or_a_file_over_600_lines() {
    let sources = crate_sources();
    assert!(sources.len() >= ALLOWED.len(), "cargo metadata listed only {sources:?}");
    let mut problems = Vec::new();
    for (name, src) in &sources {
        if let Some(cycle) = modules::a_cycle(&modules::nested_edges(src)) {
            problems.push(format!("{name}: a module cycle: {}", cycle.join(" -> ")));
        }
        problems.extend(modules::long_files(src).into_iter().map(|long| format!("{name}: {long}")));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_planted_module_cycle_is_caught_in_any_crate() {
    // The isolation proof's old circle: probe_command runs the probe, and the
    // probe naming its command again would close it.
    let sources = crate_sources();
    let mut edges = modules::nested_edges(&sources["clink-isolation"]);
    assert!(edges["probe_command"].contains("probe"), "the reading finds real edges: {edges:?}");
    assert_eq!(modules::a_cycle(&edges), None);
    edges.entry("probe".into()).or_default().insert("probe_command".into());
    let cycle = modules::a_cycle(&edges).expect("the planted edge closes a cycle");
    assert!(cycle.contains(&"probe".to_string()) && cycle.contains(&"probe_command".to_string()), "{cycle:?}");
    // A level down: the coordinator runs the protocol; the protocol naming
    // the coordinator would be a cycle inside the engine's runtime.
    let mut edges = modules::nested_edges(&sources["clink-engine"]);
    assert!(edges["runtime::coordinator"].contains("runtime::protocol"), "nested edges are read: {edges:?}");
    edges.entry("runtime::protocol".into()).or_default().insert("runtime::coordinator".into());
    assert!(modules::a_cycle(&edges).is_some(), "a nested cycle is caught");
    // The same reading of every other crate: one reversed real edge is a cycle.
    for (name, src) in &sources {
        let mut edges = modules::nested_edges(src);
        let Some((from, to)) = edges.iter().find_map(|(f, ts)| ts.iter().next().map(|t| (f.clone(), t.clone()))) else {
            continue;
        };
        edges.entry(to).or_default().insert(from);
        assert!(modules::a_cycle(&edges).is_some(), "{name}: a reversed edge was not seen as a cycle");
    }
}

#[test]
fn paths_are_read_from_the_crate_root_at_every_level() {
    let module: Vec<String> = ["runtime", "coordinator", "walk"].map(String::from).to_vec();
    let code = "use super::super::protocol::{Step, X};\nuse super::answers;\nuse crate::{checkpoint::{Y, Z}, job};\n\
                fn f() { crate::value::Row::new(); a_super::x(); }";
    let paths: Vec<String> = modules::rooted_paths(code, &module).iter().map(|p| p.join("::")).collect();
    for want in [
        "runtime::protocol::Step",
        "runtime::protocol::X",
        "runtime::coordinator::answers",
        "checkpoint::Y",
        "checkpoint::Z",
        "job",
        "value::Row::new",
    ] {
        assert!(paths.contains(&want.to_string()), "{want} not read: {paths:?}");
    }
    assert!(!paths.iter().any(|p| p.contains("a_super") || p == "x"), "{paths:?}");
    // A directory's mod.rs is its module too: its super is its parent.
    let dir: Vec<String> = ["runtime", "coordinator"].map(String::from).to_vec();
    let paths = modules::rooted_paths("use super::protocol::Step;", &dir);
    assert_eq!(paths, [["runtime", "protocol", "Step"].map(String::from).to_vec()]);
}

#[test]
fn a_file_over_600_lines_outside_its_tests_is_caught() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let body = "fn f() {}\n".repeat(modules::MAX_LINES);
    std::fs::write(dir.path().join("at_the_bound.rs"), format!("{body}#[cfg(test)]\nmod tests {{\n{body}}}\n"))
        .expect("a source file");
    assert!(modules::long_files(dir.path()).is_empty(), "tests do not count");
    std::fs::write(dir.path().join("over.rs"), format!("{body}fn g() {{}}\n")).expect("a source file");
    let long = modules::long_files(dir.path());
    assert!(long.len() == 1 && long[0].contains("over.rs has 601 lines"), "{long:?}");
}

/// The text of one `## ` section of ARCHITECTURE.md.
fn architecture_section(title: &str) -> String {
    let text = std::fs::read_to_string(repository().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let start = text.find(&format!("\n## {title}\n")).unwrap_or_else(|| panic!("no section {title}"));
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    rest[..end].to_string()
}

#[test]
fn the_code_map_names_every_crate() {
    let map = architecture_section("Code map");
    let rules = architecture_section("Crates and the rules between them");
    let mut missing = Vec::new();
    let crates = crate_sources();
    assert!(crates.len() >= ALLOWED.len(), "cargo metadata listed only {crates:?}");
    for name in crates.keys() {
        // The harness's entry is its directory, the binary and the suites.
        let named = map.contains(&format!("{name}:")) || name == "clink-harness" && map.contains("\nharness/ ");
        if !named {
            missing.push(format!("{name} has no entry in the code map"));
        }
        if !rules.contains(name.as_str()) {
            missing.push(format!("{name} is not in the rules between crates"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_entry_points_name_every_binary_and_gate() {
    let entries = architecture_section("Entry points");
    let mut missing = Vec::new();
    let (mut binaries, mut gates_read) = (0, 0);
    for package in packages() {
        for target in package["targets"].as_array().into_iter().flatten() {
            let is_bin = target["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "bin"));
            let name = target["name"].as_str().unwrap_or_default();
            binaries += usize::from(is_bin);
            if is_bin && !entries.contains(&format!("`{name}")) {
                missing.push(format!("the binary {name}"));
            }
        }
    }
    let gates = std::fs::read_dir(repository().join("gates")).expect("the gates directory");
    for gate in gates {
        let path = gate.expect("a directory entry").path();
        let name = path.file_name().expect("a file name").to_string_lossy().into_owned();
        // lib.sh is sourced by the gates, services.d holds the services' files.
        if path.is_file() && !name.ends_with(".sh") {
            gates_read += 1;
            if !entries.contains(&format!("`gates/{name}")) {
                missing.push(format!("gates/{name}"));
            }
        }
    }
    // clink, clink-audit, clink-reference-audit, kafka-txn-probe; the gates.
    assert!(binaries >= 4 && gates_read >= 15, "read only {binaries} binaries and {gates_read} gates");
    assert!(missing.is_empty(), "the entry points of ARCHITECTURE.md leave out: {}", missing.join(", "));
}
