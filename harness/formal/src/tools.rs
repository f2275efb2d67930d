//! Where the formal tools are: the repository's `formal/` directory, a Java
//! runtime, and the TLA+ jar pinned by SHA-256 in `formal/tools.env`.

use std::path::{Path, PathBuf};

use clink_basics::digest::sha256_hex;
use thiserror::Error;

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

/// Why the formal tools are unavailable.
#[derive(Debug, Error)]
pub enum ToolsError {
    /// `formal/tools.env` could not be read.
    #[error("{}: {error}", path.display())]
    Pins { path: PathBuf, error: std::io::Error },
    /// `formal/tools.env` has no line `key=...`.
    #[error("{}: no {key}", path.display())]
    NoPin { path: PathBuf, key: &'static str },
    #[error("no java on PATH")]
    NoJava,
    /// The pinned jar is not installed where it was looked for.
    #[error("{}: {error} (run gates/fetch-tools)", jar.display())]
    NoJar { jar: PathBuf, error: std::io::Error },
    #[error("{} has SHA-256 {digest}, not the pinned {pinned}", jar.display())]
    NotThePinnedJar { jar: PathBuf, digest: String, pinned: String },
}

pub fn read_tools_env(formal_dir: &Path) -> Result<ToolsEnv, ToolsError> {
    let path = formal_dir.join("tools.env");
    let text = std::fs::read_to_string(&path).map_err(|error| ToolsError::Pins { path: path.clone(), error })?;
    let get = |key: &'static str| {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim().trim_matches('"').to_string())
            .ok_or_else(|| ToolsError::NoPin { path: path.clone(), key })
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
pub fn locate(formal: Option<&Path>, tools_dir: Option<&Path>) -> Result<FormalTools, ToolsError> {
    let formal_dir = formal_dir(formal);
    let pins = read_tools_env(&formal_dir)?;
    let java = which::which("java").map_err(|_| ToolsError::NoJava)?;
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
    let bytes = std::fs::read(&jar).map_err(|error| ToolsError::NoJar { jar: jar.clone(), error })?;
    let digest = sha256_hex(&bytes);
    if digest != pins.sha256 {
        return Err(ToolsError::NotThePinnedJar { jar, digest, pinned: pins.sha256 });
    }
    Ok(FormalTools { formal_dir, java, jar })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_pins_and_jars_say_what_is_missing_and_where() {
        let scratch = tempfile::tempdir().unwrap();
        assert!(matches!(read_tools_env(scratch.path()), Err(ToolsError::Pins { .. })));
        std::fs::write(scratch.path().join("tools.env"), "# pins\nTLA_TOOLS_JAR=x.jar\n").unwrap();
        let e = read_tools_env(scratch.path()).unwrap_err();
        assert!(matches!(e, ToolsError::NoPin { key: "TLA_TOOLS_SHA256", .. }), "{e}");
        assert!(e.to_string().ends_with("tools.env: no TLA_TOOLS_SHA256"), "{e}");
        std::fs::write(
            scratch.path().join("tools.env"),
            "TLA_TOOLS_JAR=x.jar\nTLA_TOOLS_SHA256=00\nTLA_TOOLS_INSTALL_SUBDIR=\"tools\"\n",
        )
        .unwrap();
        let pins = read_tools_env(scratch.path()).unwrap();
        assert_eq!(pins.install_subdir, "tools");
        if which::which("java").is_ok() {
            let tools = scratch.path().join("tools");
            let e = locate(Some(scratch.path()), Some(&tools)).unwrap_err();
            assert!(matches!(&e, ToolsError::NoJar { jar, .. } if *jar == tools.join("x.jar")), "{e}");
            std::fs::create_dir(&tools).unwrap();
            std::fs::write(tools.join("x.jar"), b"not a jar").unwrap();
            let e = locate(Some(scratch.path()), Some(&tools)).unwrap_err();
            assert!(matches!(&e, ToolsError::NotThePinnedJar { pinned, .. } if pinned == "00"), "{e}");
        }
    }
}
