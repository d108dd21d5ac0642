//! `kubectl nodemem explain NODE`: which policy governs the node and why, its revision
//! and rollout state, and per pod the cgroup values nodemem sets (pure, from the
//! snapshot and the node's pods).

use std::fmt::Write;

use k8s_openapi::api::core::v1 as core;
use nodemem_api::convert::to_selector;
use nodemem_model::node::Admission;
use nodemem_model::values::cgroup::{CPUSET_MEMS, MEMORY_HIGH, MEMORY_LOW, MEMORY_MIN};
use serde::Serialize;

use crate::cluster::Snapshot;
use crate::node_view::{compute, config_settings, node_facts, node_pods};
use crate::render::table;
use nodemem_api::convert::{governing, last_accepted, node_settings, policy_takes_nodes};

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainReport {
    pub node: String,
    /// The governing policy, if any.
    pub policy: Option<String>,
    /// Why, in one sentence.
    pub why: String,
    /// Every policy and whether and how it selects the node.
    pub candidates: Vec<Candidate>,
    /// The revision the node's config carries, and the one its policy rolls out (after
    /// a rollback, the revision before the rolled-back one).
    pub config_revision: Option<String>,
    pub policy_revision: Option<String>,
    /// Ready, Updating, Failed, Waiting (not yet moved to the policy's revision), or
    /// NoConfig.
    pub rollout_state: String,
    /// The node's kubelet version and the rules nodemem computes with for it.
    pub kubelet: String,
    /// Where the agent read the kubelet's configuration (its process, file, drop-ins,
    /// flags), or why it could not, as the agent reports it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kubelet_read: Vec<String>,
    /// How a new container gets nodemem's values on the node, as its agent reports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation: Option<String>,
    /// The node runs the values of a policy it is leaving: where it goes, and how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff: Option<String>,
    pub conditions: Vec<ConditionRow>,
    /// How the config reaches the node: Agent, Kubelet, or Observe (the pods' values
    /// are then what enforcement would set; nothing is written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<String>,
    /// What the agent observed of its containers against memory.high.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation: Option<nodemem_api::config::ObservationSummary>,
    /// What proactive reclaim took (Active) or would take (Observe), as the agent reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<nodemem_api::config::ReclaimSummary>,
    pub pods: Vec<PodValues>,
    /// Pods the agent cannot read, and settings the node cannot satisfy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    pub policy: String,
    pub priority: i32,
    pub selector: String,
    pub selects: bool,
    /// governs, same priority (does not move the node), lower priority, or does not select.
    pub outcome: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionRow {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodValues {
    pub namespace: String,
    pub name: String,
    pub qos_class: String,
    /// Managed, OptedOut, or Rejected: reason.
    pub admission: String,
    /// The workload class its values follow (absent: the pool's own settings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Where its class came from (`pod annotation`, `namespace label`, `pool`); absent
    /// when no pod of the node names a class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_min: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_low: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_high: Option<String>,
    /// NUMA nodes its containers are pinned to (Static Memory Manager).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpuset_mems: Option<String>,
}

fn selector_text(s: &nodemem_api::policy::NodeSelector) -> String {
    let mut parts: Vec<String> = s
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    parts.extend(
        s.match_expressions
            .iter()
            .map(|e| format!("{} {:?} ({})", e.key, e.operator, e.values.join(","))),
    );
    if parts.is_empty() {
        "<every node>".into()
    } else {
        parts.join(", ")
    }
}

/// What a node that runs the values of a policy it is leaving waits for (None: it runs
/// its governing policy's).
pub(crate) fn handoff(c: &nodemem_api::NodeMemoryConfig, winner: Option<&str>) -> Option<String> {
    let runs = c.spec.policy.as_str();
    if winner == Some(runs) {
        return None;
    }
    let released = nodemem_api::revision::revision(&nodemem_api::NodeSettings::released());
    Some(if c.spec.revision == released {
        format!("released from {runs}: its agent gives back what nodemem set; the config goes once every node of the release is done")
    } else {
        match winner {
            Some(w) => format!(
                "runs {runs}'s revision {}; {w} takes it through {w}'s rollout (it keeps these values until its turn)",
                c.spec.revision
            ),
            None => format!(
                "runs {runs}'s revision {}; no policy selects it: it is released in its turn with {runs}'s rollout settings",
                c.spec.revision
            ),
        }
    })
}

pub fn build(
    s: &Snapshot,
    node: &core::Node,
    pods: &[core::Pod],
    namespaces: &[core::Namespace],
) -> ExplainReport {
    let name = node.metadata.name.clone().unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let current = s.config(&name).map(|c| c.spec.policy.as_str());
    let r = governing(&s.policies, &labels, current);
    let winner = r.winner.as_deref().and_then(|w| s.policy(w));
    let excluded = winner.and_then(|p| excluded_reason(p, &name));
    let config = s.config(&name);
    let policy_revision = winner.and_then(crate::status::target_revision);
    let rollout_state = match config {
        _ if excluded.is_some() => "Excluded".to_string(),
        None => "NoConfig".to_string(),
        Some(c) => crate::status::node_state(
            c,
            policy_revision.as_deref(),
            crate::status::min_ready_seconds(winner),
            crate::status::now_seconds(),
        ),
    };
    let node_pods = node_pods(node, pods, namespaces);
    let (pods_out, problems) = pod_values(node, config, &node_pods);
    ExplainReport {
        node: name,
        policy: r.winner.clone().filter(|_| excluded.is_none()),
        why: match (&excluded, &r.winner) {
            (Some(reason), Some(w)) => format!(
                "{w} selects it, but nodemem's agent cannot run on it ({reason}): no policy governs it, no config is written for it and no rollout waits for it"
            ),
            _ => why_this_policy(&r),
        },
        candidates: candidates(s, &labels, &r),
        config_revision: config.map(|c| c.spec.revision.clone()),
        policy_revision,
        rollout_state,
        kubelet: kubelet_rules(node),
        kubelet_read: config.map(kubelet_read).unwrap_or_default(),
        creation: config.and_then(creation_path),
        handoff: config.and_then(|c| handoff(c, r.winner.as_deref())),
        conditions: config.map(condition_rows).unwrap_or_default(),
        enforcement: config.map(|c| format!("{:?}", c.spec.settings.enforcement)),
        observation: config
            .and_then(|c| c.status.as_ref())
            .and_then(|st| st.observation.as_deref().cloned()),
        reclaim: config
            .and_then(|c| c.status.as_ref())
            .and_then(|st| st.reclaim.as_deref().cloned()),
        pods: pods_out,
        problems,
    }
}

/// Why the agent cannot run on `node`, as `policy`'s status names it (the controller's
/// judgement of the agent's nodeSelector and node affinity against the node's labels).
fn excluded_reason(policy: &nodemem_api::NodeMemoryPolicy, node: &str) -> Option<String> {
    policy
        .status
        .as_ref()?
        .excluded_node_names
        .iter()
        .find(|e| e.name == node)
        .map(|e| e.reason.clone())
}

/// Proactive reclaim's figures in a few lines: what it took or would take, and the
/// signals against their target.
fn reclaim_text(r: &nodemem_api::config::ReclaimSummary) -> String {
    use nodemem_model::quantity::format_bytes;
    let mut out = format!(
        "Reclaim ({}, revision {}): {} container(s), {} step(s)",
        r.mode, r.revision, r.containers, r.steps
    );
    if !r.supported {
        out.push_str(
            "\n  this node's kernel has no memory.reclaim (Linux 5.19 and later): it cannot reclaim",
        );
    }
    if r.mode == "Active" {
        out.push_str(&format!(
            "\n  reclaimed {} (memory.current: page cache {}, anon {}), eviction headroom gained {} (working set)",
            format_bytes(r.reclaimed_bytes),
            format_bytes(r.reclaimed_file_bytes),
            format_bytes(r.reclaimed_anon_bytes),
            format_bytes(r.headroom_gained_bytes)
        ));
        if let Some(takes) = r.swappiness_key {
            out.push_str(if takes {
                "\n  this kernel's memory.reclaim takes swappiness= (page cache and anon can be steered)"
            } else {
                "\n  this kernel's memory.reclaim takes no swappiness= (Linux 6.11 added it): the kernel's own balance decides between page cache and anon"
            });
        }
    } else {
        out.push_str(&format!(
            "\n  would reclaim {} (nothing written: mode Observe)",
            format_bytes(r.would_reclaim_bytes)
        ));
    }
    out.push_str(&format!(
        "\n  resident {} (at start {}), reclaimable now {}{}",
        format_bytes(r.resident_bytes),
        format_bytes(r.resident_at_start_bytes),
        format_bytes(r.reclaimable_bytes),
        if r.swap {
            " (page cache and anon: swap)"
        } else {
            " (page cache: no swap)"
        }
    ));
    out.push_str(&format!(
        "\n  stall {} us/s at most (target {}), {} refaults/s; backed off {} time(s) on pressure, {} on refaults",
        r.highest_stall_microseconds_per_second,
        r.target_stall_microseconds_per_second,
        r.refaults_per_second,
        r.pressure_back_offs,
        r.refault_back_offs
    ));
    if r.failed_writes > 0 {
        out.push_str(&format!(
            "\n  {} memory.reclaim write(s) refused",
            r.failed_writes
        ));
    }
    out
}

/// Where the node's agent read the kubelet's configuration, one line per source in
/// the kubelet's order; or why it could not (the `KubeletConfigRead` condition).
fn kubelet_read(config: &nodemem_api::NodeMemoryConfig) -> Vec<String> {
    let Some(status) = config.status.as_ref() else {
        return Vec::new();
    };
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "KubeletConfigRead");
    if let Some(c) = condition.filter(|c| c.status != "True") {
        return vec![format!("not read ({}): {}", c.reason, c.message)];
    }
    let Some(k) = status.node.as_ref().and_then(|n| n.kubelet.as_ref()) else {
        return Vec::new();
    };
    let mut lines = vec![format!(
        "{}: {}",
        k.process.as_deref().unwrap_or("files given to the agent"),
        k.config
            .as_deref()
            .unwrap_or("no --config file (the kubelet's built-in defaults)")
    )];
    lines.extend(k.drop_ins.iter().map(|d| format!("drop-in {d}")));
    lines.extend(k.flags.iter().map(|f| format!("flag {f}")));
    lines.extend(k.ignored.iter().map(|i| format!("ignored {i}")));
    lines.extend(k.removed_gates.iter().map(|g| {
        format!("feature gate {g}: a kubelet of that version refuses to start with it; take it out of the kubelet's configuration before upgrading")
    }));
    lines
}

/// How new containers get their values, as the node's agent reports it.
fn creation_path(config: &nodemem_api::NodeMemoryConfig) -> Option<String> {
    let said = config
        .status
        .as_ref()?
        .node
        .as_ref()?
        .container_values
        .as_ref()?;
    Some(match said.path.as_str() {
        "NRI" => format!(
            "NRI ({}): in each container's spec at creation, before its first instruction",
            said.runtime.as_deref().unwrap_or("the runtime")
        ),
        other => format!(
            "{other} ({}): written once the container's cgroup appears",
            said.reason.as_deref().unwrap_or("no NRI")
        ),
    })
}

/// Which version rule applies: the node's kubelet version and what its rules do.
pub(crate) fn kubelet_rules(node: &core::Node) -> String {
    let status = nodemem_api::k8s::node_status_facts(node);
    nodemem_model::kubelet::version::QosRules::applied(status.kubelet_version.as_deref())
}

/// Every policy, and what it is to this node: it governs, does not select it, loses
/// on priority, ties, or cannot govern (deleted, invalid).
fn candidates(
    s: &Snapshot,
    labels: &std::collections::BTreeMap<String, String>,
    r: &nodemem_model::cluster::resolve::Resolution,
) -> Vec<Candidate> {
    let winner_priority = r
        .winner
        .as_deref()
        .and_then(|w| s.policy(w))
        .map(|p| p.spec.priority);
    let mut candidates: Vec<Candidate> = s
        .policies
        .iter()
        .map(|p| {
            let policy = p.metadata.name.clone().unwrap_or_default();
            let selects = to_selector(&p.spec.node_selector).matches(labels);
            let outcome = if !selects {
                "does not select".to_string()
            } else if p.metadata.deletion_timestamp.is_some() {
                "deleted: hands its nodes on".to_string()
            } else if !policy_takes_nodes(p) {
                "invalid spec: governs no node until it is valid".to_string()
            } else if r.winner.as_deref() == Some(policy.as_str()) {
                match p.status.as_ref().filter(|_| node_settings(&p.spec.settings).is_err()) {
                    Some(st) => format!(
                        "governs; its spec is invalid: the node keeps revision {}, the last accepted",
                        last_accepted(st).map_or("-", |r| r.revision.as_str())
                    ),
                    None => "governs".to_string(),
                }
            } else if Some(p.spec.priority) == winner_priority {
                "same priority, does not move the node".to_string()
            } else {
                "lower priority".to_string()
            };
            Candidate {
                selector: selector_text(&p.spec.node_selector),
                priority: p.spec.priority,
                selects,
                outcome,
                policy,
            }
        })
        .collect();
    candidates.sort_by(|a, b| {
        b.selects
            .cmp(&a.selects)
            .then(b.priority.cmp(&a.priority))
            .then(a.policy.cmp(&b.policy))
    });
    candidates
}

/// Why the node has the policy it has, in one sentence.
fn why_this_policy(r: &nodemem_model::cluster::resolve::Resolution) -> String {
    match &r.winner {
        None => "no NodeMemoryPolicy selects this node's labels; nodemem sets nothing here".into(),
        Some(w) if r.matching.len() == 1 => format!("{w} is the only policy that selects it"),
        Some(w) if !r.conflicting.is_empty() => match r.won {
            nodemem_model::cluster::resolve::Won::KeptOnTie => format!(
                "{w} and {} select it with the same priority; it stays with {w}, whose revision it runs: a tie moves no node (the policies report Conflicting)",
                r.conflicting.join(", ")
            ),
            _ => format!(
                "{w} and {} select it with the same priority; {w} governs it as the oldest of them: the node ran none of them (the policies report Conflicting)",
                r.conflicting.join(", ")
            ),
        },
        Some(w) => format!(
            "{w} has the highest priority of the {} policies that select it",
            r.matching.len()
        ),
    }
}

fn condition_rows(config: &nodemem_api::NodeMemoryConfig) -> Vec<ConditionRow> {
    config
        .status
        .as_ref()
        .map(|st| {
            st.conditions
                .iter()
                .map(|c| ConditionRow {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The values the agent writes for each pod under the node's config (as the agent
/// computes them); without a usable config, the pods unmanaged and why.
fn pod_values(
    node: &core::Node,
    config: Option<&nodemem_api::NodeMemoryConfig>,
    node_pods: &crate::node_view::NodePods,
) -> (Vec<PodValues>, Vec<String>) {
    let mut problems = node_pods.problems.clone();
    let settings = config.map(config_settings);
    let facts = node_facts(node, config);
    let computed = match &settings {
        Some(Ok(settings)) => match compute(settings, &facts, &node_pods.pods) {
            Ok(d) => Some(d),
            Err(ps) => {
                problems.extend(
                    ps.into_iter()
                        .map(|p| format!("this node cannot satisfy its config: {p}")),
                );
                None
            }
        },
        Some(Err(ps)) => {
            problems.extend(ps.iter().map(|p| format!("its config is invalid: {p}")));
            None
        }
        None => None,
    };
    let values = match &computed {
        Some(d) => {
            let shown = d.names_classes();
            d.pods
                .iter()
                .map(|p| PodValues {
                    class_from: shown.then(|| p.class_from().as_str().to_string()),
                    ..computed_pod_values(p)
                })
                .collect()
        }
        None => node_pods
            .pods
            .iter()
            .map(|p| PodValues {
                namespace: p.pod().namespace.clone(),
                name: p.pod().name.clone(),
                qos_class: nodemem_model::pod::qos::qos_class(&p.pod().spec)
                    .as_str()
                    .to_string(),
                admission: "Unmanaged".into(),
                class: None,
                class_from: None,
                memory_min: None,
                memory_low: None,
                memory_high: None,
                cpuset_mems: None,
            })
            .collect(),
    };
    (values, problems)
}

fn computed_pod_values(p: &nodemem_model::node::PodOutcome<'_>) -> PodValues {
    let value =
        |v: &nodemem_model::values::cgroup::CgroupValues, f: &str| v.get(f).map(|x| x.render());
    let pinned = p.pinned_nodes();
    PodValues {
        namespace: p.namespace.to_string(),
        name: p.name.to_string(),
        qos_class: p.qos.as_str().to_string(),
        admission: match &p.admission {
            Admission::Managed => "Managed".into(),
            Admission::OptedOut => "OptedOut".into(),
            Admission::Rejected(r) => format!("Rejected: {r}"),
        },
        class: p.class.map(str::to_string),
        class_from: None,
        memory_min: value(&p.values, MEMORY_MIN),
        memory_low: value(&p.values, MEMORY_LOW),
        // memory.high is set per container (KEP-2570): the distinct values
        // of the containers, in container order.
        memory_high: value(&p.values, MEMORY_HIGH).or_else(|| {
            let mut highs: Vec<String> = Vec::new();
            for c in &p.containers {
                if let Some(h) = value(&c.values, MEMORY_HIGH) {
                    if !highs.contains(&h) {
                        highs.push(h);
                    }
                }
            }
            (!highs.is_empty()).then(|| highs.join(","))
        }),
        cpuset_mems: (!pinned.is_empty()).then(|| {
            p.containers
                .iter()
                .find_map(|c| c.values.get(CPUSET_MEMS).map(|v| v.render()))
                .unwrap_or_else(|| {
                    pinned
                        .iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                })
        }),
    }
}

pub fn render_table(r: &ExplainReport) -> String {
    use nodemem_model::quantity::format_bytes;
    let mut out = String::new();
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let memory = |v: &Option<String>| v.as_deref().map_or("-".into(), crate::render::memory);
    let _ = writeln!(out, "Node:      {}", r.node);
    let _ = writeln!(out, "Policy:    {}", dash(&r.policy));
    let _ = writeln!(out, "Why:       {}", r.why);
    let _ = writeln!(
        out,
        "Revision:  {} (policy at {})",
        dash(&r.config_revision),
        dash(&r.policy_revision)
    );
    let _ = writeln!(out, "Rollout:   {}", r.rollout_state);
    let _ = writeln!(out, "Kubelet:   {}", r.kubelet);
    for line in &r.kubelet_read {
        let _ = writeln!(out, "  read:    {line}");
    }
    if let Some(c) = &r.creation {
        let _ = writeln!(out, "Creation:  {c}");
    }
    if let Some(h) = &r.handoff {
        let _ = writeln!(out, "Handoff:   {h}");
    }
    if !r.candidates.is_empty() {
        let mut t = table(&["POLICY", "PRIORITY", "SELECTOR", "OUTCOME"]);
        for c in &r.candidates {
            t.add_row(vec![
                c.policy.clone(),
                c.priority.to_string(),
                c.selector.clone(),
                c.outcome.clone(),
            ]);
        }
        let _ = writeln!(out, "\nPolicies:\n{}", crate::render::text(&t));
    }
    if !r.conditions.is_empty() {
        let mut t = table(&["CONDITION", "STATUS", "REASON", "MESSAGE"]);
        for c in &r.conditions {
            t.add_row(vec![
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
            ]);
        }
        let _ = writeln!(out, "\nAgent:\n{}", crate::render::text(&t));
    }
    if let Some(o) = &r.observation {
        let what = if o.enforced {
            "throttled (memory.high set)"
        } else {
            "would be throttled (memory.high not set: enforcement: Observe)"
        };
        let _ = writeln!(
            out,
            "\nObservation (revision {}, since {}, {} s): {} of {} container(s) {what}",
            o.revision, o.since.0, o.observed_seconds, o.throttled_containers, o.containers
        );
        if !o.worst.is_empty() {
            let mut t = table(&[
                "POD",
                "CONTAINER",
                "MEMORY.HIGH",
                "PEAK WORKING SET",
                "MEMORY.PEAK",
                "SECONDS ABOVE",
                "MOST ABOVE",
                "HIGH EVENTS",
            ]);
            for w in &o.worst {
                t.add_row(vec![
                    w.pod.clone(),
                    w.container.clone(),
                    format_bytes(w.memory_high),
                    format_bytes(w.peak_working_set),
                    w.memory_peak.map_or("-".into(), format_bytes),
                    w.seconds_above_high.to_string(),
                    format_bytes(w.max_excess_bytes),
                    w.throttle_events.to_string(),
                ]);
            }
            let _ = writeln!(out, "{}", crate::render::text(&t));
        }
    }
    if let Some(rc) = &r.reclaim {
        let _ = writeln!(out, "\n{}", reclaim_text(rc));
    }
    let with_classes = r.pods.iter().any(|p| p.class_from.is_some());
    let mut header = vec!["NAMESPACE", "POD", "QOS", "NODEMEM"];
    if with_classes {
        header.push("CLASS");
    }
    header.extend(["MEMORY.MIN", "MEMORY.LOW", "MEMORY.HIGH", "CPUSET.MEMS"]);
    let mut t = table(&header);
    for p in &r.pods {
        let mut row = vec![
            p.namespace.clone(),
            p.name.clone(),
            p.qos_class.clone(),
            p.admission.clone(),
        ];
        if with_classes {
            let from = p.class_from.as_deref().unwrap_or("pool");
            row.push(format!("{} ({from})", p.class.as_deref().unwrap_or("-")));
        }
        row.extend(vec![
            memory(&p.memory_min),
            memory(&p.memory_low),
            // The distinct values of its containers, comma-separated.
            p.memory_high.as_deref().map_or("-".into(), |h| {
                h.split(',')
                    .map(crate::render::memory)
                    .collect::<Vec<_>>()
                    .join(",")
            }),
            dash(&p.cpuset_mems),
        ]);
        t.add_row(row);
    }
    let observed = if r.enforcement.as_deref() == Some("Observe") {
        ", the values enforcement would set (enforcement: Observe writes none)"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "\nPods ({}{observed}):\n{}",
        r.pods.len(),
        crate::render::text(&t)
    );
    for p in &r.problems {
        let _ = writeln!(out, "problem: {p}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_api::config::{ObservationSummary, ObservedContainer};
    use nodemem_api::NodeMemoryPolicy;

    #[test]
    fn the_version_rule_is_named_from_the_nodes_kubelet() {
        let node = |version: Option<&str>| -> core::Node {
            let mut info = serde_json::json!({"kernelVersion": "", "architecture": "", "bootID": "",
                "containerRuntimeVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                "machineID": "", "operatingSystem": "", "osImage": "", "systemUUID": ""});
            if let Some(v) = version {
                info["kubeletVersion"] = v.into();
            }
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n"},
                "status": {"nodeInfo": info}}))
            .unwrap()
        };
        assert_eq!(
            kubelet_rules(&node(Some("v1.37.2"))),
            "v1.37.2 (v1.37 rules: memory.high on the pod cgroup of a pod with pod-level resources)"
        );
        assert_eq!(
            kubelet_rules(&node(Some("v1.36.3"))),
            "v1.36.3 (v1.36 rules: memory.high on containers only)"
        );
        assert!(kubelet_rules(&node(Some("latest")))
            .starts_with("\"latest\" is not a version: the newest rules (v1.37"));
        assert!(kubelet_rules(&node(None)).starts_with("not reported: the newest rules (v1.37"));
    }

    /// Where the agent read the kubelet, in the kubelet's order; or the condition's
    /// reason and message when it could not.
    #[test]
    fn the_kubelets_sources_are_listed_or_why_not() {
        let mut c = on("general", "r1");
        assert!(kubelet_read(&c).is_empty(), "no status yet");
        c.status = Some(
            serde_json::from_value(serde_json::json!({
                "conditions": [{"type": "KubeletConfigRead", "status": "True", "reason": "Read",
                    "message": "m", "lastTransitionTime": "2026-11-26T00:00:00Z"}],
                "node": {"kubelet": {"process": "k3s agent (pid 90)",
                    "dropIns": ["/var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf"],
                    "flags": ["--kube-reserved=memory=512Mi"],
                    "ignored": ["kubelet (pid 4100): runs in a pod's cgroup (/kubepods/besteffort/pod1/ab)"],
                    "removedGates": ["NodeSwap (removed in v1.38)"]}}}))
            .unwrap(),
        );
        assert_eq!(
            kubelet_read(&c),
            [
                "k3s agent (pid 90): no --config file (the kubelet's built-in defaults)",
                "drop-in /var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf",
                "flag --kube-reserved=memory=512Mi",
                "ignored kubelet (pid 4100): runs in a pod's cgroup (/kubepods/besteffort/pod1/ab)",
                "feature gate NodeSwap (removed in v1.38): a kubelet of that version refuses to start with it; take it out of the kubelet's configuration before upgrading",
            ]
        );
        let status = c.status.as_mut().unwrap();
        status.conditions[0].status = "False".into();
        status.conditions[0].reason = "NoKubeletProcess".into();
        status.conditions[0].message = "no kubelet process under /host/proc".into();
        assert_eq!(
            kubelet_read(&c),
            ["not read (NoKubeletProcess): no kubelet process under /host/proc"]
        );
    }

    fn report(enforcement: &str, enforced: bool) -> ExplainReport {
        ExplainReport {
            node: "batch-1".into(),
            policy: Some("batch".into()),
            why: "batch is the only policy that selects it".into(),
            candidates: Vec::new(),
            config_revision: Some("r1".into()),
            policy_revision: Some("r1".into()),
            rollout_state: "Ready".into(),
            kubelet: "v1.36.3 (v1.36 rules: memory.high on containers only)".into(),
            kubelet_read: vec![
                "kubelet (pid 812): /etc/kubernetes/kubelet/config.json".into(),
                "flag --feature-gates=MemoryQoS=true".into(),
            ],
            creation: Some("NRI (containerd v2.2.9): in each container's spec at creation, before its first instruction".into()),
            handoff: None,
            conditions: Vec::new(),
            enforcement: Some(enforcement.into()),
            observation: Some(ObservationSummary {
                revision: "r1".into(),
                enforced,
                since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap(),
                ),
                observed_seconds: 75,
                containers: 3,
                throttled_containers: 1,
                fitting_by_factor: vec![2; 20],
                worst: vec![ObservedContainer {
                    pod: "sandbox/report-batch-1".into(),
                    container: "report".into(),
                    memory_high: 1_825_361_920,
                    peak_working_set: 1_887_436_800,
                    memory_peak: Some(2_097_152_000),
                    seconds_above_high: 60,
                    max_excess_bytes: 62_074_880,
                    throttle_events: 0,
                    class: None,
                }],
                classes: Vec::new(),
            }),
            reclaim: None,
            pods: vec![PodValues {
                namespace: "sandbox".into(),
                name: "report-batch-1".into(),
                qos_class: "Burstable".into(),
                admission: "Managed".into(),
                class: None,
                class_from: None,
                memory_min: None,
                memory_low: None,
                memory_high: Some("1825361920".into()),
                cpuset_mems: None,
            }],
            problems: Vec::new(),
        }
    }

    fn policy(name: &str, priority: i32, extra: serde_json::Value) -> NodeMemoryPolicy {
        let mut v = serde_json::json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": {"pool": "general"}}, "priority": priority,
                "memoryQoS": {"throttlingFactor": 0.8}}});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn on(policy: &str, revision: &str) -> nodemem_api::NodeMemoryConfig {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
            "metadata": {"name": "general-1"},
            "spec": {"policy": policy, "revision": revision}}))
        .unwrap()
    }

    /// A deleted override and a policy never accepted govern no node; the node says it
    /// still runs the override's values until the pool policy's rollout reaches it.
    #[test]
    fn a_node_leaving_a_deleted_policy_says_where_it_goes_and_invalid_policies_govern_nothing() {
        let node: core::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "general-1", "labels": {"pool": "general"}}}))
        .unwrap();
        let s = Snapshot {
            policies: vec![
                policy("general", 0, serde_json::json!({})),
                policy(
                    "overlap",
                    1,
                    serde_json::json!({"metadata": {"deletionTimestamp": "2026-11-25T00:00:00Z",
                        "finalizers": [nodemem_api::HANDOFF_FINALIZER]}}),
                ),
                // Static without reservedMemory: never valid.
                policy(
                    "bad-sum",
                    300,
                    serde_json::json!({"spec": {"memoryManager": {"policy": "Static"}}}),
                ),
            ],
            nodes: vec![node.clone()],
            configs: vec![on("overlap", "r-overlap")],
        };
        let r = build(&s, &node, &[], &[]);
        assert_eq!(r.policy.as_deref(), Some("general"));
        assert_eq!(
            r.handoff.as_deref(),
            Some("runs overlap's revision r-overlap; general takes it through general's rollout (it keeps these values until its turn)")
        );
        let outcome = |p: &str| {
            r.candidates
                .iter()
                .find(|c| c.policy == p)
                .unwrap()
                .outcome
                .clone()
        };
        assert_eq!(outcome("overlap"), "deleted: hands its nodes on");
        assert_eq!(
            outcome("bad-sum"),
            "invalid spec: governs no node until it is valid"
        );
        assert_eq!(outcome("general"), "governs");
        assert!(render_table(&r).contains("Handoff:   runs overlap's revision r-overlap"));

        // No policy left: released in its turn, then released.
        let alone = Snapshot {
            policies: vec![s.policies[1].clone()],
            nodes: s.nodes.clone(),
            configs: s.configs.clone(),
        };
        let r = build(&alone, &node, &[], &[]);
        assert_eq!(r.policy, None);
        assert!(r.handoff.as_deref().unwrap().contains(
            "no policy selects it: it is released in its turn with overlap's rollout settings"
        ));
        let released = nodemem_api::revision::revision(&nodemem_api::NodeSettings::released());
        let gone = Snapshot {
            configs: vec![on("overlap", &released)],
            ..alone
        };
        let r = build(&gone, &node, &[], &[]);
        assert!(r
            .handoff
            .as_deref()
            .unwrap()
            .starts_with("released from overlap"));
    }

    #[test]
    fn an_observed_node_shows_what_enforcement_would_do_and_who_it_would_throttle() {
        let out = render_table(&report("Observe", false));
        assert!(
            out.contains(
                "Creation:  NRI (containerd v2.2.9): in each container's spec at creation"
            ),
            "{out}"
        );
        assert!(
            out.contains("Observation (revision r1, since 2027-01-15T08:00:00Z, 75 s): 1 of 3 container(s) would be throttled (memory.high not set: enforcement: Observe)"),
            "{out}"
        );
        let row = out
            .lines()
            .find(|l| l.contains("sandbox/report-batch-1"))
            .unwrap();
        // Exact binary units, as everywhere people read memory (bytes with -o json).
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "sandbox/report-batch-1",
                "report",
                "1782580Ki",
                "1800Mi",
                "2000Mi",
                "60",
                "60620Ki",
                "0"
            ]
        );
        let pods_row = out.lines().last().unwrap();
        assert!(pods_row.contains("1782580Ki"), "{pods_row}");
        let json = serde_json::to_value(report("Observe", false)).unwrap();
        assert_eq!(
            json["pods"][0]["memoryHigh"], "1825361920",
            "JSON keeps bytes"
        );
        assert!(
            out.contains(
                "Pods (1, the values enforcement would set (enforcement: Observe writes none)):"
            ),
            "{out}"
        );
        let enforced = render_table(&report("Agent", true));
        assert!(
            enforced.contains("1 of 3 container(s) throttled (memory.high set)"),
            "{enforced}"
        );
        assert!(enforced.contains("Pods (1):"), "{enforced}");
        assert!(!enforced.contains("CLASS"), "no class named: no column");
    }

    /// Workload classes: a CLASS column with each pod's class and where it came from,
    /// once a pod of the node names one; JSON carries both.
    #[test]
    fn each_pod_shows_its_class_and_where_it_came_from() {
        let mut r = report("Agent", true);
        r.pods[0].class = Some("batch".into());
        r.pods[0].class_from = Some("pod annotation".into());
        let mut pool = r.pods[0].clone();
        pool.name = "api".into();
        pool.class = None;
        pool.class_from = Some("pool".into());
        r.pods.push(pool);
        let out = render_table(&r);
        let row = |name: &str| {
            let pods = out.split("Pods (2):").nth(1).unwrap();
            pods.lines().find(|l| l.contains(name)).unwrap().to_string()
        };
        assert!(out.contains("CLASS"), "{out}");
        assert!(
            row("report-batch-1").contains("batch (pod annotation)"),
            "{out}"
        );
        assert!(row(" api ").contains("- (pool)"), "{out}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["pods"][0]["class"], "batch");
        assert_eq!(json["pods"][0]["classFrom"], "pod annotation");
        assert!(json["pods"][1].get("class").is_none());
    }

    /// Reclaim says what it took under On, what it would take under Observe, and a
    /// node whose kernel cannot.
    #[test]
    fn reclaim_says_what_it_took_or_would_take() {
        let mut r = nodemem_api::config::ReclaimSummary {
            revision: "r1".into(),
            mode: "Active".into(),
            supported: true,
            containers: 4,
            steps: 12,
            reclaimed_bytes: 300 << 20,
            reclaimed_file_bytes: 280 << 20,
            swappiness_key: Some(false),
            headroom_gained_bytes: 120 << 20,
            resident_at_start_bytes: 1 << 30,
            resident_bytes: 724 << 20,
            reclaimable_bytes: 10 << 20,
            highest_stall_microseconds_per_second: 40,
            target_stall_microseconds_per_second: 1000,
            ..Default::default()
        };
        let text = reclaim_text(&r);
        assert!(
            text.starts_with("Reclaim (Active, revision r1): 4 container(s), 12 step(s)"),
            "{text}"
        );
        assert!(
            text.contains("reclaimed 300Mi (memory.current: page cache 280Mi, anon 0), eviction headroom gained 120Mi"),
            "{text}"
        );
        assert!(
            text.contains("memory.reclaim takes no swappiness= (Linux 6.11 added it)"),
            "{text}"
        );
        assert!(
            text.contains(
                "resident 724Mi (at start 1Gi), reclaimable now 10Mi (page cache: no swap)"
            ),
            "{text}"
        );
        assert!(
            text.contains("stall 40 us/s at most (target 1000)"),
            "{text}"
        );
        r.mode = "Observe".into();
        r.would_reclaim_bytes = 64 << 20;
        r.supported = false;
        let text = reclaim_text(&r);
        assert!(
            text.contains("would reclaim 64Mi (nothing written: mode Observe)"),
            "{text}"
        );
        assert!(text.contains("has no memory.reclaim"), "{text}");
        assert!(!text.contains("reclaimed "), "{text}");
    }
}
