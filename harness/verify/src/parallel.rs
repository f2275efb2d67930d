//! Work spread over the machine's cores: one item at a time to whichever
//! thread is free, results in the items' order. Never reorders what a
//! caller reports, and never drops an item: a worker that panics re-panics
//! on the calling thread.

use std::sync::atomic::{AtomicUsize, Ordering};

/// `work` over every item, on as many threads as the machine has cores (at
/// most one per item); `finished(n)` is told on the calling thread as the
/// n-th item (in any order) finishes.
pub fn map_ordered<T: Sync, R: Send>(
    items: &[T],
    work: impl Fn(&T) -> R + Sync,
    mut finished: impl FnMut(usize),
) -> Vec<R> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let mut slots: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..workers {
            let (tx, next, work) = (tx.clone(), &next, &work);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                if tx.send((i, work(item))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (done, (i, result)) in rx.iter().enumerate() {
            slots[i] = Some(result);
            finished(done + 1);
        }
    });
    // A worker that panicked re-panics when the scope joins it, so every
    // slot is filled here.
    slots.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_comes_back_in_its_place() {
        let items: Vec<u64> = (0..1000).collect();
        let mut told = Vec::new();
        let out = map_ordered(&items, |&i| i * 3, |n| told.push(n));
        assert_eq!(out, items.iter().map(|i| i * 3).collect::<Vec<_>>());
        assert_eq!(told, (1..=1000).collect::<Vec<_>>());
        assert!(map_ordered(&[] as &[u64], |&i| i, |_| unreachable!()).is_empty());
    }
}
