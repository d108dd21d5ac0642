//! The one NUMA topology document: what `simulate --numa` reads, what the test
//! harness's simulated nodes publish in the `nodemem.io/numa-topology` annotation, and
//! what the agent can be given instead of reading sysfs.
//!
//! `{"numaNodes": [{"id": 0, "memory": {"memory": "16Gi", "hugepages-2Mi": "1Gi"}}]}`
//! (YAML or JSON). Amounts are Kubernetes quantities or plain byte counts.

use std::collections::BTreeMap;

use nodemem_model::numa::NumaTopology;
use nodemem_model::pod::is_valid_hugepages_name;
use nodemem_model::pod::MEMORY;
use nodemem_model::quantity::Quantity;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The annotation a Node may carry its topology in (test harness, manual setups).
pub const NUMA_TOPOLOGY_ANNOTATION: &str = "nodemem.io/numa-topology";

/// A NUMA topology as the annotation writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TopologyDocument {
    /// Each NUMA node, by id.
    pub numa_nodes: Vec<NumaNodeEntry>,
}

/// One NUMA node and its memory by type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaNodeEntry {
    /// The NUMA node's id, as the kernel numbers it.
    pub id: i64,
    /// Memory type -> a quantity string or a byte count.
    pub memory: BTreeMap<String, Value>,
}

impl TopologyDocument {
    /// The document for a topology, amounts as byte counts.
    pub fn from_topology(topology: &NumaTopology) -> Self {
        TopologyDocument {
            numa_nodes: topology
                .nodes
                .iter()
                .map(|(id, memory)| NumaNodeEntry {
                    id: *id,
                    memory: memory
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::from(*v)))
                        .collect(),
                })
                .collect(),
        }
    }

    /// The topology, or every problem, each one line starting with `origin` and the
    /// path of the bad value.
    pub fn to_topology(&self, origin: &str) -> Result<NumaTopology, Vec<String>> {
        let mut problems = Vec::new();
        let mut topology = NumaTopology::default();
        if self.numa_nodes.is_empty() {
            problems.push(format!(
                "{origin}: numaNodes: the topology has no NUMA nodes"
            ));
        }
        for (i, entry) in self.numa_nodes.iter().enumerate() {
            let at = format!("{origin}: numaNodes[{i}]");
            if entry.id < 0 {
                problems.push(format!("{at}.id: must not be negative, found {}", entry.id));
                continue;
            }
            if topology.nodes.contains_key(&entry.id) {
                problems.push(format!("{at}.id: duplicate NUMA node {}", entry.id));
                continue;
            }
            if !entry.memory.contains_key(MEMORY) {
                problems.push(format!(
                    "{at}.memory: every NUMA node has memory; give its size under \"memory\""
                ));
            }
            let mut capacity = BTreeMap::new();
            for (kind, amount) in &entry.memory {
                let p = format!("{at}.memory.{kind}");
                if kind != MEMORY && !is_valid_hugepages_name(kind) {
                    problems.push(format!(
                        "{p}: unknown memory type: use memory or hugepages-<size>"
                    ));
                    continue;
                }
                match bytes(amount) {
                    Ok(b) if b < 0 => problems.push(format!("{p}: must not be negative")),
                    Ok(b) => {
                        capacity.insert(kind.clone(), b);
                    }
                    Err(e) => problems.push(format!("{p}: {e}")),
                }
            }
            topology.nodes.insert(entry.id, capacity);
        }
        if problems.is_empty() {
            Ok(topology)
        } else {
            Err(problems)
        }
    }
}

/// The topology a Node carries in its `nodemem.io/numa-topology` annotation, if any.
pub fn node_topology(
    node: &k8s_openapi::api::core::v1::Node,
) -> Option<Result<NumaTopology, Vec<String>>> {
    let text = node
        .metadata
        .annotations
        .as_ref()?
        .get(NUMA_TOPOLOGY_ANNOTATION)?;
    let origin = format!(
        "node {} annotation {NUMA_TOPOLOGY_ANNOTATION}",
        node.metadata.name.as_deref().unwrap_or("")
    );
    Some(parse_topology(&origin, text))
}

/// Parses a topology document (YAML or JSON); every problem is one line naming
/// `origin` and the path of the bad value.
pub fn parse_topology(origin: &str, text: &str) -> Result<NumaTopology, Vec<String>> {
    let value: Value =
        serde_yaml::from_str(text).map_err(|e| vec![format!("{origin}: not valid YAML: {e}")])?;
    let document: TopologyDocument = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        vec![if path == "." {
            format!("{origin}: {inner}")
        } else {
            format!("{origin}: {path}: {inner}")
        }]
    })?;
    document.to_topology(origin)
}

fn bytes(amount: &Value) -> Result<i64, String> {
    match amount {
        Value::String(s) => Quantity::parse(s)
            .map(|q| q.value())
            .map_err(|e| format!("{s:?} is not a quantity: {e}")),
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| format!("{n} is not a whole number of bytes")),
        other => Err(format!(
            "expected a quantity such as \"16Gi\", found {other}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        parse_topology("t.yaml", text).unwrap_err()
    }

    #[test]
    fn parses_quantities_and_byte_counts_and_round_trips() {
        let t = parse_topology(
            "t.yaml",
            "numaNodes:\n- id: 0\n  memory: {memory: 16Gi, hugepages-2Mi: 1Gi}\n- id: 1\n  memory: {memory: 1073741824}\n",
        )
        .unwrap();
        assert_eq!(t.nodes[&0]["memory"], 16 << 30);
        assert_eq!(t.nodes[&0]["hugepages-2Mi"], 1 << 30);
        assert_eq!(t.nodes[&1]["memory"], 1 << 30);
        assert_eq!(t.nodes.len(), 2);
        let json = serde_json::to_string(&TopologyDocument::from_topology(&t)).unwrap();
        assert_eq!(parse_topology("again", &json).unwrap(), t);
    }

    #[test]
    fn every_bad_value_is_one_line() {
        let p = problems(
            "numaNodes:\n- id: -1\n  memory: {memory: 1Gi}\n- id: 0\n  memory: {memory: 1Gi}\n- id: 0\n  memory: {memory: 1Gi}\n- id: 1\n  memory: {memory: lots, hugepages-3x: 1Gi, hugepages-2Mi: -1Gi}\n- id: 2\n  memory: {hugepages-2Mi: 2Mi}\n",
        );
        assert_eq!(p.len(), 6, "{p:#?}");
        assert_eq!(
            p[0],
            "t.yaml: numaNodes[0].id: must not be negative, found -1"
        );
        assert_eq!(p[1], "t.yaml: numaNodes[2].id: duplicate NUMA node 0");
        assert_eq!(
            p[2],
            "t.yaml: numaNodes[3].memory.hugepages-2Mi: must not be negative"
        );
        assert_eq!(
            p[3],
            "t.yaml: numaNodes[3].memory.hugepages-3x: unknown memory type: use memory or hugepages-<size>"
        );
        assert!(
            p[4].starts_with("t.yaml: numaNodes[3].memory.memory: \"lots\" is not a quantity"),
            "{}",
            p[4]
        );
        assert_eq!(
            p[5],
            "t.yaml: numaNodes[4].memory: every NUMA node has memory; give its size under \"memory\""
        );
    }

    #[test]
    fn structural_errors_name_the_path() {
        assert_eq!(
            problems("numaNodes:\n- id: 0\n  memory: {memory: 1Gi}\n  cpus: 4\n"),
            vec!["t.yaml: numaNodes[0].cpus: unknown field `cpus`, expected `id` or `memory`"]
        );
        assert_eq!(
            problems("numaNodes: []\n"),
            vec!["t.yaml: numaNodes: the topology has no NUMA nodes"]
        );
        let p = problems("nodes: []\n");
        assert_eq!(p.len(), 1);
        assert!(
            p[0].starts_with("t.yaml: nodes: unknown field `nodes`"),
            "{}",
            p[0]
        );
    }
}
