//! The windowed chain: the reference states held for the next increment,
//! the bases an audit may start from, and the check that a held state's
//! bytes are the bytes recorded when it was held.
//!
//! It holds only the state of an audit that ended `passed` or `empty`, and
//! never hands the reference a state whose hash does not match.

use std::path::Path;

use clink_basics::digest::sha256_hex;
use serde_json::json;

use super::{io_at, remove, RunError, Runner, MAX_REACH_BACK};
use crate::durable::write_atomically;
use crate::ledger::Shape;
use crate::outcome::Outcome;
use crate::steps::{self, HeldState, Verdict};

impl Runner<'_> {
    pub(super) fn chain_broken(&mut self, ck: u64, why: &str) -> String {
        let reason = format!(
            "the windowed chain is broken at checkpoint {ck}: no held reference state ({:?}) is on its lineage \
             in the bundle: {why}",
            self.ledger.chain.held
        );
        self.ledger.chain.broken = Some(reason.clone());
        self.event("chain-broken", json!({"checkpoint": ck, "why": reason}));
        reason
    }

    /// The held state of checkpoint `base`, with the hash recorded when it was held.
    pub(super) fn held(&self, base: u64) -> HeldState {
        HeldState {
            checkpoint: base,
            path: self.state.join("states").join(format!("{base}.json")),
            sha256: self.ledger.chain.sha256.get(&base).cloned().unwrap_or_default(),
        }
    }

    /// Right before the reference starts from a held state: its bytes must
    /// hash to the hash recorded when it was held. One that does not is
    /// dropped from the chain, never handed to the reference, and the
    /// audit says so (an error, tried again from another base).
    pub(super) fn refuse_unheld(&mut self, held: &HeldState) -> Result<Option<Verdict>, RunError> {
        let now = clink_basics::digest::sha256_file(&held.path, steps::MAX_STATE_BYTES)
            .ok()
            .filter(|d| d.bytes <= steps::MAX_STATE_BYTES)
            .map(|d| d.sha256);
        if now.as_deref() == Some(held.sha256.as_str()) && !held.sha256.is_empty() {
            return Ok(None);
        }
        let why = format!(
            "reference: not started: the held state of checkpoint {} does not hash to the SHA-256 recorded when it \
             was held (recorded {}, now {}); it is not used and is dropped from the chain",
            held.checkpoint,
            if held.sha256.is_empty() { "none" } else { &held.sha256 },
            now.as_deref().unwrap_or("unreadable")
        );
        let chain = &mut self.ledger.chain;
        chain.held.retain(|b| *b != held.checkpoint);
        chain.sha256.remove(&held.checkpoint);
        self.event("held-state-refused", json!({"checkpoint": held.checkpoint, "why": why}));
        self.save()?;
        self.prune_states()?;
        Ok(Some(Verdict::Decided(Outcome::Error, why, Vec::new())))
    }

    /// The held states an increment to `ck` may start from, newest first,
    /// within reach (at most eight completed checkpoints back).
    pub(super) fn bases(&self, ck: u64) -> Vec<u64> {
        if self.ledger.shape != Shape::Windowed {
            return Vec::new();
        }
        let between: Vec<u64> = self.ledger.observed.keys().copied().filter(|c| *c < ck).collect();
        let reach = between.len().saturating_sub(MAX_REACH_BACK);
        let lowest = between.get(reach).copied().unwrap_or(0);
        self.ledger.chain.held.iter().rev().copied().filter(|b| *b < ck && *b >= lowest).collect()
    }

    /// The epochs to collect: a windowed audit's reach back to its oldest
    /// base (or the whole lineage when it has none), else collection's default.
    pub(super) fn epochs(&self, ck: u64, bases: &[u64]) -> Option<Vec<u64>> {
        match (self.ledger.shape, bases.last()) {
            (Shape::RecordWise, _) => None,
            (Shape::Windowed, Some(oldest)) => Some((*oldest..=ck).collect()),
            (Shape::Windowed | Shape::Unknown, None) if ck as usize <= MAX_REACH_BACK => Some((1..=ck).collect()),
            _ => None,
        }
    }

    /// Keeps the state the reference of a verified windowed audit left, the
    /// newest `retain_states`, with the SHA-256 of the bytes held. The
    /// states it lets go are deleted once a saved ledger no longer lists
    /// them ([`Runner::prune_states`]).
    pub(super) fn hold_state(&mut self, ck: u64, state_out: &Path) -> Result<(), RunError> {
        let path = self.state.join("states").join(format!("{ck}.json"));
        let bytes = clink_basics::files::read_bounded(state_out, steps::MAX_STATE_BYTES).map_err(io_at(state_out))?;
        write_atomically(&path, &bytes)?;
        let sha256 = sha256_hex(&bytes);
        self.event("state-held", json!({"checkpoint": ck, "sha256": sha256}));
        let chain = &mut self.ledger.chain;
        chain.sha256.insert(ck, sha256);
        if !chain.held.contains(&ck) {
            chain.held.push(ck);
            chain.held.sort_unstable();
        }
        chain.broken = None;
        let excess = chain.held.len().saturating_sub(self.config.retain_states as usize);
        for old in chain.held.drain(..excess).collect::<Vec<_>>() {
            chain.sha256.remove(&old);
        }
        Ok(())
    }

    /// Deletes the held states a saved ledger no longer lists (`states/<n>.json`
    /// only: the runner's own names).
    pub(super) fn prune_states(&mut self) -> Result<(), RunError> {
        let dir = self.state.join("states");
        let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(()) };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(ck) = name.to_str().and_then(|n| n.strip_suffix(".json")).and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if !self.ledger.chain.held.contains(&ck) {
                remove(&entry.path())?;
            }
        }
        Ok(())
    }
}
