//! The flake evaluated, as far as a machine without Nix network allows:
//! `nix-instantiate --eval --strict` calls flake.nix's `outputs` with a
//! stand-in nixpkgs (support/flake_standin.nix: every package a name and a
//! made-up store path, every builder its arguments) and prints what came out.
//! The checks below hold that to the flake's promises: every app is an app
//! whose program runs the packaged binary (CLINK_BIN) and a gate of the
//! flake's own source, never ./gates; every gate a user runs has an app; the
//! package's pname, version (Cargo.toml's) and cargoLock.lockFile; the dev
//! shell's packages; the check running the flake tests.
//!
//! The stand-in provides exactly the attributes the flake uses: a misspelt
//! or unknown attribute fails the evaluation, and every attribute it offers
//! must have been used (it traces each use). Nothing here says the real
//! nixpkgs has those attributes or that anything builds (README, "With
//! Nix"). Without `nix-instantiate` every trial is ignored as `nix`. Each
//! check is also fed a broken flake or gates/ (`selftest::…`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value as Json;

#[path = "support/flake_gates.rs"]
#[allow(dead_code)] // the gates' texts are the shape test's business
mod flake_gates;
use flake_gates::{is_internal, read_bounded, read_gates};

const SYSTEMS: &[&str] = &["x86_64-linux", "aarch64-linux"];
const OUTPUTS: &[&str] = &["apps", "checks", "devShells", "packages"];
/// How the stand-in names a package's store path: this, the system, a dash, the name.
const STANDIN_STORE: &str = "/nix/store/standin-";
/// How Nix prints a stand-in trace on stderr.
const TRACE: &str = "trace: clink-standin ";
/// What the package's postPatch must be: the vendored librdkafka's scripts
/// pointed at stdenv's bash (gates/sandbox-build shows the build fails without).
const PATCH_SHEBANGS: &str = "patchShebangs $cargoDepsCopy/rdkafka-sys-*/librdkafka";
/// The gate that builds the package in a stand-in of Nix's build sandbox.
const SANDBOX_GATE: &str = "gates/sandbox-build";
/// The tests checks.flake-shape must run.
const CHECK_TESTS: &[&str] = &["flake_shape", "flake_eval"];

// ---------------------------------------------------------------------------
// The evaluation.

/// What one evaluation gave: the outputs as JSON, what the stand-in offered,
/// what the flake used of it, and the scripts it wrote (store path -> name, text).
struct Evaluated {
    dir: PathBuf,
    outputs: Json,
    provided: BTreeSet<String>,
    used: BTreeSet<String>,
    scripts: BTreeMap<String, (String, String)>,
}

fn evaluate(nix: &Path, standin: &Path, dir: &Path) -> Result<Evaluated, String> {
    let dir_text = dir.to_str().ok_or_else(|| format!("{}: not a UTF-8 path", dir.display()))?;
    let out = Command::new(nix)
        .args(["--store", "dummy://", "--eval", "--strict", "--json"])
        .arg(standin)
        .args(["--argstr", "flakeDir", dir_text])
        .current_dir("/")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", nix.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (traces, rest): (Vec<&str>, Vec<&str>) = stderr.lines().partition(|l| l.starts_with(TRACE));
    if !out.status.success() {
        return Err(format!("nix-instantiate --eval refused the flake ({}):\n{}", out.status, rest.join("\n")));
    }
    let doc: Json = serde_json::from_slice(&out.stdout).map_err(|e| format!("nix-instantiate printed no JSON: {e}"))?;
    let provided = strings(at(&doc, &["provided"])?, "provided")?.into_iter().collect();
    let mut ev = Evaluated {
        dir: dir.to_path_buf(),
        outputs: at(&doc, &["outputs"])?.clone(),
        provided,
        used: BTreeSet::new(),
        scripts: BTreeMap::new(),
    };
    for line in traces {
        let note: Json = serde_json::from_str(&line[TRACE.len()..]).map_err(|e| format!("trace `{line}`: {e}"))?;
        if let Some(used) = note.get("use").and_then(Json::as_str) {
            ev.used.insert(used.to_string());
        } else if let (Some(name), Some(text), Some(path)) = (
            note.get("writeShellScript").and_then(Json::as_str),
            note.get("text").and_then(Json::as_str),
            note.get("path").and_then(Json::as_str),
        ) {
            ev.scripts.insert(path.to_string(), (name.to_string(), text.to_string()));
        } else {
            return Err(format!("a stand-in trace this test does not know: {line}"));
        }
    }
    Ok(ev)
}

fn at<'a>(v: &'a Json, path: &[&str]) -> Result<&'a Json, String> {
    path.iter().try_fold(v, |v, k| v.get(*k).ok_or_else(|| format!("no `{}`", path.join("."))))
}
fn text_at<'a>(v: &'a Json, path: &[&str]) -> Result<&'a str, String> {
    at(v, path)?.as_str().ok_or_else(|| format!("`{}` is not a string", path.join(".")))
}
fn strings(v: &Json, what: &str) -> Result<Vec<String>, String> {
    let items = v.as_array().ok_or_else(|| format!("`{what}` is not a list"))?;
    items.iter().map(|i| i.as_str().map(str::to_string).ok_or_else(|| format!("`{what}` holds a non-string"))).collect()
}
fn keys(v: &Json) -> BTreeSet<String> {
    v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}
fn expect_keys(v: &Json, want: &[&str], what: &str) -> Result<(), String> {
    let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
    let got = keys(v);
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: the attributes are {got:?}, not {want:?}"))
    }
}
/// The derivation a stand-in builder returned, as the driver dumped it.
fn derivation<'a>(v: &'a Json, what: &str) -> Result<&'a Json, String> {
    v.get("derivation").ok_or_else(|| format!("{what} is not a derivation: {v}"))
}
/// The nixpkgs attribute a stand-in package of `system` is, from its store path.
fn package_name<'a>(path: &'a str, system: &str) -> Option<&'a str> {
    path.strip_prefix(STANDIN_STORE)?.strip_prefix(system)?.strip_prefix('-')
}
fn package_names(list: &Json, system: &str, what: &str) -> Result<Vec<String>, String> {
    let items = list.as_array().ok_or_else(|| format!("{what} is not a list"))?;
    items
        .iter()
        .map(|i| {
            let path = text_at(derivation(i, what)?, &["path"])?;
            package_name(path, system)
                .map(str::to_string)
                .ok_or_else(|| format!("{what}: {path} is no stand-in package"))
        })
        .collect()
}

/// The workspace version Cargo.toml declares ([workspace.package] version).
fn cargo_version(dir: &Path) -> Result<String, String> {
    let text = read_bounded(&dir.join("Cargo.toml"))?;
    let mut section = "";
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[workspace.package]" {
            if let Some(v) = line.strip_prefix("version").map(str::trim_start).and_then(|r| r.strip_prefix('=')) {
                return Ok(v.trim().trim_matches('"').to_string());
            }
        }
    }
    Err("Cargo.toml: no [workspace.package] version".into())
}

fn all_or_problems(problems: Vec<String>) -> Result<(), String> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

// ---------------------------------------------------------------------------
// The checks.

/// The stand-in offered exactly what the flake used.
fn check_stand_in(ev: &Evaluated) -> Result<(), String> {
    let unused: Vec<&String> = ev.provided.difference(&ev.used).collect();
    let unknown: Vec<&String> = ev.used.difference(&ev.provided).collect();
    let mut problems = Vec::new();
    if !unused.is_empty() {
        problems.push(format!(
            "the stand-in provides what the flake does not use: {unused:?} (drop it from support/flake_standin.nix)"
        ));
    }
    if !unknown.is_empty() {
        problems.push(format!("the flake used what the stand-in does not list: {unknown:?}"));
    }
    all_or_problems(problems)
}

/// packages, apps, devShells and checks, each for exactly our systems.
fn check_shape(ev: &Evaluated) -> Result<(), String> {
    expect_keys(&ev.outputs, OUTPUTS, "the outputs")?;
    all_or_problems(
        OUTPUTS.iter().filter_map(|o| expect_keys(&ev.outputs[*o], SYSTEMS, &format!("`{o}`")).err()).collect(),
    )
}

/// The attributes a buildRustPackage of this flake must carry, package or check.
fn rust_package_problems(ev: &Evaluated, drv: &Json, pname: &str, what: &str) -> Result<Vec<String>, String> {
    let mut problems = Vec::new();
    let mut want = |field: &[&str], value: &str| match text_at(drv, field) {
        Ok(v) if v == value => {}
        Ok(v) => problems.push(format!("{what}: `{}` is {v:?}, not {value:?}", field.join("."))),
        Err(e) => problems.push(format!("{what}: {e}")),
    };
    let dir = ev.dir.to_string_lossy();
    want(&["pname"], pname);
    want(&["version"], &cargo_version(&ev.dir)?);
    want(&["cargoLock", "lockFile"], &format!("{dir}/Cargo.lock"));
    want(&["src"], &dir);
    want(&["meta", "mainProgram"], "clink");
    if text_at(drv, &["postPatch"]).map(str::trim) != Ok(PATCH_SHEBANGS) {
        problems.push(format!(
            "{what}: postPatch is not `{PATCH_SHEBANGS}` (librdkafka's ./configure runs /usr/bin/env, which the build \
             sandbox lacks)"
        ));
    }
    let flags = strings(at(drv, &["cargoBuildFlags"])?, "cargoBuildFlags")?;
    for bin in ["clink", "clink-reference-audit"] {
        if !flags.windows(2).any(|w| w[0] == "--bin" && w[1] == bin) {
            problems.push(format!("{what}: cargoBuildFlags {flags:?} do not build --bin {bin}"));
        }
    }
    Ok(problems)
}

/// packages.<system>.default: clink at Cargo.toml's version, from Cargo.lock, tests off.
fn check_package(ev: &Evaluated) -> Result<(), String> {
    let mut problems = Vec::new();
    for system in SYSTEMS {
        let what = format!("packages.{system}.default");
        expect_keys(&ev.outputs["packages"][*system], &["default"], &format!("packages.{system}"))?;
        let drv = derivation(&ev.outputs["packages"][*system]["default"], &what)?;
        problems.extend(rust_package_problems(ev, drv, "clink", &what)?);
        if drv.get("doCheck") != Some(&Json::Bool(false)) {
            problems.push(format!("{what}: doCheck is not false (its tests run in CI and the check)"));
        }
    }
    all_or_problems(problems)
}

/// One app's script: the tools it puts on PATH, or what is wrong with it.
fn read_app_script(ev: &Evaluated, system: &str, name: &str, text: &str) -> Result<Vec<String>, Vec<String>> {
    let mut problems = Vec::new();
    let dir = ev.dir.to_string_lossy();
    let package = text_at(&ev.outputs, &["packages", system, "default", "derivation", "path"]).map_err(|e| vec![e])?;
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    for (var, bin) in [("CLINK_BIN", "clink"), ("CLINK_REFERENCE_AUDIT_BIN", "clink-reference-audit")] {
        let line = format!("export {var}={package}/bin/{bin}");
        if lines.iter().filter(|l| **l == line).count() != 1 {
            problems
                .push(format!("app `{name}` ({system}) does not set `{line}` once: it must run the packaged binary"));
        }
    }
    match lines.iter().find_map(|l| l.strip_prefix("export CARGO_TARGET_DIR=")) {
        Some(v) if !v.contains(&*dir) => {}
        _ => problems.push(format!("app `{name}` ({system}) sets no CARGO_TARGET_DIR outside the read-only source")),
    }
    if text.contains("./gates") || lines.iter().any(|l| l.starts_with("cargo ")) {
        problems.push(format!("app `{name}` ({system}) runs ./gates or cargo itself: {text}"));
    }
    let exec = format!("exec {dir}/gates/{name} \"$@\"");
    if lines.last() != Some(&exec.as_str()) {
        problems.push(format!("app `{name}` ({system}) does not end with `{exec}`"));
    }
    let mut rest = text;
    while let Some(k) = rest.find("gates/") {
        let gate: String =
            rest[k + 6..].chars().take_while(|&c| c.is_ascii_alphanumeric() || c == '-' || c == '_').collect();
        if !rest[..k].ends_with(&format!("{dir}/")) {
            problems.push(format!("app `{name}` ({system}) names gates/{gate} outside the flake's source {dir}"));
        }
        match std::fs::metadata(ev.dir.join("gates").join(&gate)) {
            Ok(m) if m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o100 != 0 => {}
            _ => problems.push(format!("app `{name}` ({system}) runs gates/{gate}, which does not exist as a program")),
        }
        rest = &rest[k + 6..];
    }
    let tools = match lines.iter().find_map(|l| l.strip_prefix("export PATH=")).and_then(|v| v.strip_suffix(":$PATH")) {
        None => {
            problems.push(format!("app `{name}` ({system}) puts no tools on PATH ahead of the caller's"));
            Vec::new()
        }
        Some(v) => v
            .split(':')
            .filter_map(|entry| match entry.strip_suffix("/bin").and_then(|p| package_name(p, system)) {
                Some(tool) => Some(tool.to_string()),
                None => {
                    problems.push(format!("app `{name}` ({system}): PATH entry {entry} is no package's bin"));
                    None
                }
            })
            .collect(),
    };
    if problems.is_empty() {
        Ok(tools)
    } else {
        Err(problems)
    }
}

/// Every app of every system, with the tools on its PATH (or the problems).
fn read_apps(ev: &Evaluated) -> Result<BTreeMap<(String, String), Vec<String>>, String> {
    let mut apps = BTreeMap::new();
    let mut problems = Vec::new();
    for system in SYSTEMS {
        let Some(table) = ev.outputs["apps"][*system].as_object() else {
            return Err(format!("apps.{system} is not an attribute set"));
        };
        for (name, app) in table {
            let what = format!("apps.{system}.{name}");
            if let Err(e) = expect_keys(app, &["program", "type"], &what) {
                problems.push(e);
                continue;
            }
            if app["type"] != "app" {
                problems.push(format!("{what}: type is {}, not \"app\"", app["type"]));
            }
            let program = app["program"].as_str().unwrap_or_default();
            match ev.scripts.get(program) {
                Some((script, text)) if *script == format!("clink-{name}") => {
                    match read_app_script(ev, system, name, text) {
                        Ok(tools) => {
                            apps.insert((system.to_string(), name.clone()), tools);
                        }
                        Err(p) => problems.extend(p),
                    }
                }
                Some((script, _)) => problems.push(format!("{what}: program is the script {script}, not clink-{name}")),
                None => problems.push(format!("{what}: program {program:?} is no script the flake wrote")),
            }
        }
    }
    if problems.is_empty() {
        Ok(apps)
    } else {
        Err(problems.join("\n"))
    }
}

fn check_apps(ev: &Evaluated) -> Result<(), String> {
    read_apps(ev).map(|_| ())
}

/// Every gate a user runs has an app, on every system.
fn check_gates_have_apps(ev: &Evaluated) -> Result<(), String> {
    let gates = read_gates(&ev.dir.join("gates"))?;
    let mut problems = Vec::new();
    for gate in gates.keys().filter(|g| !is_internal(g)) {
        for system in SYSTEMS {
            if ev.outputs["apps"][*system].get(gate).is_none() {
                problems.push(format!(
                    "gates/{gate} has no app on {system}: add it to the `gates` table in flake.nix, or list it in \
                     INTERNAL in harness/tests/support/flake_gates.rs"
                ));
            }
        }
    }
    all_or_problems(problems)
}

/// The dev shell carries every tool some app puts on PATH, each once, and nothing else.
fn check_dev_shell(ev: &Evaluated) -> Result<(), String> {
    let apps = read_apps(ev)?;
    let mut problems = Vec::new();
    for system in SYSTEMS {
        let what = format!("devShells.{system}.default");
        expect_keys(&ev.outputs["devShells"][*system], &["default"], &format!("devShells.{system}"))?;
        let packages = package_names(
            at(derivation(&ev.outputs["devShells"][*system]["default"], &what)?, &["packages"])?,
            system,
            &what,
        )?;
        let listed: BTreeSet<&String> = packages.iter().collect();
        if listed.len() != packages.len() {
            problems.push(format!("{what} lists a package twice: {packages:?}"));
        }
        let on_paths: BTreeSet<&String> = apps.iter().filter(|((s, _), _)| s == system).flat_map(|(_, t)| t).collect();
        if listed != on_paths {
            problems.push(format!(
                "{what} has {listed:?}, but the apps' PATHs have {on_paths:?} (missing {:?}, extra {:?})",
                on_paths.difference(&listed).collect::<Vec<_>>(),
                listed.difference(&on_paths).collect::<Vec<_>>()
            ));
        }
    }
    all_or_problems(problems)
}

/// The names gates/sandbox-build prints, one per line up to a colon, for one mode.
fn sandbox_gate_names(ev: &Evaluated, mode: &str) -> Result<BTreeSet<String>, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or("no repository root")?;
    // Through bash: Nix's build sandbox, where checks.flake-shape runs this,
    // has no /usr/bin/env for the gate's shebang.
    let out = Command::new("bash")
        .arg(root.join(SANDBOX_GATE))
        .arg(mode)
        .env("SANDBOX_FLAKE_DIR", &ev.dir)
        .output()
        .map_err(|e| format!("cannot run {SANDBOX_GATE}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{SANDBOX_GATE} {mode} refused the flake ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        ));
    }
    let text = String::from_utf8(out.stdout).map_err(|_| format!("{SANDBOX_GATE} {mode}: output not UTF-8"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect())
}

/// The sandboxed build binds exactly the package's nativeBuildInputs and
/// buildInputs: the gate reads them from flake.nix (`--inputs`), and its
/// table of Debian packages (`--table`) has a line for each and for nothing
/// else, so the flake's lists are the one list.
fn check_sandbox_inputs(ev: &Evaluated) -> Result<(), String> {
    let mut problems = Vec::new();
    let mut named = BTreeMap::new();
    for system in SYSTEMS {
        let what = format!("packages.{system}.default");
        let drv = derivation(&ev.outputs["packages"][*system]["default"], &what)?;
        let mut inputs = BTreeSet::new();
        for attr in ["nativeBuildInputs", "buildInputs"] {
            inputs.extend(package_names(at(drv, &[attr])?, system, &format!("{what}.{attr}"))?);
        }
        named.insert(*system, inputs);
    }
    let flake = named.get("x86_64-linux").cloned().unwrap_or_default();
    if named.values().any(|n| *n != flake) {
        problems.push(format!("the systems' nativeBuildInputs differ: {named:?}"));
    }
    let bound = sandbox_gate_names(ev, "--inputs")?;
    if bound != flake {
        problems.push(format!("{SANDBOX_GATE} binds {bound:?}, but the flake's nativeBuildInputs are {flake:?}"));
    }
    let table = sandbox_gate_names(ev, "--table")?;
    if table != flake {
        problems.push(format!(
            "{SANDBOX_GATE}'s table maps {table:?}, but the flake's nativeBuildInputs are {flake:?} (one line per \
             input, no more)"
        ));
    }
    all_or_problems(problems)
}

/// checks.<system>.flake-shape builds clink with its tests on and runs the flake tests, with nix.
fn check_check(ev: &Evaluated) -> Result<(), String> {
    let mut problems = Vec::new();
    for system in SYSTEMS {
        let what = format!("checks.{system}.flake-shape");
        expect_keys(&ev.outputs["checks"][*system], &["flake-shape"], &format!("checks.{system}"))?;
        let drv = derivation(&ev.outputs["checks"][*system]["flake-shape"], &what)?;
        problems.extend(rust_package_problems(ev, drv, "clink-flake-shape", &what)?);
        if drv.get("doCheck") != Some(&Json::Bool(true)) {
            problems.push(format!("{what}: doCheck is not true"));
        }
        let flags = strings(at(drv, &["cargoTestFlags"])?, "cargoTestFlags")?;
        for test in CHECK_TESTS {
            if !flags.windows(2).any(|w| w[0] == "--test" && w[1] == *test) {
                problems.push(format!("{what}: cargoTestFlags {flags:?} do not run --test {test}"));
            }
        }
        let inputs = package_names(at(drv, &["nativeCheckInputs"])?, system, &what)?;
        if inputs != ["nix", "python3"] {
            problems.push(format!(
                "{what}: nativeCheckInputs are {inputs:?}, not [nix, python3] (the tests run nix-instantiate, and \
                 {SANDBOX_GATE}, which reads the evaluation with python3)"
            ));
        }
    }
    all_or_problems(problems)
}

// ---------------------------------------------------------------------------
// Trials.

struct Ctx {
    nix: PathBuf,
    root: PathBuf,
    standin: PathBuf,
    real: OnceLock<Result<Evaluated, String>>,
}

impl Ctx {
    fn real(&self) -> Result<&Evaluated, String> {
        self.real.get_or_init(|| evaluate(&self.nix, &self.standin, &self.root)).as_ref().map_err(Clone::clone)
    }

    /// A variant's evaluation must fail, or the check on it must, saying each needle.
    fn expect(&self, from: &str, to: &str, gates: &[&str], check: Check, needles: &[&str]) -> Result<(), String> {
        match self.variant(from, to, gates, |ev| check(&ev))? {
            Ok(()) => Err("the check passed on a deliberately broken flake".into()),
            Err(msg) => match needles.iter().find(|n| !msg.contains(**n)) {
                None => Ok(()),
                Some(n) => Err(format!("the check failed, but its message does not mention {n:?}:\n{msg}")),
            },
        }
    }

    /// The flake with one edit (none when `from` is empty) and gates/ with
    /// extra scripts, in a directory of its own beside copies of what it
    /// reads, evaluated and checked while that directory exists.
    fn variant(
        &self,
        from: &str,
        to: &str,
        extra_gates: &[&str],
        check: impl Fn(Evaluated) -> Result<(), String>,
    ) -> Result<Result<(), String>, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let flake = read_bounded(&self.root.join("flake.nix"))?;
        let edited = match flake.matches(from).count() {
            _ if from.is_empty() => flake,
            1 => flake.replacen(from, to, 1),
            n => return Err(format!("self-test out of date: expected `{from}` once in flake.nix, found it {n} times")),
        };
        let io = |e: std::io::Error| format!("copying the flake: {e}");
        std::fs::write(dir.path().join("flake.nix"), edited).map_err(io)?;
        for file in ["Cargo.toml", "Cargo.lock"] {
            std::fs::copy(self.root.join(file), dir.path().join(file)).map_err(io)?;
        }
        let gates = dir.path().join("gates");
        std::fs::create_dir(&gates).map_err(io)?;
        for name in read_gates(&self.root.join("gates"))?.keys() {
            std::fs::copy(self.root.join("gates").join(name), gates.join(name)).map_err(io)?;
        }
        for name in extra_gates {
            std::fs::copy(self.root.join("gates/example-job"), gates.join(name)).map_err(io)?;
        }
        Ok(evaluate(&self.nix, &self.standin, dir.path()).and_then(check))
    }
}

type Check = fn(&Evaluated) -> Result<(), String>;
/// A trial's body, given the context.
type Run = dyn Fn(&Ctx) -> Result<(), String> + Send + Sync;

fn real(check: Check) -> impl Fn(&Ctx) -> Result<(), String> {
    move |ctx| check(ctx.real()?)
}

const GATES_OPEN: &str = "gates = pkgs: with pkgs; {";
const DEV_SHELL: &str =
    "packages = pkgs.lib.unique (common pkgs ++ pkgs.lib.concatMap (g: g.tools) (builtins.attrValues (gates pkgs)));";

/// (name, edit from, edit to, extra gates, the check, what its failure says)
type SelfTest = (&'static str, &'static str, &'static str, &'static [&'static str], Check, &'static [&'static str]);

const SELF_TESTS: &[SelfTest] = &[
    (
        "misspelt_lib_function",
        "pkgs.lib.makeBinPath",
        "pkgs.lib.makeBinPth",
        &[],
        check_stand_in,
        &["attribute 'makeBinPth' missing"],
    ),
    (
        "tool_the_stand_in_lacks",
        "tools = [ python3 util-linux ]; };",
        "tools = [ python3 util-linux ripgrep ]; };",
        &[],
        check_stand_in,
        &["undefined variable 'ripgrep'"],
    ),
    (
        "stand_in_attribute_unused",
        "gnugrep gnused cargo",
        "gnugrep cargo",
        &[],
        check_stand_in,
        &["does not use", "gnused"],
    ),
    (
        "a_system_the_stand_in_lacks",
        r#"systems = [ "x86_64-linux" "aarch64-linux" ];"#,
        r#"systems = [ "x86_64-linux" "aarch64-linux" "x86_64-darwin" ];"#,
        &[],
        check_shape,
        &["attribute 'x86_64-darwin' missing"],
    ),
    (
        "misspelt_output",
        "devShells = forAll",
        "devShell = forAll",
        &[],
        check_shape,
        &["the outputs: the attributes are", "\"devShell\""],
    ),
    ("app_type", r#"type = "app";"#, r#"type = "App";"#, &[], check_apps, &["type is \"App\""]),
    (
        "app_with_no_gate",
        GATES_OPEN,
        "gates = pkgs: with pkgs; {\n        ghost-gate = { fetch = false; tools = [ ]; };",
        &[],
        check_apps,
        &["runs gates/ghost-gate, which does not exist"],
    ),
    (
        "gate_with_no_app",
        "",
        "",
        &["unlisted-gate"],
        check_gates_have_apps,
        &["gates/unlisted-gate has no app on x86_64-linux"],
    ),
    (
        "app_runs_gates_from_cwd",
        r#"exec ${self}/gates/${name} "$@""#,
        r#"exec ./gates/${name} "$@""#,
        &[],
        check_apps,
        &["runs ./gates"],
    ),
    (
        "app_without_clink_bin",
        "export CLINK_BIN=${package pkgs}/bin/clink\n",
        "",
        &[],
        check_apps,
        &["export CLINK_BIN=", "packaged binary"],
    ),
    (
        "app_builds_with_cargo",
        "export INSTA_UPDATE=no\n",
        "export INSTA_UPDATE=no\n          cargo build --release\n",
        &[],
        check_apps,
        &["runs ./gates or cargo itself"],
    ),
    (
        "app_target_in_the_store",
        "export CARGO_TARGET_DIR=\"''${CARGO_TARGET_DIR:-''${XDG_CACHE_HOME:-$HOME/.cache}/clink-rs/nix-target}\"",
        "export CARGO_TARGET_DIR=${self}/target",
        &[],
        check_apps,
        &["no CARGO_TARGET_DIR outside"],
    ),
    ("package_pname", r#"pname = "clink";"#, r#"pname = "clinc";"#, &[], check_package, &["`pname` is \"clinc\""]),
    ("package_version", "inherit version;", r#"version = "0.0.9";"#, &[], check_package, &["`version` is \"0.0.9\""]),
    (
        "package_lock_file",
        "cargoLock.lockFile = ./Cargo.lock;",
        "cargoLock.lockFile = ./Cargo.toml;",
        &[],
        check_package,
        &["cargoLock.lockFile", "Cargo.toml"],
    ),
    (
        "package_without_audit",
        r#" "-p" "clink-reference-audit" "--bin" "clink-reference-audit""#,
        "",
        &[],
        check_package,
        &["--bin clink-reference-audit"],
    ),
    (
        "dev_shell_short",
        DEV_SHELL,
        "packages = common pkgs;",
        &[],
        check_dev_shell,
        &["devShells.x86_64-linux.default has", "jdk17_headless"],
    ),
    (
        "package_without_shebang_patch",
        "patchShebangs $cargoDepsCopy/rdkafka-sys-*/librdkafka",
        "",
        &[],
        check_package,
        &["postPatch is not", "/usr/bin/env"],
    ),
    (
        "input_the_sandbox_lacks",
        "buildInputs = [ pkgs.rocksdb ];",
        "buildInputs = [ pkgs.rocksdb pkgs.git ];",
        &[],
        check_sandbox_inputs,
        &["sandbox-build --inputs refused", "names git, which the table"],
    ),
    (
        "check_runs_another_test",
        r#""--test" "flake_eval""#,
        r#""--test" "formal""#,
        &[],
        check_check,
        &["do not run --test flake_eval"],
    ),
];

fn trials(ctx: &Option<Result<Arc<Ctx>, String>>) -> Vec<Trial> {
    let mut list: Vec<(String, Box<Run>)> = vec![
        ("eval::stand_in_is_what_the_flake_uses".into(), Box::new(real(check_stand_in))),
        ("eval::outputs_for_each_system".into(), Box::new(real(check_shape))),
        ("eval::package".into(), Box::new(real(check_package))),
        ("eval::apps_run_the_package_and_the_stores_gates".into(), Box::new(real(check_apps))),
        ("eval::every_user_gate_has_an_app".into(), Box::new(real(check_gates_have_apps))),
        ("eval::dev_shell_carries_every_apps_tools".into(), Box::new(real(check_dev_shell))),
        ("eval::check_runs_the_flake_tests".into(), Box::new(real(check_check))),
        ("eval::sandbox_binds_the_flakes_native_build_inputs".into(), Box::new(real(check_sandbox_inputs))),
    ];
    for &(name, from, to, gates, check, needles) in SELF_TESTS {
        let run = move |ctx: &Ctx| ctx.expect(from, to, gates, check, needles);
        list.push((format!("selftest::{name}"), Box::new(run)));
    }
    list.into_iter()
        .map(|(name, check)| match ctx {
            None => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("nix"),
            Some(Err(e)) => {
                let e = e.clone();
                Trial::test(name, move || Err(Failed::from(e)))
            }
            Some(Ok(ctx)) => {
                let ctx = Arc::clone(ctx);
                Trial::test(name, move || check(&ctx).map_err(Failed::from))
            }
        })
        .collect()
}

fn main() {
    let args = Arguments::from_args();
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.ancestors().find(|d| d.join("flake.nix").is_file()).map(Path::to_path_buf);
    let ctx = match (which::which("nix-instantiate"), root) {
        (Ok(nix), Some(root)) => Some(Ok(Arc::new(Ctx {
            nix,
            root,
            standin: manifest.join("tests/support/flake_standin.nix"),
            real: OnceLock::new(),
        }))),
        (Ok(_), None) => Some(Err(format!("no flake.nix in {} or above", manifest.display()))),
        (Err(_), _) => None,
    };
    libtest_mimic::run(&args, trials(&ctx)).exit();
}
