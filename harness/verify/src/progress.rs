//! What a verification tells whoever watches it while it runs. The library
//! only calls these methods; how progress is shown (a bar on a terminal, or
//! nothing) is the caller's business, so no terminal code lives here.

use super::CheckResult;

/// Observes a verification. Every method has an empty default.
pub trait VerifyProgress {
    /// How many checks the profile will report.
    fn planned(&mut self, _checks: usize) {}
    /// A check (or a group of checks computed together, named by its first) begins.
    fn started(&mut self, _check: &str) {}
    /// The replay checks finished `done` of `of` selected epochs.
    fn epochs(&mut self, _done: usize, _of: usize) {}
    /// A check concluded.
    fn finished(&mut self, _check: &CheckResult) {}
}

/// Shows nothing.
pub struct Quiet;

impl VerifyProgress for Quiet {}
