//! clink-engine: the streaming runtime that clink-rs verifies.
//!
//! It runs job graphs of typed rows (a segment-file source, keyed windows and
//! timers, file sinks) on threads, takes aligned barrier checkpoints into a
//! file state backend, commits a two-phase staged-file sink exactly once, and
//! resumes after being killed at any protocol step. It also leaves the
//! evidence the harness reads: markers, snapshots with sidecars, and protocol
//! traces.
//!
//! The crate never verifies its own evidence and never opens a network
//! connection: verification is the harness's.

pub mod capture;
pub mod checkpoint;
pub mod codec;
pub mod defects;
pub mod event;
pub mod fault;
pub mod gen;
pub mod inspect;
pub mod job;
pub mod job_manifest;
pub mod keys;
pub mod operators;
pub mod registry;
pub mod routing;
pub mod runtime;
pub mod state_map;
pub mod timers;
pub mod trace;
pub mod value;
