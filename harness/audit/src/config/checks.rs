//! The checks of single values and of the rules between sections: paths
//! (absolute, no `..`), identifiers, credential names (never values),
//! argument lists and their placeholders, ranges.
//!
//! Each check names the field it refused and what was expected; none ever
//! writes a value it refused as a credential into its error.

use std::fmt::Write as _;
use std::path::{Component, Path};

use clink_basics::fields::{kind_name, FieldError, Fields};
use serde_json::Value as Json;

use super::{AuditConfig, ChildKind, MAX_ARGS, PLACEHOLDERS};

pub(super) const MAX_PATH_BYTES: usize = 4096;
pub(super) const MAX_CREDENTIALS: usize = 64;
pub(super) const MAX_NAME_BYTES: usize = 128;
pub(super) const MAX_JOB_ID_BYTES: usize = 256;

/// The rules between sections: the budget holds one bundle, the reference
/// gets none of the destination's variables, the state directory is apart.
pub(super) fn check_across(f: &Fields, c: &AuditConfig) -> Result<(), FieldError> {
    if c.disk_budget_bytes < c.bounds.bundle_bytes {
        return Err(f.error(
            "disk_budget_bytes",
            format!("expected at least bounds.bundle_bytes ({}), or no audit could ever start", c.bounds.bundle_bytes),
        ));
    }
    let destination = c.child_env(ChildKind::Reconcile);
    if let Some(i) = c.reference.credential_env.iter().position(|n| destination.contains(&n.as_str())) {
        return Err(FieldError::new(
            format!("reference.credential_env[{i}]"),
            "names a variable of the destination; the reference receives only its own",
        ));
    }
    let state = Path::new(&c.state_dir);
    let job = [
        ("job.checkpoint_dir", &c.job.checkpoint_dir),
        ("job.ha_dir", &c.job.ha_dir),
        ("job.capture_dir", &c.job.capture_dir),
        ("job.trace_dir", &c.job.trace_dir),
    ];
    for (name, dir) in job {
        let dir = Path::new(dir);
        if state.starts_with(dir) || dir.starts_with(state) {
            return Err(f.error(
                "state_dir",
                format!("expected a directory apart from {name}: retention deletes inside the state directory"),
            ));
        }
    }
    Ok(())
}

pub(super) fn in_range(f: &Fields, field: &str, min: u64, max: u64) -> Result<u64, FieldError> {
    let value = f.u64(field)?;
    if value < min || value > max {
        return Err(f.error(field, format!("expected an integer from {min} to {max}, found {value}")));
    }
    Ok(value)
}

/// An absolute path of UTF-8 text without `..`, NUL or control characters.
pub(super) fn absolute_path(f: &Fields, field: &str) -> Result<String, FieldError> {
    path_text(&f.field_path(field), f.str(field)?)
}

pub(super) fn path_text(at: &str, text: &str) -> Result<String, FieldError> {
    let path = Path::new(text);
    let reason = if text.is_empty() {
        Some("expected an absolute path, found an empty string")
    } else if !path.is_absolute() {
        Some("expected an absolute path (the runner's working directory is nobody's choice)")
    } else if text.len() > MAX_PATH_BYTES {
        Some("expected a path of at most 4096 bytes")
    } else if text.chars().any(char::is_control) {
        Some("expected a path without control characters")
    } else if path.components().any(|c| c == Component::ParentDir) {
        Some("expected a path without `..`")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(FieldError::new(at, reason)),
        None => Ok(text.to_string()),
    }
}

/// A job id: 1-256 bytes of text without control characters. It may hold
/// anything else (it is passed as one argument, never interpreted).
pub(super) fn job_id(f: &Fields, field: &str) -> Result<String, FieldError> {
    let id = f.str(field)?;
    if id.is_empty() || id.len() > MAX_JOB_ID_BYTES || id.chars().any(char::is_control) {
        return Err(f.error(field, "expected 1 to 256 bytes of text without control characters"));
    }
    Ok(id.to_string())
}

/// `table` or `database.table`, each part a plain identifier.
pub(super) fn table_name(f: &Fields, field: &str) -> Result<String, FieldError> {
    let table = f.str(field)?;
    let parts: Vec<&str> = table.split('.').collect();
    if parts.len() > 2 || !parts.iter().all(|p| is_identifier(p)) {
        return Err(f.error(
            field,
            format!("expected `table` or `database.table`, each [A-Za-z_][A-Za-z0-9_]*, found {}", shown(table)),
        ));
    }
    Ok(table.to_string())
}

pub(super) fn is_identifier(part: &str) -> bool {
    let mut bytes = part.bytes();
    part.len() <= MAX_NAME_BYTES
        && bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether `name` is an environment variable's name: `^[A-Z_][A-Z0-9_]*$`, at most 128 bytes.
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_NAME_BYTES
        && bytes.next().is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// A variable's name. The refused text is never shown: it may be the secret itself.
pub(super) fn env_name(at: &str, value: &Json) -> Result<String, FieldError> {
    let Json::String(name) = value else {
        return Err(FieldError::new(at, format!("expected a variable name (a string), found {}", kind_name(value))));
    };
    if is_env_name(name) {
        return Ok(name.clone());
    }
    let why = if name.is_empty() {
        "found an empty string"
    } else if looks_like_value(name) {
        "found what looks like a value (not shown); credentials are named, never written here"
    } else {
        "found something else (not shown)"
    };
    Err(FieldError::new(at, format!("expected an environment variable name matching ^[A-Z_][A-Z0-9_]*$, {why}")))
}

pub(super) fn looks_like_value(text: &str) -> bool {
    text.len() > MAX_NAME_BYTES || text.chars().any(|c| c.is_lowercase() || c.is_whitespace() || "=:/@".contains(c))
}

pub(super) fn env_names(f: &Fields, field: &str) -> Result<Vec<String>, FieldError> {
    let at = f.field_path(field);
    let items = list(f, field, "variable names", "")?;
    if items.len() > MAX_CREDENTIALS {
        return Err(f.error(field, format!("expected at most {MAX_CREDENTIALS} variable names")));
    }
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let name = env_name(&format!("{at}[{i}]"), item)?;
        if names.contains(&name) {
            return Err(FieldError::new(format!("{at}[{i}]"), format!("{name} is named twice")));
        }
        names.push(name);
    }
    Ok(names)
}

/// An array field; `as_string` says why one string will not do.
pub(super) fn list<'a>(f: &Fields<'a>, field: &str, what: &str, as_string: &str) -> Result<&'a Vec<Json>, FieldError> {
    match f.value(field)? {
        Json::Array(items) => Ok(items),
        Json::String(_) => Err(f.error(field, format!("expected an array of {what}, found a string{as_string}"))),
        other => Err(f.error(field, format!("expected an array of {what}, found {}", kind_name(other)))),
    }
}

/// An argument array of at least `min` strings, each placeholder a fixed one.
pub(super) fn arguments(f: &Fields, field: &str, min: usize) -> Result<Vec<String>, FieldError> {
    let at = f.field_path(field);
    let items = list(
        f,
        field,
        "arguments",
        ": the reference runs without a shell, so a command line is never split; give each argument as its own item",
    )?;
    if items.len() < min || items.len() > MAX_ARGS {
        return Err(f.error(field, format!("expected {min} to {MAX_ARGS} arguments, found {}", items.len())));
    }
    let mut args = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item_at = format!("{at}[{i}]");
        let Json::String(arg) = item else {
            return Err(FieldError::new(item_at, format!("expected a string, found {}", kind_name(item))));
        };
        if arg.contains('\0') || arg.len() > MAX_PATH_BYTES {
            return Err(FieldError::new(item_at, "expected at most 4096 bytes without NUL"));
        }
        if let Some(unknown) = unknown_placeholder(arg) {
            return Err(FieldError::new(
                item_at,
                format!("unknown placeholder {}; the placeholders are {}", shown(unknown), PLACEHOLDERS.join(", ")),
            ));
        }
        args.push(arg.clone());
    }
    Ok(args)
}

/// The program: an absolute path, alone, with no placeholder.
pub(super) fn check_program(f: &Fields, argv: &[String]) -> Result<(), FieldError> {
    let at = format!("{}[0]", f.field_path("argv"));
    let program = argv.first().map(String::as_str).unwrap_or_default();
    if program.chars().any(char::is_whitespace) {
        return Err(FieldError::new(
            at,
            "expected the program's path alone: the reference runs without a shell, so give each argument as its own item",
        ));
    }
    if program.contains('{') {
        return Err(FieldError::new(at, "expected the program's path, without a placeholder"));
    }
    path_text(&at, program).map(|_| ())
}

pub(super) fn holds(args: &[String], placeholder: &str) -> bool {
    args.iter().any(|a| a.contains(placeholder))
}

/// The first `{...}` in `arg` that is not a fixed placeholder. A `{` with no
/// `}` after it, before the next `{`, is text.
pub(super) fn unknown_placeholder(arg: &str) -> Option<&str> {
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find('}')?;
        match after[..close].find('{') {
            Some(inner) => rest = &after[inner..],
            None => {
                let candidate = &rest[open..open + close + 2];
                if !PLACEHOLDERS.contains(&candidate) {
                    return Some(candidate);
                }
                rest = &after[close + 1..];
            }
        }
    }
    None
}

/// Text from the document shown in an error: quoted, at most 64 characters.
pub(super) fn shown(text: &str) -> String {
    let mut out = String::new();
    let cut: String = text.chars().take(64).collect();
    let _ = write!(out, "{cut:?}");
    if cut.len() < text.len() {
        out.push('…');
    }
    out
}
