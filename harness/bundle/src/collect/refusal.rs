//! How a collection is refused: a kind a runner can act on (retry on
//! `changed`, fix the command on `other`), and a reason a person can read.

/// The kinds of refusal `--json` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The evidence changed while it was copied (a checkpoint completed, a file was rewritten).
    Changed,
    /// Evidence the selected checkpoint needs is not there.
    Missing,
    /// A bound (--max-bytes, --max-files) would be passed by required evidence.
    Bound,
    /// --timeout-s passed.
    Timeout,
    Other,
}

impl RefusalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalKind::Changed => "changed",
            RefusalKind::Missing => "missing",
            RefusalKind::Bound => "bound",
            RefusalKind::Timeout => "timeout",
            RefusalKind::Other => "other",
        }
    }

    /// What to do about a refusal of this kind.
    pub fn advice(self) -> &'static str {
        match self {
            RefusalKind::Changed => "collect again, or stop the job first",
            RefusalKind::Missing => {
                "check --checkpoint-dir and --job (the job must have completed a checkpoint), or name another --checkpoint"
            }
            RefusalKind::Bound => "raise --max-bytes or --max-files, or narrow --op and --epochs",
            RefusalKind::Timeout => "raise --timeout-s, or collect while the machine is less busy",
            RefusalKind::Other => "fix what the reason names, and collect again",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Refusal {
    pub kind: RefusalKind,
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused ({}): {}; nothing was published; {}", self.kind.as_str(), self.reason, self.kind.advice())
    }
}

pub(super) fn refusal(kind: RefusalKind, reason: impl Into<String>) -> Refusal {
    Refusal { kind, reason: reason.into() }
}
