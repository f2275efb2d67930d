//! The frames that cross between the coordinator and the subtasks, and between
//! subtasks. Nothing else is shared between them: keeping every exchange an
//! explicit message keeps a split into several processes possible.

use crate::checkpoint::markers::CheckpointKind;
use crate::value::Row;

/// One element of a data stream between two subtasks.
#[derive(Debug, Clone, PartialEq)]
pub enum Element {
    Record(Row),
    Watermark {
        time: i64,
        idle: bool,
    },
    Barrier {
        checkpoint: u64,
        kind: CheckpointKind,
    },
    /// The input's end: everything has fired, the stream is over.
    End,
    /// The stream stops here with state kept (a savepoint stop).
    Stop,
}

/// A batch of elements on one channel of the receiving subtask.
#[derive(Debug)]
pub struct DataFrame {
    pub channel: u32,
    pub elements: Vec<Element>,
}

/// Coordinator to subtask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToTask {
    /// To the source: start checkpoint `checkpoint`.
    TriggerCheckpoint { checkpoint: u64, kind: CheckpointKind },
    /// To the sinks: `checkpoint` is completed and its marker durable.
    CommitCheckpoint { checkpoint: u64 },
    /// Stop now; nothing after this frame counts.
    Cancel,
}

/// Subtask to coordinator. `task` is the subtask's index in the deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToCoordinator {
    /// The source asks for a checkpoint (every N records, at END, for a savepoint).
    RequestCheckpoint { kind: CheckpointKind },
    /// The subtask's snapshot of `checkpoint` is durable (ok) or failed.
    Ack { task: usize, checkpoint: u64, ok: bool, error: Option<String> },
    /// A sink published its handles up to `checkpoint`.
    Committed { task: usize, checkpoint: u64 },
    /// The subtask is done (its input ended and, for a sink, its last checkpoint committed).
    Finished { task: usize },
    /// The subtask failed.
    Failed { task: usize, error: String },
}
