//! One trial per bundle under `fixtures/bundles/`: a real bundle (a
//! directory with a manifest.json) or a tampered variant of one (a directory
//! with a variant.json recipe applied to a copy of its base). Each is verified
//! by `clink incident-verify`; its exit code must be the one the recipe
//! expects, and its report is compared with an insta snapshot.

#[path = "bundles/claims.rs"]
mod claims;
mod common;
#[path = "bundles/forge.rs"]
mod forge;

use common::copy_dir;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use clink_basics::digest::sha256_hex;
use clink_engine::capture::format::{encode_capture, read_capture};
use clink_engine::checkpoint::{CheckpointLayout, FileStateBackend};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value as Json;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bundles")
}

fn manifest(dir: &Path) -> Json {
    serde_json::from_slice(&fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

fn save_manifest(dir: &Path, m: &Json) {
    fs::write(dir.join("manifest.json"), serde_json::to_vec_pretty(m).unwrap()).unwrap();
}

/// The first artifact with a role (and, for captures, an epoch role); the
/// largest instead when the action says so.
fn pick_for(m: &Json, action: &Json) -> String {
    let role = action["role"].as_str().unwrap_or_else(|| panic!("{action}: no role"));
    if role == "selected_marker" {
        return selected_marker(m);
    }
    let capture_role = action["capture_role"].as_str();
    if action["largest"] != true {
        return pick(m, role, capture_role);
    }
    m["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["role"] == role)
        .filter(|a| {
            capture_role.is_none_or(|r| {
                m["epochs"].as_array().unwrap().iter().any(|e| e["path"] == a["path"] && e["role"] == r)
            })
        })
        .max_by_key(|a| a["size"].as_u64())
        .map(|a| a["path"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no {role} artifact"))
}

/// The first artifact with a role (and, for captures, an epoch role).
fn pick(m: &Json, role: &str, capture_role: Option<&str>) -> String {
    let operator_captures: Vec<String> = m["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| capture_role.is_none_or(|r| e["role"] == r))
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    m["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["role"] == role)
        .map(|a| a["path"].as_str().unwrap().to_string())
        .find(|p| role != "capture" || operator_captures.contains(p))
        .unwrap_or_else(|| panic!("no {role} artifact"))
}

/// Updates the manifest's size and SHA-256 of an artifact to what is on disk.
fn revouch(dir: &Path, path: &str) {
    let bytes = fs::read(dir.join(path)).unwrap();
    let mut m = manifest(dir);
    for a in m["artifacts"].as_array_mut().unwrap() {
        if a["path"] == path {
            a["size"] = bytes.len().into();
            a["sha256"] = sha256_hex(&bytes).into();
        }
    }
    save_manifest(dir, &m);
}

fn apply(dir: &Path, action: &Json) {
    let m = manifest(dir);
    let capture_role = action["capture_role"].as_str();
    match action["op"].as_str().unwrap() {
        "flip_byte" => {
            let path = dir.join(pick(&m, action["role"].as_str().unwrap(), capture_role));
            let mut bytes = fs::read(&path).unwrap();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x40;
            fs::write(path, bytes).unwrap();
        }
        "remove" => fs::remove_file(dir.join(pick(&m, action["role"].as_str().unwrap(), capture_role))).unwrap(),
        "add_unlisted" => fs::write(dir.join(action["path"].as_str().unwrap()), b"an unlisted note\n").unwrap(),
        "set" => {
            let mut m = m;
            *m.pointer_mut(action["pointer"].as_str().unwrap()).unwrap() = action["value"].clone();
            save_manifest(dir, &m);
        }
        "link" => {
            let target = pick(&m, action["role"].as_str().unwrap(), capture_role);
            let parent = dir.join(&target).parent().unwrap().to_path_buf();
            let stash = dir.join("stash");
            copy_dir(&parent, &stash);
            fs::remove_dir_all(&parent).unwrap();
            std::os::unix::fs::symlink(&stash, &parent).unwrap();
        }
        "truncate" => {
            let rel = pick_for(&m, action);
            let bytes = fs::read(dir.join(&rel)).unwrap();
            let keep = action["keep_percent"].as_u64().unwrap_or(66) as usize;
            fs::write(dir.join(&rel), &bytes[..bytes.len() * keep / 100]).unwrap();
            if action["revouch"] == true {
                revouch(dir, &rel);
            }
        }
        "wrong_restore_choice" => {
            let mut m = m;
            let chosen = m["selection"]["engine_choice"].as_u64().unwrap();
            m["selection"]["engine_choice"] = (chosen - 1).into();
            save_manifest(dir, &m);
        }
        "marker_job" => {
            let rel = selected_marker(&m);
            let mut marker: Json = serde_json::from_slice(&fs::read(dir.join(&rel)).unwrap()).unwrap();
            marker["job"] = action["job"].clone();
            fs::write(dir.join(&rel), serde_json::to_vec_pretty(&marker).unwrap()).unwrap();
            revouch(dir, &rel);
        }
        "edit_json" => {
            // Sets one field of a JSON artifact (picked by role, or named by
            // path), optionally re-vouching for it in the manifest.
            let rel = match action["path"].as_str() {
                Some(p) => placed(&m, p),
                None => pick_for(&m, action),
            };
            let mut doc: Json = serde_json::from_slice(&fs::read(dir.join(&rel)).unwrap()).unwrap();
            let pointer = action["pointer"].as_str().unwrap();
            match action.get("value") {
                Some(value) => {
                    *doc.pointer_mut(pointer).unwrap_or_else(|| panic!("{rel} has no {pointer}")) = value.clone()
                }
                None => {
                    let (parent, key) = pointer.rsplit_once('/').unwrap();
                    doc.pointer_mut(parent).and_then(|p| p.as_object_mut()).unwrap().remove(key);
                }
            }
            fs::write(dir.join(&rel), serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
            if action["revouch"] == true {
                revouch(dir, &rel);
            }
        }
        "swap" => {
            // Exchanges two files' contents (each stays where the manifest
            // lists it), re-vouching for both: every hash holds, the names do not.
            let (a, b) = (placed(&m, action["a"].as_str().unwrap()), placed(&m, action["b"].as_str().unwrap()));
            let (a, b) = (a.as_str(), b.as_str());
            let (bytes_a, bytes_b) = (fs::read(dir.join(a)).unwrap(), fs::read(dir.join(b)).unwrap());
            fs::write(dir.join(a), bytes_b).unwrap();
            fs::write(dir.join(b), bytes_a).unwrap();
            revouch(dir, a);
            revouch(dir, b);
        }
        "selected_marker" => {
            // Edits the selected COMPLETED marker and re-vouches for it.
            let rel = selected_marker(&m);
            let mut marker: Json = serde_json::from_slice(&fs::read(dir.join(&rel)).unwrap()).unwrap();
            *marker.pointer_mut(action["pointer"].as_str().unwrap()).unwrap() = action["value"].clone();
            fs::write(dir.join(&rel), serde_json::to_vec_pretty(&marker).unwrap()).unwrap();
            revouch(dir, &rel);
        }
        "remove_trace" => {
            // Removes the trace files of the first or last process (by its
            // start time), of the roles named, from disk and manifest.
            for rel in trace_files(&m, action["process"].as_str().unwrap(), action["roles"].as_array().unwrap()) {
                fs::remove_file(dir.join(&rel)).unwrap();
                unlist(dir, &rel);
                // As the collector says of a traced run's file the trace directory lost.
                if action["note"] == true {
                    let mut m = manifest(dir);
                    let note = serde_json::json!({"what": rel, "why": "the trace directory does not hold it"});
                    m["absent"].as_array_mut().unwrap().push(note);
                    save_manifest(dir, &m);
                }
            }
        }
        "trace_lines" => {
            // Sets fields on every line of every trace file, re-vouched for.
            for rel in trace_files(&m, "all", &[]) {
                let text = fs::read_to_string(dir.join(&rel)).unwrap();
                let mut out = String::new();
                for line in text.lines() {
                    let mut v: Json = serde_json::from_str(line).unwrap();
                    for (k, value) in action["set"].as_object().unwrap() {
                        v[k] = value.clone();
                    }
                    out.push_str(&v.to_string());
                    out.push('\n');
                }
                fs::write(dir.join(&rel), out).unwrap();
                revouch(dir, &rel);
            }
        }
        "append_bytes" => {
            // Appends bytes (hex) to an artifact and re-vouches for it.
            let rel = pick_for(&m, action);
            let hex = action["hex"].as_str().unwrap();
            let bytes: Vec<u8> =
                (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
            let mut all = fs::read(dir.join(&rel)).unwrap();
            all.extend(bytes);
            fs::write(dir.join(&rel), all).unwrap();
            revouch(dir, &rel);
        }
        "drop_epoch" => {
            // Leaves the first epoch of a role out of the manifest's epoch
            // index; its capture stays listed as an artifact.
            let mut m = m;
            let role = action["capture_role"].as_str().unwrap_or("operator");
            let epochs = m["epochs"].as_array_mut().unwrap();
            let at = epochs.iter().position(|e| e["role"] == role).unwrap_or_else(|| panic!("no {role} epoch"));
            epochs.remove(at);
            save_manifest(dir, &m);
        }
        "truncate_path" => {
            // Cuts a named artifact in half and re-vouches for it.
            let rel = placed(&m, action["path"].as_str().unwrap());
            let bytes = fs::read(dir.join(&rel)).unwrap();
            fs::write(dir.join(&rel), &bytes[..bytes.len() / 2]).unwrap();
            revouch(dir, &rel);
        }
        "note" => {
            // Adds a note to the manifest's absent or excluded list.
            let mut m = m;
            m[action["list"].as_str().unwrap()].as_array_mut().unwrap().push(action["note"].clone());
            save_manifest(dir, &m);
        }
        "add_copy" => {
            // Copies a picked artifact to another path (`{name}`: its file
            // name) and lists the copy with a role and its own hash.
            let from = match action["prefix"].as_str() {
                // The first artifact of the role whose file name starts so.
                Some(prefix) => m["artifacts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|a| a["role"] == action["role"])
                    .map(|a| a["path"].as_str().unwrap().to_string())
                    .find(|p| p.rsplit('/').next().unwrap().starts_with(prefix))
                    .unwrap_or_else(|| panic!("no {prefix}* artifact")),
                None => pick_for(&m, action),
            };
            let name = from.rsplit('/').next().unwrap().to_string();
            // `{pid}`: the process of a trace file name (`<role>-<pid>-<start>.ndjson`).
            let pid = name.split('-').nth(1).unwrap_or_default().to_string();
            let to = placed(&m, &action["to"].as_str().unwrap().replace("{name}", &name).replace("{pid}", &pid));
            fs::create_dir_all(dir.join(&to).parent().unwrap()).unwrap();
            fs::copy(dir.join(&from), dir.join(&to)).unwrap();
            let mut m = m;
            let role = action["as"].as_str().unwrap_or_else(|| action["role"].as_str().unwrap());
            m["artifacts"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"path": to, "role": role, "size": 0, "sha256": ""}));
            save_manifest(dir, &m);
            revouch(dir, &to);
        }
        "set_role" => {
            // Relabels a picked artifact (or one named by path): only what the
            // manifest says the file is changes.
            let rel = match action["path"].as_str() {
                Some(p) => placed(&m, p),
                None => pick_for(&m, action),
            };
            let mut m = m;
            for a in m["artifacts"].as_array_mut().unwrap() {
                if a["path"] == rel.as_str() {
                    a["role"] = action["to"].clone();
                }
            }
            save_manifest(dir, &m);
        }
        "rewrite_snapshot" => {
            // Cuts the last byte off one slot of a participant's snapshot of
            // the selected checkpoint and writes it back with a sidecar that
            // agrees (the engine's own writer), both re-vouched: every hash
            // holds, the state does not decode.
            let participant = action["participant"].as_str().unwrap();
            let job: u64 = m["job"]["id"].as_str().unwrap().parse().unwrap();
            let checkpoint = m["selection"]["checkpoint"].as_u64().unwrap();
            let backend = FileStateBackend::new(CheckpointLayout::new(dir.join("checkpoint"), job));
            let mut snapshot = backend.read(1, participant, checkpoint).unwrap();
            let slot = snapshot.slots.0.get_mut(action["slot"].as_str().unwrap()).unwrap();
            slot.bytes.pop();
            backend.write(participant, &snapshot.header, &snapshot.slots).unwrap();
            let base = format!("checkpoint/_state/{job}/v1/{participant}/checkpoint-{checkpoint}.snap");
            revouch(dir, &base);
            revouch(dir, &format!("{base}.meta"));
        }
        "capture_header" => {
            // Re-encodes a capture with header fields changed (the job, the
            // epoch, the truncation flag, the true event count), re-vouched.
            let rel = placed(&m, action["path"].as_str().unwrap());
            let capture = read_capture(&fs::read(dir.join(&rel)).unwrap()).unwrap();
            let mut header = capture.header.clone();
            if let Some(job) = action["job"].as_u64() {
                header.job = job;
            }
            if let Some(epoch) = action["epoch"].as_u64() {
                header.epoch = epoch;
            }
            if let Some(truncated) = action["truncated"].as_bool() {
                header.truncated = truncated;
            }
            if let Some(n) = action["true_events"].as_u64() {
                header.true_events = n;
            }
            fs::write(dir.join(&rel), encode_capture(&header, &capture.events)).unwrap();
            revouch(dir, &rel);
        }
        "swap_marker_and_broadcast" => {
            // In the first coordinator trace, the first COMPLETED marker and
            // the commit broadcast after it exchange places (seq and ts kept),
            // re-vouched: a well-formed trace the protocol forbids.
            let rel = trace_files(&m, "first", &[Json::from("coordinator")]).pop().unwrap();
            let mut lines: Vec<Json> =
                fs::read_to_string(dir.join(&rel)).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            let marker = lines.iter().position(|l| l["event"] == "WriteCompleted").unwrap();
            assert_eq!(lines[marker + 1]["event"], "Broadcast");
            let (a, b) = (lines[marker].clone(), lines[marker + 1].clone());
            for (at, from) in [(marker, b), (marker + 1, a)] {
                let (seq, ts) = (lines[at]["seq"].clone(), lines[at]["ts"].clone());
                lines[at] = from;
                lines[at]["seq"] = seq;
                lines[at]["ts"] = ts;
            }
            fs::write(dir.join(&rel), lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
            revouch(dir, &rel);
        }
        other => assert!(forge::apply(dir, other, action), "unknown action {other}"),
    }
}

/// The trace artifacts of the first or last process (by the start time in
/// their names), restricted to some roles; `all`: every trace artifact.
fn trace_files(m: &Json, process: &str, roles: &[Json]) -> Vec<String> {
    let traces: Vec<String> = m["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["role"] == "trace")
        .map(|a| a["path"].as_str().unwrap().to_string())
        .collect();
    let start = |p: &str| p.rsplit('-').next().unwrap().trim_end_matches(".ndjson").parse::<u64>().unwrap();
    let chosen = match process {
        "all" => return traces,
        "first" => traces.iter().map(|p| start(p)).min().unwrap(),
        "last" => traces.iter().map(|p| start(p)).max().unwrap(),
        other => panic!("unknown process {other}"),
    };
    traces
        .into_iter()
        .filter(|p| start(p) == chosen)
        .filter(|p| roles.is_empty() || roles.iter().any(|r| p.contains(&format!("/{}-", r.as_str().unwrap()))))
        .collect()
}

/// Removes an artifact's entry from the manifest.
fn unlist(dir: &Path, path: &str) {
    let mut m = manifest(dir);
    m["artifacts"].as_array_mut().unwrap().retain(|a| a["path"] != path);
    save_manifest(dir, &m);
}

/// A recipe's path with `{job}` and `{checkpoint}` filled in from the
/// manifest, so recipes survive a refresh of their base bundle.
fn placed(m: &Json, path: &str) -> String {
    path.replace("{job}", m["job"]["id"].as_str().unwrap())
        .replace("{checkpoint}", &m["selection"]["checkpoint"].to_string())
}

fn selected_marker(m: &Json) -> String {
    format!("checkpoint/_jobs/{}/COMPLETED-{}", m["job"]["id"].as_str().unwrap(), m["selection"]["checkpoint"])
}

struct Case {
    name: String,
    dir: PathBuf,
    /// A tamper recipe, or why the directory's recipe does not read.
    recipe: Option<Result<Json, String>>,
}

/// Every directory under fixtures/bundles: a real bundle, or a recipe. A
/// directory that is neither, or a recipe that does not read, is a case that
/// fails: a suite never loses a case silently.
fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = fs::read_dir(fixtures())
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let dir = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let recipe = if dir.join("variant.json").is_file() {
                Some(
                    fs::read(dir.join("variant.json"))
                        .map_err(|e| e.to_string())
                        .and_then(|b| serde_json::from_slice::<Json>(&b).map_err(|e| e.to_string()))
                        .and_then(check_recipe)
                        .map_err(|e| format!("fixtures/bundles/{name}/variant.json: {e}")),
                )
            } else if dir.join("manifest.json").is_file() {
                None
            } else {
                Some(Err(format!("fixtures/bundles/{name} holds neither a manifest.json nor a variant.json")))
            };
            Case { name, dir, recipe }
        })
        .collect();
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

/// A recipe names its base, profile, expected exit and actions.
fn check_recipe(recipe: Json) -> Result<Json, String> {
    let ok = recipe["base"].is_string()
        && recipe["profile"].is_string()
        && recipe["expected_exit"].as_u64().is_some_and(|c| c <= 3)
        && recipe["actions"].as_array().is_some_and(|a| !a.is_empty() && a.iter().all(|x| x["op"].is_string()));
    if ok {
        Ok(recipe)
    } else {
        Err("a recipe needs base, profile, expected_exit (0 to 3) and a non-empty list of actions with an op".into())
    }
}

fn run_case(case: &Case) -> Result<(), Failed> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let bundle = scratch.path().join(&case.name);
    let (profile, expected_exit) = match &case.recipe {
        None => {
            copy_dir(&case.dir, &bundle);
            ("replay".to_string(), 0)
        }
        Some(Err(why)) => return Err(why.clone().into()),
        Some(Ok(recipe)) => {
            copy_dir(&fixtures().join(recipe["base"].as_str().unwrap()), &bundle);
            for action in recipe["actions"].as_array().unwrap() {
                apply(&bundle, action);
            }
            (recipe["profile"].as_str().unwrap().to_string(), recipe["expected_exit"].as_u64().unwrap() as i32)
        }
    };
    // A recipe may ask for the text report (what a person reads) instead of JSON.
    let text = matches!(&case.recipe, Some(Ok(r)) if r["text"] == true);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink"));
    cmd.args(["incident-verify", "--profile", &profile]).arg(&bundle);
    // A recipe may select epochs (or pass other options) as a user would.
    if let Some(Ok(recipe)) = &case.recipe {
        for arg in recipe["args"].as_array().into_iter().flatten() {
            cmd.arg(arg.as_str().unwrap_or_default());
        }
    }
    if !text {
        cmd.arg("--json");
    }
    let out = cmd.output().map_err(|e| e.to_string())?;
    let code = out.status.code().unwrap_or(-1);
    // A lie the verifier still tells (issue 59): reproduced while it passes,
    // and the trial fails once the verdict is right, so the mark is removed.
    if let Some(Ok(recipe)) = &case.recipe {
        if let Some(issue) = recipe["known_lie"].as_str() {
            return match code {
                0 => Ok(()),
                c if c == expected_exit => {
                    Err(format!("no longer a lie: exit {c} as expected; remove known_lie ({issue})").into())
                }
                c => Err(format!(
                    "known lie ({issue}): exit {c}, neither the lie (0) nor the verdict ({expected_exit})\n{}",
                    String::from_utf8_lossy(&out.stdout)
                )
                .into()),
            };
        }
    }
    // With --json every outcome, a refusal too, is one JSON document on stdout.
    let snapshot = String::from_utf8_lossy(&out.stdout).replace(&bundle.display().to_string(), "<bundle>");
    if code != expected_exit {
        return Err(format!(
            "exit {code}, expected {expected_exit}\n{snapshot}{}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/bundles"));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_description(format!("clink incident-verify --profile {profile}: exit {code}"));
    let name = case.name.clone();
    // A mismatch panics; libtest-mimic reports a panicking trial as failed.
    settings.bind(|| insta::assert_snapshot!(name, snapshot));
    Ok(())
}

/// A malformed recipe is a failing trial, never a skipped one: each of these
/// is refused by the recipe check, and a case holding the refusal fails.
fn a_malformed_recipe_fails_its_trial() -> Result<(), Failed> {
    let malformed = [
        serde_json::json!({}),
        serde_json::json!({"base": "good", "profile": "replay", "expected_exit": 1, "actions": []}),
        serde_json::json!({"base": "good", "profile": "replay", "expected_exit": 7, "actions": [{"op": "remove"}]}),
        serde_json::json!({"base": "good", "profile": "replay", "expected_exit": 1, "actions": [{"role": "snapshot"}]}),
        serde_json::json!({"profile": "replay", "expected_exit": 1, "actions": [{"op": "remove"}]}),
    ];
    for recipe in malformed {
        let why = match check_recipe(recipe.clone()) {
            Ok(_) => return Err(format!("the recipe check accepted {recipe}").into()),
            Err(why) => why,
        };
        let case = Case { name: "malformed".into(), dir: fixtures().join("good"), recipe: Some(Err(why)) };
        if run_case(&case).is_ok() {
            return Err(format!("a case holding a malformed recipe passed: {recipe}").into());
        }
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let mut trials: Vec<Trial> = cases()
        .into_iter()
        .map(|case| Trial::test(format!("bundle::{}", case.name), move || run_case(&case)))
        .collect();
    let found = trials.len();
    trials.push(Trial::test("suite::a-malformed-recipe-fails-its-trial", a_malformed_recipe_fails_its_trial));
    trials.push(Trial::test("claims::any-single-field-edit-never-passes", || {
        claims::any_single_field_edit_never_passes(&fixtures().join("good"))
    }));
    if found == 0 {
        trials.push(Trial::test("bundle::none_found", || {
            Err("no bundle under fixtures/bundles: an empty suite proves nothing".into())
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}
