//! The stable JSON document of `nodemem simulate -o json`, and the table for people.
//!
//! JSON: `{"node", "policy", "kubeletRules", "warnings", "kubepods", "qos": {"burstable", "besteffort"},
//! "pods": [{"namespace", "name", "uid", "qosClass", "cgroup", "containers": [{"name",
//! "cgroup"}]}]}`, where every cgroup object maps file names to bytes or `"max"`, and a
//! file nodemem does not set is absent. A pod annotated `nodemem.io/memory-qos:
//! disabled` also has `"optedOut": true` (and no memory.min/low/high). When a pod on
//! the node names a workload class (`nodemem.io/class`), every pod has `"classFrom"`
//! (`pod annotation`, `namespace label` or `pool`) and those in a class `"class"`; the
//! table gains a CLASS column. `kubeletRules`
//! names the kubelet version the Node reports and the rules it chose (absent when no
//! policy selects the node).
//!
//! With `--numa` and a Static memoryManager policy, a pinned container's cgroup also
//! holds `cpuset.mems`, a refused one has `"numa": {"rejected": reason}`, and the
//! document gains `"numa": {"nodes": [{"id", "memoryMap": {type: {"total",
//! "systemReserved", "allocatable", "reserved", "free"}}}], "pinningRequests",
//! "pinningErrors"}`. Without `--numa` these keys are absent.

use std::collections::BTreeMap;

use nodemem_model::node::{Admission, DesiredNode, PodOutcome};
use nodemem_model::numa::{MemoryTable, NumaId, Pinning};
use nodemem_model::pod::qos::qos_class;
use nodemem_model::pod::Pod;
use nodemem_model::quantity::format_bytes;
use nodemem_model::values::cgroup::{
    CgroupValue, CgroupValues, CPUSET_MEMS, MEMORY_HIGH, MEMORY_LOW, MEMORY_MAX, MEMORY_MIN,
};
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimulateOutput {
    pub node: String,
    pub policy: Option<String>,
    /// The node's kubelet version and the rules it chose (`QosRules::applied`).
    #[serde(rename = "kubeletRules", skip_serializing_if = "Option::is_none")]
    pub kubelet_rules: Option<String>,
    pub warnings: Vec<String>,
    pub kubepods: CgroupValues,
    pub qos: QosCgroups,
    pub pods: Vec<PodOutput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa: Option<NumaOutput>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NumaOutput {
    pub nodes: Vec<NumaNodeOutput>,
    pub pinning_requests: u64,
    pub pinning_errors: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NumaNodeOutput {
    pub id: NumaId,
    pub memory_map: BTreeMap<String, MemoryTable>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContainerNuma {
    pub rejected: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QosCgroups {
    pub burstable: CgroupValues,
    pub besteffort: CgroupValues,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodOutput {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub qos_class: String,
    /// Annotated `nodemem.io/memory-qos: disabled`: nodemem protects nothing of it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub opted_out: bool,
    /// The workload class its values follow (absent: the pool's own settings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Where its class came from: `pod annotation`, `namespace label`, or `pool` (no
    /// choice, or a class the policy does not have); absent when no pod on the node
    /// names a class.
    #[serde(rename = "classFrom", skip_serializing_if = "Option::is_none")]
    pub class_from: Option<String>,
    pub cgroup: CgroupValues,
    pub containers: Vec<ContainerOutput>,
}

impl PodOutput {
    /// A pod nodemem sets nothing for: every container listed, no values.
    fn unmanaged(p: &Pod) -> Self {
        PodOutput {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
            qos_class: qos_class(&p.spec).as_str().to_string(),
            opted_out: false,
            class: None,
            class_from: None,
            cgroup: CgroupValues::new(),
            containers: p
                .spec
                .init_containers
                .iter()
                .chain(&p.spec.containers)
                .map(|c| ContainerOutput {
                    name: c.name.clone(),
                    cgroup: CgroupValues::new(),
                    numa: None,
                })
                .collect(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContainerOutput {
    pub name: String,
    pub cgroup: CgroupValues,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa: Option<ContainerNuma>,
}

impl SimulateOutput {
    /// No policy selects the node: nodemem sets nothing there.
    pub fn unmanaged(node: &str, pods: &[Pod]) -> Self {
        SimulateOutput {
            node: node.to_string(),
            policy: None,
            kubelet_rules: None,
            warnings: Vec::new(),
            kubepods: CgroupValues::new(),
            qos: QosCgroups::default(),
            pods: pods.iter().map(PodOutput::unmanaged).collect(),
            numa: None,
        }
    }

    /// Renders the node computation; `warnings` are the texts of its warnings (the
    /// caller words some of them for the command line).
    pub fn from_desired(
        node: &str,
        policy: &str,
        kubelet_rules: String,
        desired: &DesiredNode,
        warnings: Vec<String>,
    ) -> Self {
        SimulateOutput {
            node: node.to_string(),
            policy: Some(policy.to_string()),
            kubelet_rules: Some(kubelet_rules),
            warnings,
            kubepods: desired.kubepods.clone(),
            qos: QosCgroups {
                burstable: desired.burstable.clone(),
                besteffort: desired.besteffort.clone(),
            },
            pods: with_classes_shown(desired),
            numa: desired.memory_manager.as_ref().map(|m| NumaOutput {
                nodes: m
                    .machine
                    .nodes
                    .iter()
                    .map(|(id, n)| NumaNodeOutput {
                        id: *id,
                        memory_map: n.memory_map.clone(),
                    })
                    .collect(),
                pinning_requests: m.pinning_requests,
                pinning_errors: m.pinning_errors,
            }),
        }
    }
}

/// The pods, each with its class and where it came from when any pod on the node names
/// a class (a node without classes reads as it always did).
fn with_classes_shown(desired: &DesiredNode) -> Vec<PodOutput> {
    let shown = desired.names_classes();
    desired
        .pods
        .iter()
        .map(|p| {
            let mut out = PodOutput::from_outcome(p);
            if shown {
                // A class the policy does not have is the pool's (the warning names it).
                out.class_from = Some(p.class_from().as_str().to_string());
            }
            out
        })
        .collect()
}

impl PodOutput {
    fn from_outcome(p: &PodOutcome<'_>) -> Self {
        PodOutput {
            namespace: p.namespace.to_string(),
            name: p.name.to_string(),
            uid: p.uid.to_string(),
            qos_class: p.qos.as_str().to_string(),
            opted_out: p.admission == Admission::OptedOut,
            class: p.class.map(str::to_string),
            class_from: None,
            cgroup: p.values.clone(),
            containers: p
                .containers
                .iter()
                .map(|c| ContainerOutput {
                    name: c.name.to_string(),
                    cgroup: c.values.clone(),
                    numa: match &c.pinning {
                        Pinning::Rejected(r) => Some(ContainerNuma {
                            rejected: r.to_string(),
                        }),
                        _ => None,
                    },
                })
                .collect(),
        }
    }
}

pub fn render_json(output: &SimulateOutput) -> String {
    let mut text =
        serde_json::to_string_pretty(output).expect("simulation output always serializes");
    text.push('\n');
    text
}

fn human(values: &CgroupValues, file: &str) -> String {
    match values.get(file) {
        None => "-".to_string(),
        Some(CgroupValue::Bytes(b)) => format_bytes(*b),
        Some(CgroupValue::Text(t)) => t.clone(),
    }
}

/// One row per cgroup, values in binary units, `-` where nodemem sets nothing; with
/// NUMA pinning, a CPUSET.MEMS column and the NUMA memory map below.
pub fn render_table(output: &SimulateOutput) -> String {
    let with_numa = output.numa.is_some();
    let with_classes = output.pods.iter().any(|p| p.class_from.is_some());
    let mut header = vec!["CGROUP", "CONTAINER", "QOS"];
    if with_classes {
        header.push("CLASS");
    }
    header.extend(["MEMORY.MIN", "MEMORY.LOW", "MEMORY.HIGH", "MEMORY.MAX"]);
    if with_numa {
        header.push("CPUSET.MEMS");
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |cgroup: &str,
                   container: Option<&ContainerOutput>,
                   qos: &str,
                   class: &str,
                   v: &CgroupValues| {
        let mut r = vec![
            cgroup.to_string(),
            container.map(|c| c.name.clone()).unwrap_or_default(),
            qos.to_string(),
        ];
        if with_classes {
            r.push(class.to_string());
        }
        r.extend(
            [MEMORY_MIN, MEMORY_LOW, MEMORY_HIGH, MEMORY_MAX]
                .iter()
                .map(|f| human(v, f)),
        );
        if with_numa {
            let rejected = container.is_some_and(|c| c.numa.is_some());
            r.push(if rejected {
                "rejected".to_string()
            } else {
                human(v, CPUSET_MEMS)
            });
        }
        rows.push(r);
    };
    row("kubepods", None, "", "", &output.kubepods);
    row("kubepods/burstable", None, "", "", &output.qos.burstable);
    row("kubepods/besteffort", None, "", "", &output.qos.besteffort);
    for pod in &output.pods {
        let name = format!("{}/{}", pod.namespace, pod.name);
        let qos = if pod.opted_out {
            format!("{} (opted out)", pod.qos_class)
        } else {
            pod.qos_class.clone()
        };
        let class = match (&pod.class, &pod.class_from) {
            (Some(class), Some(from)) => format!("{class} ({from})"),
            (None, Some(from)) => format!("- ({from})"),
            _ => String::new(),
        };
        row(&name, None, &qos, &class, &pod.cgroup);
        for c in &pod.containers {
            row(&name, Some(c), "", "", &c.cgroup);
        }
    }
    let mut text = match &output.policy {
        Some(p) => match &output.kubelet_rules {
            Some(r) => format!("node {}: policy {p}; kubelet {r}\n", output.node),
            None => format!("node {}: policy {p}\n", output.node),
        },
        None => format!(
            "node {}: no NodeMemoryPolicy selects this node; nodemem sets nothing\n",
            output.node
        ),
    };
    text.push_str(&aligned(&header, &rows));
    if let Some(numa) = &output.numa {
        text.push_str(&format!(
            "\nNUMA memory map (pinning requests {}, errors {})\n",
            numa.pinning_requests, numa.pinning_errors
        ));
        let mut map_rows = Vec::new();
        for n in &numa.nodes {
            for (kind, t) in &n.memory_map {
                let mut r = vec![n.id.to_string(), kind.clone()];
                r.extend(
                    [
                        t.total,
                        t.system_reserved,
                        t.allocatable,
                        t.reserved,
                        t.free,
                    ]
                    .into_iter()
                    .map(format_bytes),
                );
                map_rows.push(r);
            }
        }
        text.push_str(&aligned(
            &[
                "NUMA",
                "TYPE",
                "TOTAL",
                "SYSTEM-RESERVED",
                "ALLOCATABLE",
                "RESERVED",
                "FREE",
            ],
            &map_rows,
        ));
    }
    for w in &output.warnings {
        text.push_str(&format!("warning: {w}\n"));
    }
    text
}

/// Left-aligned columns two spaces apart, header first, no trailing blanks.
fn aligned(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string();
        l.push('\n');
        l
    };
    let mut text = line(header.to_vec());
    for r in rows {
        text.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    text
}
