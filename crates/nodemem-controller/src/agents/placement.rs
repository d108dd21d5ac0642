//! Whether the agent's pod can run on a node (issue 58, "Nodes nodemem cannot
//! manage"), as the scheduler would judge the DaemonSet's pod there: its nodeSelector
//! (Linux only by default), its required node affinity and its tolerations against the
//! node's taints. A node it cannot run on has no agent to wait for; the decision counts
//! it apart rather than failing a rollout at its deadline. Pure: the node's labels,
//! name and taints in, the reason out.
//!
//! The rules are the scheduler's (`k8s.io/component-helpers/scheduling/corev1`
//! `MatchNodeSelectorTerms`, `nodeaffinity`; `TolerationsTolerateTaint`): terms are
//! ORed, a term's requirements ANDed, an empty term matches nothing; `Gt`/`Lt` compare
//! integers; only `metadata.name` is a field; `NoSchedule` and `NoExecute` taints keep a
//! pod off unless tolerated, `PreferNoSchedule` does not.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};

use crate::agents::pod::AgentPod;

/// The taints every DaemonSet pod tolerates, whatever its own tolerations say: the
/// DaemonSet controller adds these (`pkg/controller/daemon/util/daemonset_util.go`
/// `AddOrUpdateDaemonPodTolerations`, v1.37.2; the agent's pod has no host network,
/// so `network-unavailable` is not among them).
const DAEMON_TOLERATIONS: [(&str, &str); 6] = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];

/// What a node is, for placement.
pub struct NodePlace<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
}

/// Why the agent's pod cannot run on `node`; None: it can.
pub fn refused(agent: &AgentPod, node: &NodePlace<'_>) -> Option<String> {
    for (key, want) in &agent.node_selector {
        let have = node.labels.get(key);
        if have != Some(want) {
            let have = have.map_or("no such label".to_string(), |v| format!("{key}={v}"));
            return Some(format!(
                "the agent's nodeSelector asks {key}={want}, the node has {have}"
            ));
        }
    }
    let terms = agent
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice());
    if let Some(terms) = terms {
        if !terms.iter().any(|t| term_matches(t, node)) {
            return Some(
                "no term of the agent's required node affinity matches the node".to_string(),
            );
        }
    }
    node.taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .filter(|t| !DAEMON_TOLERATIONS.contains(&(t.key.as_str(), t.effect.as_str())))
        .find(|t| !agent.tolerations.iter().any(|o| tolerates(o, t)))
        .map(|t| {
            let value = t
                .value
                .as_deref()
                .map(|v| format!("={v}"))
                .unwrap_or_default();
            format!(
                "the node's taint {}{value}:{} is not among the agent's tolerations",
                t.key, t.effect
            )
        })
}

/// A term holds where all its requirements do; an empty term holds nowhere.
fn term_matches(term: &NodeSelectorTerm, node: &NodePlace<'_>) -> bool {
    let labels = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if labels.is_empty() && fields.is_empty() {
        return false;
    }
    let name = BTreeMap::from([("metadata.name".to_string(), node.name.to_string())]);
    labels.iter().all(|r| requirement_holds(r, node.labels))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_holds(r, &name))
}

fn requirement_holds(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let have = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => have.is_some_and(|h| values.contains(h)),
        "NotIn" => have.is_none_or(|h| !values.contains(h)),
        "Exists" => have.is_some(),
        "DoesNotExist" => have.is_none(),
        "Gt" | "Lt" => {
            let (Some(h), [v]) = (have.and_then(|h| number(h)), values) else {
                return false;
            };
            let Some(v) = number(v) else { return false };
            if r.operator == "Gt" {
                h > v
            } else {
                h < v
            }
        }
        _ => false,
    }
}

/// A toleration tolerates a taint of its key (any key when empty with `Exists`), its
/// effect (any when empty) and, with `Equal` (the default), its value.
fn tolerates(o: &Toleration, t: &Taint) -> bool {
    let effect = o.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != t.effect {
        return false;
    }
    let key = o.key.as_deref().unwrap_or_default();
    match o.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == t.key,
        "Equal" => {
            key == t.key
                && o.value.as_deref().unwrap_or_default() == t.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agent(given: serde_json::Value) -> AgentPod {
        AgentPod::parse(&given.to_string()).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn refused_on(
        a: &AgentPod,
        name: &str,
        l: &[(&str, &str)],
        taints: &[Taint],
    ) -> Option<String> {
        let labels = labels(l);
        refused(
            a,
            &NodePlace {
                name,
                labels: &labels,
                taints,
            },
        )
    }

    #[test]
    fn by_default_linux_nodes_only_whatever_their_taints() {
        let a = AgentPod::default();
        let linux = [("kubernetes.io/os", "linux")];
        assert_eq!(
            refused_on(&a, "n", &linux, &[taint("gpu", Some("yes"), "NoSchedule")]),
            None
        );
        assert_eq!(
            refused_on(&a, "w", &[("kubernetes.io/os", "windows")], &[]).as_deref(),
            Some("the agent's nodeSelector asks kubernetes.io/os=linux, the node has kubernetes.io/os=windows")
        );
        assert!(refused_on(&a, "x", &[], &[])
            .unwrap()
            .ends_with("the node has no such label"));
    }

    #[test]
    fn required_node_affinity_terms_are_ored_and_their_requirements_anded() {
        let a = agent(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": "pool", "operator": "In", "values": ["a", "b"]},
                    {"key": "excluded", "operator": "DoesNotExist"}
                ]},
                {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["63"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]}
            ]}}}}),
        );
        let os = ("kubernetes.io/os", "linux");
        assert_eq!(refused_on(&a, "n", &[os, ("pool", "a")], &[]), None);
        assert!(refused_on(&a, "n", &[os, ("pool", "a"), ("excluded", "")], &[]).is_some());
        assert!(refused_on(&a, "n", &[os, ("pool", "c")], &[]).is_some());
        assert_eq!(refused_on(&a, "n", &[os, ("cores", "64")], &[]), None);
        assert!(refused_on(&a, "n", &[os, ("cores", "63")], &[]).is_some());
        assert!(refused_on(&a, "n", &[os, ("cores", "many")], &[]).is_some());
        assert_eq!(refused_on(&a, "special", &[os], &[]), None);
        assert_eq!(
            refused_on(&a, "plain", &[os], &[]).as_deref(),
            Some("no term of the agent's required node affinity matches the node")
        );
        let not_in = agent(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["edge"]}]}
            ]}}}}),
        );
        assert_eq!(
            refused_on(&not_in, "n", &[os], &[]),
            None,
            "NotIn holds without the label"
        );
        assert!(refused_on(&not_in, "n", &[os, ("tier", "edge")], &[]).is_some());
        let empty = agent(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}}),
        );
        assert!(
            refused_on(&empty, "n", &[os], &[]).is_some(),
            "an empty term matches nothing"
        );
    }

    #[test]
    fn a_taint_keeps_the_agent_off_unless_tolerated() {
        let a = agent(json!({"tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"},
            {"key": "maintenance", "operator": "Exists"}
        ]}));
        let os = [("kubernetes.io/os", "linux")];
        assert_eq!(
            refused_on(
                &a,
                "n",
                &os,
                &[taint("dedicated", Some("db"), "NoSchedule")]
            ),
            None
        );
        assert_eq!(
            refused_on(&a, "n", &os, &[taint("maintenance", None, "NoExecute")]),
            None
        );
        assert_eq!(
            refused_on(&a, "n", &os, &[taint("soft", None, "PreferNoSchedule")]),
            None
        );
        assert_eq!(
            refused_on(
                &a,
                "n",
                &os,
                &[taint("dedicated", Some("web"), "NoSchedule")]
            )
            .as_deref(),
            Some("the node's taint dedicated=web:NoSchedule is not among the agent's tolerations")
        );
        assert!(refused_on(&a, "n", &os, &[taint("dedicated", Some("db"), "NoExecute")]).is_some());
        // A cordoned or pressured node keeps its agent: the DaemonSet controller adds
        // those tolerations itself; a network-unavailable one does not (no host network).
        for (key, effect) in DAEMON_TOLERATIONS {
            assert_eq!(
                refused_on(&a, "n", &os, &[taint(key, None, effect)]),
                None,
                "{key}"
            );
        }
        assert!(refused_on(
            &a,
            "n",
            &os,
            &[taint(
                "node.kubernetes.io/network-unavailable",
                None,
                "NoSchedule"
            )]
        )
        .is_some());
    }
}
