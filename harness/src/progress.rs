//! Progress on a terminal for the long commands (incident-collect,
//! incident-verify, replay sweep), drawn with indicatif on standard error.
//!
//! Shown only when standard error is a terminal and `--json` was not given;
//! otherwise every call is a no-op and nothing is written. The libraries know
//! nothing of this: they report through their observer traits
//! ([`clink_verify::VerifyProgress`], [`clink_bundle::collect::CollectProgress`]),
//! which [`Progress`] implements.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar (or a spinner, when the total is unknown) on standard error, or nothing.
pub struct Progress {
    bar: Option<ProgressBar>,
    /// What is running now (a check's name, a collection phase).
    current: String,
}

/// Whether progress is drawn: standard error is a terminal and no --json.
pub fn wanted(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

impl Progress {
    /// A bar counting `unit` (checks, epochs) towards a total set later.
    pub fn bar(json: bool, prefix: &str, unit: &str) -> Progress {
        let template = format!("{{spinner}} {{prefix}} [{{bar:28}}] {{pos}}/{{len}} {unit} {{wide_msg}} {{elapsed}}");
        Progress::with(json, prefix, &template)
    }

    /// A spinner with a message (bytes copied so far, and the like).
    pub fn spinner(json: bool, prefix: &str) -> Progress {
        Progress::with(json, prefix, "{spinner} {prefix} {wide_msg} {elapsed}")
    }

    fn with(json: bool, prefix: &str, template: &str) -> Progress {
        if !wanted(json) {
            return Progress { bar: None, current: String::new() };
        }
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(style);
        bar.set_prefix(prefix.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress { bar: Some(bar), current: String::new() }
    }

    pub fn set_length(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(n);
        }
    }

    pub fn message(&self, msg: String) {
        if let Some(bar) = &self.bar {
            bar.set_message(msg);
        }
    }

    pub fn inc(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }
}

impl Drop for Progress {
    /// The bar is removed before the command prints its result.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl clink_verify::VerifyProgress for Progress {
    fn planned(&mut self, checks: usize) {
        self.set_length(checks as u64);
    }

    fn started(&mut self, check: &str) {
        self.current = check.to_string();
        self.message(check.to_string());
    }

    fn epochs(&mut self, done: usize, of: usize) {
        self.message(format!("{}: {done}/{of} epochs replayed", self.current));
    }

    fn finished(&mut self, _check: &clink_verify::CheckResult) {
        self.inc();
    }
}

impl clink_bundle::collect::CollectProgress for Progress {
    fn phase(&mut self, what: &str) {
        self.current = what.to_string();
        self.message(what.to_string());
    }

    fn copied(&mut self, path: &str, files: u64, bytes: u64) {
        self.message(format!("{}: {files} files, {} ({path})", self.current, HumanBytes(bytes)));
    }
}
