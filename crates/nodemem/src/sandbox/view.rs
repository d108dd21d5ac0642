//! What the sandbox shows: the policies' rollouts, each node's state, and the memory
//! values of one node's pods as its cgroup files hold them right now. [`View`] is read
//! from the cluster and the node's tree; [`frame`] (the live screen) and [`changes`]
//! (plain lines for `--no-ui`) are pure.

use std::collections::BTreeMap;
use std::fmt::Write;

use k8s_openapi::api::core::v1 as core;
use nodemem_model::pod::qos::qos_class;
use nodemem_model::values::cgroup_layout::{container_dir_under, pod_dir, CgroupDriver};

use nodemem_plugin::cluster::Snapshot;
use nodemem_plugin::render::table;
use nodemem_plugin::status::{self, PolicyRow};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct View {
    pub policies: Vec<PolicyRow>,
    /// node -> (pool label, policy, revision, state)
    pub nodes: BTreeMap<String, NodeLine>,
    /// The node whose values are shown, and its pods' rows.
    pub focus: Option<(String, Vec<PodLine>)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLine {
    pub pool: String,
    pub policy: String,
    pub revision: String,
    pub state: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodLine {
    pub pod: String,
    pub qos: String,
    pub memory_min: String,
    pub memory_low: String,
    /// The first container's (memory.high is set per container).
    pub memory_high: String,
    pub cpuset_mems: String,
}

impl View {
    /// True when the controller reported on every policy and every policy that matches
    /// nodes finished its rollout. A policy it has not reported on yet shows 0 matched
    /// nodes too: that is not "matches nothing" (the sandbox once announced itself ready
    /// before the first status was written).
    pub fn settled(&self) -> bool {
        !self.policies.is_empty()
            && self.policies.iter().all(|p| {
                p.state != status::UNREPORTED
                    && (p.matched == 0 || (p.state == "Complete" && p.ready == p.matched))
            })
    }
}

/// The view from a snapshot, the focus node's pods and a reader of its cgroup files.
pub fn build(
    s: &Snapshot,
    focus: Option<(&str, &[core::Pod])>,
    workload_namespace: &str,
    read: &dyn Fn(&str, &str) -> Option<String>,
) -> View {
    let mut policies: Vec<PolicyRow> = status::build(s).policies;
    policies.sort_by(|a, b| a.name.cmp(&b.name));
    let mut nodes = BTreeMap::new();
    for n in &s.nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let pool = n
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(nodemem_testkit::bed::POOL_LABEL))
            .cloned()
            .unwrap_or_default();
        let line = match s.config(&name) {
            None => NodeLine {
                pool,
                policy: "-".into(),
                revision: "-".into(),
                state: "NoConfig".into(),
            },
            Some(c) => {
                let policy = s.policy(&c.spec.policy);
                let target = policy.and_then(status::target_revision);
                NodeLine {
                    pool,
                    policy: c.spec.policy.clone(),
                    revision: c.spec.revision.clone(),
                    state: status::node_state(
                        c,
                        target.as_deref(),
                        status::min_ready_seconds(policy),
                        status::now_seconds(),
                    ),
                }
            }
        };
        nodes.insert(name, line);
    }
    let focus = focus.map(|(node, pods)| {
        let mut rows = Vec::new();
        let mut pods: Vec<&core::Pod> = pods.iter().collect();
        pods.sort_by_key(|p| p.metadata.name.clone());
        for p in pods
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(workload_namespace))
        {
            let Ok(model) = nodemem_api::k8s::node_pod_from_k8s(p, &Default::default()) else {
                continue;
            };
            let qos = qos_class(&model.pod().spec);
            let dir = pod_dir(CgroupDriver::Systemd, qos, &model.pod().uid);
            let first = model
                .pod()
                .spec
                .containers
                .first()
                .and_then(|c| model.container_ids().get(&c.name))
                .map(|id| container_dir_under(&dir, CgroupDriver::Systemd, id));
            let get = |path: &str, file: &str| {
                read(path, file)
                    .filter(|v| !v.is_empty())
                    .unwrap_or_else(|| "-".into())
            };
            rows.push(PodLine {
                pod: model.pod().name.clone(),
                qos: qos.as_str().to_string(),
                memory_min: get(&dir, "memory.min"),
                memory_low: get(&dir, "memory.low"),
                memory_high: first
                    .as_deref()
                    .map_or("-".into(), |c| get(c, "memory.high")),
                cpuset_mems: first
                    .as_deref()
                    .map_or("-".into(), |c| get(c, "cpuset.mems")),
            });
        }
        (node.to_string(), rows)
    });
    View {
        policies,
        nodes,
        focus,
    }
}

fn short(revision: &str) -> String {
    revision.chars().take(8).collect()
}

/// A value as the plugin and `simulate` show it: exact binary units, or `max`.
fn human(v: &str) -> String {
    nodemem_plugin::render::memory(v)
}

/// The live screen.
pub fn frame(v: &View, header: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{header}\n");
    let mut t = table(&[
        "POLICY", "REVISION", "MATCHED", "UPDATED", "READY", "FAILED", "ROLLOUT",
    ]);
    for p in &v.policies {
        t.add_row(vec![
            p.name.clone(),
            p.revision.as_deref().map_or("-".into(), short),
            p.matched.to_string(),
            p.updated.to_string(),
            p.ready.to_string(),
            p.failed.to_string(),
            p.state.clone(),
        ]);
    }
    let _ = writeln!(out, "{}\n", nodemem_plugin::render::text(&t));
    let mut t = table(&["NODE", "POOL", "POLICY", "REVISION", "STATE"]);
    for (name, n) in &v.nodes {
        t.add_row(vec![
            name.clone(),
            n.pool.clone(),
            n.policy.clone(),
            short(&n.revision),
            n.state.clone(),
        ]);
    }
    let _ = writeln!(out, "{}", nodemem_plugin::render::text(&t));
    if let Some((node, rows)) = &v.focus {
        let _ = writeln!(out, "\ncgroup files on {node} now:");
        let mut t = table(&[
            "POD",
            "QOS",
            "MEMORY.MIN",
            "MEMORY.LOW",
            "MEMORY.HIGH",
            "CPUSET.MEMS",
        ]);
        for r in rows {
            t.add_row(vec![
                r.pod.clone(),
                r.qos.clone(),
                human(&r.memory_min),
                human(&r.memory_low),
                human(&r.memory_high),
                r.cpuset_mems.clone(),
            ]);
        }
        let _ = writeln!(out, "{}", nodemem_plugin::render::text(&t));
    }
    out
}

/// Plain lines for what changed between two views (`--no-ui`).
pub fn changes(before: &View, after: &View) -> Vec<String> {
    let mut out = Vec::new();
    for p in &after.policies {
        let old = before.policies.iter().find(|o| o.name == p.name);
        let line = |p: &PolicyRow| {
            (
                p.revision.clone(),
                p.updated,
                p.ready,
                p.failed,
                p.state.clone(),
            )
        };
        if old.map(line) != Some(line(p)) {
            out.push(format!(
                "policy {}: revision {} {}/{} updated, {} ready, {} failed, {}",
                p.name,
                p.revision.as_deref().map_or("-".into(), short),
                p.updated,
                p.matched,
                p.ready,
                p.failed,
                p.state
            ));
        }
    }
    for (name, n) in &after.nodes {
        if before.nodes.get(name) != Some(n) {
            out.push(format!(
                "node {name}: {} revision {} {}",
                n.policy,
                short(&n.revision),
                n.state
            ));
        }
    }
    if let (Some((node, rows)), old) = (&after.focus, &before.focus) {
        for r in rows {
            let was = old
                .as_ref()
                .and_then(|(_, rs)| rs.iter().find(|o| o.pod == r.pod));
            if was != Some(r) {
                out.push(format!(
                    "{node} {} ({}): memory.min {} memory.low {} memory.high {} cpuset.mems {}",
                    r.pod, r.qos, r.memory_min, r.memory_low, r.memory_high, r.cpuset_mems
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, state: &str, matched: i32, ready: i32) -> PolicyRow {
        PolicyRow {
            name: name.into(),
            priority: 0,
            enforcement: "Agent".into(),
            revision: None,
            target_revision: None,
            leaving: 0,
            deleting: false,
            matched,
            excluded: 0,
            excluded_nodes: Vec::new(),
            updated: ready,
            ready,
            failed: 0,
            state: state.into(),
            message: String::new(),
            rolled_back_revision: None,
            classes: Vec::new(),
        }
    }

    fn view(policies: Vec<PolicyRow>) -> View {
        View {
            policies,
            ..View::default()
        }
    }

    #[test]
    fn settled_needs_a_report_on_every_policy_and_every_rollout_complete() {
        assert!(!view(vec![]).settled());
        // Before the controller's first status: 0 matched, state unreported.
        assert!(!view(vec![row("general", status::UNREPORTED, 0, 0)]).settled());
        assert!(!view(vec![
            row("batch", "Complete", 2, 2),
            row("general", status::UNREPORTED, 0, 0),
        ])
        .settled());
        assert!(!view(vec![row("general", "Updating", 3, 1)]).settled());
        assert!(!view(vec![row("general", "Complete", 3, 2)]).settled());
        assert!(view(vec![row("general", "Complete", 3, 3)]).settled());
        // A reported policy that matches no node has nothing to roll out.
        assert!(view(vec![
            row("general", "Complete", 3, 3),
            row("spare", "Complete", 0, 0),
        ])
        .settled());
    }
}
