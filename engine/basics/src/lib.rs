//! clink-basics: the leaf helpers every crate of clink-rs shares.
//!
//! It owns the small rules that must be written once and read the same
//! everywhere: 64-bit ids as canonical decimal text ([`ids`]), a JSON field
//! reader whose every error names the path of the field at fault
//! ([`fields`]), SHA-256 digests in lowercase hex, computed by streaming
//! ([`digest`]), the one bounded reader of files an input names ([`files`]),
//! the multiset comparison ([`multiset`]), the command-line exit codes
//! ([`exit`]) and the check vocabulary ([`status`]).
//!
//! It depends on nothing of ours and never will: it is the bottom of the
//! dependency graph. It knows nothing about jobs, checkpoints or bundles.
//!
//! ```
//! use clink_basics::ids::parse_decimal_u64;
//! assert_eq!(parse_decimal_u64("18446744073709551615"), Some(u64::MAX));
//! assert_eq!(parse_decimal_u64("007"), None);
//! ```

pub mod digest;
pub mod exit;
pub mod fields;
pub mod files;
pub mod ids;
pub mod multiset;
pub mod names;
pub mod ndjson;
pub mod redact;
pub mod status;
pub mod text;
