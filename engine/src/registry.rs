//! The one operator registry: operator type names to their descriptors.
//!
//! The job planner, the runtime, replay and the harness's checks all find an
//! operator here and build it through its descriptor, so a replayed or
//! decoded operator is the operator production ran. The table itself is the
//! `registered_operators!` line in [`crate::operators`]; this module only
//! looks things up in it. It never depends on the job graph or the runtime.

use std::fmt;

use crate::checkpoint::StateSlots;
use crate::operators::driver::Driver;
use crate::operators::{
    Build, Descriptor, OperatorError, OperatorKind, Setup, Sink, Source, StateDecoding, Transform, DESCRIPTORS,
};
use crate::timers::Clock;

/// An operator type this build does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownType(pub String);

impl fmt::Display for UnknownType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown operator type {:?}; known types: {}", self.0, type_names().join(", "))
    }
}

impl std::error::Error for UnknownType {}

/// The descriptor of an operator type.
pub fn descriptor(type_name: &str) -> Result<&'static Descriptor, UnknownType> {
    DESCRIPTORS.iter().copied().find(|d| d.type_name == type_name).ok_or_else(|| UnknownType(type_name.to_string()))
}

pub fn type_names() -> Vec<&'static str> {
    DESCRIPTORS.iter().map(|d| d.type_name).collect()
}

pub fn kind_of(type_name: &str) -> Option<OperatorKind> {
    descriptor(type_name).ok().map(Descriptor::kind)
}

fn wrong_shape(d: &Descriptor, wanted: &str) -> OperatorError {
    OperatorError::Protocol(format!("{:?} is a {:?}, not a {wanted}", d.type_name, d.kind()))
}

pub fn build_source(d: &Descriptor, setup: &Setup<'_>) -> Result<Box<dyn Source>, OperatorError> {
    match d.build {
        Build::Source(build) => build(setup),
        _ => Err(wrong_shape(d, "source")),
    }
}

pub fn build_transform(d: &Descriptor, setup: &Setup<'_>) -> Result<Box<dyn Transform>, OperatorError> {
    match d.build {
        Build::Transform(build) => build(setup),
        _ => Err(wrong_shape(d, "transform")),
    }
}

pub fn build_sink(d: &Descriptor, setup: &Setup<'_>) -> Result<Box<dyn Sink>, OperatorError> {
    match d.build {
        Build::Sink { build, .. } => build(setup),
        _ => Err(wrong_shape(d, "sink")),
    }
}

/// Decodes a participant's state through its operator's restore path, with
/// no side effect: a transform is built and restored on a manual clock, a
/// source's position and a sink's handles are decoded without touching input
/// or output. What `state.decode` runs on a bundle's snapshots.
pub fn decode_state(d: &Descriptor, setup: &Setup<'_>, slots: &StateSlots) -> Result<(), OperatorError> {
    match d.state {
        StateDecoding::Restore => Driver::new(build_transform(d, setup)?, Clock::Manual(0)).restore(slots),
        StateDecoding::Decode(decode) => decode(slots),
        StateDecoding::Stateless => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_is_registered_once_and_found_by_name() {
        let names = type_names();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for name in names {
            assert_eq!(descriptor(name).map(|d| d.type_name), Ok(name));
        }
        let err = descriptor("no_such_type").unwrap_err();
        assert!(err.to_string().contains("known types: segment_source"), "{err}");
    }
}
