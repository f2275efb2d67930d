//! The capture store against a real run: `clink capture push` and `clink
//! capture fetch` as processes over a `file://` store. A fetched capture is
//! byte-identical and replays; a second push stores nothing new; every
//! corruption and every bound is refused with nothing left at DEST; a push
//! killed with SIGKILL leaves no reference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

fn clink() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clink"))
}

fn exec(cmd: &mut Command) -> Output {
    cmd.output().expect("clink starts")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The example job with captures armed, run once for the whole test process.
struct Run {
    dir: tempfile::TempDir,
}

impl Run {
    fn capture(&self) -> PathBuf {
        self.dir.path().join("capture")
    }
    fn checkpoints(&self) -> PathBuf {
        self.dir.path().join("ck")
    }
}

fn example() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let input = d.join("input");
        assert!(exec(clink().args(["gen-input", "--seed", "1", "--events", "6000", "--out"]).arg(&input))
            .status
            .success());
        let job = format!("{}/../fixtures/jobs/example/job.json", env!("CARGO_MANIFEST_DIR"));
        let out = exec(
            clink()
                .args([
                    "run",
                    "--quiet",
                    "--checkpoint-every-records",
                    "500",
                    "--retain-checkpoints",
                    "1000",
                    "--job",
                    &job,
                ])
                .arg("--input-dir")
                .arg(&input)
                .arg("--output-dir")
                .arg(d.join("out"))
                .arg("--checkpoint-dir")
                .arg(d.join("ck"))
                .arg("--capture-dir")
                .arg(d.join("capture")),
        );
        assert!(out.status.success(), "{}", text(&out));
        Run { dir }
    })
}

fn push_cmd(run: &Run, store: &Path) -> Command {
    let mut cmd = clink();
    cmd.args(["capture", "push", "--capture-dir"])
        .arg(run.capture())
        .arg("--checkpoint-dir")
        .arg(run.checkpoints())
        .args(["--job", "1"])
        .arg(format!("file://{}", store.display()));
    cmd
}

/// Pushes the example's capture with --json and returns the result document.
fn push(run: &Run, store: &Path) -> Json {
    let out = run_json(push_cmd(run, store).arg("--json"));
    assert!(out.0.status.success(), "{}", text(&out.0));
    out.1
}

fn run_json(cmd: &mut Command) -> (Output, Json) {
    let out = exec(cmd);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(Json::Null);
    (out, doc)
}

fn reference(doc: &Json) -> String {
    doc["reference"].as_str().expect("a reference").to_string()
}

fn fetch(store: &Path, reference: &str, dest: &Path, extra: &[&str]) -> Output {
    exec(clink().args(["capture", "fetch"]).arg(store).arg(reference).arg(dest).args(extra))
}

/// Every regular file under `root`, by relative path, with its bytes.
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn manifest_path(store: &Path, reference: &str) -> PathBuf {
    store.join("manifests/sha256").join(reference)
}

fn object_path(store: &Path, sha256: &str) -> PathBuf {
    store.join("objects/sha256").join(sha256)
}

fn read_manifest(store: &Path, reference: &str) -> Json {
    serde_json::from_slice(&std::fs::read(manifest_path(store, reference)).unwrap()).unwrap()
}

/// The manifest entry of the first captured epoch file.
fn a_capture_entry(manifest: &Json) -> (String, String, u64) {
    let files = manifest["files"].as_array().unwrap();
    let f = files.iter().find(|f| f["path"].as_str().unwrap().ends_with(".cap")).expect("a capture file");
    (f["path"].as_str().unwrap().into(), f["sha256"].as_str().unwrap().into(), f["size"].as_u64().unwrap())
}

/// Nothing at DEST, and no temporary directory beside it.
fn assert_nothing_left(dest: &Path) {
    assert!(std::fs::symlink_metadata(dest).is_err(), "{} exists", dest.display());
    let parent = dest.parent().unwrap();
    let leftovers: Vec<String> = std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".clink-fetch-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary directories left: {leftovers:?}");
}

fn sweep(capture: &Path, checkpoints: &Path) -> Json {
    let (out, doc) = run_json(
        clink()
            .args(["replay", "sweep", "--json", "--job", "1", "--capture-dir"])
            .arg(capture)
            .arg("--checkpoint-dir")
            .arg(checkpoints),
    );
    assert!(out.status.success(), "{}", text(&out));
    doc
}

#[test]
fn a_fetched_capture_is_byte_identical_and_replays() {
    let run = example();
    let scratch = tempfile::tempdir().unwrap();
    let store = scratch.path().join("store");
    let pushed = push(run, &store);
    assert_eq!(pushed["source"], "capture");
    let r = reference(&pushed);
    let dest = scratch.path().join("fetched");
    let out = fetch(&store, &r, &dest, &["--json"]);
    assert!(out.status.success(), "{}", text(&out));

    assert_eq!(tree(&dest.join("capture")), tree(&run.capture()));
    let ck = tree(&run.checkpoints());
    assert!(ck.keys().any(|k| k.ends_with(".snap")), "the run left snapshots");
    assert_eq!(tree(&dest.join("checkpoint")), ck);
    assert_eq!(pushed["files"].as_u64().unwrap() as usize, tree(&dest).len());

    let live = sweep(&run.capture(), &run.checkpoints());
    let fetched = sweep(&dest.join("capture"), &dest.join("checkpoint"));
    assert!(fetched["deterministic"].as_u64().unwrap() > 0);
    assert_eq!(fetched["deterministic"], live["deterministic"]);
    assert_eq!(fetched["unavailable"], 0);

    let manifest = read_manifest(&store, &r);
    assert_eq!(manifest["format"], "clink-capture-manifest");
    assert_eq!(manifest["job"], "1");
    let e = &manifest["epochs"].as_array().unwrap().iter().find(|e| e["operator"] == "3" && e["epoch"] == 3).unwrap();
    let epoch = exec(
        clink()
            .args(["replay", "epoch", "--verify", "--job", "1", "--op", "3", "--epoch", "3", "--subtask"])
            .arg(e["subtask"].to_string())
            .arg("--capture-dir")
            .arg(dest.join("capture"))
            .arg("--checkpoint-dir")
            .arg(dest.join("checkpoint")),
    );
    assert!(epoch.status.success(), "{}", text(&epoch));
    assert!(text(&epoch).contains("deterministic"), "{}", text(&epoch));
}

#[test]
fn a_second_push_of_the_same_bytes_writes_no_new_object() {
    let run = example();
    let scratch = tempfile::tempdir().unwrap();
    let store = scratch.path().join("store");
    let first = push(run, &store);
    let files = first["files"].as_u64().unwrap();
    assert!(files > 100, "{first}");
    assert!(first["objects_written"].as_u64().unwrap() > 0);
    assert_eq!(first["objects_present"], 0);
    assert_eq!(first["manifest_written"], true);
    let objects = std::fs::read_dir(store.join("objects/sha256")).unwrap().count() as u64;
    assert_eq!(objects, first["objects_written"].as_u64().unwrap());

    let second = push(run, &store);
    assert_eq!(second["reference"], first["reference"]);
    assert_eq!(second["objects_written"], 0, "{second}");
    assert_eq!(second["bytes_written"], 0);
    assert_eq!(second["objects_present"], first["objects_written"]);
    assert_eq!(second["manifest_written"], false);
    assert_eq!(std::fs::read_dir(store.join("objects/sha256")).unwrap().count() as u64, objects);
    assert_eq!(std::fs::read_dir(store.join("manifests/sha256")).unwrap().count(), 1);

    let plain = exec(&mut push_cmd(run, &store));
    assert!(plain.status.success());
    let out = String::from_utf8_lossy(&plain.stdout);
    assert!(out.contains(" 0 new objects (0 bytes)"), "{out}");
    assert_eq!(out.lines().last(), first["reference"].as_str());
    eprintln!(
        "dedup: first push {} files, {} objects written; second push 0 written, {} present",
        files, objects, second["objects_present"]
    );
}

/// A store with the example pushed, its reference and manifest.
fn pushed_store(scratch: &Path, name: &str) -> (PathBuf, String, Json) {
    let store = scratch.join(name);
    let r = reference(&push(example(), &store));
    let manifest = read_manifest(&store, &r);
    (store, r, manifest)
}

/// Fetch refused (exit 2), naming `named`, and nothing left at DEST.
fn assert_refused(store: &Path, r: &str, dest: &Path, named: &str) {
    let out = fetch(store, r, dest, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains(named), "the refusal names {named}: {}", text(&out));
    assert_nothing_left(dest);
    let (out, doc) = run_json(clink().args(["capture", "fetch", "--json"]).arg(store).arg(r).arg(dest));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(doc["result"], "refused", "{doc}");
    assert_nothing_left(dest);
}

/// Stores a doctored manifest under its own digest; returns the new reference.
fn store_manifest(store: &Path, manifest: &Json) -> String {
    let bytes = serde_json::to_vec_pretty(manifest).unwrap();
    let r = clink_basics::digest::sha256_hex(&bytes);
    std::fs::write(manifest_path(store, &r), bytes).unwrap();
    r
}

#[test]
fn every_corruption_is_refused_naming_it_with_nothing_left_at_dest() {
    let scratch = tempfile::tempdir().unwrap();
    let dest = scratch.path().join("dest");

    // Deleted.
    let (store, r, manifest) = pushed_store(scratch.path(), "deleted");
    let (path, sha, size) = a_capture_entry(&manifest);
    assert!(size > 1);
    std::fs::remove_file(object_path(&store, &sha)).unwrap();
    assert_refused(&store, &r, &dest, &format!("objects/sha256/{sha} (for {path}) is missing"));

    // Truncated.
    let (store, r, _) = pushed_store(scratch.path(), "truncated");
    let bytes = std::fs::read(object_path(&store, &sha)).unwrap();
    std::fs::write(object_path(&store, &sha), &bytes[..bytes.len() - 1]).unwrap();
    assert_refused(&store, &r, &dest, &format!("objects/sha256/{sha} (for {path}) is truncated"));

    // One byte altered.
    let (store, r, _) = pushed_store(scratch.path(), "altered");
    let mut bytes = std::fs::read(object_path(&store, &sha)).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(object_path(&store, &sha), &bytes).unwrap();
    assert_refused(&store, &r, &dest, &format!("objects/sha256/{sha} (for {path}) is altered"));

    // Longer than the manifest says.
    let (store, r, _) = pushed_store(scratch.path(), "longer");
    let mut bytes = std::fs::read(object_path(&store, &sha)).unwrap();
    bytes.push(0);
    std::fs::write(object_path(&store, &sha), &bytes).unwrap();
    assert_refused(&store, &r, &dest, &format!("objects/sha256/{sha} (for {path}) is longer"));

    // The manifest doctored in place: its bytes no longer have the REF's digest.
    let (store, r, manifest) = pushed_store(scratch.path(), "manifest-bytes");
    let mut doctored = manifest.clone();
    doctored["job"] = "2".into();
    std::fs::write(manifest_path(&store, &r), serde_json::to_vec_pretty(&doctored).unwrap()).unwrap();
    assert_refused(&store, &r, &dest, &format!("manifests/sha256/{r}: its bytes have SHA-256"));

    // Another format, and another version, stored under their own digests.
    let (store, _, manifest) = pushed_store(scratch.path(), "format");
    let mut other = manifest.clone();
    other["format"] = "clink-incident-bundle".into();
    assert_refused(&store, &store_manifest(&store, &other), &dest, "format: \"clink-incident-bundle\"");
    let mut newer = manifest.clone();
    newer["version"] = 2.into();
    assert_refused(&store, &store_manifest(&store, &newer), &dest, "version: 2");

    // Hostile paths: `..`, absolute, and one path twice.
    for (hostile, named) in
        [("capture/../../escaped", "has the component \"..\""), ("/tmp/escaped", "is absolute"), ("", "an empty path")]
    {
        let mut m = manifest.clone();
        m["files"][0]["path"] = hostile.into();
        assert_refused(&store, &store_manifest(&store, &m), &dest, named);
    }
    let mut twice = manifest.clone();
    let first = twice["files"][0].clone();
    twice["files"][1]["path"] = first["path"].clone();
    assert_refused(&store, &store_manifest(&store, &twice), &dest, "is listed twice");
    assert!(!scratch.path().join("escaped").exists() && !Path::new("/tmp/escaped").exists());

    // An unknown reference, and one that is not a digest.
    assert_refused(&store, &"0".repeat(64), &dest, "no manifest");
    assert_refused(&store, "../x", &dest, "is not a SHA-256");
}

#[test]
fn an_existing_dest_and_a_linked_source_are_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let (store, r, _) = pushed_store(scratch.path(), "store");
    let dest = scratch.path().join("dest");
    std::fs::create_dir(&dest).unwrap();
    let out = fetch(&store, &r, &dest, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("already exists"));
    assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 0);

    let capture = scratch.path().join("capture");
    std::fs::create_dir(&capture).unwrap();
    let copy = exec(Command::new("cp").arg("-a").arg(format!("{}/.", example().capture().display())).arg(&capture));
    assert!(copy.status.success());
    let link = capture.join("op-3/subtask-0/stolen");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let out = exec(
        clink()
            .args(["capture", "push", "--capture-dir"])
            .arg(&capture)
            .arg("--checkpoint-dir")
            .arg(example().checkpoints())
            .arg(scratch.path().join("linked")),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("stolen: a link"), "{}", text(&out));
    assert!(!scratch.path().join("linked/manifests").exists());
}

#[test]
fn bounds_below_what_is_needed_are_refused_on_push_and_on_fetch() {
    let run = example();
    let scratch = tempfile::tempdir().unwrap();
    let (store, r, manifest) = pushed_store(scratch.path(), "store");
    let files = manifest["files"].as_array().unwrap().len() as u64;
    let bytes: u64 = manifest["files"].as_array().unwrap().iter().map(|f| f["size"].as_u64().unwrap()).sum();

    let tight = scratch.path().join("tight");
    for (flag, value, named) in [("--max-files", files - 1, "--max-files"), ("--max-bytes", bytes - 1, "--max-bytes")] {
        let out = exec(push_cmd(run, &tight).args([flag, &value.to_string()]));
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(named), "{}", text(&out));
        assert!(!tight.join("manifests").exists() && !tight.join("objects").exists(), "a refused push wrote");

        let dest = scratch.path().join("dest");
        let out = fetch(&store, &r, &dest, &[flag, &value.to_string()]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(named), "{}", text(&out));
        assert_nothing_left(&dest);
    }
    // Exactly enough passes on both sides.
    let exact = ["--max-files".to_string(), files.to_string(), "--max-bytes".into(), bytes.to_string()];
    assert!(exec(push_cmd(run, &tight).args(&exact)).status.success());
    let dest = scratch.path().join("dest");
    let exact: Vec<&str> = exact.iter().map(String::as_str).collect();
    assert!(fetch(&store, &r, &dest, &exact).status.success());
}

#[test]
fn a_push_killed_with_sigkill_leaves_no_reference() {
    let run = example();
    let scratch = tempfile::tempdir().unwrap();
    // The reference a whole push makes, from another store.
    let (_, r, manifest) = pushed_store(scratch.path(), "whole");
    let total = manifest["files"].as_array().unwrap().len();

    let store = scratch.path().join("killed");
    let mut child = push_cmd(run, &store)
        .env("CLINK_TEST_PUSH_PAUSE_MS", "20")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let objects = store.join("objects/sha256");
    let count = || std::fs::read_dir(&objects).map(|d| d.count()).unwrap_or(0);
    let started = Instant::now();
    while count() < 20 {
        assert!(child.try_wait().unwrap().is_none(), "the push ended before it was killed");
        assert!(started.elapsed() < Duration::from_secs(60), "the push wrote no objects");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
    let written = count();
    assert!(written >= 20 && written < total, "killed midway: {written} of {total} objects");
    let manifests = std::fs::read_dir(store.join("manifests/sha256")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(manifests, 0, "a killed push left a manifest");
    let dest = scratch.path().join("dest");
    let out = fetch(&store, &r, &dest, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no manifest"), "{}", text(&out));
    assert_nothing_left(&dest);

    // Pushing again completes it, reusing what the killed push sent.
    let again = push(run, &store);
    assert_eq!(reference(&again), r);
    assert!(again["objects_present"].as_u64().unwrap() >= 19, "{again}");
    assert!(fetch(&store, &r, &dest, &[]).status.success());
}

#[test]
fn an_incident_bundle_round_trips_and_still_verifies() {
    let run = example();
    let scratch = tempfile::tempdir().unwrap();
    let bundle = scratch.path().join("bundle");
    let out = exec(
        clink()
            .args(["incident-collect", "--include-state", "--include-captures", "--checkpoint-dir"])
            .arg(run.checkpoints())
            .arg("--capture-dir")
            .arg(run.capture())
            .arg("--out")
            .arg(&bundle),
    );
    assert!(out.status.success(), "{}", text(&out));
    let store = scratch.path().join("store");
    let (out, doc) = run_json(clink().args(["capture", "push", "--json", "--bundle"]).arg(&bundle).arg(&store));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(doc["source"], "bundle");
    let dest = scratch.path().join("fetched");
    assert!(fetch(&store, &reference(&doc), &dest, &[]).status.success());
    assert_eq!(tree(&dest), tree(&bundle));
    let verified = exec(clink().args(["incident-verify", "--profile", "replay"]).arg(&dest));
    assert!(verified.status.success(), "{}", text(&verified));
}

#[test]
fn push_help_explains_both_sources() {
    let out = exec(clink().args(["capture", "push", "--help"]));
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["--capture-dir", "--checkpoint-dir", "--bundle", "--max-files", "--max-bytes", "s3://", "file://"] {
        assert!(help.contains(needle), "{needle} in: {help}");
    }
}

/// A bundle collected from the example run, in `scratch`.
fn collected_bundle(scratch: &Path) -> PathBuf {
    let run = example();
    let bundle = scratch.join("bundle");
    let out = exec(
        clink()
            .args(["incident-collect", "--include-state", "--include-captures", "--checkpoint-dir"])
            .arg(run.checkpoints())
            .arg("--capture-dir")
            .arg(run.capture())
            .arg("--out")
            .arg(&bundle),
    );
    assert!(out.status.success(), "{}", text(&out));
    bundle
}

/// A bundle whose evidence no longer matches its manifest is pushed only as
/// its manifest vouches for it: a truncated snapshot, a file it does not
/// list, a file it lists that is gone are each refused (exit 2) naming the
/// file, and no reference is written.
#[test]
fn a_damaged_bundle_is_refused_naming_the_file_and_leaves_no_reference() {
    let scratch = tempfile::tempdir().unwrap();
    let good = collected_bundle(scratch.path());
    let m: Json = serde_json::from_slice(&std::fs::read(good.join("manifest.json")).unwrap()).unwrap();
    let snapshot = m["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["role"] == "snapshot")
        .map(|a| a["path"].as_str().unwrap().to_string())
        .expect("a snapshot");
    type Damage = Box<dyn Fn(&Path)>;
    let snap = snapshot.clone();
    let cases: Vec<(&str, String, Damage)> = vec![
        (
            "truncated",
            snapshot.clone(),
            Box::new(move |b: &Path| {
                let bytes = std::fs::read(b.join(&snap)).unwrap();
                std::fs::write(b.join(&snap), &bytes[..bytes.len() / 2]).unwrap();
            }),
        ),
        (
            "unlisted",
            "checkpoint/note.txt".into(),
            Box::new(|b: &Path| std::fs::write(b.join("checkpoint/note.txt"), b"not vouched for").unwrap()),
        ),
        ("gone", snapshot.clone(), Box::new(move |b: &Path| std::fs::remove_file(b.join(&snapshot)).unwrap())),
    ];
    for (name, named, damage) in cases {
        let bundle = scratch.path().join(format!("bundle-{name}"));
        common_copy(&good, &bundle);
        damage(&bundle);
        let store = scratch.path().join(format!("store-{name}"));
        let out = exec(clink().args(["capture", "push", "--bundle"]).arg(&bundle).arg(&store));
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out));
        assert!(text(&out).contains(&named), "{name}: the refusal must name {named}: {}", text(&out));
        let manifests = std::fs::read_dir(store.join("manifests/sha256")).map(|d| d.count()).unwrap_or(0);
        assert_eq!(manifests, 0, "{name}: a refused push wrote a reference");
    }
}

fn common_copy(from: &Path, to: &Path) {
    let out = Command::new("cp").arg("-a").arg(from).arg(to).output().unwrap();
    assert!(out.status.success());
}

/// An object already in the store counts as present only when its bytes
/// hash to its name: one corrupted in place (same size) is sent again, and
/// what the reference names fetches whole.
#[test]
fn a_corrupted_object_in_the_store_is_sent_again() {
    let run = example();
    let scratch = tempfile::tempdir().unwrap();
    let (store, r, manifest) = pushed_store(scratch.path(), "store");
    let (_, sha256, _) = a_capture_entry(&manifest);
    let object = object_path(&store, &sha256);
    let mut bytes = std::fs::read(&object).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&object, &bytes).unwrap();
    let again = push(run, &store);
    assert_eq!(reference(&again), r);
    assert!(again["objects_written"].as_u64().unwrap() >= 1, "the corrupted object was taken as present: {again}");
    let dest = scratch.path().join("dest");
    let out = fetch(&store, &r, &dest, &[]);
    assert!(out.status.success(), "{}", text(&out));
}

/// A fetch killed with SIGKILL leaves nothing at DEST, and what it left
/// beside it is refused by every reader as an interrupted fetch, never read
/// as a whole capture or bundle.
#[test]
fn a_fetch_killed_with_sigkill_leaves_nothing_read_as_whole() {
    let scratch = tempfile::tempdir().unwrap();
    let (store, r, _) = pushed_store(scratch.path(), "store");
    let bundle = collected_bundle(scratch.path());
    let (out, doc) = run_json(clink().args(["capture", "push", "--json", "--bundle"]).arg(&bundle).arg(&store));
    assert!(out.status.success(), "{}", text(&out));
    for (what, reference) in [("capture", r.clone()), ("bundle", doc["reference"].as_str().unwrap().to_string())] {
        let parent = scratch.path().join(format!("fetched-{what}"));
        std::fs::create_dir_all(&parent).unwrap();
        let dest = parent.join("dest");
        let mut child = clink()
            .args(["capture", "fetch"])
            .arg(&store)
            .arg(&reference)
            .arg(&dest)
            .env("CLINK_TEST_FETCH_PAUSE_MS", "20")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let leftover = || {
            std::fs::read_dir(&parent)
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(".clink-fetch-"))
        };
        let started = Instant::now();
        let partial = loop {
            if let Some(dir) = leftover() {
                if tree(&dir).len() > 5 {
                    break dir;
                }
            }
            assert!(child.try_wait().unwrap().is_none(), "{what}: the fetch ended before it was killed");
            assert!(started.elapsed() < Duration::from_secs(60), "{what}: the fetch wrote nothing");
            std::thread::sleep(Duration::from_millis(10));
        };
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert!(std::fs::symlink_metadata(&dest).is_err(), "{what}: a killed fetch left DEST");
        let read = if what == "capture" {
            exec(
                clink()
                    .args(["replay", "sweep", "--job", "1", "--capture-dir"])
                    .arg(partial.join("capture"))
                    .arg("--checkpoint-dir")
                    .arg(partial.join("checkpoint")),
            )
        } else {
            exec(clink().args(["incident-verify", "--profile", "integrity"]).arg(&partial))
        };
        assert_eq!(read.status.code(), Some(2), "{what}: {}", text(&read));
        assert!(text(&read).contains("interrupted `clink capture fetch`"), "{what}: {}", text(&read));
        // Fetching again from the start succeeds.
        assert!(fetch(&store, &reference, &dest, &[]).status.success());
    }
}
