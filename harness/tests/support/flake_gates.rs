//! The gates as the flake tests see them: the scripts under gates/, and which
//! of them users run (each of those needs an app). Shared by
//! harness/tests/flake_shape.rs (the parsed table) and
//! harness/tests/flake_eval.rs (the evaluated apps), so both hold the flake
//! to one list. Only std: it moves with the tests that include it.

use std::collections::BTreeMap;
use std::path::Path;

/// Scripts under gates/ that users do not run directly, so they need no app.
pub const INTERNAL: &[&str] = &[
    // A step of incident-gate: it proves
    // isolation before a verification relies on it.
    "network-isolation",
    // Re-records traces/ for developers; its output is committed.
    "record-traces",
    // Builds the prior release that upgrade-gate compares against.
    "build-release",
    // Installs the services with apt and cargo on machines without Nix;
    // under Nix the services app takes them from nixpkgs.
    "install-services",
    // Builds the release binaries from a checkout and puts them on PATH;
    // under Nix the package is clink, built by the flake.
    "install-clink",
    // CI's stand-in for Nix's build sandbox on machines without a Nix
    // store; with Nix, `nix build` is the real thing.
    "sandbox-build",
    // Sourced by the gates, never run.
    "lib.sh",
    // The README's test command: cargo's test binaries from a checkout,
    // run in the dev shell under Nix, never as an app of the package.
    "test",
    // A step of CI, build-release and the defect-variant builds: a new
    // target directory started from a built one.
    "seed-target",
];
/// Prefixes of internal scripts: refresh-* re-make committed fixtures.
pub const INTERNAL_PREFIXES: &[&str] = &["refresh-"];

/// Largest file the tests read (gates, flake.nix, flake.lock).
pub const MAX_FILE: u64 = 1 << 20;

/// A script under gates/.
#[derive(Clone, Debug)]
pub struct Gate {
    pub executable: bool,
    pub text: String,
}

/// Every regular file directly under `dir` (subdirectories and links are
/// not gates), by name.
pub fn read_gates(dir: &Path) -> Result<BTreeMap<String, Gate>, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut gates = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if !meta.is_file() {
            continue;
        }
        let name = entry.file_name().into_string().map_err(|n| format!("gates/{n:?}: not a UTF-8 name"))?;
        gates.insert(name, Gate { executable: meta.permissions().mode() & 0o100 != 0, text: read_bounded(&path)? });
    }
    Ok(gates)
}

/// A file's text, refused when it is larger than MAX_FILE.
pub fn read_bounded(path: &Path) -> Result<String, String> {
    let len = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    if len > MAX_FILE {
        return Err(format!("{}: {len} bytes, more than this test reads", path.display()));
    }
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether users never run this gate directly (so it needs no app).
pub fn is_internal(gate: &str) -> bool {
    INTERNAL.contains(&gate) || INTERNAL_PREFIXES.iter().any(|p| gate.starts_with(p))
}
