//! The capture store over a real S3-compatible server: SeaweedFS, started by
//! `gates/services start` on 127.0.0.1 (its env file names the endpoint, the
//! bucket and the credentials). `clink capture push` and `fetch` reach it
//! through object_store's AmazonS3 with the standard AWS variables; a large
//! file goes up in parts. Without the service the trial is ignored with the
//! reason `service`, never passed; `.ci/run` starts it and fails on any
//! ignored trial.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value as Json;

/// The services' env file, as `gates/services start` wrote it.
fn services() -> Result<BTreeMap<String, String>, String> {
    let path = std::env::var("CLINK_SERVICES_ENV").unwrap_or_else(|_| {
        format!("{}/clink-services.env", std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into()))
    });
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e} (run gates/services start)"))?;
    let env: BTreeMap<String, String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for key in ["CLINK_S3_ENDPOINT", "CLINK_S3_BUCKET", "CLINK_S3_ACCESS_KEY", "CLINK_S3_SECRET_KEY"] {
        if !env.contains_key(key) {
            return Err(format!("{path} names no {key}"));
        }
    }
    Ok(env)
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), Failed> {
    if ok {
        Ok(())
    } else {
        Err(what().into())
    }
}

/// `clink` with the S3 variables of the service, and no other AWS_* setting.
fn clink(env: &BTreeMap<String, String>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink"));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("AWS_")) {
        cmd.env_remove(key);
    }
    cmd.env("AWS_ENDPOINT_URL", &env["CLINK_S3_ENDPOINT"])
        .env("AWS_ACCESS_KEY_ID", &env["CLINK_S3_ACCESS_KEY"])
        .env("AWS_SECRET_ACCESS_KEY", &env["CLINK_S3_SECRET_KEY"])
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ALLOW_HTTP", "true");
    cmd
}

fn json(out: &Output) -> Json {
    serde_json::from_slice(&out.stdout).unwrap_or(Json::Null)
}

/// Every regular file under `root`, by relative path, with its bytes.
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(path.strip_prefix(root).unwrap().display().to_string(), std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// A run of the example job with captures armed, in `dir`.
fn example_run(dir: &Path) -> Result<(PathBuf, PathBuf), Failed> {
    let bin = env!("CARGO_BIN_EXE_clink");
    let input = dir.join("input");
    let gen = Command::new(bin).args(["gen-input", "--seed", "1", "--events", "6000", "--out"]).arg(&input).output()?;
    check(gen.status.success(), || text(&gen))?;
    let job = format!("{}/../fixtures/jobs/example/job.json", env!("CARGO_MANIFEST_DIR"));
    let run = Command::new(bin)
        .args(["run", "--quiet", "--checkpoint-every-records", "500", "--retain-checkpoints", "1000", "--job", &job])
        .arg("--input-dir")
        .arg(&input)
        .arg("--output-dir")
        .arg(dir.join("out"))
        .arg("--checkpoint-dir")
        .arg(dir.join("ck"))
        .arg("--capture-dir")
        .arg(dir.join("capture"))
        .output()?;
    check(run.status.success(), || text(&run))?;
    Ok((dir.join("capture"), dir.join("ck")))
}

/// 20 MiB that no other file shares, so it is sent in parts (8 MiB each).
fn large_file(path: &Path) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(20 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while bytes.len() < 20 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, bytes)
}

fn round_trip(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let scratch = tempfile::tempdir()?;
    let (capture, ck) = example_run(scratch.path())?;
    large_file(&capture.join("large.bin"))?;
    let prefix = format!("trial-{}-{}", std::process::id(), scratch.path().file_name().unwrap().to_string_lossy());
    let store = format!("s3://{}/{prefix}", env["CLINK_S3_BUCKET"]);
    let push = || {
        clink(env)
            .args(["capture", "push", "--json", "--capture-dir"])
            .arg(&capture)
            .arg("--checkpoint-dir")
            .arg(&ck)
            .arg(&store)
            .output()
    };
    let first = push()?;
    check(first.status.success(), || text(&first))?;
    let first = json(&first);
    let files = first["files"].as_u64().unwrap_or(0);
    check(files > 100 && first["objects_written"].as_u64() == Some(files), || format!("first push: {first}"))?;

    let second = push()?;
    check(second.status.success(), || text(&second))?;
    let second = json(&second);
    check(second["objects_written"] == 0 && second["objects_present"].as_u64() == Some(files), || {
        format!("second push: {second}")
    })?;
    check(second["reference"] == first["reference"] && second["manifest_written"] == false, || {
        format!("second push: {second}")
    })?;
    eprintln!("s3 dedup: first push wrote {files} objects; the second wrote 0, found {files} present");

    let reference = first["reference"].as_str().unwrap_or_default().to_string();
    let dest = scratch.path().join("fetched");
    let fetched = clink(env).args(["capture", "fetch"]).arg(&store).arg(&reference).arg(&dest).output()?;
    check(fetched.status.success(), || text(&fetched))?;
    check(tree(&dest.join("capture")) == tree(&capture), || "the fetched capture differs from the source".into())?;
    check(tree(&dest.join("checkpoint")) == tree(&ck), || "the fetched checkpoints differ from the source".into())?;
    let sweep = Command::new(env!("CARGO_BIN_EXE_clink"))
        .args(["replay", "sweep", "--job", "1", "--capture-dir"])
        .arg(dest.join("capture"))
        .arg("--checkpoint-dir")
        .arg(dest.join("checkpoint"))
        .output()?;
    check(sweep.status.success(), || text(&sweep))?;

    // What the store lacks is refused (exit 2) and leaves nothing.
    let other = scratch.path().join("other");
    let missing = clink(env).args(["capture", "fetch"]).arg(&store).arg("0".repeat(64)).arg(&other).output()?;
    check(missing.status.code() == Some(2) && text(&missing).contains("no manifest"), || text(&missing))?;
    check(!other.exists(), || "a refused fetch left DEST".into())?;
    // Refused credentials are a store that did not answer: exit 3, nothing left.
    let denied = clink(env)
        .env("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        .args(["capture", "fetch"])
        .arg(&store)
        .arg(&reference)
        .arg(&other)
        .output()?;
    check(denied.status.code() == Some(3), || text(&denied))?;
    check(!other.exists(), || "a refused fetch left DEST".into())
}

fn main() {
    let args = Arguments::from_args();
    let name = "s3::push-fetch-dedup-multipart-replay";
    let trial = match services() {
        Ok(env) => Trial::test(name, move || round_trip(&env)),
        Err(why) => {
            eprintln!("the S3 trial is ignored as `service`: {why}");
            Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("service")
        }
    };
    libtest_mimic::run(&args, vec![trial]).exit();
}
