//! What each simulated agent's watches delivered, per resource: the events after the
//! first list (each agent's own count) and the lists after the first (a watch that had
//! to start over, the apiserver having lost its place: 410 Gone).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use kube::runtime::watcher;

/// Every agent's events and every resource's relists, counted by the watch tasks.
pub struct Tally {
    events: BTreeMap<&'static str, Vec<AtomicUsize>>,
    relists: BTreeMap<&'static str, AtomicUsize>,
}

/// A reading of a [`Tally`]: resource -> each agent's events, and resource -> relists.
#[derive(Clone)]
pub struct Reading {
    pub events: BTreeMap<&'static str, Vec<usize>>,
    pub relists: BTreeMap<&'static str, usize>,
}

impl Tally {
    /// A tally for `agents` agents, each watching `resources`.
    pub fn new(resources: &[&'static str], agents: usize) -> Self {
        Tally {
            events: resources
                .iter()
                .map(|r| (*r, (0..agents).map(|_| AtomicUsize::new(0)).collect()))
                .collect(),
            relists: resources
                .iter()
                .map(|r| (*r, AtomicUsize::new(0)))
                .collect(),
        }
    }

    /// Counts one event of `event` on agent `agent`'s watch of `resource`; says whether
    /// it ended the watch's first list.
    pub fn count<K>(
        &self,
        resource: &str,
        agent: usize,
        event: &watcher::Result<watcher::Event<K>>,
        listed_once: &mut bool,
    ) -> bool {
        match event {
            Ok(watcher::Event::Init) if *listed_once => {
                self.relists[resource].fetch_add(1, Ordering::Relaxed);
            }
            Ok(watcher::Event::InitDone) if !*listed_once => {
                *listed_once = true;
                return true;
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                self.events[resource][agent].fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        false
    }

    /// The counts now.
    pub fn read(&self) -> Reading {
        Reading {
            events: self
                .events
                .iter()
                .map(|(r, v)| (*r, v.iter().map(|c| c.load(Ordering::Relaxed)).collect()))
                .collect(),
            relists: self
                .relists
                .iter()
                .map(|(r, c)| (*r, c.load(Ordering::Relaxed)))
                .collect(),
        }
    }
}

impl Reading {
    /// Each agent's events of `resource` since `before`.
    pub fn events_since(&self, before: &Reading, resource: &str) -> Vec<usize> {
        self.events[resource]
            .iter()
            .zip(&before.events[resource])
            .map(|(now, then)| now - then)
            .collect()
    }

    /// The relists of `resource` since `before`.
    pub fn relists_since(&self, before: &Reading, resource: &str) -> usize {
        self.relists[resource] - before.relists[resource]
    }
}

/// Each agent's events of every resource since `before`, a line per resource: the
/// agents that saw any, the most one saw, and the events in all.
pub fn per_agent(before: &Reading, after: &Reading) -> Vec<String> {
    after
        .events
        .keys()
        .map(|resource| {
            let each = after.events_since(before, resource);
            let saw = each.iter().filter(|n| **n > 0).count();
            let most = each.iter().max().copied().unwrap_or(0);
            let all: usize = each.iter().sum();
            format!(
                "{resource}: {all} event(s) to {saw} of {} agents (at most {most} to one)",
                each.len()
            )
        })
        .collect()
}

/// Reads a watch's events, counting them on `tally` as agent `agent`'s of `resource`.
pub async fn counted<K>(
    events: impl futures::Stream<Item = watcher::Result<watcher::Event<K>>>,
    tally: std::sync::Arc<Tally>,
    resource: &'static str,
    agent: usize,
) {
    let mut events = Box::pin(events);
    let mut listed_once = false;
    while let Some(e) = events.next().await {
        tally.count(resource, agent, &e, &mut listed_once);
    }
}
