//! How an edge routes a producer subtask's rows to the consumer's subtasks.
//!
//! The one implementation of edge routing: the runtime's output gates send
//! by it ([`Router`], which hashes a row's key once for every edge keyed by
//! the same columns), and the harness's `replay.recorded_output` predicts
//! with it ([`Route::target`]) which consumer subtask received which
//! replayed row. Both go through [`Route::target_of_group`], so they cannot
//! disagree. Routing never allocates per row and never looks at a row's
//! values beyond its key columns.

use std::ops::Range;

use crate::job::Partition;
#[cfg(test)]
use crate::keys::{key_bytes, subtask_for_key};
use crate::keys::{key_group_in, key_group_of, subtask_for_group};
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
        let group = match self {
            Route::Forward => 0,
            Route::Hash(columns) => key_group_of(row, columns),
        };
        self.target_of_group(producer_subtask, group, consumers)
    }

    /// The consumer subtask of a row whose key group is `group` (ignored by
    /// a forward edge).
    pub fn target_of_group(&self, producer_subtask: u32, group: u32, consumers: u32) -> u32 {
        match self {
            Route::Forward => producer_subtask,
            Route::Hash(_) => subtask_for_group(group, consumers),
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

/// Routes rows over a subtask's output edges: each edge's consumer subtask
/// for a row, with the key group of each distinct set of key columns
/// computed once per row in a reused buffer (two edges keyed alike, as a
/// key_by feeding a window and an idle detector, hash the key once).
#[derive(Debug, Clone)]
pub struct Router {
    routes: Vec<Route>,
    /// For each edge, the first edge with the same key columns (itself when
    /// none before it has them); unused for a forward edge.
    hashed_as: Vec<usize>,
    groups: Vec<u32>,
    scratch: Vec<u8>,
}

impl Router {
    pub fn new(routes: Vec<Route>) -> Router {
        let hashed_as = (0..routes.len()).map(|i| routes.iter().position(|r| *r == routes[i]).unwrap_or(i)).collect();
        let groups = vec![0; routes.len()];
        Router { routes, hashed_as, groups, scratch: Vec::with_capacity(64) }
    }

    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Computes the row's key groups; then [`Router::target`] answers per edge.
    pub fn hash_row(&mut self, row: &[Value]) {
        for i in 0..self.routes.len() {
            if let Route::Hash(columns) = &self.routes[i] {
                let first = self.hashed_as[i];
                self.groups[i] =
                    if first < i { self.groups[first] } else { key_group_in(&mut self.scratch, row, columns) };
            }
        }
    }

    /// Edge `edge`'s consumer subtask (of `consumers`) for the row last hashed.
    pub fn target(&self, edge: usize, producer_subtask: u32, consumers: u32) -> u32 {
        self.routes[edge].target_of_group(producer_subtask, self.groups[edge], consumers)
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

    #[test]
    fn the_router_sends_each_row_where_each_route_says() {
        let routes = vec![Route::Hash(vec![0]), Route::Forward, Route::Hash(vec![0]), Route::Hash(vec![1])];
        let mut router = Router::new(routes.clone());
        for i in 0..200 {
            let row = vec![Value::Str(format!("acct-{i}")), Value::Int(i)];
            router.hash_row(&row);
            for (edge, route) in routes.iter().enumerate() {
                assert_eq!(router.target(edge, 1, 3), route.target(1, &row, 3), "row {i}, edge {edge}");
            }
        }
    }
}
