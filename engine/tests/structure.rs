//! The engine's internal structure, read from its source with the
//! structure tests' one reader (harness/tests/support/modules.rs): the
//! top-level modules of `engine/src` and the `crate::` paths each names
//! outside its tests must not contain the edges the rules below forbid,
//! nor a cycle. The crate-level rules, and the cycle and length rules for
//! every crate of the workspace, are harness/tests/layers.rs; these are the
//! rules inside the engine.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "../../harness/tests/support/modules.rs"]
mod modules;

use modules::{a_cycle, code_only, crate_paths, non_test};

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

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn module_edges() -> BTreeMap<String, BTreeSet<String>> {
    modules::module_edges(&src())
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
