//! `cargo bench -p nodemem-controller --bench decide`: what one decision costs after
//! one agent's report, at 500, 5,000 and 20,000 nodes (issue 32, goal 3: a node's event
//! should cost the same whatever the cluster's size, within 2x).
//!
//! The controller's `Decider` on a world built as the watches would fill it: one policy
//! over every node, rolled out and every agent reporting its revision applied and
//! healthy. Then, sample after sample, one agent's report changes (a memory.high
//! crossing more since the revision) and the controller decides again; the model
//! (`decide`, which reads the whole world) decides too, for comparison, and must
//! decide the same. The apiserver is not involved: this is the controller's own time
//! per event.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is the run failing

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodemem_api::config::{MemoryTotals, RevisionSignals};
use nodemem_api::report::ConfigEntry;
use nodemem_api::{NodeMemoryConfigStatus, NodeMemoryPolicy};
use nodemem_controller::decide::{decide, Decider};
use nodemem_controller::decision::Decision;
use nodemem_controller::world::World;
use serde_json::json;

/// The sizes, unless NODEMEM_DECIDE_SIZES names others (`500,100000`: the first is the
/// one the others are held against).
const SIZES: [usize; 3] = [500, 5_000, 20_000];
const SAMPLES: usize = 200;
const T0: i64 = 1_795_341_600;

/// One cluster of the bench: its world, the decider that follows it, the time.
struct Cluster {
    nodes: usize,
    world: World,
    decider: Decider,
    now: i64,
    took: Vec<Duration>,
}

impl Cluster {
    fn new(nodes: usize) -> Cluster {
        let (mut world, now) = rolled_out(nodes);
        // The controller's decider, having decided once on the whole world.
        let mut decider = Decider::default();
        decider.decide(&mut world, now);
        Cluster {
            nodes,
            world,
            decider,
            now,
            took: Vec::with_capacity(SAMPLES),
        }
    }

    /// One agent's report, and the decision after it (timed).
    fn sample(&mut self, sample: usize) -> Decision {
        let node = name(sample * 7919 % self.nodes);
        one_report(&mut self.world, &node);
        let started = Instant::now();
        let d = self.decider.decide(&mut self.world, self.now);
        self.took.push(started.elapsed());
        assert!(d.writes.is_empty(), "a report changes no config");
        d
    }

    /// The status a decision writes comes back through the policy watch.
    fn written(&mut self, d: &Decision) {
        for (policy, status) in &d.statuses {
            if let Some(p) = self.world.policies.get_mut(policy) {
                p.status = status.clone();
            }
        }
        self.world.touch_policies();
    }
}

fn main() {
    let sizes: Vec<usize> = match std::env::var("NODEMEM_DECIDE_SIZES") {
        Ok(list) => list
            .split(',')
            .map(|n| n.trim().parse().expect("NODEMEM_DECIDE_SIZES: node counts"))
            .collect(),
        Err(_) => SIZES.to_vec(),
    };
    let mut clusters: Vec<Cluster> = sizes.into_iter().map(Cluster::new).collect();
    // The sizes take turns, so that whatever else the machine does meanwhile falls on
    // all of them alike; each sample finds the caches as another cluster left them, as
    // a controller's decision finds them after its writes.
    for sample in 0..SAMPLES {
        for c in &mut clusters {
            let d = c.sample(sample);
            c.written(&d);
        }
    }
    let mut medians = Vec::new();
    for c in &mut clusters {
        // The model, reading the whole world, for comparison; it decides the same.
        let mut whole = Vec::new();
        for sample in SAMPLES..SAMPLES + 4 {
            let d = c.sample(sample);
            let started = Instant::now();
            let model = decide(&c.world, c.now);
            whole.push(started.elapsed());
            assert_eq!(d, model, "the decider decides as the model");
            c.written(&d);
        }
        c.took.truncate(SAMPLES);
        let (median, p90) = spread(&mut c.took);
        let (whole_median, _) = spread(&mut whole);
        println!(
            "decide: {} nodes, one agent's report: median {:.3} ms, p90 {:.3} ms over {SAMPLES} decisions (the whole world read again: {:.2} ms)",
            c.nodes,
            ms(median),
            ms(p90),
            ms(whole_median)
        );
        medians.push((c.nodes, median));
    }
    let (small, large) = (medians[0], medians[medians.len() - 1]);
    println!(
        "decide: {} nodes against {}: {:.2}x (goal: within 2x)",
        large.0,
        small.0,
        large.1.as_secs_f64() / small.1.as_secs_f64()
    );
}

/// One agent's report: a memory.high crossing more since its revision.
fn one_report(world: &mut World, node: &str) {
    let report = &mut world
        .configs
        .get_mut(node)
        .expect("every node has its config")
        .status;
    if let Some(s) = report.since_revision.as_mut() {
        s.throttle_events += 1;
    }
    world.touch_node(node);
}

/// The median and the 90th percentile.
fn spread(took: &mut [Duration]) -> (Duration, Duration) {
    took.sort();
    (took[took.len() / 2], took[took.len() * 9 / 10])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn name(i: usize) -> String {
    format!("node-{i:05}")
}

/// A world of `nodes` nodes under one policy, rolled out: every config written with
/// the policy's revision and its agent reporting it applied and healthy.
fn rolled_out(nodes: usize) -> (World, i64) {
    let mut world = World::default();
    let policy: NodeMemoryPolicy = serde_json::from_value(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": "general", "uid": "uid-general", "generation": 1,
            "finalizers": [nodemem_api::HANDOFF_FINALIZER]},
        "spec": {"nodeSelector": {"matchLabels": {"pool": "general"}},
            "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"},
            "rollout": {"maxUnavailable": "100%"}},
    }))
    .expect("a valid policy");
    world.apply_policy(&policy);
    for i in 0..nodes {
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(
            json!({"metadata": {"name": name(i), "labels": {"pool": "general"}}}),
        )
        .expect("a valid node");
        world.apply_node(&node);
    }
    let mut now = T0;
    for _ in 0..4 {
        let d = decide(&world, now);
        for w in &d.writes {
            let generation = world
                .configs
                .get(&w.node)
                .and_then(|c| c.generation)
                .unwrap_or(0)
                + 1;
            let mut entry = ConfigEntry {
                generation: Some(generation),
                spec: w.spec.clone(),
                status: NodeMemoryConfigStatus::default(),
                spec_changed_at: Some(now),
                good_seen_at: None,
            };
            entry.status = healthy(&entry, now);
            world.configs.insert(w.node.clone(), entry);
        }
        for (policy, status) in &d.statuses {
            if let Some(p) = world.policies.get_mut(policy) {
                p.status = status.clone();
            }
        }
        now += 60;
    }
    assert_eq!(world.configs.len(), nodes, "every node got its config");
    (world, now)
}

/// The agent's report: its revision applied and healthy.
fn healthy(c: &ConfigEntry, at: i64) -> NodeMemoryConfigStatus {
    let condition = |type_: &str| Condition {
        type_: type_.into(),
        status: "True".into(),
        reason: type_.into(),
        message: String::new(),
        observed_generation: c.generation,
        last_transition_time: Time(
            k8s_openapi::jiff::Timestamp::from_second(at).expect("a valid time"),
        ),
    };
    NodeMemoryConfigStatus {
        observed_revision: Some(c.spec.revision.clone()),
        conditions: vec![condition("Applied"), condition("Healthy")],
        totals: Some(MemoryTotals {
            memory_min_bytes: 1 << 20,
            memory_low_bytes: 2 << 20,
        }),
        since_revision: Some(RevisionSignals {
            revision: c.spec.revision.clone(),
            throttle_events: 0,
            oom_kills: 0,
            peak_full_memory_pressure: 0.0,
            peak_refaults_per_second: None,
        }),
        ..NodeMemoryConfigStatus::default()
    }
}
