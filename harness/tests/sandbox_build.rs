//! gates/sandbox-build, CI's stand-in for Nix's build sandbox, on a probe
//! package small enough to build in seconds: a flake of its own (evaluated
//! against support/flake_standin.nix, as the gate evaluates ours) whose crate
//! has a build script that runs a `#!/usr/bin/env bash` script, compiles C
//! with `cc`, tries a loopback port the test listens on outside, and looks
//! for perl and python3, which the probe's derivation does not name.
//!
//! It shows the sandbox is what it claims: the probe fails there for the
//! reason our package failed (the script's interpreter, /usr/bin/env, does
//! not exist), builds once postPatch patches the shebang, and the binary
//! built records that the network and the unnamed tools were out of reach.
//! The gate refuses what it does not emulate (an unknown attribute, a check
//! phase, another source). The full
//! build of our package in the same sandbox is CI's (.ci/run), not a trial
//! here: it takes many minutes.
//!
//! Without bwrap, nix-instantiate or git on PATH every trial is ignored as
//! `sandbox` (CI installs them, and fails on an ignored trial).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};

const GATE: &str = "gates/sandbox-build";

/// The probe's build script: each fact it finds becomes an env var the binary prints.
const BUILD_RS: &str = r#"
use std::io::Write;
use std::process::Command;
fn main() {
    let out = std::env::var("OUT_DIR").unwrap();
    // The trap: a script whose interpreter is found through /usr/bin/env.
    let gen = Command::new("./tools/gen").output().unwrap_or_else(|e| panic!("./tools/gen: {e}"));
    assert!(gen.status.success(), "./tools/gen failed");
    std::io::stdout().write_all(&gen.stdout).unwrap();
    // The C compiler stdenv gives: cc and ar.
    let ok = Command::new("cc").args(["-c", "probe.c", "-o"]).arg(format!("{out}/probe.o")).status().unwrap();
    assert!(ok.success(), "cc failed");
    let ok = Command::new("ar").args(["rcs"]).arg(format!("{out}/libprobe.a")).arg(format!("{out}/probe.o"))
        .status().unwrap();
    assert!(ok.success(), "ar failed");
    println!("cargo:rustc-link-search=native={out}");
    println!("cargo:rustc-link-lib=static=probe");
    // The network: a loopback port that answers outside the sandbox.
    let port: u16 = std::fs::read_to_string("tools/port").unwrap().trim().parse().unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let net = match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)) {
        Ok(_) => "reached".to_string(),
        Err(e) => format!("unreachable ({:?})", e.kind()),
    };
    println!("cargo:rustc-env=PROBE_NET={net}");
    // Tools the derivation does not name.
    for tool in ["perl", "python3"] {
        let found = Command::new(tool).arg("--version").output().is_ok();
        println!("cargo:rustc-env=PROBE_{}={}", tool.to_uppercase(), if found { "found" } else { "absent" });
    }
}
"#;

const MAIN_RS: &str = r#"
extern "C" { fn probe_answer() -> i32; }
fn main() {
    if std::env::args().nth(1).as_deref() == Some("--facts") {
        println!("gen={} net={} perl={} python3={} c={}", env!("PROBE_GEN"), env!("PROBE_NET"),
            env!("PROBE_PERL"), env!("PROBE_PYTHON3"), unsafe { probe_answer() });
    } else {
        println!("probe 0.1.0");
    }
}
"#;

const FLAKE: &str = r#"{
  outputs = { self, nixpkgs }: {
    packages.x86_64-linux.default = nixpkgs.legacyPackages.x86_64-linux.rustPlatform.buildRustPackage {
      pname = "probe";
      version = "0.1.0";
      src = self;
      cargoLock.lockFile = ./Cargo.lock;
      cargoBuildFlags = [ "--bin" "probe" ];
      nativeBuildInputs = [ ];
      postPatch = ''
        patchShebangs tools
      '';
      doCheck = false;
    };
  };
}
"#;

/// Writes the probe's flake (with one edit, or none when `from` is empty) and
/// crate into `dir` as a git repository (a flake's source is its tracked files).
fn write_probe(dir: &Path, (from, to): Edit, port: u16) -> Result<(), String> {
    let io = |e: std::io::Error| format!("writing the probe: {e}");
    let flake = if from.is_empty() { FLAKE.to_string() } else { FLAKE.replacen(from, to, 1) };
    let files: &[(&str, String)] = &[
        ("flake.nix", flake),
        ("Cargo.toml", "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n".into()),
        ("Cargo.lock", "version = 4\n\n[[package]]\nname = \"probe\"\nversion = \"0.1.0\"\n".into()),
        ("build.rs", BUILD_RS.into()),
        ("src/main.rs", MAIN_RS.into()),
        ("probe.c", "int probe_answer(void) { return 42; }\n".into()),
        ("tools/gen", "#!/usr/bin/env bash\necho \"cargo:rustc-env=PROBE_GEN=ran\"\n".into()),
        ("tools/port", format!("{port}\n")),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&path, text).map_err(io)?;
    }
    std::fs::set_permissions(dir.join("tools/gen"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).map_err(io)?;
    for args in [&["init", "-q"][..], &["add", "-A"][..]] {
        let status = Command::new("git").args(args).current_dir(dir).status().map_err(|e| format!("git: {e}"))?;
        if !status.success() {
            return Err(format!("git {args:?} failed"));
        }
    }
    Ok(())
}

/// An edit of the probe's flake: (from, to).
type Edit = (&'static str, &'static str);
const AS_IS: Edit = ("", "");
const UNPATCHED: Edit = ("patchShebangs tools", "");

/// What one run of the gate over the probe gave.
struct Run {
    code: Option<i32>,
    output: String,
    /// The work directory it kept (--keep), removed when the run is dropped.
    work: Option<PathBuf>,
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(work) = &self.work {
            let _ = std::fs::remove_dir_all(work);
        }
    }
}

struct Ctx {
    root: PathBuf,
}

impl Ctx {
    /// Runs the gate with --keep over a probe written with these choices,
    /// while a listener answers on a loopback port outside the sandbox.
    fn run(&self, edit: Edit) -> Result<Run, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("listening on loopback: {e}"))?;
        let port = listener.local_addr().map_err(|e| format!("the listener's port: {e}"))?.port();
        // The control: the port answers outside the sandbox.
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("the control connection failed: {e}"))?;
        write_probe(dir.path(), edit, port)?;
        let out = Command::new(self.root.join(GATE))
            .arg("--keep")
            .env("SANDBOX_FLAKE_DIR", dir.path())
            .output()
            .map_err(|e| format!("cannot run {GATE}: {e}"))?;
        let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let work = output
            .lines()
            .find_map(|l| l.strip_prefix("sandbox-build: work directory "))
            .map(|w| PathBuf::from(w.trim()));
        Ok(Run { code: out.status.code(), output, work })
    }
}

fn expect_code(run: &Run, code: i32) -> Result<(), String> {
    if run.code == Some(code) {
        Ok(())
    } else {
        Err(format!("the gate exited {:?}, not {code}:\n{}", run.code, run.output))
    }
}

fn expect_said(run: &Run, needles: &[&str]) -> Result<(), String> {
    match needles.iter().find(|n| !run.output.contains(**n)) {
        None => Ok(()),
        Some(n) => Err(format!("the gate's output does not say {n:?}:\n{}", run.output)),
    }
}

/// Unpatched, the build script's ./tools/gen cannot start: its interpreter
/// is /usr/bin/env, which the sandbox does not have.
fn env_shebang_fails(ctx: &Ctx) -> Result<(), String> {
    let run = ctx.run(UNPATCHED)?;
    expect_code(&run, 1)?;
    expect_said(&run, &["sandbox: no /usr/bin/env", "./tools/gen: No such file or directory", "FAILED"])
}

/// Patched, it builds: the script ran, cc and ar worked, the loopback port
/// that answers outside was unreachable inside, perl and python3 were absent.
fn patched_probe_builds_isolated(ctx: &Ctx) -> Result<(), String> {
    let run = ctx.run(AS_IS)?;
    expect_code(&run, 0)?;
    expect_said(&run, &["network interfaces: lo ", "-> #!/tools/bin/bash", "probe: probe 0.1.0", "PASSED"])?;
    let work = run.work.as_ref().ok_or_else(|| format!("the gate named no work directory:\n{}", run.output))?;
    let binary = work.join("build/target/x86_64-unknown-linux-gnu/release/probe");
    let out = Command::new(&binary).arg("--facts").output().map_err(|e| format!("{}: {e}", binary.display()))?;
    let facts = String::from_utf8_lossy(&out.stdout);
    let want = ["gen=ran", "net=unreachable", "perl=absent", "python3=absent", "c=42"];
    match want.iter().find(|w| !facts.contains(**w)) {
        None => Ok(()),
        Some(w) => Err(format!("the probe built in the sandbox says `{}`, not {w}", facts.trim())),
    }
}

/// What would change a Nix build but the gate does not emulate is refused
/// (exit 2), never ignored: an attribute it does not know, a check phase,
/// another source than the flake's.
fn unemulated_refused(ctx: &Ctx) -> Result<(), String> {
    let cases: [(Edit, &[&str]); 3] = [
        (
            ("doCheck = false;", "doCheck = false; propagatedBuildInputs = [ ];"),
            &["['propagatedBuildInputs']", "does not emulate"],
        ),
        (("doCheck = false;", "doCheck = true;"), &["doCheck is not false"]),
        (("src = self;", "src = ./src;"), &["src is", "not the flake's own source"]),
    ];
    for (edit, needles) in cases {
        let run = ctx.run(edit)?;
        expect_code(&run, 2)?;
        expect_said(&run, needles)?;
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf);
    let missing: Vec<&str> =
        ["bwrap", "nix-instantiate", "git"].into_iter().filter(|t| which::which(t).is_err()).collect();
    type Check = fn(&Ctx) -> Result<(), String>;
    let checks: [(&str, Check); 3] = [
        ("sandbox::a_script_through_usr_bin_env_fails", env_shebang_fails),
        ("sandbox::patched_probe_builds_with_no_network_and_no_unnamed_tools", patched_probe_builds_isolated),
        ("sandbox::what_it_does_not_emulate_is_refused", unemulated_refused),
    ];
    let ctx = root.map(|root| Arc::new(Ctx { root }));
    let trials = checks
        .into_iter()
        .map(|(name, check)| match (&ctx, missing.is_empty()) {
            (Some(ctx), true) => {
                let ctx = Arc::clone(ctx);
                Trial::test(name, move || check(&ctx).map_err(Failed::from))
            }
            (None, _) => Trial::test(name, || Err(Failed::from("no repository root above CARGO_MANIFEST_DIR"))),
            (_, false) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("sandbox"),
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
