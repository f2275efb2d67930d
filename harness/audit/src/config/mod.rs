//! The operator's configuration: the `clink-audit-config` version 1 document.
//!
//! It owns the reading and checking of that document, the rule of which
//! child receives which credential ([`AuditConfig::child_env`]) and the
//! configuration's fingerprint ([`AuditConfig::fingerprint`]). It never runs
//! anything, never reads an environment variable, and never writes into an
//! error a value it refused as a credential (it may be a secret).
//!
//! Decisions a reader of a configuration should know:
//! - Every field is required (an empty list is written `[]`), and any field
//!   the document does not define, at any depth, is refused: a misspelt bound
//!   is never silently a default.
//! - Every path (the job's four directories, the state directory, the
//!   reference's program) must be absolute and hold no `..`: the runner runs
//!   from cron or a service manager, whose working directory is nobody's
//!   choice. The state directory may neither be nor contain nor lie inside a
//!   directory of the job, since retention deletes inside it.
//! - The reference runs without a shell: `reference.argv` is an array whose
//!   first item is the program's absolute path. Any `{...}` in an argument
//!   must be one of `{scope}`, `{out}`, `{state_in}`, `{state_out}`; there is
//!   no escape. `argv` must hold `{scope}` and `{out}` and never `{state_in}`,
//!   which only `reference.with_state_in` (the arguments added when an audit
//!   starts from a held state) may hold, and then must.
//! - Credentials are environment variable names (`^[A-Z_][A-Z0-9_]*$`), never
//!   values. The reference's names may not be the destination's.
//! - The file is read only when it is a regular file (a link is not
//!   followed) of at most [`MAX_CONFIG_BYTES`]; a larger one is refused unread.

use std::io;
use std::path::{Path, PathBuf};

use clink_basics::digest::sha256_hex;
use clink_basics::fields::{depth, kind_name, FieldError, Fields};
use clink_basics::files::read_bounded;
use serde::Serialize;
use serde_json::Value as Json;
use thiserror::Error;

mod checks;

pub use checks::is_env_name;
use checks::{
    absolute_path, arguments, check_across, check_program, env_name, env_names, holds, in_range, is_identifier, job_id,
    list, shown, table_name,
};

/// The document's `format`.
pub const FORMAT: &str = "clink-audit-config";
/// The only `version` this build reads.
pub const VERSION: u64 = 1;
/// The largest configuration file read; a larger one is refused unread.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// How deeply the document may nest (it needs 3).
pub const MAX_DEPTH: usize = 8;

/// The fixed placeholders of the reference's arguments.
pub const PLACEHOLDERS: [&str; 4] = ["{scope}", "{out}", "{state_in}", "{state_out}"];

const MAX_ARGS: usize = 256;
const DAY_S: u64 = 86_400;

/// A configuration refused: where, and why.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("{}: cannot read the configuration: {source}", path.display())]
    Unreadable { path: PathBuf, source: io::Error },
    #[error("the configuration is not JSON: {0}")]
    NotJson(String),
    #[error("the configuration nests {0} deep; at most {MAX_DEPTH} expected")]
    TooDeep(usize),
    #[error("{0}")]
    Field(#[from] FieldError),
}

impl ConfigError {
    /// The path of the field at fault (`bounds.child_timeout_s`), or `$` for the whole document.
    pub fn field(&self) -> &str {
        match self {
            ConfigError::Field(e) => &e.path,
            _ => "$",
        }
    }
}

/// A checked `clink-audit-config` version 1 document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditConfig {
    pub job: Job,
    pub destination: Destination,
    pub reference: Reference,
    pub selection: Selection,
    pub start_at: StartAt,
    pub bounds: Bounds,
    pub backoff: Backoff,
    /// Attempts per audit, the first included (at least 1).
    pub max_attempts: u32,
    /// How many passed audits keep their evidence (0: none).
    pub retain_passed: u32,
    /// How many reference states (`states/<checkpoint>.json`) are held (at least 1).
    pub retain_states: u32,
    /// The most the state directory may hold; the runner starts no audit that would pass it.
    pub disk_budget_bytes: u64,
    /// The runner's own directory (absolute).
    pub state_dir: String,
}

/// The job audited: its directories (absolute) and its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Job {
    pub id: String,
    pub checkpoint_dir: String,
    pub ha_dir: String,
    pub capture_dir: String,
    pub trace_dir: String,
}

/// The ClickHouse table the job writes, and the variables reconciliation receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Destination {
    /// The variable whose value is the ClickHouse endpoint.
    pub endpoint_env: String,
    /// `table` or `database.table`.
    pub table: String,
    /// The columns that identify one row of a record-wise job (`[]` for a
    /// windowed job, whose key is its windows' identity).
    pub key: Vec<String>,
    /// Every variable reconciliation receives beside the endpoint.
    pub credential_env: Vec<String>,
    /// Which of them holds the ClickHouse user (null: the server's default user).
    pub user_env: Option<String>,
    /// Which of them holds the user's password (null: none).
    pub password_env: Option<String>,
}

/// The operator's reference command, run without a shell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reference {
    pub argv: Vec<String>,
    /// Arguments appended when an audit starts from a held state; empty when it cannot.
    pub with_state_in: Vec<String>,
    /// Arguments appended when the scope spans the run from its start (a
    /// windowed job's first audit, its whole lineage), such as the run's
    /// first offsets, which checkpoints do not record.
    pub from_run_start: Vec<String>,
    pub credential_env: Vec<String>,
}

/// Which completed checkpoints are audited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Selection {
    Sequential,
    LatestOnly,
}

/// Where a runner with no state begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartAt {
    Earliest,
    Latest,
}

/// The bounds of one audit; one reached makes it partial, never a pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bounds {
    pub child_timeout_s: u64,
    pub bundle_bytes: u64,
    pub bundle_files: u64,
    pub rows: u64,
    pub query_timeout_s: u64,
}

/// The wait before a partial or failed audit is tried again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Backoff {
    pub initial_s: u64,
    pub max_s: u64,
}

/// The children of one audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildKind {
    Collect,
    Scope,
    Reference,
    Verify,
    Reconcile,
}

impl ChildKind {
    pub const ALL: [ChildKind; 5] =
        [ChildKind::Collect, ChildKind::Scope, ChildKind::Reference, ChildKind::Verify, ChildKind::Reconcile];
}

impl AuditConfig {
    /// Reads and checks the configuration file at `path`.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let bytes = read_bounded(path, MAX_CONFIG_BYTES)
            .map_err(|source| ConfigError::Unreadable { path: path.to_path_buf(), source })?;
        Self::from_slice(&bytes)
    }

    /// Checks a configuration's bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ConfigError> {
        let json: Json = serde_json::from_slice(bytes).map_err(|e| ConfigError::NotJson(e.to_string()))?;
        Self::from_json(&json)
    }

    /// Checks a parsed configuration.
    pub fn from_json(json: &Json) -> Result<Self, ConfigError> {
        let d = depth(json);
        if d > MAX_DEPTH {
            return Err(ConfigError::TooDeep(d));
        }
        Ok(read_document(&Fields::object(json, "$")?)?)
    }

    /// The environment variables a child may receive, by name; every other
    /// variable the configuration names is kept from it.
    pub fn child_env(&self, kind: ChildKind) -> Vec<&str> {
        match kind {
            ChildKind::Reference => self.reference.credential_env.iter().map(String::as_str).collect(),
            ChildKind::Reconcile => std::iter::once(self.destination.endpoint_env.as_str())
                .chain(self.destination.credential_env.iter().map(String::as_str))
                .collect(),
            ChildKind::Collect | ChildKind::Scope | ChildKind::Verify => Vec::new(),
        }
    }

    /// The canonical serialisation: the checked values, compact, fields in
    /// a fixed order, preceded by the format and version. Formatting and key
    /// order of the file do not change it; any value does.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let mut out = format!("{FORMAT} v{VERSION}\n").into_bytes();
        // Serialising these structs of strings, integers and lists cannot fail.
        out.extend(serde_json::to_vec(self).unwrap_or_default());
        out
    }

    /// The SHA-256 of [`AuditConfig::canonical_bytes`], in lowercase hex.
    pub fn fingerprint(&self) -> String {
        sha256_hex(&self.canonical_bytes())
    }
}

fn read_document(f: &Fields) -> Result<AuditConfig, FieldError> {
    f.only(&[
        "format",
        "version",
        "job",
        "destination",
        "reference",
        "selection",
        "start_at",
        "bounds",
        "backoff",
        "max_attempts",
        "retain_passed",
        "retain_states",
        "disk_budget_bytes",
        "state_dir",
    ])?;
    let format = f.str("format")?;
    if format != FORMAT {
        return Err(f.error("format", format!("expected {FORMAT:?}, found {}", shown(format))));
    }
    let version = f.u64("version")?;
    if version != VERSION {
        return Err(f.error("version", format!("expected {VERSION}, found {version}; this build reads version 1")));
    }
    let config = AuditConfig {
        job: read_job(&f.child("job")?)?,
        destination: read_destination(&f.child("destination")?)?,
        reference: read_reference(&f.child("reference")?)?,
        selection: read_selection(f)?,
        start_at: read_start_at(f)?,
        bounds: read_bounds(&f.child("bounds")?)?,
        backoff: read_backoff(&f.child("backoff")?)?,
        max_attempts: in_range(f, "max_attempts", 1, 1000)? as u32,
        retain_passed: in_range(f, "retain_passed", 0, 100_000)? as u32,
        retain_states: in_range(f, "retain_states", 1, 1000)? as u32,
        disk_budget_bytes: in_range(f, "disk_budget_bytes", 1, 1 << 50)?,
        state_dir: absolute_path(f, "state_dir")?,
    };
    check_across(f, &config)?;
    Ok(config)
}

fn read_job(f: &Fields) -> Result<Job, FieldError> {
    f.only(&["id", "checkpoint_dir", "ha_dir", "capture_dir", "trace_dir"])?;
    Ok(Job {
        id: job_id(f, "id")?,
        checkpoint_dir: absolute_path(f, "checkpoint_dir")?,
        ha_dir: absolute_path(f, "ha_dir")?,
        capture_dir: absolute_path(f, "capture_dir")?,
        trace_dir: absolute_path(f, "trace_dir")?,
    })
}

fn read_destination(f: &Fields) -> Result<Destination, FieldError> {
    f.only(&["endpoint_env", "table", "key", "credential_env", "user_env", "password_env"])?;
    let endpoint_env = env_name(&f.field_path("endpoint_env"), f.value("endpoint_env")?)?;
    let credential_env = env_names(f, "credential_env")?;
    if let Some(i) = credential_env.iter().position(|n| *n == endpoint_env) {
        return Err(FieldError::new(
            format!("{}[{i}]", f.field_path("credential_env")),
            "names destination.endpoint_env again; expected each variable once",
        ));
    }
    Ok(Destination {
        endpoint_env,
        table: table_name(f, "table")?,
        key: column_names(f, "key")?,
        user_env: one_of_the_credentials(f, "user_env", &credential_env)?,
        password_env: one_of_the_credentials(f, "password_env", &credential_env)?,
        credential_env,
    })
}

/// The key's columns: plain identifiers, each once.
fn column_names(f: &Fields, field: &str) -> Result<Vec<String>, FieldError> {
    let at = f.field_path(field);
    let items = list(f, field, "column names", "")?;
    if items.len() > MAX_ARGS {
        return Err(f.error(field, format!("expected at most {MAX_ARGS} columns")));
    }
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let name = match item {
            Json::String(n) if is_identifier(n) => n.clone(),
            Json::String(n) => {
                return Err(FieldError::new(
                    at,
                    format!("expected a column name ([A-Za-z_][A-Za-z0-9_]*), found {}", shown(n)),
                ))
            }
            other => return Err(FieldError::new(at, format!("expected a column name, found {}", kind_name(other)))),
        };
        if names.contains(&name) {
            return Err(FieldError::new(at, format!("{name} is named twice")));
        }
        names.push(name);
    }
    Ok(names)
}

/// null, or the name of one of `credential_env`'s variables.
fn one_of_the_credentials(f: &Fields, field: &str, credentials: &[String]) -> Result<Option<String>, FieldError> {
    let value = f.value(field)?;
    if value.is_null() {
        return Ok(None);
    }
    let name = env_name(&f.field_path(field), value)?;
    if !credentials.contains(&name) {
        return Err(
            f.error(field, format!("{name} is not one of credential_env's variables; expected one of them, or null"))
        );
    }
    Ok(Some(name))
}

fn read_reference(f: &Fields) -> Result<Reference, FieldError> {
    f.only(&["argv", "with_state_in", "from_run_start", "credential_env"])?;
    let argv = arguments(f, "argv", 1)?;
    let with_state_in = arguments(f, "with_state_in", 0)?;
    let from_run_start = arguments(f, "from_run_start", 0)?;
    if let Some(i) = from_run_start.iter().position(|a| a.contains("{state_in}")) {
        return Err(FieldError::new(
            format!("{}[{i}]", f.field_path("from_run_start")),
            "{state_in} belongs in reference.with_state_in: a scope from the run's start starts from no state",
        ));
    }
    check_program(f, &argv)?;
    if !holds(&argv, "{scope}") || !holds(&argv, "{out}") {
        return Err(f.error("argv", "expected the arguments to hold {scope} and {out}"));
    }
    if let Some(i) = argv.iter().position(|a| a.contains("{state_in}")) {
        return Err(FieldError::new(
            format!("{}[{i}]", f.field_path("argv")),
            "{state_in} belongs in reference.with_state_in, the arguments added only when an audit starts from a held state",
        ));
    }
    if !with_state_in.is_empty() {
        if !holds(&with_state_in, "{state_in}") {
            return Err(f.error("with_state_in", "expected {state_in} among these arguments (or none at all)"));
        }
        if !holds(&argv, "{state_out}") {
            return Err(f.error(
                "argv",
                "expected {state_out}: reference.with_state_in starts from a state, so the reference must leave one",
            ));
        }
    }
    Ok(Reference { argv, with_state_in, from_run_start, credential_env: env_names(f, "credential_env")? })
}

fn read_selection(f: &Fields) -> Result<Selection, FieldError> {
    match f.str("selection")? {
        "sequential" => Ok(Selection::Sequential),
        "latest-only" => Ok(Selection::LatestOnly),
        other => {
            Err(f.error("selection", format!("expected \"sequential\" or \"latest-only\", found {}", shown(other))))
        }
    }
}

fn read_start_at(f: &Fields) -> Result<StartAt, FieldError> {
    match f.str("start_at")? {
        "earliest" => Ok(StartAt::Earliest),
        "latest" => Ok(StartAt::Latest),
        other => Err(f.error("start_at", format!("expected \"earliest\" or \"latest\", found {}", shown(other)))),
    }
}

fn read_bounds(f: &Fields) -> Result<Bounds, FieldError> {
    f.only(&["child_timeout_s", "bundle_bytes", "bundle_files", "rows", "query_timeout_s"])?;
    Ok(Bounds {
        child_timeout_s: in_range(f, "child_timeout_s", 1, DAY_S)?,
        bundle_bytes: in_range(f, "bundle_bytes", 1, 1 << 40)?,
        bundle_files: in_range(f, "bundle_files", 1, 10_000_000)?,
        rows: in_range(f, "rows", 1, 1_000_000_000)?,
        query_timeout_s: in_range(f, "query_timeout_s", 1, DAY_S)?,
    })
}

fn read_backoff(f: &Fields) -> Result<Backoff, FieldError> {
    f.only(&["initial_s", "max_s"])?;
    let backoff =
        Backoff { initial_s: in_range(f, "initial_s", 1, DAY_S)?, max_s: in_range(f, "max_s", 1, 7 * DAY_S)? };
    if backoff.max_s < backoff.initial_s {
        return Err(f.error("max_s", format!("expected at least backoff.initial_s ({})", backoff.initial_s)));
    }
    Ok(backoff)
}

#[cfg(test)]
mod tests;
