//! How an agent's report on a NodeMemoryConfig is read: whether the agent reports a
//! failure of the config's current spec, and whether it reports that spec good and for
//! how long. The controller gates rollouts on it and `kubectl nodemem` shows it, so both
//! read the report with this one rule.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use nodemem_model::cluster::rollout::AgentReport;

use crate::config::{NodeMemoryConfig, NodeMemoryConfigSpec, NodeMemoryConfigStatus};

/// The annotation on a NodeMemoryConfig recording when its spec last changed (RFC 3339):
/// how long a node has been updating survives a controller restart.
pub const SPEC_CHANGED_AT: &str = "nodemem.io/spec-changed-at";

/// The annotation on a NodeMemoryConfig recording when the controller saw its agent's
/// report on a revision turn good, on the controller's clock: `<revision> <RFC 3339>`.
/// A controller that starts or takes over counts minReadySeconds from it, never from
/// the agent's own condition times (an agent whose clock is behind would pass
/// minReadySeconds early), and `kubectl nodemem` reads it the same way.
pub const READY_SINCE: &str = "nodemem.io/ready-since";

/// The value of [`READY_SINCE`] for `revision` seen good at `at` (seconds).
pub fn ready_since_value(revision: &str, at: i64) -> String {
    let time = k8s_openapi::jiff::Timestamp::from_second(at)
        .map(|t| t.to_string())
        .unwrap_or_default();
    format!("{revision} {time}")
}

/// The revision and time (seconds) of a config's [`READY_SINCE`]; None when it has
/// none or it does not read as one.
pub fn ready_since(c: &NodeMemoryConfig) -> Option<(String, i64)> {
    let value = c.metadata.annotations.as_ref()?.get(READY_SINCE)?;
    let (revision, time) = value.rsplit_once(' ')?;
    Some((revision.to_string(), parse_time(time)?))
}

/// A NodeMemoryConfig as a rollout reads it: its spec, what its agent reported, and
/// since when the spec has been what it is.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigEntry {
    /// The config's `metadata.generation`.
    pub generation: Option<i64>,
    /// What the config asks of the node.
    pub spec: NodeMemoryConfigSpec,
    /// What the node's agent reported.
    pub status: NodeMemoryConfigStatus,
    /// Seconds since the epoch, from [`SPEC_CHANGED_AT`].
    pub spec_changed_at: Option<i64>,
    /// When the controller saw the agent's report on this revision turn good, on the
    /// controller's clock (seconds since the epoch): its [`READY_SINCE`] stamp of the
    /// current revision as read, or what the controller keeps
    /// (`nodemem_controller::world`: when it saw it turn good, or, good the first time
    /// it saw it without a stamp, that first time). None: the report's own times
    /// count, bounded below by the spec's change (a reader without a stamp to go by).
    /// An agent whose clock is behind writes condition times that would pass
    /// minReadySeconds early.
    pub good_seen_at: Option<i64>,
}

/// Seconds since the epoch of an RFC 3339 time.
pub fn parse_time(text: &str) -> Option<i64> {
    text.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

impl From<&NodeMemoryConfig> for ConfigEntry {
    fn from(c: &NodeMemoryConfig) -> Self {
        let stamped = ready_since(c)
            .filter(|(revision, _)| *revision == c.spec.revision)
            .map(|(_, at)| at);
        ConfigEntry {
            generation: c.metadata.generation,
            spec: c.spec.clone(),
            status: c.status.clone().unwrap_or_default(),
            spec_changed_at: c
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SPEC_CHANGED_AT))
                .and_then(|t| parse_time(t)),
            good_seen_at: stamped,
        }
    }
}

/// The Applied and Healthy conditions the agent reported for the config's current
/// spec (its generation).
fn current_conditions(c: &ConfigEntry) -> (Option<&Condition>, Option<&Condition>) {
    let find = |t: &str| {
        c.status
            .conditions
            .iter()
            .find(|cond| cond.type_ == t && cond.observed_generation == c.generation)
    };
    (find("Applied"), find("Healthy"))
}

/// The agent's `Healthy` reason when memory pressure cannot be read (PSI is off) and
/// the policy holds such nodes (`health.pressureUnavailable: Hold`): `Unknown`.
pub const PRESSURE_UNAVAILABLE: &str = "PressureUnavailable";
/// The agent's `Healthy` reason when memory pressure cannot be read and the policy
/// proceeds without it (`health.pressureUnavailable: Proceed`): `True`.
pub const HEALTHY_WITHOUT_PRESSURE: &str = "HealthyWithoutPressure";
/// The agent's `Healthy` reason when the refault gate (`health.maxRefaultsPerSecond`,
/// or its default under Active reclaim) cannot be evaluated: no managed pod's refault
/// rate is measured yet under the revision, or a pod's memory.stat has no refault
/// counts: `Unknown`.
pub const REFAULTS_UNKNOWN: &str = "RefaultsUnknown";

/// Whether the config's agent reports on its current spec that memory pressure cannot
/// be read on its node: Some(true) when the node holds for it, Some(false) when it
/// proceeds without it, None when pressure is read (or nothing is reported yet).
pub fn pressure_unavailable(c: &ConfigEntry) -> Option<bool> {
    let (_, healthy) = current_conditions(c);
    match healthy?.reason.as_str() {
        PRESSURE_UNAVAILABLE => Some(true),
        HEALTHY_WITHOUT_PRESSURE => Some(false),
        _ => None,
    }
}

/// Whether the config's agent has reported anything on its current spec: an agent cut
/// off from the apiserver, not running or not scheduled never does.
pub fn acknowledged(c: &ConfigEntry) -> bool {
    let (applied, healthy) = current_conditions(c);
    applied.is_some() || healthy.is_some()
}

/// The first of the agent's Applied and Healthy conditions on the current spec that is
/// not True: what a node that is not ready yet waits on.
pub fn waiting_on(c: &ConfigEntry) -> Option<&Condition> {
    let (applied, healthy) = current_conditions(c);
    applied
        .into_iter()
        .chain(healthy)
        .find(|cond| cond.status != "True")
}

/// The condition in which the config's agent reports a failure of its current spec.
/// Waiting for a kubelet restart is not one (progressDeadlineSeconds covers it), and
/// Healthy=False NotApplied only repeats an Applied failure.
pub fn failure(c: &ConfigEntry) -> Option<&Condition> {
    let (applied, healthy) = current_conditions(c);
    let failed =
        |cond: &&Condition, not_failure: &str| cond.status == "False" && cond.reason != not_failure;
    applied
        .filter(|a| failed(a, "KubeletRestartRequired"))
        .or(healthy.filter(|h| failed(h, "NotApplied")))
}

/// What a config's agent reports about the config's current spec.
pub fn report(c: &ConfigEntry, now: i64) -> AgentReport {
    if failure(c).is_some() {
        return AgentReport::Bad;
    }
    let (applied, healthy) = current_conditions(c);
    let good = applied.is_some_and(|c| c.status == "True")
        && healthy.is_some_and(|c| c.status == "True")
        && c.status.observed_revision.as_deref() == Some(c.spec.revision.as_str());
    if !good {
        return AgentReport::Pending;
    }
    // Good since the controller saw it turn good, on the controller's clock alone;
    // else (a reader without a stamp) since the later of the spec change and the
    // conditions turning True, as written.
    let since = c.good_seen_at.unwrap_or_else(|| {
        [applied, healthy]
            .into_iter()
            .flatten()
            .map(|c| c.last_transition_time.0.as_second())
            .chain(c.spec_changed_at)
            .max()
            .unwrap_or(now)
    });
    AgentReport::Good {
        for_seconds: (now - since).max(0) as u64,
    }
}
