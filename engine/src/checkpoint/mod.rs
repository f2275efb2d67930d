//! Everything a checkpoint leaves on disk, and the one rule that chooses where a
//! restart restores from.
//!
//! This module owns the checkpoint directory's layout, the snapshot format and
//! its integrity sidecar, the COMPLETED markers, the RESTORED record, the
//! commit-confirmed family's receipts and CONFIRMED markers, durable
//! writes, and [`restore_point_on_disk`]. It never decides *when* to checkpoint
//! or commit: that is the runtime's protocol. Every reader here refuses a file
//! whose size, hash or contents do not match what its writer vouched for.

pub mod backend;
pub mod commits;
pub mod dataset;
pub mod durable;
pub mod fence;
pub mod graph;
pub mod identity;
pub mod layout;
pub mod lineage;
pub mod markers;
pub mod restore;
pub mod rocks;
pub mod snapshot;
pub mod state_error;
pub mod state_root;

pub use backend::{FileStateBackend, StateError};
pub use layout::{participant_name, CheckpointLayout, GENERATION};
pub use markers::{CompletedMarker, MarkerError, RestoredRecord};
pub use restore::{
    choose_restore_point, engine_restore_point, epoch_start, epoch_start_from, next_checkpoint_id, restore_point_from,
    restore_point_on_disk, restore_point_on_disk_by, ChosenBy, EpochStartError, RestoreError, RestorePoint,
    RestoreRule, StartPoint,
};
pub use snapshot::{Slot, SlotKind, SnapshotMeta, StateSlots};
pub use state_root::{parse_state_flag, BackendKind, StateRoot};
