//! clink-audit: continuous audits of a running job (issue 20).
//!
//! So far this crate owns the pure parts, none of which runs or reads
//! anything, and two files of the state directory:
//! - [`config`]: the reader of the operator's configuration, the
//!   `clink-audit-config` version 1 document. It turns a file into an
//!   [`config::AuditConfig`] whose every value has been checked (absolute
//!   paths, bounds in range, credentials named as environment variables, the
//!   reference as an argument array with only the fixed placeholders), or
//!   refuses it with a [`config::ConfigError`] that names the field at fault
//!   and what was expected. It also fixes which child may receive which
//!   credential ([`config::ChildKind`]) and the configuration's fingerprint,
//!   which audit ids will be made from.
//! - [`outcome`]: the outcomes of `clink-audit-report` version 1 and the
//!   relationships a finding names; which outcomes are tried again and when
//!   ([`outcome::next_attempt_due`]), and which count toward coverage.
//! - [`coverage`]: per topic and partition, the verified offsets as merged
//!   ranges, the gaps tagged by outcome, and the discrepancies, which a later
//!   pass never clears.
//! - [`status`]: the state `status` reports, the most severe condition that
//!   holds, and its exit code.
//!
//! - [`lock`]: the runner lock, one runner per state directory, a second
//!   refused naming the first.
//! - [`events`]: `events.ndjson`, one JSON object per line, a torn tail
//!   reported.
//!
//! What it must never do: run anything (the runner, which will run the real
//! `clink` and reference processes, is issue 20's remaining work), read a
//! credential's value, write a credential's value into an error or a
//! fingerprint, or accept a configuration it has not fully checked. It will
//! sit above `clink-verify`, `clink-reconcile` and `clink-bundle` and add no
//! check of its own.
//!
//! ```
//! use clink_audit::config::{AuditConfig, ChildKind};
//! let text = include_str!("../examples/audit.json");
//! let config = AuditConfig::from_slice(text.as_bytes()).unwrap();
//! assert!(config.child_env(ChildKind::Verify).is_empty());
//! // The example's backoff starts at 30 s; a second failure waits 60 s.
//! use clink_audit::outcome::{next_attempt_due, Outcome};
//! let due = next_attempt_due(Outcome::Partial, 2, config.max_attempts, 1_000, &config.backoff);
//! assert_eq!(due, Some(1_060));
//! ```

pub mod cli;
pub mod config;
pub mod coverage;
pub mod durable;
pub mod events;
pub mod job;
pub mod ledger;
pub mod lock;
pub mod outcome;
pub mod page;
pub mod procs;
pub mod report;
pub mod runner;
pub mod status;
pub mod steps;
pub mod view;
