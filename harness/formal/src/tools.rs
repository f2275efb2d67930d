//! Where the formal tools are: the repository's `formal/` directory, a Java
//! runtime, and the TLA+ jar pinned by SHA-256 in `formal/tools.env`; and,
//! beside the jar, the class-data-sharing archive `gates/fetch-tools` made for
//! it, used only when its sidecar verifies (see [`verify_archive`]).

use std::path::{Path, PathBuf};

use clink_basics::digest::sha256_hex;
use thiserror::Error;

pub const FORMAL_DIR_ENV: &str = "CLINK_FORMAL_DIR";
pub const TOOLS_DIR_ENV: &str = "CLINK_FORMAL_TOOLS_DIR";
pub const DEPS_PREFIX_ENV: &str = "CLINK_DEPS_PREFIX";

/// The sidecar's `format`.
pub const ARCHIVE_FORMAT: &str = "clink-tlc-cds-archive";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormalTools {
    pub formal_dir: PathBuf,
    pub java: PathBuf,
    pub jar: PathBuf,
    /// The class-data-sharing archive for the jar, verified (TLC starts with
    /// it); `None` runs TLC without one.
    pub archive: Option<PathBuf>,
    /// Why there is no archive, when there is none.
    pub no_archive: Option<ArchiveError>,
}

/// Why the CDS archive beside the jar is not used (TLC then runs without it).
/// An archive is never used unless it verifies: a truncated one crashes the
/// JVM (SIGBUS) rather than being refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ArchiveError {
    #[error("{}: no archive (gates/fetch-tools makes it)", archive.display())]
    NoArchive { archive: PathBuf },
    #[error("{}: no sidecar: {error} (gates/fetch-tools makes it)", sidecar.display())]
    NoSidecar { sidecar: PathBuf, error: String },
    #[error("{}: not an archive's sidecar: {why}", sidecar.display())]
    BadSidecar { sidecar: PathBuf, why: String },
    #[error("{} has SHA-256 {digest} ({size} bytes), not its sidecar's {recorded} ({recorded_size} bytes)", archive.display())]
    Tampered { archive: PathBuf, digest: String, size: u64, recorded: String, recorded_size: u64 },
    #[error("{}: made for the jar with SHA-256 {recorded}, not the pinned {pinned}", sidecar.display())]
    OtherJar { sidecar: PathBuf, recorded: String, pinned: String },
    #[error("{}: made under the classpath {recorded}, not {jar}", sidecar.display())]
    OtherClasspath { sidecar: PathBuf, recorded: String, jar: String },
    #[error("{}: the jar was reinstalled after the archive was made (size or mtime differ)", sidecar.display())]
    JarReinstalled { sidecar: PathBuf },
    #[error("{}: made under the JVM flags {recorded:?}, not {flags:?}", sidecar.display())]
    OtherFlags { sidecar: PathBuf, recorded: Vec<String>, flags: Vec<String> },
    #[error("{}: made by another java ({recorded:?}), not the one on PATH ({java:?})", sidecar.display())]
    OtherJava { sidecar: PathBuf, recorded: String, java: String },
    #[error("{}: {error}", path.display())]
    Read { path: PathBuf, error: String },
    #[error("{} -version: {error}", java.display())]
    JavaVersion { java: PathBuf, error: String },
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
/// A relative path is taken against the working directory now, once: TLC
/// runs in other directories, where a relative path would name another place.
pub fn formal_dir(explicit: Option<&Path>) -> PathBuf {
    absolute(
        explicit
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(FORMAL_DIR_ENV).map(PathBuf::from))
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../formal")),
    )
}

/// `path` against the working directory (unchanged when that cannot be read).
fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

/// What `java -version` says (stderr), without `Picked up ...` lines: the
/// text `gates/fetch-tools` records in the sidecar.
pub fn java_version(java: &Path) -> Result<String, ArchiveError> {
    let out = std::process::Command::new(java)
        .arg("-version")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| ArchiveError::JavaVersion { java: java.to_path_buf(), error: e.to_string() })?;
    if !out.status.success() {
        return Err(ArchiveError::JavaVersion { java: java.to_path_buf(), error: format!("exit {}", out.status) });
    }
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(text.lines().filter(|l| !l.starts_with("Picked up ")).collect::<Vec<_>>().join("\n").trim_end().to_string())
}

/// The archive's path beside a jar: `tla2tools.jar` has `tla2tools.jsa`.
pub fn archive_path(jar: &Path) -> PathBuf {
    jar.with_extension("jsa")
}

/// The sidecar's path: `tla2tools.jsa.json`.
pub fn sidecar_path(archive: &Path) -> PathBuf {
    let mut name = archive.as_os_str().to_os_string();
    name.push(".json");
    PathBuf::from(name)
}

/// Verifies the CDS archive beside `jar` (already verified as the pinned
/// one): its sidecar parses, names the pinned jar (SHA-256, and the size and
/// mtime it has now), the classpath and the JVM flags TLC runs with
/// ([`crate::tlc::JVM_FLAGS`]) and the java that `java_version` reports (run
/// only when everything else holds); and the archive's size and SHA-256 are
/// the sidecar's. `Ok` is the archive to use.
pub fn verify_archive(
    jar: &Path,
    pinned: &str,
    java_version: impl FnOnce() -> Result<String, ArchiveError>,
) -> Result<PathBuf, ArchiveError> {
    let archive = archive_path(jar);
    let sidecar = sidecar_path(&archive);
    if !archive.is_file() {
        return Err(ArchiveError::NoArchive { archive });
    }
    let text = std::fs::read_to_string(&sidecar)
        .map_err(|e| ArchiveError::NoSidecar { sidecar: sidecar.clone(), error: e.to_string() })?;
    let bad = |why: String| ArchiveError::BadSidecar { sidecar: sidecar.clone(), why };
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let text_of = |key: &str| doc[key].as_str().map(str::to_string).ok_or_else(|| bad(format!("no text {key}")));
    let number_of = |key: &str| doc[key].as_u64().ok_or_else(|| bad(format!("no number {key}")));
    if doc["format"] != ARCHIVE_FORMAT || doc["version"] != 1 {
        return Err(bad(format!("not {ARCHIVE_FORMAT} version 1")));
    }
    let flags: Vec<String> = doc["flags"]
        .as_array()
        .and_then(|a| a.iter().map(|f| f.as_str().map(str::to_string)).collect())
        .ok_or_else(|| bad("no list of flags".into()))?;
    let recorded = text_of("jar_sha256")?;
    if recorded != pinned {
        return Err(ArchiveError::OtherJar { sidecar, recorded, pinned: pinned.to_string() });
    }
    let want: Vec<String> = crate::tlc::JVM_FLAGS.iter().map(|f| f.to_string()).collect();
    if flags != want {
        return Err(ArchiveError::OtherFlags { sidecar, recorded: flags, flags: want });
    }
    let recorded = text_of("classpath")?;
    if recorded != jar.display().to_string() {
        return Err(ArchiveError::OtherClasspath { sidecar, recorded, jar: jar.display().to_string() });
    }
    let meta =
        std::fs::metadata(jar).map_err(|e| ArchiveError::Read { path: jar.to_path_buf(), error: e.to_string() })?;
    let mtime = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_secs());
    if number_of("jar_size")? != meta.len() || Some(number_of("jar_mtime")?) != mtime {
        return Err(ArchiveError::JarReinstalled { sidecar });
    }
    let (recorded, recorded_size) = (text_of("archive_sha256")?, number_of("archive_size")?);
    let recorded_java = text_of("java_version")?;
    let java = java_version()?;
    if recorded_java != java {
        return Err(ArchiveError::OtherJava { sidecar, recorded: recorded_java, java });
    }
    let bytes =
        std::fs::read(&archive).map_err(|e| ArchiveError::Read { path: archive.clone(), error: e.to_string() })?;
    let digest = sha256_hex(&bytes);
    if digest != recorded || bytes.len() as u64 != recorded_size {
        return Err(ArchiveError::Tampered { archive, digest, size: bytes.len() as u64, recorded, recorded_size });
    }
    Ok(archive)
}

/// Finds Java and the pinned jar; `Err` says why they are unavailable. The
/// CDS archive beside the jar is used when it verifies ([`verify_archive`]);
/// otherwise the tools carry why not, and TLC runs without it.
pub fn locate(formal: Option<&Path>, tools_dir: Option<&Path>) -> Result<FormalTools, ToolsError> {
    let formal_dir = formal_dir(formal);
    let pins = read_tools_env(&formal_dir)?;
    let java = which::which("java").map_err(|_| ToolsError::NoJava)?;
    let dir = absolute(
        tools_dir.map(Path::to_path_buf).or_else(|| std::env::var_os(TOOLS_DIR_ENV).map(PathBuf::from)).unwrap_or_else(
            || {
                let prefix = std::env::var_os(DEPS_PREFIX_ENV)
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".clink-deps")))
                    .unwrap_or_else(|| PathBuf::from(".clink-deps"));
                prefix.join(&pins.install_subdir)
            },
        ),
    );
    let jar = dir.join(&pins.jar_name);
    let bytes = std::fs::read(&jar).map_err(|error| ToolsError::NoJar { jar: jar.clone(), error })?;
    let digest = sha256_hex(&bytes);
    if digest != pins.sha256 {
        return Err(ToolsError::NotThePinnedJar { jar, digest, pinned: pins.sha256 });
    }
    let (archive, no_archive) = match verify_archive(&jar, &pins.sha256, || java_version(&java)) {
        Ok(archive) => (Some(archive), None),
        Err(why) => (None, Some(why)),
    };
    Ok(FormalTools { formal_dir, java, jar, archive, no_archive })
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

    const JAVA: &str = "openjdk version \"17.0.15\" 2025-04-15\nOpenJDK 64-Bit Server VM (build 17.0.15+6)";

    /// A jar, an archive beside it and the sidecar `gates/fetch-tools` would
    /// write for them (made by `JAVA`); the pinned SHA-256 of the jar.
    fn installed(dir: &Path) -> (PathBuf, String) {
        let jar = dir.join("tla2tools.jar");
        std::fs::write(&jar, b"the pinned jar").unwrap();
        let archive = dir.join("tla2tools.jsa");
        std::fs::write(&archive, b"classes of the pinned jar").unwrap();
        let mtime = std::fs::metadata(&jar).unwrap().modified().unwrap();
        let sidecar = serde_json::json!({
            "format": ARCHIVE_FORMAT,
            "version": 1,
            "archive_sha256": sha256_hex(b"classes of the pinned jar"),
            "archive_size": 25,
            "classpath": jar.display().to_string(),
            "jar_sha256": sha256_hex(b"the pinned jar"),
            "jar_size": 14,
            "jar_mtime": mtime.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(),
            "java_version": JAVA,
            "flags": crate::tlc::JVM_FLAGS,
        });
        std::fs::write(dir.join("tla2tools.jsa.json"), serde_json::to_string_pretty(&sidecar).unwrap()).unwrap();
        (jar, sha256_hex(b"the pinned jar"))
    }

    fn edit_sidecar(dir: &Path, key: &str, value: serde_json::Value) {
        let path = dir.join("tla2tools.jsa.json");
        let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        doc[key] = value;
        std::fs::write(&path, doc.to_string()).unwrap();
    }

    fn java() -> Result<String, ArchiveError> {
        Ok(JAVA.to_string())
    }

    #[test]
    fn an_archive_is_used_only_when_its_sidecar_verifies_it() {
        let scratch = tempfile::tempdir().unwrap();
        let (jar, pinned) = installed(scratch.path());
        assert_eq!(verify_archive(&jar, &pinned, java), Ok(scratch.path().join("tla2tools.jsa")));

        // A tampered archive: same size, another byte.
        std::fs::write(scratch.path().join("tla2tools.jsa"), b"classes of the pinned jaR").unwrap();
        let e = verify_archive(&jar, &pinned, java).unwrap_err();
        assert!(matches!(&e, ArchiveError::Tampered { size: 25, recorded_size: 25, .. }), "{e}");
        // A truncated one.
        std::fs::write(scratch.path().join("tla2tools.jsa"), b"classes").unwrap();
        let e = verify_archive(&jar, &pinned, java).unwrap_err();
        assert!(matches!(&e, ArchiveError::Tampered { size: 7, .. }), "{e}");
        assert!(e.to_string().contains("not its sidecar's"), "{e}");

        // A sidecar naming another jar.
        let (jar, pinned) = installed(scratch.path());
        edit_sidecar(scratch.path(), "jar_sha256", sha256_hex(b"another jar").into());
        let e = verify_archive(&jar, &pinned, java).unwrap_err();
        assert!(matches!(&e, ArchiveError::OtherJar { pinned: p, .. } if *p == pinned), "{e}");

        // Made under another classpath, or other flags.
        let (jar, pinned) = installed(scratch.path());
        edit_sidecar(scratch.path(), "classpath", "/elsewhere/tla2tools.jar".into());
        assert!(matches!(verify_archive(&jar, &pinned, java), Err(ArchiveError::OtherClasspath { .. })));
        let (jar, pinned) = installed(scratch.path());
        edit_sidecar(scratch.path(), "flags", serde_json::json!(["-XX:+UseParallelGC"]));
        assert!(matches!(verify_archive(&jar, &pinned, java), Err(ArchiveError::OtherFlags { .. })));

        // The jar reinstalled since (the JVM would refuse the archive).
        let (jar, pinned) = installed(scratch.path());
        edit_sidecar(scratch.path(), "jar_mtime", 1.into());
        assert!(matches!(verify_archive(&jar, &pinned, java), Err(ArchiveError::JarReinstalled { .. })));

        // Made by another java.
        let (jar, pinned) = installed(scratch.path());
        let e = verify_archive(&jar, &pinned, || Ok("openjdk version \"21.0.1\"".into())).unwrap_err();
        assert!(matches!(&e, ArchiveError::OtherJava { recorded, .. } if recorded == JAVA), "{e}");
        // A java that cannot say its version.
        let no_java = || Err(ArchiveError::JavaVersion { java: "java".into(), error: "not found".into() });
        assert!(matches!(verify_archive(&jar, &pinned, no_java), Err(ArchiveError::JavaVersion { .. })));

        // A sidecar that does not parse, or lacks a field.
        std::fs::write(scratch.path().join("tla2tools.jsa.json"), "{ not json").unwrap();
        assert!(matches!(verify_archive(&jar, &pinned, java), Err(ArchiveError::BadSidecar { .. })));
        let (jar, pinned) = installed(scratch.path());
        edit_sidecar(scratch.path(), "archive_size", serde_json::Value::Null);
        let e = verify_archive(&jar, &pinned, java).unwrap_err();
        assert!(matches!(&e, ArchiveError::BadSidecar { why, .. } if why == "no number archive_size"), "{e}");

        // No sidecar; no archive.
        std::fs::remove_file(scratch.path().join("tla2tools.jsa.json")).unwrap();
        assert!(matches!(verify_archive(&jar, &pinned, java), Err(ArchiveError::NoSidecar { .. })));
        std::fs::remove_file(scratch.path().join("tla2tools.jsa")).unwrap();
        let e = verify_archive(&jar, &pinned, java).unwrap_err();
        assert!(matches!(&e, ArchiveError::NoArchive { archive } if *archive == scratch.path().join("tla2tools.jsa")));
    }

    #[test]
    fn locate_carries_the_archive_or_why_not() {
        let Ok(java) = which::which("java") else { return };
        let scratch = tempfile::tempdir().unwrap();
        let tools = scratch.path().join("tools");
        std::fs::create_dir(&tools).unwrap();
        let (_, pinned) = installed(&tools);
        std::fs::write(
            scratch.path().join("tools.env"),
            format!("TLA_TOOLS_JAR=tla2tools.jar\nTLA_TOOLS_SHA256={pinned}\nTLA_TOOLS_INSTALL_SUBDIR=tools\n"),
        )
        .unwrap();
        // Recorded by another java: refused, and the tools say why.
        let found = locate(Some(scratch.path()), Some(&tools)).unwrap();
        assert_eq!(found.archive, None);
        assert!(matches!(found.no_archive, Some(ArchiveError::OtherJava { .. })), "{:?}", found.no_archive);
        // Recorded by the java on PATH: used.
        edit_sidecar(&tools, "java_version", java_version(&java).unwrap().into());
        let found = locate(Some(scratch.path()), Some(&tools)).unwrap();
        assert_eq!((found.archive, found.no_archive), (Some(tools.join("tla2tools.jsa")), None));
        // Missing sidecar: none, with the reason.
        std::fs::remove_file(tools.join("tla2tools.jsa.json")).unwrap();
        let found = locate(Some(scratch.path()), Some(&tools)).unwrap();
        assert_eq!(found.archive, None);
        assert!(matches!(found.no_archive, Some(ArchiveError::NoSidecar { .. })), "{:?}", found.no_archive);
    }
}
