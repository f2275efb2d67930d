//! The COMPLETED markers across a restore at another parallelism: where two
//! markers in checkpoint order name different layout generations, the newer
//! is one more, the two markers' job graphs show an operator whose
//! parallelism changed, and for each such operator every old subtask has
//! exactly one successor under the engine's rule
//! (`clink_engine::operators::rescale::Rescale`). Anything else (a
//! generation that goes down or skips, a generation bumped with no
//! parallelism changed, a graph missing, a successor missing or doubled) is
//! a problem with the markers. It reads the model; it never reads a file.

use std::collections::BTreeMap;

use clink_engine::job::JobGraph;
use clink_engine::operators::rescale::Rescale;

use super::Evidence;

/// The problems of the markers' generations, in checkpoint order.
pub(super) fn generation_problems(e: &Evidence) -> Vec<String> {
    let mut problems = Vec::new();
    let markers: Vec<(u64, u32)> = e.completed.iter().map(|(c, m)| (*c, m.generation)).collect();
    for pair in markers.windows(2) {
        let [(before, old), (after, new)] = [pair[0], pair[1]];
        if new == old {
            continue;
        }
        if new != old + 1 {
            problems.push(format!(
                "COMPLETED-{before} names generation {old} and COMPLETED-{after} generation {new}: a restore at another \
                 parallelism writes exactly the next one"
            ));
            continue;
        }
        let (Some(g1), Some(g2)) = (e.graphs.get(&before), e.graphs.get(&after)) else {
            problems.push(format!(
                "COMPLETED-{after} names generation {new}, one past COMPLETED-{before}'s, and the job graphs that \
                 would show the rescale are not both in the bundle"
            ));
            continue;
        };
        let rescaled = rescaled_operators(g1, g2);
        if rescaled.is_empty() {
            problems.push(format!(
                "COMPLETED-{after} names generation {new}, one past COMPLETED-{before}'s, and no operator's \
                 parallelism changed between their job graphs"
            ));
        }
        for (op, rescale) in rescaled {
            problems.extend(successor_problems(rescale).into_iter().map(|p| format!("operator {op} {p}")));
        }
    }
    problems
}

/// The operators of both graphs whose parallelism differs, by id.
fn rescaled_operators(before: &JobGraph, after: &JobGraph) -> BTreeMap<u64, Rescale> {
    before
        .operators
        .iter()
        .filter_map(|old| {
            let new = after.operator(old.spec.id)?;
            let (from, to) = (old.spec.parallelism, new.spec.parallelism);
            (from != to).then_some((old.spec.id.0, Rescale { from, to }))
        })
        .collect()
}

/// Every old subtask of a rescale that does not have exactly one successor.
fn successor_problems(rescale: Rescale) -> Vec<String> {
    (0..rescale.from)
        .filter_map(|old| {
            let successors: Vec<u32> = (0..rescale.to).filter(|&n| rescale.predecessors(n).contains(&old)).collect();
            (successors.len() != 1).then(|| {
                format!(
                    "from {} to {} subtasks: old subtask {old}'s prepared work goes to {successors:?}, not to exactly \
                     one new subtask",
                    rescale.from, rescale.to
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use clink_engine::checkpoint::markers::{CheckpointKind, CompletedMarker};
    use clink_engine::job::parse_job;

    use super::*;

    const EXAMPLE: &str = include_str!("../../../../fixtures/jobs/example/job.json");

    /// Markers 1 and 2, of generations `gens`, of the example job at parallelism 2 then `to`.
    fn evidence(gens: (u32, u32), to: u32, graphs: bool) -> Evidence {
        let at = |p: u32| {
            let mut doc: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
            for op in doc["operators"].as_array_mut().unwrap() {
                if ["3", "4", "5", "6"].contains(&op["id"].as_str().unwrap()) {
                    op["parallelism"] = p.into();
                }
            }
            Arc::new(parse_job(&doc.to_string()).unwrap())
        };
        let mut e = Evidence::default();
        for (c, g, p) in [(1, gens.0, 2), (2, gens.1, to)] {
            e.completed.insert(c, CompletedMarker::new(1, c, g, CheckpointKind::Periodic, Vec::new(), None));
            if graphs {
                e.graphs.insert(c, at(p));
            }
        }
        e
    }

    #[test]
    fn a_rescale_with_one_successor_per_old_subtask_is_accepted() {
        assert!(generation_problems(&evidence((1, 2), 3, true)).is_empty());
        assert!(generation_problems(&evidence((1, 2), 1, true)).is_empty());
        assert!(generation_problems(&evidence((1, 1), 2, true)).is_empty());
    }

    #[test]
    fn a_generation_bump_the_graphs_do_not_explain_is_a_problem() {
        let no_change = generation_problems(&evidence((1, 2), 2, true));
        assert!(no_change.iter().any(|p| p.contains("no operator's parallelism changed")), "{no_change:?}");
        let no_graphs = generation_problems(&evidence((1, 2), 3, false));
        assert!(no_graphs.iter().any(|p| p.contains("not both in the bundle")), "{no_graphs:?}");
        let skipped = generation_problems(&evidence((1, 3), 3, true));
        assert!(skipped.iter().any(|p| p.contains("exactly the next one")), "{skipped:?}");
        let down = generation_problems(&evidence((2, 1), 3, true));
        assert!(!down.is_empty());
    }

    #[test]
    fn every_pair_of_parallelisms_gives_each_old_subtask_one_successor() {
        for from in 1..=6 {
            for to in 1..=6 {
                assert!(successor_problems(Rescale { from, to }).is_empty(), "{from}->{to}");
            }
        }
    }
}
