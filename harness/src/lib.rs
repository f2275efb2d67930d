//! clink-harness: the verification library behind the `clink` command line.
//!
//! It judges what the engine left behind; it never changes it. Today it holds
//! the independent reference for the example job and the multiset comparison
//! every output check uses.

pub mod bundle;
pub mod compare;
pub mod formal;
pub mod reference;
pub mod regress;
pub mod replay;
pub mod verify;
