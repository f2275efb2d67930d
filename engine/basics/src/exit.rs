//! The exit codes every `clink` command and gate shares. They are a
//! contract: scripts and CI read them.

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exit {
    /// Everything asked for was done and every required check passed.
    Passed = 0,
    /// A job failed, or a required check failed.
    Failed = 1,
    /// Bad usage, or an input refused before anything was judged.
    Refused = 2,
    /// Nothing failed, but something required could not be checked. Never a success.
    NotEstablished = 3,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Exit::Passed => "passed",
            Exit::Failed => "failed",
            Exit::Refused => "refused",
            Exit::NotEstablished => "not_established",
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_are_the_contract() {
        assert_eq!([Exit::Passed, Exit::Failed, Exit::Refused, Exit::NotEstablished].map(Exit::code), [0, 1, 2, 3]);
    }
}
