//! The watch events between the watches and the decisions: read all the time in a
//! task of their own, queued up to a cap, and taken into the world together, so that
//! everything that arrived while a decision's writes were in flight makes one decision,
//! not one each.
//!
//! Why read all the time: an unread watch fills the apiserver's buffer for it; the
//! apiserver's dispatch to every watcher of the resource (every agent's watch of its
//! own config among them) then waits on it, and in the end the apiserver closes the
//! watch and the controller lists again (BENCHMARKS.md, the fan-out at 5,000 nodes).
//! Why a cap: each queued event costs memory until the loop takes it. At the cap the
//! reader waits (backpressure): the watches are read no further until the loop has
//! room, which is the apiserver's buffer again, so the cap is sized for a fan-out's
//! own echoes (one config event per node) several times over.

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;

/// The default cap on queued events: a 20,000-node fan-out's echoes (one config event
/// per node, managedFields dropped: about 2 KiB each) three times over, about 120 MiB
/// at most.
pub const DEFAULT_CAPACITY: u64 = 60_000;

/// Reads `updates` into a queue of `capacity` events until the receiver is dropped.
pub fn start<U: Send + 'static>(
    mut updates: impl Stream<Item = U> + Unpin + Send + 'static,
    capacity: usize,
) -> (mpsc::Receiver<U>, tokio::task::JoinHandle<()>) {
    let (forward, received) = mpsc::channel(capacity.max(1));
    let reader = tokio::spawn(async move {
        while let Some(update) = updates.next().await {
            if forward.send(update).await.is_err() {
                break;
            }
        }
    });
    (received, reader)
}

/// The events that were queued when a decision began: `first` and everything behind it
/// at that moment (not what arrives meanwhile, so a busy watch cannot hold a decision
/// off). Returns how many were taken.
pub fn take_queued<U>(
    first: U,
    received: &mut mpsc::Receiver<U>,
    mut take: impl FnMut(U),
) -> usize {
    let queued = received.len();
    take(first);
    let mut taken = 1;
    for _ in 0..queued {
        match received.try_recv() {
            Ok(update) => {
                take(update);
                taken += 1;
            }
            Err(_) => break,
        }
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn everything_queued_is_taken_at_once_and_nothing_that_comes_later() {
        let (tx, mut rx) = mpsc::channel(64);
        for n in 1..=20 {
            tx.send(n).await.unwrap();
        }
        let first = rx.recv().await.unwrap();
        let mut seen = Vec::new();
        let taken = take_queued(first, &mut rx, |n| {
            seen.push(n);
        });
        assert_eq!(taken, 20);
        assert_eq!(seen, (1..=20).collect::<Vec<_>>());
        tx.send(21).await.unwrap();
        assert_eq!(rx.try_recv(), Ok(21), "left for the next decision");
    }

    #[tokio::test]
    async fn at_the_cap_the_reader_waits_and_loses_nothing() {
        let (mut rx, reader) = start(futures::stream::iter(0..1_000), 8);
        // The reader filled the queue and waits for room.
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(rx.len(), 8, "the queue holds its cap, no more");
        assert!(!reader.is_finished(), "the reader waits at the cap");
        let mut all = Vec::new();
        while let Some(first) = rx.recv().await {
            take_queued(first, &mut rx, |n| all.push(n));
        }
        assert_eq!(all, (0..1_000).collect::<Vec<_>>(), "in order, none lost");
    }
}
