//! How the structure tests read a crate's source, shared by
//! engine/tests/structure.rs (the engine's own layering) and
//! harness/tests/layers.rs (every crate of the workspace): its top-level
//! modules and the `crate::` paths each names outside its tests form a
//! graph that must have no cycle, and no source file may be over 600 lines
//! outside its tests.
//!
//! The reading is deliberately plain (no parser): comments and string
//! literals are blanked, the text after a top-level `#[cfg(test)]` module
//! is dropped, a file that is a test module itself (`tests.rs`, or under a
//! `tests/` directory of the source) is not read, and every remaining
//! `crate::NAME` counts as an edge. [`nested_edges`] reads every level: a
//! `crate::a::b` or `super::b` path is an edge between the two sibling
//! modules under the modules both sit in, so a cycle between
//! `runtime::protocol` and `runtime::coordinator` is one too.

#![allow(dead_code)] // each including test uses its own part

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub const MAX_LINES: usize = 600;

/// The `.rs` files under `dir`, sorted, test modules' files left out.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect(dir, &mut out);
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if path.is_dir() {
            if name != "tests" {
                collect(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The text before the first `#[cfg(test)]` module: the tests of a module
/// sit at its end, so what precedes them is the module itself. (A
/// `#[cfg(test)]` on a single item elsewhere counts as code.)
pub fn non_test(text: &str) -> &str {
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
pub fn code_only(text: &str) -> String {
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

/// Every `crate::NAME` the code names.
pub fn crate_paths(code: &str) -> BTreeSet<String> {
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

/// The top-level module a file under `src` belongs to (`lib`, `main` and
/// `bin` are the crate's roots, not modules).
pub fn module_of(src: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(src).expect("under the source directory");
    let first = rel.components().next().expect("a path").as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn is_root(module: &str) -> bool {
    matches!(module, "lib" | "main" | "bin")
}

/// The module graph of the crate whose source is `src`: each top-level
/// module and the top-level modules it names.
pub fn module_edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(src, f)).filter(|m| !is_root(m)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(src, file);
        if is_root(&from) {
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

/// The files under `src` over [`MAX_LINES`] lines outside their tests, each
/// with its count.
pub fn long_files(src: &Path) -> Vec<String> {
    rust_files(src)
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).expect("a source file");
            let lines = non_test(&text).lines().count();
            (lines > MAX_LINES).then(|| format!("{} has {lines} lines outside its tests", f.display()))
        })
        .collect()
}

/// One cycle of the graph, if it has any, as the modules along it.
pub fn a_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
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

/// A file's module path under `src` (`runtime/protocol/mod.rs` is
/// `["runtime", "protocol"]`; the crate's root files are `[]`); `None` for
/// the files of other binaries (`src/bin/`).
pub fn module_path(src: &Path, path: &Path) -> Option<Vec<String>> {
    let rel = path.strip_prefix(src).expect("under the source directory").with_extension("");
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    if parts.last().is_some_and(|p| p == "mod") || matches!(parts.as_slice(), [only] if only == "lib" || only == "main")
    {
        parts.pop();
    }
    Some(parts)
}

/// Every path the code names from the crate's root: `crate::a::b::C`,
/// each leaf of a group (`crate::{a::X, b::{c, d}}`), and `super::x`
/// resolved from `module` (each `super` is one level up, in a `mod.rs` as
/// in any other file).
pub fn rooted_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            paths.extend(use_tree(&code[at + "crate::".len()..]));
        }
    }
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // the second `super` of `super::super::`, or some_super::
        }
        let mut base = module.to_vec();
        let mut rest = &code[at..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        paths.extend(use_tree(rest).into_iter().map(|p| base.iter().cloned().chain(p).collect()));
    }
    paths.retain(|p| !p.is_empty());
    paths
}

/// The paths a use tree at the start of `text` names: `a::b::C`, or
/// `a::{b, c::{d, e}}` as each of its leaves.
fn use_tree(text: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = text.trim_start();
    loop {
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        prefix.push(name);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => return vec![prefix],
        }
    }
    let Some(group) = rest.strip_prefix('{') else { return vec![prefix] };
    let mut leaves = Vec::new();
    let (mut depth, mut from) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                leaves.push(&group[from..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                leaves.push(&group[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    leaves
        .into_iter()
        .flat_map(use_tree)
        .filter(|p| !p.is_empty())
        .map(|p| prefix.iter().cloned().chain(p).collect())
        .collect()
}

/// The module graph at every level: an edge from module `a` to its sibling
/// `b` (both named by their whole path) when anything inside `a` names
/// anything inside `b`. A module naming its own ancestors or descendants is
/// no edge (its parent declares it; it declares its children).
pub fn nested_edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(PathBuf, Vec<String>)> =
        rust_files(src).into_iter().filter_map(|f| module_path(src, &f).map(|m| (f, m))).collect();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(_, m)| m.clone()).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, module) in &files {
        let text = std::fs::read_to_string(file).expect("a source file");
        let code = code_only(non_test(&text));
        for path in rooted_paths(&code, module) {
            let Some(target) = (1..=path.len()).rev().map(|k| &path[..k]).find(|p| modules.contains(*p)) else {
                continue;
            };
            let common = module.iter().zip(target).take_while(|(a, b)| a == b).count();
            if common == module.len() || common == target.len() {
                continue;
            }
            edges.entry(module[..=common].join("::")).or_default().insert(target[..=common].join("::"));
        }
    }
    edges
}
