//! `clink-test-candidate`: a test double of an A/B candidate build, for
//! `harness/tests/replay_ab.rs` only (never installed). It answers
//! `capabilities --json` with the document its plan holds and replays an
//! epoch with the same library this build replays with, and before (or
//! after) doing so it attempts what its plan says: write over its own file,
//! write beside it, exec another program, read a file, connect, spawn a
//! child, sleep, write past a bound. Each attempt is reported on standard
//! error as `double: <what>: ok` or `double: <what>: failed: <why>`.
//!
//! Its plan is part of its own bytes: a test appends `PLAN MAGIC LENGTH` to
//! a copy of this binary (JSON, then b"CLINKDBL", then the plan's length as
//! 8 little-endian bytes), so each plan is another build with another hash,
//! and the double needs nothing but itself to know how to behave.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use clink_basics::ids::OperatorId;
use clink_replay::emissions::encode_dump;
use clink_replay::{load_epoch, replay, EpochRef};
use serde_json::Value as Json;

const MAGIC: &[u8; 8] = b"CLINKDBL";

fn say(what: &str, result: Result<String, String>) {
    match result {
        Ok(detail) if detail.is_empty() => eprintln!("double: {what}: ok"),
        Ok(detail) => eprintln!("double: {what}: ok: {detail}"),
        Err(why) => eprintln!("double: {what}: failed: {why}"),
    }
}

/// The plan appended to this binary, or an empty one.
fn plan() -> Result<Json, String> {
    let me = std::env::current_exe().map_err(|e| format!("its own path: {e}"))?;
    let mut file = std::fs::File::open(&me).map_err(|e| format!("{}: {e}", me.display()))?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    if len < 16 {
        return Ok(Json::Null);
    }
    let mut tail = [0u8; 16];
    file.seek(SeekFrom::Start(len - 16)).and_then(|_| file.read_exact(&mut tail)).map_err(|e| e.to_string())?;
    if &tail[..8] != MAGIC {
        return Ok(Json::Null);
    }
    let size = u64::from_le_bytes(tail[8..].try_into().map_err(|_| "a bent length")?);
    let start = len.checked_sub(16 + size).ok_or("a plan longer than the file")?;
    let mut text = vec![0u8; usize::try_from(size).map_err(|_| "a plan too long")?];
    file.seek(SeekFrom::Start(start)).and_then(|_| file.read_exact(&mut text)).map_err(|e| e.to_string())?;
    serde_json::from_slice(&text).map_err(|e| format!("the plan: {e}"))
}

/// The value after `--name` in the arguments.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
}

fn io<T>(r: std::io::Result<T>) -> Result<String, String> {
    r.map(|_| String::new()).map_err(|e| e.to_string())
}

/// Runs one attempt of the plan; `Some(code)` ends the process.
fn attempt(action: &Json, args: &[String]) -> Option<u8> {
    let me = std::env::current_exe().unwrap_or_default();
    let text = |k: &str| action[k].as_str().unwrap_or_default().to_string();
    let number = |k: &str| action[k].as_u64().unwrap_or_default();
    match action["do"].as_str().unwrap_or_default() {
        "write_self" => {
            // An adversary first makes its file writable by its owner.
            use std::os::unix::fs::PermissionsExt;
            say("chmod its own file", io(std::fs::set_permissions(&me, std::fs::Permissions::from_mode(0o700))));
            let opened = std::fs::OpenOptions::new().append(true).open(&me);
            say("write its own file", io(opened.and_then(|mut f| f.write_all(b"\0"))));
            let next = me.with_extension("next");
            let swapped = std::fs::write(&next, b"#!/bin/sh\nexit 7\n").and_then(|_| std::fs::rename(&next, &me));
            say("replace its own file", io(swapped));
        }
        "write_beside" => {
            let beside = me.parent().unwrap_or(Path::new("/")).join(text("name"));
            say(&format!("write {}", beside.display()), io(std::fs::write(&beside, b"written")));
        }
        "exec" => {
            use std::os::unix::process::CommandExt;
            let program = text("path");
            let err = Command::new(&program).args(args).exec();
            say(&format!("exec {program}"), Err(err.to_string()));
        }
        "read" => {
            let path = text("path");
            say(
                &format!("read {path}"),
                std::fs::read(&path).map(|b| format!("{} bytes", b.len())).map_err(|e| e.to_string()),
            );
        }
        "connect" => {
            let to = std::net::SocketAddr::from(([127, 0, 0, 1], number("port") as u16));
            let tried = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(2));
            say(&format!("connect {to}"), io(tried));
        }
        "spawn_sleeper" => {
            let child = Command::new(&me).args(["sleep-child", &number("seconds").to_string()]).spawn();
            match child {
                Ok(mut c) => {
                    say("spawn a sleeper", Ok(format!("pid {}", c.id())));
                    let _ = c.wait();
                }
                Err(e) => say("spawn a sleeper", Err(e.to_string())),
            }
        }
        "sleep_ms" => std::thread::sleep(Duration::from_millis(number("ms"))),
        "flood" => {
            let out = format!("{}{}", flag(args, "--out").unwrap_or("flood"), text("suffix"));
            say(
                &format!("write {} bytes", number("bytes")),
                io(std::fs::write(&out, vec![0u8; number("bytes") as usize])),
            );
        }
        "append" => {
            let path = text("path");
            let opened = std::fs::OpenOptions::new().append(true).open(&path);
            say(&format!("append to {path}"), io(opened.and_then(|mut f| f.write_all(b"x"))));
        }
        "exit" => return Some(number("code") as u8),
        other => say(&format!("unknown action {other:?}"), Err("not done".into())),
    }
    None
}

fn attempts(plan: &Json, key: &str, args: &[String]) -> Option<u8> {
    plan[key].as_array().into_iter().flatten().find_map(|a| attempt(a, args))
}

/// `replay epoch ... --out FILE`, as this build's replay does it.
fn replay_epoch(args: &[String]) -> Result<String, String> {
    let number = |name: &str| -> Result<u64, String> {
        flag(args, name).ok_or(format!("no {name}"))?.parse().map_err(|e| format!("{name}: {e}"))
    };
    let at = EpochRef {
        operator: OperatorId(number("--op")?),
        subtask: u32::try_from(number("--subtask")?).map_err(|e| e.to_string())?,
        epoch: number("--epoch")?,
    };
    let dir = |name: &str| flag(args, name).map(PathBuf::from).ok_or(format!("no {name}"));
    let job = number("--job")?;
    let evidence =
        load_epoch(&dir("--capture-dir")?, &dir("--checkpoint-dir")?, job, &at).map_err(|e| e.to_string())?;
    let outcome = replay(&evidence).map_err(|e| e.to_string())?;
    std::fs::write(dir("--out")?, encode_dump(job, &at, &outcome.emissions)).map_err(|e| e.to_string())?;
    Ok(format!("{at}: {} emissions", outcome.emissions.len()))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("sleep-child") {
        let seconds = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
        std::thread::sleep(Duration::from_secs(seconds));
        return ExitCode::SUCCESS;
    }
    let plan = match plan() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("double: no plan: {why}");
            return ExitCode::from(2);
        }
    };
    match args.first().map(String::as_str) {
        Some("capabilities") => {
            if let Some(code) = attempts(&plan, "on_capabilities", &args) {
                return ExitCode::from(code);
            }
            match plan.get("capabilities") {
                Some(doc) if !doc.is_null() => {
                    println!("{doc}");
                    ExitCode::SUCCESS
                }
                _ => {
                    eprintln!("double: the plan declares no capabilities");
                    ExitCode::from(2)
                }
            }
        }
        Some("replay") => {
            if let Some(code) = attempts(&plan, "on_replay", &args) {
                return ExitCode::from(code);
            }
            let replayed = replay_epoch(&args);
            let ok = replayed.is_ok();
            say("replay", replayed);
            if let Some(code) = attempts(&plan, "after_replay", &args) {
                return ExitCode::from(code);
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            }
        }
        _ => {
            eprintln!("double: usage: capabilities --json | replay epoch ... --out FILE");
            ExitCode::from(2)
        }
    }
}
