//! Simulated nodes: `Node` objects with labels, memory capacity and allocatable, the
//! kernel version, and NUMA-shaped capacity (the per-NUMA-node split is published in
//! the `nodemem.io/numa-topology` annotation in the `simulate --numa` topology format,
//! since core/v1 Node has no field for it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use crate::Error;

use nodemem_api::k8s::TopologyDocument;
/// The annotation holding the simulated NUMA topology (nodemem-api's shared document).
pub use nodemem_api::k8s::NUMA_TOPOLOGY_ANNOTATION;
use nodemem_model::numa::NumaTopology;

/// One simulated NUMA node: bytes of memory and of each hugepage size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaNode {
    pub id: i64,
    pub memory: i64,
    /// `hugepages-2Mi` -> bytes
    pub hugepages: BTreeMap<String, i64>,
}

#[derive(Clone, Debug)]
pub struct SimNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub kernel_version: String,
    pub kubelet_version: String,
    pub numa: Vec<NumaNode>,
    /// Bytes held back from pods (kube + system reserved + hard eviction).
    pub reserved: i64,
    pub cpus: u32,
}

const GI: i64 = 1 << 30;

impl SimNode {
    /// The NUMA topology as the model sees it: memory and hugepages per NUMA node.
    pub fn topology(&self) -> NumaTopology {
        NumaTopology {
            nodes: self
                .numa
                .iter()
                .map(|n| {
                    let mut memory = n.hugepages.clone();
                    memory.insert("memory".to_string(), n.memory);
                    (n.id, memory)
                })
                .collect(),
        }
    }

    /// Two NUMA nodes of 8Gi, 1Gi reserved, kernel 6.1, 4 CPUs.
    pub fn new(name: &str) -> Self {
        SimNode {
            name: name.to_string(),
            // The labels every kubelet sets on its Node (the agents' DaemonSet selects
            // Linux nodes by the first).
            labels: BTreeMap::from([
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                ("kubernetes.io/hostname".to_string(), name.to_string()),
            ]),
            kernel_version: "6.1.0-28-amd64".to_string(),
            kubelet_version: "v1.36.3".to_string(),
            numa: (0..2)
                .map(|id| NumaNode {
                    id,
                    memory: 8 * GI,
                    hugepages: BTreeMap::new(),
                })
                .collect(),
            reserved: GI,
            cpus: 4,
        }
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    pub fn kernel(mut self, version: &str) -> Self {
        self.kernel_version = version.to_string();
        self
    }

    /// `status.nodeInfo.kubeletVersion` (default v1.36.3).
    pub fn kubelet_version(mut self, version: &str) -> Self {
        self.kubelet_version = version.to_string();
        self
    }

    pub fn numa(mut self, numa: Vec<NumaNode>) -> Self {
        self.numa = numa;
        self
    }

    pub fn memory_capacity(&self) -> i64 {
        self.numa.iter().map(|n| n.memory).sum()
    }

    fn hugepages(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for n in &self.numa {
            for (k, v) in &n.hugepages {
                *out.entry(k.clone()).or_insert(0) += v;
            }
        }
        out
    }

    /// The Node object, status included.
    pub fn to_node(&self) -> Node {
        let mut capacity = json!({
            "cpu": self.cpus.to_string(),
            "memory": self.memory_capacity().to_string(),
            "pods": "110",
        });
        let mut allocatable = json!({
            "cpu": self.cpus.to_string(),
            "memory": (self.memory_capacity() - self.reserved).to_string(),
            "pods": "110",
        });
        for (k, v) in self.hugepages() {
            capacity[&k] = json!(v.to_string());
            allocatable[&k] = json!(v.to_string());
        }
        let topology = serde_json::to_value(TopologyDocument::from_topology(&self.topology()))
            .expect("a topology document serializes");
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": self.labels,
                "annotations": {NUMA_TOPOLOGY_ANNOTATION: topology.to_string()},
            },
            "status": {
                "capacity": capacity,
                "allocatable": allocatable,
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "nodemem-testkit fake kubelet",
                    "lastHeartbeatTime": now(), "lastTransitionTime": now(),
                }],
                "nodeInfo": {
                    "kernelVersion": self.kernel_version,
                    "architecture": "amd64", "operatingSystem": "linux",
                    "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "kubeletVersion": self.kubelet_version, "kubeProxyVersion": "",
                    "bootID": "", "machineID": "", "systemUUID": "",
                },
            },
        }))
        .expect("a valid Node")
    }

    /// Creates (or replaces the status of) the Node in the cluster.
    pub async fn register(&self, client: &Client) -> Result<Node, Error> {
        let nodes: Api<Node> = Api::all(client.clone());
        let node = self.to_node();
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(Error::Api(format!("create node {}: {e}", self.name))),
        }
        // Status set on create may be dropped by admission; write it explicitly.
        let status = json!({"status": serde_json::to_value(&node.status).expect("status")});
        nodes
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| Error::Api(format!("node {} status: {e}", self.name)))
    }
}

/// RFC 3339 UTC time of now, second precision (as the apiserver stores it).
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .expect("rounding to seconds")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_object_sums_numa_capacity() {
        let mut n = SimNode::new("n1").label("pool", "db");
        n.numa[1].hugepages.insert("hugepages-2Mi".into(), GI);
        let node = n.to_node();
        let status = node.status.clone().unwrap();
        assert_eq!(
            status.capacity.as_ref().unwrap()["memory"].0,
            (16 * GI).to_string()
        );
        assert_eq!(
            status.allocatable.as_ref().unwrap()["memory"].0,
            (15 * GI).to_string()
        );
        assert_eq!(
            status.allocatable.as_ref().unwrap()["hugepages-2Mi"].0,
            GI.to_string()
        );
        assert_eq!(status.node_info.unwrap().kernel_version, "6.1.0-28-amd64");
        // The annotation is the shared topology document and reads back as the model's
        // topology.
        let read = nodemem_api::k8s::node_topology(&node)
            .expect("the annotation is there")
            .expect("it parses");
        assert_eq!(read, n.topology());
        assert_eq!(read.nodes[&1]["hugepages-2Mi"], GI);
        assert_eq!(node.metadata.labels.unwrap()["pool"], "db");
    }

    #[test]
    fn now_is_rfc3339() {
        let t = now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(
            t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T",
            "{t}"
        );
    }
}
