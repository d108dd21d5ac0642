//! Rollout planning for one policy's pool (pure): given where every node of the pool
//! stands on the policy's current revision, which nodes move next, and whether the
//! rollout is progressing, waiting, paused, degraded, rolling back or complete.
//!
//! A node is *updating* from the moment its NodeMemoryConfig carries the target
//! revision until its agent reports that revision `Applied` and `Healthy` for
//! `minReadySeconds` (then *ready*), or it fails. Updating nodes count against
//! `maxUnavailable`; canary nodes go first and the rest waits until they are ready.
//! Everything the planner needs is in the API objects (the configs' specs and
//! statuses), so a restarted controller plans the same next step.

/// How a new revision moves through the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RolloutParams {
    /// Nodes updating at the same time (already resolved from a count or percent; at
    /// least 1).
    pub max_unavailable: u32,
    /// Nodes updated first; the rest waits until they are ready.
    pub canary: u32,
    /// Seconds a node must report Applied and Healthy before it counts as ready.
    pub min_ready_seconds: u64,
    /// Seconds an updating node may take to become ready before it counts as failed.
    pub progress_deadline_seconds: u64,
    /// Failed nodes tolerated before `on_failure` applies.
    pub max_failures: u32,
    /// What `max_failures` failed nodes bring: a pause or a rollback.
    pub on_failure: OnFailure,
    /// No new node starts updating.
    pub paused: bool,
}

/// What a rollout does once `maxFailures` nodes failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    /// Nothing new starts until a person resumes.
    Pause,
    /// The updated nodes go back to the previous revision.
    Rollback,
}

/// Where one node of the pool stands, from its NodeMemoryConfig.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeProgress<'a> {
    /// The node's name.
    pub node: &'a str,
    /// The revision its config's spec carries (None: no config yet).
    pub spec_revision: Option<&'a str>,
    /// What its agent reports.
    pub report: AgentReport,
    /// Seconds since its config's spec got the revision it carries.
    pub since_spec_change: u64,
    /// Seconds since the node started draining for the target revision (a Kubelet-mode
    /// Memory Manager change is drained first); it is updating from then on.
    pub draining_for: Option<u64>,
}

/// The agent's view of the revision it last observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentReport {
    /// Nothing reported for the spec's revision yet.
    Pending,
    /// Applied and Healthy on the spec's revision for this many seconds.
    Good {
        /// Seconds since it first reported so.
        for_seconds: u64,
    },
    /// Applied=False or Healthy=False on the spec's revision.
    Bad,
}

/// What a node is, relative to the target revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodePhase {
    /// Still on another revision (or none).
    Waiting,
    /// On the target revision and not ready yet (or draining for it).
    Updating,
    /// On the target revision, Applied and Healthy for `minReadySeconds`.
    Ready,
    /// A bad report on the target revision, or past its progress deadline.
    Failed,
}

impl NodePhase {
    /// Every phase, in the order of [`NodePhase::index`].
    pub const ALL: [NodePhase; 4] = [
        NodePhase::Waiting,
        NodePhase::Updating,
        NodePhase::Ready,
        NodePhase::Failed,
    ];

    /// Its place in [`NodePhase::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The rollout's state and its next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolloutPlan {
    /// Where the rollout stands.
    pub state: RolloutState,
    /// Nodes whose config should now get the target revision.
    pub start: Vec<String>,
    /// Nodes whose config should go back to the previous revision (Rollback).
    pub revert: Vec<String>,
    /// The pool's nodes counted by phase.
    pub counts: Counts,
    /// The failed nodes, by name.
    pub failed: Vec<String>,
}

/// A pool's nodes counted for the policy's status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Nodes the policy selects.
    pub matched: u32,
    /// Nodes on the target revision (updating, ready or failed).
    pub updated: u32,
    /// Nodes updating to it.
    pub updating: u32,
    /// Nodes ready on it.
    pub ready: u32,
    /// Nodes failed on it.
    pub failed: u32,
}

/// Why the rollout does what it does, for status and events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RolloutState {
    /// Every node is ready on the target revision.
    Complete,
    /// Nodes are updating; more may start as slots free up.
    Progressing,
    /// Canary nodes are updating; the rest waits until they are ready.
    WaitingForCanary,
    /// Paused by the policy's `rollout.paused`.
    Paused,
    /// maxFailures reached under `Pause`: nothing new starts.
    Degraded,
    /// maxFailures reached under `Rollback`: updated nodes go back.
    RollingBack,
    /// maxFailures reached under `Rollback` by one node's own report outside the
    /// canary: nothing new starts and nothing goes back (one broken or hostile agent
    /// does not move a whole pool) until a second node or a canary fails.
    OneNodeFailed,
}

/// Classifies a node against the target revision.
pub fn phase(node: &NodeProgress<'_>, target: &str, params: &RolloutParams) -> NodePhase {
    if node.spec_revision != Some(target) {
        return match node.draining_for {
            Some(s) if s > params.progress_deadline_seconds => NodePhase::Failed,
            Some(_) => NodePhase::Updating,
            None => NodePhase::Waiting,
        };
    }
    match node.report {
        AgentReport::Bad => NodePhase::Failed,
        AgentReport::Good { for_seconds } if for_seconds >= params.min_ready_seconds => {
            NodePhase::Ready
        }
        // Good and waiting out minReadySeconds: the deadline is for reaching a good
        // report, so a node that reported good just before it is not failed by it
        // (it is ready minReadySeconds later, or fails on a bad report).
        AgentReport::Good { .. } => NodePhase::Updating,
        _ if node.since_spec_change > params.progress_deadline_seconds => NodePhase::Failed,
        _ => NodePhase::Updating,
    }
}

/// A pool's nodes by phase, each in name order: all the planner reads. The controller
/// keeps them as agents report ([`plan`] classifies a list from scratch).
pub trait PhaseSets {
    /// How many nodes are in `phase`.
    fn count(&self, phase: NodePhase) -> u32;
    /// The nodes in `phase`, by name.
    fn in_phase(&self, phase: NodePhase) -> Box<dyn Iterator<Item = &str> + '_>;
}

/// A pool classified from scratch: a list per phase.
#[derive(Default)]
struct PhaseLists<'a>([Vec<&'a str>; 4]);

impl PhaseSets for PhaseLists<'_> {
    fn count(&self, phase: NodePhase) -> u32 {
        self.0[phase.index()].len() as u32
    }
    fn in_phase(&self, phase: NodePhase) -> Box<dyn Iterator<Item = &str> + '_> {
        Box::new(self.0[phase.index()].iter().copied())
    }
}

/// The next step of a rollout to `target` over `nodes` (the whole pool).
pub fn plan(nodes: &[NodeProgress<'_>], target: &str, params: &RolloutParams) -> RolloutPlan {
    let mut sorted: Vec<&NodeProgress<'_>> = nodes.iter().collect();
    sorted.sort_by(|a, b| a.node.cmp(b.node));
    let mut lists = PhaseLists::default();
    for n in sorted {
        lists.0[phase(n, target, params).index()].push(n.node);
    }
    plan_phases(&lists, params)
}

/// Whether failures may roll a whole pool back: more than one node failed, or the
/// failed node is the whole pool, or the pool is still at its canary stage (the nodes
/// updated so far are the canaries). One node outside the canary is its own failure.
fn rollback_corroborated(counts: &Counts, params: &RolloutParams) -> bool {
    let canary_stage = counts.ready < params.canary.min(counts.matched);
    counts.failed >= 2 || counts.failed >= counts.matched || canary_stage
}

/// The next step of a rollout over a pool already classified by phase.
pub fn plan_phases(pool: &impl PhaseSets, params: &RolloutParams) -> RolloutPlan {
    let count = |p: NodePhase| pool.count(p);
    let matched = NodePhase::ALL.into_iter().map(count).sum::<u32>();
    let counts = Counts {
        matched,
        updating: count(NodePhase::Updating),
        ready: count(NodePhase::Ready),
        failed: count(NodePhase::Failed),
        updated: matched - count(NodePhase::Waiting),
    };
    let names = |p: NodePhase| pool.in_phase(p).map(str::to_string);
    let mut out = RolloutPlan {
        state: RolloutState::Progressing,
        start: Vec::new(),
        revert: Vec::new(),
        counts,
        failed: names(NodePhase::Failed).collect(),
    };
    if counts.failed >= params.max_failures.max(1) {
        match params.on_failure {
            OnFailure::Pause => out.state = RolloutState::Degraded,
            OnFailure::Rollback if !rollback_corroborated(&counts, params) => {
                out.state = RolloutState::OneNodeFailed;
            }
            OnFailure::Rollback => {
                out.state = RolloutState::RollingBack;
                let mut revert: Vec<String> = names(NodePhase::Updating)
                    .chain(names(NodePhase::Ready))
                    .chain(names(NodePhase::Failed))
                    .collect();
                revert.sort();
                out.revert = revert;
            }
        }
        return out;
    }
    if counts.ready == counts.matched {
        out.state = RolloutState::Complete;
        return out;
    }
    if params.paused {
        out.state = RolloutState::Paused;
        return out;
    }
    let canary = params.canary.min(counts.matched);
    // Until the canaries are ready, at most `canary` nodes are updated at all.
    let (limit, state) = if counts.ready < canary {
        (
            canary.saturating_sub(counts.updated),
            RolloutState::WaitingForCanary,
        )
    } else {
        (u32::MAX, RolloutState::Progressing)
    };
    // Failed nodes hold their slot: they are not available either.
    let busy = counts.updating + counts.failed;
    let slots = params
        .max_unavailable
        .max(1)
        .saturating_sub(busy)
        .min(limit);
    out.start = names(NodePhase::Waiting).take(slots as usize).collect();
    out.state = state;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PARAMS: RolloutParams = RolloutParams {
        max_unavailable: 2,
        canary: 0,
        min_ready_seconds: 60,
        progress_deadline_seconds: 600,
        max_failures: 1,
        on_failure: OnFailure::Pause,
        paused: false,
    };

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i:03}")).collect()
    }

    fn waiting(name: &str) -> NodeProgress<'_> {
        NodeProgress {
            node: name,
            spec_revision: Some("old"),
            report: AgentReport::Good { for_seconds: 1000 },
            since_spec_change: 1000,
            draining_for: None,
        }
    }

    #[test]
    fn a_node_is_ready_only_after_min_ready_seconds_and_fails_on_a_bad_report_or_the_deadline() {
        let mut n = NodeProgress {
            node: "a",
            spec_revision: Some("new"),
            report: AgentReport::Pending,
            since_spec_change: 5,
            draining_for: None,
        };
        assert_eq!(phase(&n, "new", &PARAMS), NodePhase::Updating);
        n.report = AgentReport::Good { for_seconds: 59 };
        assert_eq!(phase(&n, "new", &PARAMS), NodePhase::Updating);
        n.report = AgentReport::Good { for_seconds: 60 };
        assert_eq!(phase(&n, "new", &PARAMS), NodePhase::Ready);
        n.report = AgentReport::Bad;
        assert_eq!(phase(&n, "new", &PARAMS), NodePhase::Failed);
        n.report = AgentReport::Pending;
        n.since_spec_change = 601;
        assert_eq!(phase(&n, "new", &PARAMS), NodePhase::Failed);
        // Good since 10 s before the deadline, waiting out its minReadySeconds (issue
        // 58): not failed at the deadline, ready 60 s after it turned good.
        n.report = AgentReport::Good { for_seconds: 11 };
        assert_eq!(phase(&n, "new", &PARAMS), NodePhase::Updating);
        n.since_spec_change = 650;
        n.report = AgentReport::Good { for_seconds: 60 };
        assert_eq!(phase(&n, "new", &PARAMS), NodePhase::Ready);
        assert_eq!(phase(&n, "other", &PARAMS), NodePhase::Waiting);
        n.draining_for = Some(30);
        assert_eq!(
            phase(&n, "other", &PARAMS),
            NodePhase::Updating,
            "draining for it"
        );
        n.draining_for = Some(601);
        assert_eq!(
            phase(&n, "other", &PARAMS),
            NodePhase::Failed,
            "a drain past the deadline"
        );
    }

    #[test]
    fn canaries_go_first_and_the_rest_waits_for_them() {
        let pool = names(5);
        let mut nodes: Vec<NodeProgress<'_>> = pool.iter().map(|n| waiting(n)).collect();
        let params = RolloutParams {
            canary: 1,
            max_unavailable: 3,
            ..PARAMS
        };
        let p = plan(&nodes, "new", &params);
        assert_eq!(p.start, ["node-000"]);
        assert_eq!(p.state, RolloutState::WaitingForCanary);
        nodes[0].spec_revision = Some("new");
        nodes[0].report = AgentReport::Pending;
        nodes[0].since_spec_change = 0;
        let p = plan(&nodes, "new", &params);
        assert!(p.start.is_empty(), "the canary is not ready yet");
        assert_eq!(p.state, RolloutState::WaitingForCanary);
        nodes[0].report = AgentReport::Good { for_seconds: 60 };
        let p = plan(&nodes, "new", &params);
        assert_eq!(p.start, ["node-001", "node-002", "node-003"]);
        assert_eq!(p.state, RolloutState::Progressing);
    }

    #[test]
    fn max_failures_pauses_or_rolls_back_every_updated_node() {
        let pool = names(4);
        let mut nodes: Vec<NodeProgress<'_>> = pool.iter().map(|n| waiting(n)).collect();
        for n in &mut nodes[..2] {
            n.spec_revision = Some("new");
            n.since_spec_change = 10;
        }
        nodes[0].report = AgentReport::Good { for_seconds: 100 };
        nodes[1].report = AgentReport::Bad;
        let p = plan(&nodes, "new", &PARAMS);
        assert_eq!(p.state, RolloutState::Degraded);
        assert_eq!(p.failed, ["node-001"]);
        assert!(p.start.is_empty() && p.revert.is_empty());
        let rollback = RolloutParams {
            on_failure: OnFailure::Rollback,
            ..PARAMS
        };
        // One node's own failure outside the canary moves nothing: the pool holds.
        let p = plan(&nodes, "new", &rollback);
        assert_eq!(p.state, RolloutState::OneNodeFailed);
        assert_eq!(p.failed, ["node-001"]);
        assert!(p.start.is_empty() && p.revert.is_empty());
        // The failed node was the canary (the pool still at its canary stage): back.
        let canary = RolloutParams {
            canary: 2,
            ..rollback
        };
        let p = plan(&nodes, "new", &canary);
        assert_eq!(p.state, RolloutState::RollingBack);
        assert_eq!(p.revert, ["node-000", "node-001"]);
        // A second node fails: back.
        nodes[0].report = AgentReport::Bad;
        let p = plan(&nodes, "new", &rollback);
        assert_eq!(p.state, RolloutState::RollingBack);
        assert_eq!(p.revert, ["node-000", "node-001"]);
        nodes[0].report = AgentReport::Good { for_seconds: 100 };
        // A pool of one node is its own corroboration.
        let alone = [nodes[1].clone()];
        assert_eq!(
            plan(&alone, "new", &rollback).state,
            RolloutState::RollingBack
        );
        let tolerant = RolloutParams {
            max_failures: 2,
            ..PARAMS
        };
        let p = plan(&nodes, "new", &tolerant);
        assert_eq!(p.state, RolloutState::Progressing);
        assert_eq!(
            p.start,
            ["node-002"],
            "the failed node holds one of the two slots"
        );
    }

    #[test]
    fn paused_starts_nothing_and_a_ready_pool_is_complete() {
        let pool = names(3);
        let nodes: Vec<NodeProgress<'_>> = pool.iter().map(|n| waiting(n)).collect();
        let p = plan(
            &nodes,
            "new",
            &RolloutParams {
                paused: true,
                ..PARAMS
            },
        );
        assert_eq!((p.state, p.start.len()), (RolloutState::Paused, 0));
        let p = plan(&nodes, "old", &PARAMS);
        assert_eq!(p.state, RolloutState::Complete);
        assert_eq!(p.counts.ready, 3);
        let p = plan(&[], "new", &PARAMS);
        assert_eq!(
            p.state,
            RolloutState::Complete,
            "an empty pool has nothing to do"
        );
    }

    /// Drives a whole rollout step by step: each step the planner's `start` nodes get
    /// the revision, and updating nodes become ready after a few steps.
    fn simulate(size: usize, params: RolloutParams, ready_after: u64) -> (u32, usize) {
        let pool = names(size);
        let mut nodes: Vec<NodeProgress<'_>> = pool.iter().map(|n| waiting(n)).collect();
        let mut peak = 0;
        for step in 0..10_000 {
            let p = plan(&nodes, "new", &params);
            assert!(
                p.counts.updating + p.counts.failed <= params.max_unavailable.max(1),
                "more than maxUnavailable in flight at step {step}: {:?}",
                p.counts
            );
            if params.canary > 0 && p.counts.ready < params.canary.min(size as u32) {
                assert!(p.counts.updated + p.start.len() as u32 <= params.canary.min(size as u32));
            }
            if p.state == RolloutState::Complete {
                return (peak, step);
            }
            for n in &mut nodes {
                if p.start.iter().any(|s| s == n.node) {
                    n.spec_revision = Some("new");
                    n.report = AgentReport::Pending;
                    n.since_spec_change = 0;
                } else if n.spec_revision == Some("new") {
                    n.since_spec_change += 1;
                    if n.since_spec_change >= ready_after {
                        n.report = AgentReport::Good {
                            for_seconds: (n.since_spec_change - ready_after) * 60,
                        };
                    }
                }
            }
            let after = plan(&nodes, "new", &params).counts.updating;
            peak = peak.max(after);
        }
        panic!("a pool of {size} did not complete");
    }

    #[test]
    fn every_pool_size_and_bound_completes_without_exceeding_max_unavailable() {
        for size in [1usize, 2, 3, 7, 10, 50, 200] {
            for max_unavailable in [1u32, 2, 5, 25, 200] {
                for canary in [0u32, 1, 3, 300] {
                    let params = RolloutParams {
                        max_unavailable,
                        canary,
                        ..PARAMS
                    };
                    let (peak, _) = simulate(size, params, 2);
                    assert!(peak <= max_unavailable, "{size}/{max_unavailable}/{canary}");
                    assert!(peak >= 1);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn never_above_the_bound(size in 1usize..=200, max_unavailable in 1u32..=50, canary in 0u32..=10, ready_after in 1u64..=4) {
            let params = RolloutParams { max_unavailable, canary, ..PARAMS };
            let (peak, _) = simulate(size, params, ready_after);
            prop_assert!(peak <= max_unavailable);
        }
    }
}
