//! Restore at another parallelism: which new subtask takes which part of a
//! checkpoint's state.
//!
//! Keyed state and timers go by key group: new subtask `s` takes exactly the
//! keys whose group [`subtask_for_group`] gives to `s` at the new
//! parallelism, from whichever old subtask held them, so a key's state and
//! timers land where its records are now routed. State an old subtask holds
//! as a whole (a sink's prepared work) goes to exactly one successor
//! ([`Rescale::successor`]): an old index that still exists stays where it
//! is, one past the new parallelism goes to its index modulo the new one.
//! Keeping a surviving index in place means no two new subtasks ever claim
//! the same old subtask's files.
//!
//! This module computes; it never reads or writes a checkpoint file (the
//! deploy reads the old snapshots through the backend and hands them here),
//! and it never guesses: an operator with no [`Redivision`], or a slot of an
//! old snapshot its re-division leaves behind, is an error.

use serde_json::Value as Json;

use super::driver::{TIMERS_SLOT, TIMERS_SLOT_VERSION};
use super::{Descriptor, OperatorError, OperatorKind};
use crate::checkpoint::{SlotKind, StateSlots};
use crate::codec::{Reader, Writer};
use crate::keys::{key_group, subtask_for_group};
use crate::timers::{Clock, TimerService};

/// An operator's parallelism before and after the restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rescale {
    pub from: u32,
    pub to: u32,
}

impl Rescale {
    /// The one new subtask that finalises old subtask `old`'s prepared work.
    pub fn successor(&self, old: u32) -> u32 {
        if old < self.to {
            old
        } else {
            old % self.to.max(1)
        }
    }

    /// The old subtasks whose prepared work new subtask `new` finalises.
    pub fn predecessors(&self, new: u32) -> Vec<u32> {
        // DEFECT rescale_orphans (feature defect-rescale-orphans): an old
        // subtask past the new parallelism is succeeded by nobody, so its
        // prepared work is never finalised.
        let orphaned = |old: u32| cfg!(feature = "defect-rescale-orphans") && old >= self.to;
        (0..self.from).filter(|&old| self.successor(old) == new && !orphaned(old)).collect()
    }

    /// Whether new subtask `new` owns the key with these canonical bytes.
    pub fn owns_key(&self, new: u32, key: &[u8]) -> bool {
        subtask_for_group(key_group(key), self.to) == new
    }
}

/// What one new subtask is built from: every old subtask's snapshot of the
/// operator, by old index.
pub struct Share<'a> {
    pub rescale: Rescale,
    pub subtask: u32,
    pub parts: &'a [StateSlots],
}

impl Share<'_> {
    pub fn owns_key(&self, key: &[u8]) -> bool {
        self.rescale.owns_key(self.subtask, key)
    }

    /// The snapshots of the old subtasks this new subtask succeeds.
    pub fn predecessor_parts(&self) -> impl Iterator<Item = (u32, &StateSlots)> {
        self.rescale.predecessors(self.subtask).into_iter().filter_map(|old| Some((old, self.parts.get(old as usize)?)))
    }
}

/// How an operator type re-divides its state.
#[derive(Clone, Copy)]
pub struct Redivision {
    /// Why the state of an operator with these params cannot be re-divided.
    pub refuses: fn(&Json) -> Option<String>,
    /// The new subtask's own slots (a transform's timers are re-divided here).
    pub split: fn(&Json, &Share<'_>) -> Result<StateSlots, OperatorError>,
}

pub fn never_refuses(_: &Json) -> Option<String> {
    None
}

/// Why an operator's state cannot move to another parallelism, if it cannot.
pub fn refusal(descriptor: &Descriptor, params: &Json) -> Option<String> {
    match &descriptor.redivision {
        None => Some(format!("a {} keeps state this engine cannot re-divide", descriptor.type_name)),
        Some(r) => (r.refuses)(params),
    }
}

/// The slots new subtask `share.subtask` restores: the operator's
/// re-division, the timers by key for a transform, and every slot of the old
/// snapshots accounted for.
pub fn redivide(descriptor: &Descriptor, params: &Json, share: &Share<'_>) -> Result<StateSlots, OperatorError> {
    let refused = |why: String| OperatorError::state("*", format!("cannot be re-divided: {why}"));
    if let Some(why) = refusal(descriptor, params) {
        return Err(refused(why));
    }
    let Some(redivision) = descriptor.redivision else {
        return Err(refused("no re-division".into()));
    };
    let mut slots = (redivision.split)(params, share)?;
    if descriptor.kind() == OperatorKind::Transform {
        slots.put(TIMERS_SLOT, SlotKind::Timers, TIMERS_SLOT_VERSION, redivide_timers(share)?);
    }
    for part in share.parts {
        if let Some(name) = part.0.keys().find(|name| slots.get(name).is_none()) {
            return Err(OperatorError::state(name, "the re-division would leave this slot behind"));
        }
    }
    Ok(slots)
}

/// The timers whose key this subtask owns, from every old subtask, under the
/// lowest old watermark. A timer's key is the keyed state's key: an operator
/// whose timers are keyed otherwise refuses its re-division.
fn redivide_timers(share: &Share<'_>) -> Result<Vec<u8>, OperatorError> {
    let mut services = Vec::with_capacity(share.parts.len());
    for part in share.parts {
        let slot =
            part.get(TIMERS_SLOT).ok_or_else(|| OperatorError::state(TIMERS_SLOT, "missing from the snapshot"))?;
        if slot.version != TIMERS_SLOT_VERSION {
            return Err(OperatorError::state(
                TIMERS_SLOT,
                format!("version {} is not {TIMERS_SLOT_VERSION}", slot.version),
            ));
        }
        let mut timers = TimerService::new(Clock::Manual(0));
        let mut r = Reader::new(&slot.bytes);
        timers.decode(&mut r).and_then(|()| r.finish()).map_err(|e| OperatorError::state(TIMERS_SLOT, e))?;
        services.push(timers);
    }
    let merged = TimerService::merged(&services, |t| share.owns_key(&t.key));
    let mut w = Writer::new();
    merged.encode(&mut w);
    Ok(w.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(feature = "defect-rescale-orphans", ignore)]
    fn every_old_subtask_has_exactly_one_successor_in_range() {
        for from in 1..=9 {
            for to in 1..=9 {
                let r = Rescale { from, to };
                for old in 0..from {
                    let claimed: Vec<u32> = (0..to).filter(|&new| r.predecessors(new).contains(&old)).collect();
                    assert_eq!(claimed, vec![r.successor(old)], "{from}->{to}: old {old}");
                }
            }
        }
    }

    #[test]
    fn a_surviving_index_keeps_its_own_work() {
        let r = Rescale { from: 2, to: 4 };
        assert_eq!((r.successor(0), r.successor(1)), (0, 1));
        let r = Rescale { from: 3, to: 1 };
        assert_eq!(r.predecessors(0), vec![0, 1, 2]);
    }

    #[test]
    fn every_key_has_exactly_one_new_owner() {
        let r = Rescale { from: 2, to: 3 };
        for k in 0u32..500 {
            let key = k.to_le_bytes();
            assert_eq!((0..3).filter(|&s| r.owns_key(s, &key)).count(), 1);
        }
    }

    #[test]
    fn only_the_operators_that_opt_in_re_divide_and_the_others_say_why() {
        let params = serde_json::json!({});
        for descriptor in [&super::super::kafka_sink::DESCRIPTOR, &super::super::segment_source::DESCRIPTOR] {
            let why = refusal(descriptor, &params).unwrap();
            assert!(why.contains(descriptor.type_name) && why.contains("cannot re-divide"), "{why}");
        }
        for descriptor in [&super::super::window::DESCRIPTOR, &super::super::staged_sink::DESCRIPTOR] {
            assert_eq!(refusal(descriptor, &params), None);
        }
        let text_keys = serde_json::json!({"timer_key": "text"});
        assert!(refusal(&super::super::idle::DESCRIPTOR, &text_keys).is_some_and(|w| w.contains("text")));
        assert_eq!(refusal(&super::super::idle::DESCRIPTOR, &params), None);
    }
}
