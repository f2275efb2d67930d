//! The engine's internal structure, read from its source: the top-level
//! modules of `engine/src` and the `crate::` paths each one names outside
//! its tests form a graph that must have no cycle, must not contain the
//! edges the rules below forbid, and no source file may be over 600 lines
//! outside its `#[cfg(test)]` module. The crate-level rules are
//! harness/tests/layers.rs; these are the rules inside the engine.
//!
//! The reading is deliberately plain (no parser): comments and string
//! literals are blanked, the text after a top-level `#[cfg(test)]` is
//! dropped, and every remaining `crate::NAME` counts as an edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges the engine's layering forbids, and why.
const FORBIDDEN: &[(&str, &str, &str)] = &[
    // The checkpoint files know no job graph: the restore mapping, which
    // compares a checkpoint with a job, lives above both (state_map).
    ("checkpoint", "job", "the restore mapping belongs in state_map, above the job graph"),
    ("checkpoint", "operators", "checkpoint files know no operator"),
    ("checkpoint", "runtime", "checkpoint files never decide when to checkpoint"),
    ("checkpoint", "state_map", "state_map sits above checkpoint"),
    // The bottom of the engine: formats and values know nothing above them.
    ("codec", "value", "the codec is under every format"),
    ("value", "operators", "a row knows no operator"),
    ("job", "runtime", "the job graph is planned before anything runs"),
    ("operators", "runtime", "operators run under the runtime and replay alike"),
];

const MAX_LINES: usize = 600;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("engine/src is readable").map(|e| e.expect("a directory entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text before the first `#[cfg(test)]` module: the tests of a module
/// sit at its end, so what precedes them is the module itself. (A
/// `#[cfg(test)]` on a single item elsewhere counts as code.)
fn non_test(text: &str) -> &str {
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]") {
        let at = from + at;
        let after = text[at + "#[cfg(test)]".len()..].trim_start();
        if after.starts_with("mod ") || after.starts_with("pub mod ") || after.starts_with("pub(crate) mod ") {
            return &text[..at];
        }
        from = at + 1;
    }
    text
}

/// The text with comments, string and character literals blanked out, so
/// that a `crate::` in a doc link or a message is not read as an import.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            i = end;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'r' && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#")) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let start = i + 2 + hashes;
            i = text[start..].find(&close).map_or(b.len(), |e| start + e + close.len());
            out.push_str("\"\"");
        } else {
            let ch = text[i..].chars().next().expect("inside the text");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The top-level module a file of engine/src belongs to.
fn module_of(path: &Path) -> String {
    let rel = path.strip_prefix(src()).expect("under engine/src");
    let first = rel.components().next().expect("a path").as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every `crate::NAME` the code names.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // some_crate::...
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // use crate::{a::X, b};
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for part in inner.split(',') {
                let name: String = part.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    names.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// The module graph: each top-level module and the modules it names.
fn module_edges() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).filter(|m| m != "lib").collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(file);
        if from == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a source file");
        let code = code_only(non_test(&text));
        let entry = edges.entry(from.clone()).or_default();
        for to in crate_paths(&code) {
            if to != from && modules.contains(&to) {
                entry.insert(to);
            }
        }
    }
    edges
}

/// One cycle of the graph, if it has any, as the modules along it.
fn a_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let start = path.iter().position(|p| p == next).expect("on the path");
                    let mut cycle = path[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, edges, state, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if !state.contains_key(node.as_str()) {
            if let Some(c) = visit(node, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// Every forbidden edge the graph has, and its cycle if it has one.
fn violations(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for (from, to, why) in FORBIDDEN {
        if edges.get(*from).is_some_and(|deps| deps.contains(*to)) {
            problems.push(format!("{from} names crate::{to}: {why}"));
        }
    }
    if let Some(cycle) = a_cycle(edges) {
        problems.push(format!("a module cycle: {}", cycle.join(" -> ")));
    }
    problems
}

#[test]
fn the_engine_modules_have_no_cycle_and_no_forbidden_edge() {
    let edges = module_edges();
    assert!(edges.len() >= 15, "too few modules read: {edges:?}");
    assert!(edges["runtime"].contains("checkpoint"), "the reading finds real edges: {edges:?}");
    let problems = violations(&edges);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_planted_checkpoint_to_job_edge_is_caught() {
    let mut edges = module_edges();
    edges.entry("checkpoint".into()).or_default().insert("job".into());
    let problems = violations(&edges);
    assert!(problems.iter().any(|p| p.starts_with("checkpoint names crate::job")), "{problems:?}");
    // job names checkpoint (its plan reads checkpoint types), so the planted
    // edge is also a cycle.
    assert!(problems.iter().any(|p| p.starts_with("a module cycle")), "{problems:?}");
}

#[test]
fn the_reader_sees_imports_and_ignores_comments_and_strings() {
    let text = "//! see [`crate::job`]\nuse crate::{checkpoint::X, timers};\nlet s = \"crate::runtime\";\n\
                /* crate::inspect */ let t = r#\"crate::gen\"#; fn f() { crate::value::Row::new() }\n\
                #[cfg(test)]\nmod tests { use crate::operators; }\n";
    let code = code_only(non_test(text));
    let names: Vec<String> = crate_paths(&code).into_iter().collect();
    assert_eq!(names, ["checkpoint", "timers", "value"]);
}

#[test]
fn no_engine_source_file_is_over_600_lines_outside_its_tests() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    // A bound over no files holds vacuously: the reading must have found the engine.
    assert!(files.len() >= 20, "too few engine source files read: {files:?}");
    assert!(files.iter().any(|f| f.ends_with("runtime/coordinator/mod.rs")), "{files:?}");
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).expect("a source file");
            let lines = non_test(&text).lines().count();
            (lines > MAX_LINES).then(|| format!("{} has {lines} lines outside its tests", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "split along what each part does:\n{}", long.join("\n"));
}
