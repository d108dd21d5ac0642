//! The stable JSON document of `nodemem simulate -o json`, and the table for people.
//!
//! JSON: `{"node", "policy", "warnings", "kubepods", "qos": {"burstable", "besteffort"},
//! "pods": [{"namespace", "name", "uid", "qosClass", "cgroup", "containers": [{"name",
//! "cgroup"}]}]}`, where every cgroup object maps file names to bytes or `"max"`, and a
//! file nodemem does not set is absent.

use nodemem_model::cgroup::{
    CgroupValue, CgroupValues, MEMORY_HIGH, MEMORY_LOW, MEMORY_MAX, MEMORY_MIN,
};
use nodemem_model::memory_qos::NodePlan;
use nodemem_model::pod::Pod;
use nodemem_model::qos::qos_class;
use nodemem_model::quantity::format_bytes;
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimulateOutput {
    pub node: String,
    pub policy: Option<String>,
    pub warnings: Vec<String>,
    pub kubepods: CgroupValues,
    pub qos: QosCgroups,
    pub pods: Vec<PodOutput>,
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
    pub cgroup: CgroupValues,
    pub containers: Vec<ContainerOutput>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContainerOutput {
    pub name: String,
    pub cgroup: CgroupValues,
}

impl SimulateOutput {
    /// No policy selects the node: nodemem sets nothing there.
    pub fn unmanaged(node: &str, pods: &[Pod]) -> Self {
        SimulateOutput {
            node: node.to_string(),
            policy: None,
            warnings: Vec::new(),
            kubepods: CgroupValues::new(),
            qos: QosCgroups::default(),
            pods: pods
                .iter()
                .map(|p| PodOutput {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                    qos_class: qos_class(&p.spec).as_str().to_string(),
                    cgroup: CgroupValues::new(),
                    containers: p
                        .spec
                        .init_containers
                        .iter()
                        .chain(&p.spec.containers)
                        .map(|c| ContainerOutput {
                            name: c.name.clone(),
                            cgroup: CgroupValues::new(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    pub fn from_plan(node: &str, policy: &str, plan: &NodePlan) -> Self {
        SimulateOutput {
            node: node.to_string(),
            policy: Some(policy.to_string()),
            warnings: plan.warnings.clone(),
            kubepods: plan.kubepods.clone(),
            qos: QosCgroups {
                burstable: plan.burstable.clone(),
                besteffort: plan.besteffort.clone(),
            },
            pods: plan
                .pods
                .iter()
                .map(|p| PodOutput {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                    qos_class: p.qos.as_str().to_string(),
                    cgroup: p.cgroup.clone(),
                    containers: p
                        .containers
                        .iter()
                        .map(|c| ContainerOutput {
                            name: c.name.clone(),
                            cgroup: c.cgroup.clone(),
                        })
                        .collect(),
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

/// One row per cgroup, values in binary units, `-` where nodemem sets nothing.
pub fn render_table(output: &SimulateOutput) -> String {
    let header = [
        "CGROUP",
        "CONTAINER",
        "QOS",
        "MEMORY.MIN",
        "MEMORY.LOW",
        "MEMORY.HIGH",
        "MEMORY.MAX",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |cgroup: &str, container: &str, qos: &str, v: &CgroupValues| {
        let mut r = vec![cgroup.to_string(), container.to_string(), qos.to_string()];
        r.extend(
            [MEMORY_MIN, MEMORY_LOW, MEMORY_HIGH, MEMORY_MAX]
                .iter()
                .map(|f| human(v, f)),
        );
        rows.push(r);
    };
    row("kubepods", "", "", &output.kubepods);
    row("kubepods/burstable", "", "", &output.qos.burstable);
    row("kubepods/besteffort", "", "", &output.qos.besteffort);
    for pod in &output.pods {
        let name = format!("{}/{}", pod.namespace, pod.name);
        row(&name, "", &pod.qos_class, &pod.cgroup);
        for c in &pod.containers {
            row(&name, &c.name, "", &c.cgroup);
        }
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut text = match &output.policy {
        Some(p) => format!("node {}: policy {p}\n", output.node),
        None => format!(
            "node {}: no NodeMemoryPolicy selects this node; nodemem sets nothing\n",
            output.node
        ),
    };
    text.push_str(&line(header.to_vec()));
    text.push('\n');
    for r in &rows {
        text.push_str(&line(r.iter().map(String::as_str).collect()));
        text.push('\n');
    }
    for w in &output.warnings {
        text.push_str(&format!("warning: {w}\n"));
    }
    text
}
