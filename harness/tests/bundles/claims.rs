//! Any single change to a field of the manifest that the evidence decides
//! never verifies as passed: the bundle is refused (a claim the evidence
//! contradicts) or a check fails. proptest picks the field and the change
//! over the good bundle; each case is verified in process (consistency
//! profile: every check that reads the manifest's job, selection, delivery,
//! contents, epochs and bounds).
//!
//! Fields the evidence cannot decide are not here: `/selection/named` (what
//! the collector was asked for), the collector's name, version and time,
//! bounds raised above what was collected, and the order of participants.

use std::path::Path;

use clink_verify::{verify, Conclusion, Profile, Selection, VerifyOptions};
use libtest_mimic::Failed;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value as Json;

/// One edit: a field (JSON pointer) and how it changes.
#[derive(Debug, Clone)]
enum Edit {
    Flip(&'static str),
    Bump(&'static str, i64),
    Text(&'static str, &'static str),
    Null(&'static str),
    DropFirst(&'static str),
}

fn edits() -> impl Strategy<Value = Edit> {
    let bools = prop::sample::select(vec![
        "/job/requires_commit_confirmation",
        "/contents/state",
        "/contents/captures",
        "/contents/traces",
        "/contents/job_manifest",
        "/contents/job_graph",
    ])
    .prop_map(Edit::Flip);
    let numbers = (
        prop::sample::select(vec![
            "/selection/checkpoint",
            "/selection/engine_choice",
            "/selection/generation",
            "/selection/restored/restored_from",
            "/selection/restored/next",
            "/epochs/0/subtask",
            "/epochs/0/epoch",
        ]),
        prop::sample::select(vec![-1i64, 1, 7]),
    )
        .prop_map(|(f, by)| Edit::Bump(f, by));
    let texts = (
        prop::sample::select(vec![
            "/job/name",
            "/selection/rule",
            "/selection/participant_state",
            "/delivery/0/operator",
            "/delivery/0/uid",
            "/delivery/0/type",
            "/delivery/0/family",
            "/delivery/0/guarantee",
            "/epochs/0/role",
            "/epochs/0/operator",
        ]),
        prop::sample::select(vec!["sink", "3", "newest_confirmed", "at_least_once", "x"]),
    )
        .prop_map(|(f, v)| Edit::Text(f, v));
    let nulls = prop::sample::select(vec!["/job/name", "/job/requires_commit_confirmation", "/selection/restored"])
        .prop_map(Edit::Null);
    let drops = prop::sample::select(vec!["/selection/participants", "/delivery", "/epochs"]).prop_map(Edit::DropFirst);
    prop_oneof![bools, numbers, texts, nulls, drops]
}

/// Applies the edit; `false` when it changes nothing (the same value).
fn apply(doc: &mut Json, edit: &Edit) -> bool {
    let (pointer, new) = match edit {
        Edit::Flip(p) => (*p, doc.pointer(p).and_then(Json::as_bool).map(|b| Json::Bool(!b))),
        Edit::Bump(p, by) => (*p, doc.pointer(p).and_then(Json::as_i64).map(|n| Json::from((n + by).max(0)))),
        Edit::Text(p, v) => (*p, Some(Json::from(*v))),
        Edit::Null(p) => (*p, Some(Json::Null)),
        Edit::DropFirst(p) => {
            let Some(list) = doc.pointer_mut(p).and_then(Json::as_array_mut) else { return false };
            if list.is_empty() {
                return false;
            }
            list.remove(0);
            return true;
        }
    };
    let Some(new) = new else { return false };
    match doc.pointer_mut(pointer) {
        Some(slot) if *slot != new => {
            *slot = new;
            true
        }
        _ => false,
    }
}

/// Verifies the bundle at `dir` with the edited manifest: a failure when it
/// passed, or when the unedited one (`edit` None) did not.
fn verdict(dir: &Path, original: &Json, edit: Option<&Edit>) -> Result<(), TestCaseError> {
    let mut doc = original.clone();
    if let Some(edit) = edit {
        if !apply(&mut doc, edit) {
            return Ok(());
        }
    }
    std::fs::write(dir.join("manifest.json"), serde_json::to_vec_pretty(&doc).unwrap())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let options =
        VerifyOptions { profile: Profile::Consistency, selection: Selection::default(), expected: None, formal: None };
    // The reader refusing the manifest is a refusal too.
    let passed = clink_bundle::read_bundle(dir)
        .ok()
        .and_then(|bundle| verify(&bundle, &options).ok())
        .is_some_and(|report| report.result == Conclusion::Passed);
    match (edit, passed) {
        (Some(edit), true) => Err(TestCaseError::fail(format!("{edit:?} verified as passed"))),
        (None, false) => Err(TestCaseError::fail("the unedited bundle did not pass")),
        _ => Ok(()),
    }
}

pub fn any_single_field_edit_never_passes(good: &Path) -> Result<(), Failed> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = scratch.path().join("bundle");
    super::common::copy_dir(good, &dir);
    let original: Json = serde_json::from_slice(&std::fs::read(dir.join("manifest.json"))?)?;
    // The property is about the edits: the unedited bundle passes.
    verdict(&dir, &original, None).map_err(|e| e.to_string())?;
    let mut runner = TestRunner::new(Config { cases: 256, failure_persistence: None, ..Config::default() });
    runner.run(&edits(), |edit| verdict(&dir, &original, Some(&edit))).map_err(|e| e.to_string().into())
}
