//! The pinned nixpkgs' Rust builds this workspace. The effective minimum is
//! computed, never assumed: the highest of every package's `rust_version`
//! (the workspace's and every locked dependency's, as `cargo metadata
//! --locked` lists them, every platform's included), what each package's
//! edition needs, and what Cargo.lock's format needs. It must not exceed the
//! Rust that flake.nix records for its nixpkgs, on the one `# rust-at-pin:
//! VERSION BRANCH REV` line next to the input; and that line must name the
//! branch and revision flake.lock pins, so a lock that moves without the
//! record being read again fails here too.
//!
//! When a dependency needs more than the pin, either pin an older version of
//! it (`cargo update -p NAME --precise VERSION`) or move the pin to a nixpkgs
//! whose Rust is new enough (and record that Rust). Each rule is also fed a
//! broken record, lock or dependency (`selftest_…`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;

/// A Rust version, major.minor.patch (a missing patch is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u64, u64, u64);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

fn parse_version(text: &str) -> Result<Version, String> {
    let parts: Vec<&str> = text.split('.').collect();
    let num = |s: &str| s.parse::<u64>().map_err(|_| format!("`{text}` is not a Rust version (major.minor[.patch])"));
    match parts.as_slice() {
        [a, b] => Ok(Version(num(a)?, num(b)?, 0)),
        [a, b, c] => Ok(Version(num(a)?, num(b)?, num(c)?)),
        _ => Err(format!("`{text}` is not a Rust version (major.minor[.patch])")),
    }
}

/// What flake.nix records for its nixpkgs.
#[derive(Debug)]
struct Record {
    rust: Version,
    branch: String,
    rev: String,
}

const RECORD: &str = "# rust-at-pin:";
const INPUT: &str = "inputs.nixpkgs.url = \"github:NixOS/nixpkgs/";

/// The one `# rust-at-pin: VERSION BRANCH REV` line, directly above the
/// nixpkgs input whose branch it names.
fn read_record(flake: &str) -> Result<Record, String> {
    let lines: Vec<&str> = flake.lines().map(str::trim).collect();
    let at: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].starts_with(RECORD)).collect();
    let &[i] = at.as_slice() else {
        return Err(format!("flake.nix has {} `{RECORD}` lines, not one", at.len()));
    };
    let fields: Vec<&str> = lines[i][RECORD.len()..].split_whitespace().collect();
    let &[rust, branch, rev] = fields.as_slice() else {
        return Err(format!("flake.nix: `{}` is not `{RECORD} VERSION BRANCH REV`", lines[i]));
    };
    let record = Record { rust: parse_version(rust)?, branch: branch.to_string(), rev: rev.to_string() };
    let input = lines.get(i + 1).copied().unwrap_or_default();
    match input.strip_prefix(INPUT).and_then(|r| r.strip_suffix("\";")) {
        Some(b) if b == record.branch => Ok(record),
        Some(b) => Err(format!("flake.nix records Rust for {}, but the input below it is {b}", record.branch)),
        None => Err(format!("flake.nix: the line after `{RECORD}` is not the nixpkgs input: `{input}`")),
    }
}

/// The branch and revision flake.lock pins for the root's `nixpkgs` input.
fn read_lock_pin(lock: &str) -> Result<(String, String), String> {
    let doc: Json = serde_json::from_str(lock).map_err(|e| format!("flake.lock is not JSON: {e}"))?;
    let root = doc["root"].as_str().ok_or("flake.lock names no root node")?;
    let node = doc["nodes"][root]["inputs"]["nixpkgs"].as_str().ok_or("flake.lock: the root has no nixpkgs input")?;
    let pinned = &doc["nodes"][node];
    match (pinned["original"]["ref"].as_str(), pinned["locked"]["rev"].as_str()) {
        (Some(branch), Some(rev)) => Ok((branch.to_string(), rev.to_string())),
        _ => Err(format!("flake.lock: node `{node}` has no original.ref or locked.rev")),
    }
}

/// One package's (or the lock's) need, and why.
#[derive(Debug)]
struct Need {
    who: String,
    rust: Version,
    why: String,
}

/// The Rust an edition needs.
fn edition_needs(edition: &str) -> Result<Version, String> {
    match edition {
        "2015" => Ok(Version(1, 0, 0)),
        "2018" => Ok(Version(1, 31, 0)),
        "2021" => Ok(Version(1, 56, 0)),
        "2024" => Ok(Version(1, 85, 0)),
        other => Err(format!("edition `{other}` is unknown to this test")),
    }
}

/// Every package's needs from `cargo metadata`, and the lock format's.
fn needs(metadata: &Json, lock_format: u64) -> Result<Vec<Need>, String> {
    let packages = metadata["packages"].as_array().ok_or("cargo metadata lists no packages")?;
    let mut needs = vec![Need {
        who: format!("Cargo.lock (format {lock_format})"),
        rust: match lock_format {
            1..=3 => Version(1, 53, 0),
            4 => Version(1, 78, 0),
            other => return Err(format!("Cargo.lock format {other} is unknown to this test")),
        },
        why: "cargo reads that lock format from this version".into(),
    }];
    for p in packages {
        let who = format!("{}@{}", p["name"].as_str().unwrap_or("?"), p["version"].as_str().unwrap_or("?"));
        if let Some(v) = p["rust_version"].as_str() {
            needs.push(Need { who: who.clone(), rust: parse_version(v)?, why: format!("rust-version = {v}") });
        }
        let edition = p["edition"].as_str().ok_or_else(|| format!("{who}: no edition in cargo metadata"))?;
        needs.push(Need { who, rust: edition_needs(edition)?, why: format!("edition {edition}") });
    }
    Ok(needs)
}

/// The effective minimum when the record covers it and is for the pinned
/// revision; otherwise what is wrong, naming each package that needs more.
fn check(record: &Record, lock: &(String, String), needs: &[Need]) -> Result<Version, String> {
    if (record.branch.as_str(), record.rev.as_str()) != (lock.0.as_str(), lock.1.as_str()) {
        return Err(format!(
            "flake.nix records Rust {} for {} {}, but flake.lock pins {} {}: read the Rust of the pinned \
             revision and record it",
            record.rust, record.branch, record.rev, lock.0, lock.1
        ));
    }
    let minimum = needs.iter().map(|n| n.rust).max().ok_or("nothing to check: no needs")?;
    let above: Vec<String> = needs
        .iter()
        .filter(|n| n.rust > record.rust)
        .map(|n| format!("  {} needs Rust {} ({})", n.who, n.rust, n.why))
        .collect();
    if above.is_empty() {
        return Ok(minimum);
    }
    Err(format!(
        "the workspace needs Rust {minimum}, but the pinned nixpkgs ({} {}) ships {}:\n{}\npin an older version \
         of each dependency (cargo update -p NAME --precise VERSION), or move the pin to a nixpkgs with a newer \
         Rust and record it in flake.nix",
        record.branch,
        record.rev,
        record.rust,
        above.join("\n")
    ))
}

// ---------------------------------------------------------------------------
// What the repository holds.

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(root().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `cargo metadata` over the locked graph, every platform's packages included.
fn metadata() -> Json {
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

fn lock_format() -> u64 {
    let lock = read("Cargo.lock");
    let line = lock.lines().find_map(|l| l.strip_prefix("version = ")).expect("Cargo.lock states its format");
    line.trim().parse().expect("Cargo.lock's format is a number")
}

fn real_needs() -> Vec<Need> {
    needs(&metadata(), lock_format()).unwrap_or_else(|e| panic!("{e}"))
}

fn real_record() -> Record {
    read_record(&read("flake.nix")).unwrap_or_else(|e| panic!("{e}"))
}

fn real_lock() -> (String, String) {
    read_lock_pin(&read("flake.lock")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_pinned_nixpkgs_rust_builds_the_workspace() {
    let needs = real_needs();
    let workspace = needs.iter().filter(|n| n.why.starts_with("rust-version")).count();
    assert!(workspace > 100, "cargo metadata gave only {workspace} rust-versions: not the locked graph");
    match check(&real_record(), &real_lock(), &needs) {
        Ok(minimum) => println!("effective minimum Rust {minimum}; the pin records {}", real_record().rust),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn selftest_a_recorded_rust_below_the_minimum_fails() {
    let needs = real_needs();
    let top = needs.iter().max_by_key(|n| n.rust).expect("needs");
    let Version(major, minor, _) = top.rust;
    let record = Record { rust: Version(major, minor - 1, 0), ..real_record() };
    let err = check(&record, &real_lock(), &needs).expect_err("a Rust below the minimum must fail");
    assert!(err.contains(&top.who) && err.contains("--precise"), "{err}");
}

#[test]
fn selftest_a_dependency_needing_more_than_the_pin_fails() {
    let record = real_record();
    let Version(major, minor, _) = record.rust;
    let newer = format!("{major}.{}", minor + 1);
    let doc: Json = serde_json::json!({"packages": [
        {"name": "fine", "version": "1.0.0", "rust_version": "1.60", "edition": "2021"},
        {"name": "eager", "version": "2.3.4", "rust_version": newer, "edition": "2021"},
        {"name": "silent", "version": "0.1.0", "rust_version": null, "edition": "2024"},
    ]});
    let err = check(&record, &real_lock(), &needs(&doc, 4).unwrap()).expect_err("must fail");
    assert!(err.contains("eager@2.3.4 needs Rust") && !err.contains("fine@"), "{err}");
    // An edition counts when no rust-version says more.
    let old = Record { rust: Version(1, 84, 0), ..real_record() };
    let err = check(&old, &real_lock(), &needs(&doc, 4).unwrap()).expect_err("edition 2024 needs 1.85");
    assert!(err.contains("silent@0.1.0 needs Rust 1.85.0 (edition 2024)"), "{err}");
}

#[test]
fn selftest_a_record_for_another_revision_or_branch_fails() {
    let needs = real_needs();
    let moved = (real_lock().0, "0".repeat(40));
    let err = check(&real_record(), &moved, &needs).expect_err("a moved lock must fail");
    assert!(err.contains("but flake.lock pins"), "{err}");
    let other = ("nixos-26.05".to_string(), real_lock().1);
    assert!(check(&real_record(), &other, &needs).is_err());
}

#[test]
fn selftest_a_missing_doubled_malformed_or_misplaced_record_is_refused() {
    let flake = read("flake.nix");
    let line = flake.lines().find(|l| l.trim().starts_with(RECORD)).expect("the record").to_string();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [_, _, version, branch, _] = fields.as_slice() else { panic!("the record has five words: {line}") };
    let with = |from: &str, to: &str| flake.replace(&line, &line.replace(from, to));
    let cases = [
        (flake.replace(&line, ""), "0 `# rust-at-pin:` lines".to_string()),
        (flake.replace(&line, &format!("{line}\n{line}")), "2 `# rust-at-pin:` lines".into()),
        (
            flake.replace(&line, &format!("{RECORD} {version} {branch}")),
            "is not `# rust-at-pin: VERSION BRANCH REV`".into(),
        ),
        (with(version, "1.91-beta"), "is not a Rust version".into()),
        (flake.replace(&line, &format!("{line}\n  #")), "is not the nixpkgs input".into()),
        (with(branch, "nixos-00.00"), format!("but the input below it is {branch}")),
    ];
    for (text, needle) in cases {
        match read_record(&text) {
            Ok(r) => panic!("a broken record was read: {r:?} (wanted: {needle})"),
            Err(e) => assert!(e.contains(&needle), "{e} (wanted: {needle})"),
        }
    }
}

#[test]
fn selftest_versions_parse_and_order() {
    assert_eq!(parse_version("1.89").unwrap(), Version(1, 89, 0));
    assert!(parse_version("1.91.1").unwrap() > parse_version("1.91").unwrap());
    assert!(parse_version("1.100.0").unwrap() > parse_version("1.99.9").unwrap());
    for bad in ["", "1", "1.x", "1.2.3.4", "v1.2", "1.2.3-beta"] {
        assert!(parse_version(bad).is_err(), "{bad:?} parsed");
    }
}
