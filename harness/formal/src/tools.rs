//! Where the formal tools are: the repository's `formal/` directory, a Java
//! runtime, and the TLA+ jar pinned by SHA-256 in `formal/tools.env`.

use std::path::{Path, PathBuf};

use clink_basics::digest::sha256_hex;

pub const FORMAL_DIR_ENV: &str = "CLINK_FORMAL_DIR";
pub const TOOLS_DIR_ENV: &str = "CLINK_FORMAL_TOOLS_DIR";
pub const DEPS_PREFIX_ENV: &str = "CLINK_DEPS_PREFIX";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormalTools {
    pub formal_dir: PathBuf,
    pub java: PathBuf,
    pub jar: PathBuf,
}

/// The pins `formal/tools.env` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsEnv {
    pub jar_name: String,
    pub sha256: String,
    pub install_subdir: String,
}

pub fn read_tools_env(formal_dir: &Path) -> Result<ToolsEnv, String> {
    let path = formal_dir.join("tools.env");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let get = |key: &str| {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim().trim_matches('"').to_string())
            .ok_or_else(|| format!("{}: no {key}", path.display()))
    };
    Ok(ToolsEnv {
        jar_name: get("TLA_TOOLS_JAR")?,
        sha256: get("TLA_TOOLS_SHA256")?,
        install_subdir: get("TLA_TOOLS_INSTALL_SUBDIR")?,
    })
}

/// The repository's formal directory: the argument, else `CLINK_FORMAL_DIR`,
/// else the `formal/` of the workspace this binary was built from.
pub fn formal_dir(explicit: Option<&Path>) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(FORMAL_DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../formal"))
}

/// Finds Java and the pinned jar; `Err` says why they are unavailable.
pub fn locate(formal: Option<&Path>, tools_dir: Option<&Path>) -> Result<FormalTools, String> {
    let formal_dir = formal_dir(formal);
    let pins = read_tools_env(&formal_dir)?;
    let java = which::which("java").map_err(|_| "no java on PATH".to_string())?;
    let dir = tools_dir
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(TOOLS_DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| {
            let prefix = std::env::var_os(DEPS_PREFIX_ENV)
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".clink-deps")))
                .unwrap_or_else(|| PathBuf::from(".clink-deps"));
            prefix.join(&pins.install_subdir)
        });
    let jar = dir.join(&pins.jar_name);
    let bytes = std::fs::read(&jar).map_err(|e| format!("{}: {e} (run gates/fetch-tools)", jar.display()))?;
    let digest = sha256_hex(&bytes);
    if digest != pins.sha256 {
        return Err(format!("{} has SHA-256 {digest}, not the pinned {}", jar.display(), pins.sha256));
    }
    Ok(FormalTools { formal_dir, java, jar })
}
