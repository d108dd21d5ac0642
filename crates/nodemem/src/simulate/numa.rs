//! `simulate --numa`: the topology file and the Memory Manager's Static policy run on
//! the pods in file order, as the kubelet admits them.
//!
//! Topology file: `{"numaNodes": [{"id": 0, "memory": {"memory": "16Gi",
//! "hugepages-2Mi": "1Gi"}}]}` (YAML or JSON). Amounts are Kubernetes quantities or
//! plain byte counts.

use std::collections::BTreeMap;
use std::path::Path;

use nodemem_model::numa::{MachineState, MemoryManager, NumaTopology, Pinning, Scope};
use nodemem_model::pod::{Pod, MEMORY};
use nodemem_model::policy::{is_valid_hugepages_name, MemoryManagerSettings};
use nodemem_model::quantity::Quantity;
use serde::Deserialize;
use serde_json::Value;

use crate::error::CliError;
use crate::manifests::deserialize_with_path;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TopologyFile {
    numa_nodes: Vec<NumaNodeEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NumaNodeEntry {
    id: i64,
    memory: BTreeMap<String, Value>,
}

/// Topology manager scope for `--topology-manager-scope` (the kubelet's
/// `topologyManagerScope`, default `container`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ScopeArg {
    #[default]
    Container,
    Pod,
}

impl From<ScopeArg> for Scope {
    fn from(s: ScopeArg) -> Self {
        match s {
            ScopeArg::Container => Scope::Container,
            ScopeArg::Pod => Scope::Pod,
        }
    }
}

/// Reads and checks a topology file; every problem is one line naming the file and
/// the path of the bad value.
pub fn read_topology(path: &Path) -> Result<NumaTopology, CliError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::one(format!("{name}: cannot read: {e}")))?;
    parse_topology(&name, &text)
}

pub fn parse_topology(name: &str, text: &str) -> Result<NumaTopology, CliError> {
    let value: Value = serde_yaml::from_str(text)
        .map_err(|e| CliError::one(format!("{name}: not valid YAML: {e}")))?;
    let file: TopologyFile = deserialize_with_path(name, value)?;

    let mut problems = Vec::new();
    let mut topology = NumaTopology::default();
    if file.numa_nodes.is_empty() {
        problems.push(format!("{name}: numaNodes: the topology has no NUMA nodes"));
    }
    for (i, entry) in file.numa_nodes.iter().enumerate() {
        let at = format!("{name}: numaNodes[{i}]");
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
        Err(CliError::many(problems))
    }
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

/// The outcome of admitting every pod, in file order.
pub struct NumaRun {
    pub manager: MemoryManager,
    /// Per pod, in input order: container name -> pinning.
    pub pinning: Vec<BTreeMap<String, Pinning>>,
}

impl NumaRun {
    /// Why the pod at `index` was refused, when it was: the kubelet rejects the whole pod.
    pub fn rejection(&self, index: usize) -> Option<&str> {
        self.pinning.get(index)?.values().find_map(|p| match p {
            Pinning::Rejected(reason) => Some(reason.as_str()),
            _ => None,
        })
    }
}

/// Builds the node map from the topology and the policy's `reservedMemory` (every
/// problem reported, prefixed with where it came from) and admits the pods.
pub fn run_static_policy(
    origin: &str,
    topology: &NumaTopology,
    settings: &MemoryManagerSettings,
    scope: Scope,
    pods: &[Pod],
) -> Result<NumaRun, CliError> {
    let machine = MachineState::new(topology, &settings.reserved_memory)
        .map_err(|ps| CliError::many(ps.into_iter().map(|p| format!("{origin}: {p}")).collect()))?;
    let mut manager = MemoryManager::new(machine, scope);
    let mut pinning = Vec::with_capacity(pods.len());
    for (i, pod) in pods.iter().enumerate() {
        // The manager keys assignments by pod UID; manifests written by hand may leave
        // it out, so the input position keeps them apart.
        let mut keyed = pod.clone();
        keyed.uid = format!("{i}/{}", pod.uid);
        pinning.push(manager.admit_pod(&keyed).into_iter().collect());
    }
    Ok(NumaRun { manager, pinning })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        parse_topology("t.yaml", text).unwrap_err().problems
    }

    #[test]
    fn parses_quantities_and_byte_counts() {
        let t = parse_topology(
            "t.yaml",
            "numaNodes:\n- id: 0\n  memory: {memory: 16Gi, hugepages-2Mi: 1Gi}\n- id: 1\n  memory: {memory: 1073741824}\n",
        )
        .unwrap();
        assert_eq!(t.nodes[&0]["memory"], 16 << 30);
        assert_eq!(t.nodes[&0]["hugepages-2Mi"], 1 << 30);
        assert_eq!(t.nodes[&1]["memory"], 1 << 30);
        assert_eq!(t.nodes.len(), 2);
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
