//! How an edge routes a producer subtask's rows to the consumer's subtasks.
//!
//! The one implementation of edge routing: the runtime's output gates send
//! by it, and the harness's `replay.recorded_output` predicts with it which
//! consumer subtask received which replayed row.

use std::ops::Range;

use crate::job::Partition;
#[cfg(test)]
use crate::keys::{key_bytes, subtask_for_key};
use crate::keys::{key_group_of, subtask_for_group};
use crate::value::Value;

/// An edge's routing, resolved from its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// To the consumer subtask with the producer subtask's index.
    Forward,
    /// By the key group of these columns of the producer's rows.
    Hash(Vec<usize>),
}

impl Route {
    pub fn of(partition: &Partition) -> Route {
        match partition {
            Partition::Forward => Route::Forward,
            Partition::Hash { indices, .. } => Route::Hash(indices.clone()),
        }
    }

    /// The consumer subtask (of `consumers`) that receives `row` from `producer_subtask`.
    pub fn target(&self, producer_subtask: u32, row: &[Value], consumers: u32) -> u32 {
        match self {
            Route::Forward => producer_subtask,
            Route::Hash(columns) => subtask_for_group(key_group_of(row, columns), consumers),
        }
    }

    /// The consumer subtasks a broadcast element (a watermark, a barrier, an
    /// end) from `producer_subtask` reaches.
    pub fn broadcast_targets(&self, producer_subtask: u32, consumers: u32) -> Range<u32> {
        match self {
            Route::Forward => producer_subtask..producer_subtask + 1,
            Route::Hash(_) => 0..consumers,
        }
    }

    /// The index of `producer_subtask`'s channel at a consumer subtask.
    pub fn channel_at_consumer(&self, producer_subtask: u32) -> u32 {
        match self {
            Route::Forward => 0,
            Route::Hash(_) => producer_subtask,
        }
    }

    /// How many channels a consumer subtask has on this edge, from a
    /// producer of `producer_parallelism`.
    pub fn channels_per_consumer(&self, producer_parallelism: u32) -> usize {
        match self {
            Route::Forward => 1,
            Route::Hash(_) => producer_parallelism as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_routing_agrees_with_key_ownership_and_forward_keeps_the_index() {
        let row = vec![Value::Str("acct-7".into()), Value::Int(3)];
        let hash = Route::Hash(vec![0]);
        let expected = subtask_for_key(&key_bytes(&row, &[0]), 4);
        assert_eq!(hash.target(2, &row, 4), expected);
        assert_eq!(Route::Forward.target(2, &row, 4), 2);
        assert_eq!(hash.broadcast_targets(1, 3), 0..3);
        assert_eq!(Route::Forward.broadcast_targets(1, 3), 1..2);
        assert_eq!(hash.channel_at_consumer(5), 5);
        assert_eq!(Route::Forward.channel_at_consumer(5), 0);
    }
}
