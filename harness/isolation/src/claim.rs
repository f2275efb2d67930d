//! The claim a command run under proven isolation is handed
//! (`CLINK_ISOLATION_CLAIM`, `clink-isolation-claim` version 1): the
//! mechanism, why it was judged enforced, and the control endpoint.
//!
//! A claim is never trusted on its own word: a command that finds one
//! confirms it from where it runs ([`confirm_here`]): `lo` its only
//! interface, loopback working, the control endpoint refused (or, for the
//! environment, answered). A claim set by hand on a machine with other
//! interfaces is therefore not enforced.

use serde::{Deserialize, Serialize};

use crate::probe::{judge_inside, observe};
use crate::{Mechanism, Proof, Verdict};

pub const CLAIM_ENV: &str = "CLINK_ISOLATION_CLAIM";
pub const CLAIM_FORMAT: &str = "clink-isolation-claim";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub format: String,
    pub version: u64,
    pub mechanism: String,
    pub reason: String,
    /// The control endpoint, `127.0.0.1:<port>`, and the nonce it answers with.
    pub control: String,
    pub nonce: String,
}

impl Claim {
    pub fn new(mechanism: Mechanism, reason: &str, control: &str, nonce: &str) -> Claim {
        Claim {
            format: CLAIM_FORMAT.into(),
            version: 1,
            mechanism: mechanism.as_arg().into(),
            reason: reason.into(),
            control: control.into(),
            nonce: nonce.into(),
        }
    }

    pub fn to_env(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The claim this process was handed, when it was handed one.
pub fn claimed() -> Option<Result<Claim, String>> {
    let text = std::env::var_os(CLAIM_ENV)?;
    let text = text.to_str().map(str::to_string).ok_or_else(|| format!("{CLAIM_ENV} is not UTF-8"));
    Some(text.and_then(|t| {
        let c: Claim = serde_json::from_str(&t).map_err(|e| format!("{CLAIM_ENV} is not a claim: {e}"))?;
        if c.format != CLAIM_FORMAT || c.version != 1 {
            return Err(format!("{CLAIM_ENV} is {} version {}, not {CLAIM_FORMAT} 1", c.format, c.version));
        }
        Ok(c)
    }))
}

/// The control endpoint's port named by a claim.
fn port_of(control: &str) -> Option<u16> {
    control.strip_prefix("127.0.0.1:")?.parse().ok()
}

/// Confirms a claim from this process: the same judgement the probe made
/// before the command started, made again here.
pub fn confirm_here(claim: Result<Claim, String>) -> Proof {
    let not = |why: String| Proof::new(Verdict::NotEnforced, why);
    let claim = match claim {
        Ok(c) => c,
        Err(e) => return not(format!("an isolation claim that does not read: {e}")),
    };
    let (Some(mechanism), Some(port)) = (Mechanism::from_arg(&claim.mechanism), port_of(&claim.control)) else {
        return not(format!("an isolation claim naming {:?} at {:?}", claim.mechanism, claim.control));
    };
    let report = observe(port, &claim.nonce);
    let (verdict, why) = judge_inside(mechanism, &report, &claim.control);
    let reason = match verdict {
        Verdict::Enforced => format!("{}; confirmed again from inside this process", claim.reason),
        _ => format!("isolation was claimed ({}), but from here: {why}", claim.reason),
    };
    Proof {
        verdict,
        mechanism: Some(mechanism),
        reason,
        control: Some(claim.control),
        outside: None,
        inside: Some(report),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_made_here_is_not_confirmed_where_other_interfaces_exist() {
        let names = crate::probe::interfaces().unwrap();
        let claim = Claim::new(Mechanism::UnshareRn, "said so", "127.0.0.1:9", "n");
        let proof = confirm_here(Ok(claim));
        if names.iter().any(|n| n != "lo") {
            assert_eq!(proof.verdict, Verdict::NotEnforced, "{}", proof.reason);
            assert!(proof.reason.contains("interfaces besides lo"), "{}", proof.reason);
        }
        assert_eq!(confirm_here(Err("x".into())).verdict, Verdict::NotEnforced);
        let odd = Claim::new(Mechanism::UnshareRn, "said so", "10.0.0.1:9", "n");
        assert_eq!(confirm_here(Ok(odd)).verdict, Verdict::NotEnforced, "only a loopback endpoint is read");
    }

    #[test]
    fn a_claim_reads_back() {
        let c = Claim::new(Mechanism::Environment, "why", "127.0.0.1:5", "n");
        let back: Claim = serde_json::from_str(&c.to_env()).unwrap();
        assert_eq!(back, c);
    }
}
