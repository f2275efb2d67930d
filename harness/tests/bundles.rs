//! One trial per bundle under `fixtures/bundles/`: a real bundle (a
//! directory with a manifest.json) or a tampered variant of one (a directory
//! with a variant.json recipe applied to a copy of its base). Each is verified
//! by `clink incident-verify`; its exit code must be the one the recipe
//! expects, and its report is compared with an insta snapshot.

mod common;

use common::copy_dir;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use clink_basics::digest::sha256_hex;
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
            let rel = pick(&m, action["role"].as_str().unwrap(), capture_role);
            let bytes = fs::read(dir.join(&rel)).unwrap();
            fs::write(dir.join(&rel), &bytes[..bytes.len() * 2 / 3]).unwrap();
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
            let rel = format!(
                "checkpoint/_jobs/{}/COMPLETED-{}",
                m["job"]["id"].as_str().unwrap(),
                m["selection"]["checkpoint"]
            );
            let mut marker: Json = serde_json::from_slice(&fs::read(dir.join(&rel)).unwrap()).unwrap();
            marker["job"] = action["job"].clone();
            fs::write(dir.join(&rel), serde_json::to_vec_pretty(&marker).unwrap()).unwrap();
            revouch(dir, &rel);
        }
        other => panic!("unknown action {other}"),
    }
}

struct Case {
    name: String,
    dir: PathBuf,
    recipe: Option<Json>,
}

fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = fs::read_dir(fixtures())
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let dir = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if dir.join("variant.json").is_file() {
                let recipe = serde_json::from_slice(&fs::read(dir.join("variant.json")).ok()?).ok()?;
                Some(Case { name, dir, recipe: Some(recipe) })
            } else if dir.join("manifest.json").is_file() {
                Some(Case { name, dir, recipe: None })
            } else {
                None
            }
        })
        .collect();
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

fn run_case(case: &Case) -> Result<(), Failed> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let bundle = scratch.path().join(&case.name);
    let (profile, expected_exit) = match &case.recipe {
        None => {
            copy_dir(&case.dir, &bundle);
            ("replay".to_string(), 0)
        }
        Some(recipe) => {
            copy_dir(&fixtures().join(recipe["base"].as_str().unwrap()), &bundle);
            for action in recipe["actions"].as_array().unwrap() {
                apply(&bundle, action);
            }
            (recipe["profile"].as_str().unwrap().to_string(), recipe["expected_exit"].as_u64().unwrap() as i32)
        }
    };
    let out = Command::new(env!("CARGO_BIN_EXE_clink"))
        .args(["incident-verify", "--json", "--profile", &profile])
        .arg(&bundle)
        .output()
        .map_err(|e| e.to_string())?;
    let code = out.status.code().unwrap_or(-1);
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

fn main() {
    let args = Arguments::from_args();
    let mut trials: Vec<Trial> = cases()
        .into_iter()
        .map(|case| Trial::test(format!("bundle::{}", case.name), move || run_case(&case)))
        .collect();
    if trials.is_empty() {
        trials.push(Trial::test("bundle::none_found", || {
            Err("no bundle under fixtures/bundles: an empty suite proves nothing".into())
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}
