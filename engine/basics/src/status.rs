//! THE check vocabulary: what a check concluded. Every report of clink-rs
//! (incident verification, reconciliation, upgrade checks, the HTML pages)
//! speaks it, so a status means the same wherever it is read.

use serde::Serialize;

/// A check's status. Only `Passed` is a success: a check that could not run
/// is `Unavailable`, one this build cannot make for this evidence is
/// `Unsupported`, and neither is ever counted as passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Passed,
    Failed,
    Unavailable,
    Unsupported,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Unavailable => "unavailable",
            Status::Unsupported => "unsupported",
        }
    }

    /// The status a report names, read back (`None` for any other text).
    pub fn parse(text: &str) -> Option<Status> {
        Some(match text {
            "passed" => Status::Passed,
            "failed" => Status::Failed,
            "unavailable" => Status::Unavailable,
            "unsupported" => Status::Unsupported,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_reads_back_and_nothing_else_does() {
        for s in [Status::Passed, Status::Failed, Status::Unavailable, Status::Unsupported] {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::Value::String(s.as_str().into()));
        }
        assert_eq!(Status::parse("Passed"), None);
        assert_eq!(Status::parse(""), None);
    }
}
