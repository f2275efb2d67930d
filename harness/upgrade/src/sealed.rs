//! What `check` reads of everything `record` sealed, so that nothing sealed
//! goes unread and nothing it reads disagrees with what the check runs:
//!
//! - the recording's own checks (`record_checks`): every one of
//!   [`RECORD_TABLE`] present and passed; evidence from a baseline that was
//!   already wrong at the cut establishes nothing about a candidate;
//! - `input/`: exactly the segments the definition generates, byte for
//!   byte (compared through the hashes the index vouches for);
//! - `reference.json`: exactly what the reference computes for the
//!   definition, and the check uses that computation;
//! - `output/`: the baseline's committed rows, equal to the reference at the cut;
//! - the savepoint: its last watermark is the input's before the cut; its
//!   job, checkpoint and operators are the dataset's as the tools build
//!   lists it; its job is the job both builds run;
//! - the builds: the baseline and the tools build are the ones that recorded it.
//!
//! It never runs anything and never changes the evidence.

use std::path::Path;

use clink_basics::digest::sha256_hex;
use serde_json::Value as Json;

use crate::compare::{self, account, LogicalState, Row, StateRow};
use crate::definition::Definition;
use crate::evidence::{FileIdentity, Index};
use crate::report::RECORD_TABLE;
use crate::steps;

/// What the check takes from evidence found fit.
#[derive(Debug, Clone)]
pub struct Sealed {
    /// The rows and state the reference expects at END.
    pub at_end: (Vec<Row>, Vec<StateRow>),
    /// The rows it expects at the cut.
    pub at_cut_rows: Vec<Row>,
    /// The baseline's committed rows (`output/`).
    pub committed: Vec<Row>,
}

/// Every check of the recording is present once and passed; otherwise the
/// reason names the check.
pub fn recording(index: &Index) -> Result<(), String> {
    let field = |c: &Json, f: &str| c.get(f).and_then(Json::as_str).map(str::to_string);
    for c in &index.record_checks {
        let name = field(c, "name").ok_or_else(|| format!("a recording check without a name: {c}"))?;
        if !RECORD_TABLE.iter().any(|(n, _)| *n == name) {
            return Err(format!("the recording lists a check this version does not know: {name}"));
        }
    }
    for (name, _) in RECORD_TABLE {
        let found: Vec<&Json> =
            index.record_checks.iter().filter(|c| field(c, "name").as_deref() == Some(name)).collect();
        match found[..] {
            [one] if field(one, "status").as_deref() == Some("passed") => {}
            [one] => {
                return Err(format!(
                    "the recording's own check {name} is {} ({})",
                    field(one, "status").unwrap_or_else(|| "without a status".into()),
                    field(one, "reason").unwrap_or_default()
                ))
            }
            [] => return Err(format!("the recording's own check {name} is missing")),
            _ => return Err(format!("the recording lists its check {name} {} times", found.len())),
        }
    }
    Ok(())
}

/// The SHA-256 the index records for a file of the set.
fn recorded<'a>(index: &'a Index, name: &str) -> Result<&'a str, String> {
    index.files.get(name).map(|e| e.sha256.as_str()).ok_or_else(|| format!("the set holds no {name}"))
}

/// `input/` holds exactly the definition's segments.
fn input(index: &Index, def: &Definition) -> Result<(), String> {
    let generated = def.input();
    for (name, text) in &generated {
        let path = format!("input/{name}");
        if recorded(index, &path)? != sha256_hex(text.as_bytes()) {
            return Err(format!("{path} is not the segment the test definition generates"));
        }
    }
    let extra = index
        .files
        .keys()
        .filter_map(|k| k.strip_prefix("input/"))
        .find(|k| !generated.iter().any(|(name, _)| name == k));
    match extra {
        Some(k) => Err(format!("input/{k} is not a segment the test definition generates")),
        None => Ok(()),
    }
}

/// `reference.json` is what the reference computes for the definition: the
/// computation, parsed.
fn reference(index: &Index, def: &Definition) -> Result<Json, String> {
    let expectation = clink_reference::upgrade::expect(&def.semantics, &def.input())
        .map_err(|e| format!("the reference cannot compute the definition's expectation: {e}"))?;
    let computed = expectation.to_json();
    let bytes = serde_json::to_vec_pretty(&computed).map_err(|e| e.to_string())?;
    if recorded(index, "reference.json")? != sha256_hex(&bytes) {
        return Err("reference.json is not what the independent reference computes for the test definition".into());
    }
    Ok(computed)
}

/// Everything sealed that the definition fixes, before any build runs.
pub fn contents(dir: &Path, index: &Index, def: &Definition) -> Result<Sealed, String> {
    input(index, def)?;
    let watermark = def.last_watermark_at_cut();
    if index.savepoint.last_watermark != watermark {
        return Err(format!(
            "the savepoint's last watermark {:?} is not the input's before the cut ({watermark:?})",
            index.savepoint.last_watermark
        ));
    }
    let reference = reference(index, def)?;
    let at_end = compare::reference_part(&reference, "at_end")?;
    let (at_cut_rows, _) = compare::reference_part(&reference, "at_cut")?;
    let committed = compare::committed_rows(&dir.join("output"), def)?;
    let diff = compare::diff_rows(&at_cut_rows, &committed);
    if !diff.is_equal() {
        return Err(format!(
            "output/ (the baseline's committed rows) against the reference at the cut: {}",
            account(&diff)
        ));
    }
    Ok(Sealed { at_end, at_cut_rows, committed })
}

/// The savepoint the index describes is the dataset the tools build listed.
pub fn listing(index: &Index, listed_job: Option<&str>, state: &LogicalState) -> Result<(), String> {
    let sp = &index.savepoint;
    if listed_job != Some(sp.job.as_str()) {
        return Err(format!("the savepoint is recorded as job {}, the dataset is of job {listed_job:?}", sp.job));
    }
    if state.checkpoint != sp.checkpoint {
        return Err(format!(
            "the savepoint is recorded as checkpoint {}, the dataset holds {}",
            sp.checkpoint, state.checkpoint
        ));
    }
    let mut sealed: Vec<(String, String, u64, bool)> =
        sp.operators.iter().map(|o| (o.uid.clone(), o.id.clone(), o.subtasks, o.holds_state)).collect();
    let mut listed: Vec<(String, String, u64, bool)> =
        state.operators.iter().map(|o| (o.uid.clone(), o.id.clone(), o.parallelism, o.holds_state)).collect();
    sealed.sort();
    listed.sort();
    if sealed != listed {
        let only = |a: &[(String, String, u64, bool)], b: &[(String, String, u64, bool)]| -> Vec<String> {
            a.iter()
                .filter(|x| !b.contains(x))
                .map(|(uid, id, n, s)| format!("{uid:?} (id {id}, {n} subtasks, holds state {s})"))
                .collect()
        };
        return Err(format!(
            "the savepoint's operators are not the dataset's: recorded only {:?}; listed only {:?}",
            only(&sealed, &listed),
            only(&listed, &sealed)
        ));
    }
    Ok(())
}

/// `builds.identity`: the baseline and the tools build recorded the
/// evidence, and both builds run the savepoint's job. The reason either way.
pub fn identity(index: &Index, ids: &[FileIdentity; 5], jobs: [(&str, &Path); 2]) -> Result<String, String> {
    let [base_clink, base_job, _, _, tools] = ids;
    let mut wrong = Vec::new();
    if base_clink.sha256 != index.baseline.clink.sha256 || base_job.sha256 != index.baseline.job.sha256 {
        wrong.push(format!(
            "the baseline given (clink {}, job {}) is not the build that recorded the evidence (clink {}, job {})",
            base_clink.sha256, base_job.sha256, index.baseline.clink.sha256, index.baseline.job.sha256
        ));
    }
    if tools.sha256 != index.tools.clink.sha256 {
        wrong.push(format!(
            "the tools build given (clink {}) is not the one that recorded the evidence (clink {})",
            tools.sha256, index.tools.clink.sha256
        ));
    }
    for (flag, job) in jobs {
        match steps::job_id(job) {
            Ok(id) if id.to_string() == index.savepoint.job => {}
            Ok(id) => wrong
                .push(format!("{flag} runs job {id}; the evidence holds a savepoint of job {}", index.savepoint.job)),
            Err(e) => wrong.push(e),
        }
    }
    if wrong.is_empty() {
        Ok("every file of both builds is hashed; the baseline and the tools build are the ones that recorded the evidence, and both builds run its job"
            .into())
    } else {
        Err(wrong.join("; "))
    }
}

/// The operators holding state in the savepoint that `job` runs at another
/// parallelism: an upgrade that also rescales, which the check never
/// compares (the two changes would be judged as one). Read from the job
/// file as the builds read it; a job that does not read is the identity
/// check's to report.
pub fn rescaled(index: &Index, job: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(job).map_err(|e| format!("{}: {e}", job.display()))?;
    let doc: Json = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", job.display()))?;
    let ops =
        doc.get("operators").and_then(Json::as_array).ok_or_else(|| format!("{}: no operators", job.display()))?;
    Ok(rescaled_in(&index.savepoint.operators, ops))
}

fn rescaled_in(held: &[crate::evidence::SavepointOperator], ops: &[Json]) -> Vec<String> {
    let mut found = Vec::new();
    for op in held.iter().filter(|o| o.holds_state) {
        let now = ops.iter().find(|j| j.get("id").and_then(Json::as_str) == Some(op.id.as_str()));
        let parallelism = now.and_then(|j| j.get("parallelism")).and_then(Json::as_u64);
        if let Some(p) = parallelism.filter(|p| *p != op.subtasks) {
            found.push(format!("operator {} ({:?}) at parallelism {p}, held at {}", op.id, op.uid, op.subtasks));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn index(checks: Vec<Json>) -> Index {
        let id = FileIdentity { path: "x".into(), sha256: "0".repeat(64), size: 0 };
        let identity = crate::evidence::Identity { clink: id.clone(), job: id, build: None };
        Index {
            format: crate::evidence::FORMAT.into(),
            version: 1,
            test_sha256: String::new(),
            baseline: identity.clone(),
            tools: identity,
            savepoint: crate::evidence::Savepoint {
                job: "1".into(),
                checkpoint: 1,
                dataset_digest: String::new(),
                last_watermark: None,
                operators: vec![],
            },
            record_checks: checks,
            files: Default::default(),
        }
    }

    fn all_passed() -> Vec<Json> {
        RECORD_TABLE.iter().map(|(n, _)| json!({"name": n, "status": "passed", "reason": "ok"})).collect()
    }

    #[test]
    fn only_a_recording_whose_every_check_passed_is_fit() {
        assert!(recording(&index(all_passed())).is_ok());
        let mut failed = all_passed();
        failed[4]["status"] = json!("failed");
        assert!(recording(&index(failed)).unwrap_err().contains("record.state is failed"));
        assert!(recording(&index(vec![])).unwrap_err().contains("missing"), "no checks is not all passed");
        let mut twice = all_passed();
        twice.push(twice[4].clone());
        assert!(recording(&index(twice)).unwrap_err().contains("2 times"));
        let mut unknown = all_passed();
        unknown.push(json!({"name": "record.other", "status": "passed"}));
        assert!(recording(&index(unknown)).unwrap_err().contains("record.other"));
        let mut no_status = all_passed();
        no_status[0].as_object_mut().unwrap().remove("status");
        assert!(recording(&index(no_status)).is_err());
    }

    #[test]
    fn the_listing_must_be_the_savepoint_recorded() {
        let mut i = index(all_passed());
        i.savepoint.operators = vec![crate::evidence::SavepointOperator {
            uid: "windows".into(),
            id: "3".into(),
            subtasks: 2,
            holds_state: true,
        }];
        let state = LogicalState {
            checkpoint: 1,
            operators: vec![compare::Operator {
                uid: "windows".into(),
                id: "3".into(),
                parallelism: 2,
                holds_state: true,
            }],
            ..LogicalState::default()
        };
        assert!(listing(&i, Some("1"), &state).is_ok());
        assert!(listing(&i, Some("2"), &state).unwrap_err().contains("job"));
        assert!(listing(&i, None, &state).is_err());
        let mut other = state.clone();
        other.checkpoint = 2;
        assert!(listing(&i, Some("1"), &other).unwrap_err().contains("checkpoint"));
        let mut other = state.clone();
        other.operators[0].parallelism = 3;
        assert!(listing(&i, Some("1"), &other).unwrap_err().contains("operators"));
    }

    #[test]
    fn a_candidate_job_that_rescales_a_stateful_operator_is_named() {
        let held = |id: &str, subtasks, holds_state| crate::evidence::SavepointOperator {
            uid: format!("u{id}"),
            id: id.into(),
            subtasks,
            holds_state,
        };
        let savepoint = [held("3", 2, true), held("2", 1, false)];
        let job = |p3: u64, p2: u64| vec![json!({"id": "3", "parallelism": p3}), json!({"id": "2", "parallelism": p2})];
        assert!(rescaled_in(&savepoint, &job(2, 1)).is_empty());
        // A stateless operator may change; a stateful one may not.
        assert!(rescaled_in(&savepoint, &job(2, 4)).is_empty());
        let found = rescaled_in(&savepoint, &job(3, 1));
        assert_eq!(found, vec!["operator 3 (\"u3\") at parallelism 3, held at 2".to_string()]);
    }
}
