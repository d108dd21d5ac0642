//! What `agent --once` prints: every write (cgroup, file, old value, new value) and a
//! summary, as a table for people or a JSON document for scripts.

use nodemem_apply::execute::FailedWrite;
use nodemem_apply::{ApplyReport, Write};
use nodemem_model::node::DesiredNode;
use nodemem_model::Warning;
use serde::Serialize;

use crate::args::OnceFormat;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OnceOutput {
    pub node: String,
    pub config: String,
    pub revision: String,
    pub dry_run: bool,
    /// Applied writes in order (with dryRun: the planned ones).
    pub writes: Vec<Write>,
    pub failed: Vec<FailedWrite>,
    /// Skipped because their cgroup disappeared meanwhile.
    pub vanished: usize,
    /// Desired cgroups that do not exist yet (containers not started).
    pub missing: Vec<String>,
    pub refused: Vec<String>,
    pub reads: usize,
    pub managed_pods: usize,
    pub pinned_pods: usize,
    pub memory_min_bytes: i64,
    pub memory_low_bytes: i64,
    pub warnings: Vec<String>,
    /// The `Healthy` condition the in-cluster agent would report after this pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthLine>,
}

/// A `Healthy` condition: status, reason, message.
#[derive(Clone, Debug, Serialize)]
pub struct HealthLine {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl OnceOutput {
    pub fn new(
        node: &str,
        config: &str,
        revision: &str,
        mode: nodemem_apply::applier::WriteMode,
        desired: &DesiredNode,
        report: &ApplyReport,
    ) -> Self {
        OnceOutput {
            node: node.to_string(),
            config: config.to_string(),
            revision: revision.to_string(),
            dry_run: mode == nodemem_apply::applier::WriteMode::DryRun,
            writes: if mode == nodemem_apply::applier::WriteMode::DryRun {
                report.planned.clone()
            } else {
                report.applied.clone()
            },
            failed: report.failed.clone(),
            vanished: report.vanished.len(),
            missing: report.missing.clone(),
            refused: report.refused.clone(),
            reads: report.reads,
            managed_pods: desired.managed_pods(),
            pinned_pods: desired.pinned_pods(),
            memory_min_bytes: desired.totals.memory_min_bytes,
            memory_low_bytes: desired.totals.memory_low_bytes,
            warnings: warning_texts(desired),
            health: None,
        }
    }
}

pub fn render(output: &OnceOutput, format: OnceFormat) -> String {
    match format {
        OnceFormat::Json => {
            let mut s = serde_json::to_string_pretty(output).expect("the report serializes");
            s.push('\n');
            s
        }
        OnceFormat::Table => table(output),
    }
}

fn table(o: &OnceOutput) -> String {
    let verb = if o.dry_run { "would write" } else { "wrote" };
    let mut text = format!(
        "node {}: config {} revision {}: {verb} {} file(s), {} failed, {} vanished, {} cgroup(s) not there yet\n",
        o.node,
        o.config,
        o.revision,
        o.writes.len(),
        o.failed.len(),
        o.vanished,
        o.missing.len()
    );
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_header(vec!["CGROUP", "FILE", "OLD", "NEW", "RESULT"]);
    for w in &o.writes {
        table.add_row(vec![
            w.cgroup.clone(),
            w.file.clone(),
            w.old.clone().unwrap_or_else(|| "?".to_string()),
            display_new(&w.new),
            if o.dry_run { "planned" } else { "ok" }.to_string(),
        ]);
    }
    for f in &o.failed {
        table.add_row(vec![
            f.write.cgroup.clone(),
            f.write.file.clone(),
            f.write.old.clone().unwrap_or_else(|| "?".to_string()),
            display_new(&f.write.new),
            format!(
                "failed (errno {})",
                f.errno.map_or("?".to_string(), |e| e.to_string())
            ),
        ]);
    }
    if !o.writes.is_empty() || !o.failed.is_empty() {
        text.push_str(&table.to_string());
        text.push('\n');
    }
    text.push_str(&format!(
        "managed pods {}, pinned pods {}, memory.min total {}, memory.low total {}\n",
        o.managed_pods, o.pinned_pods, o.memory_min_bytes, o.memory_low_bytes
    ));
    if let Some(h) = &o.health {
        text.push_str(&format!(
            "healthy {} ({}): {}\n",
            h.status, h.reason, h.message
        ));
    }
    for w in &o.warnings {
        text.push_str(&format!("warning: {w}\n"));
    }
    text
}

/// An empty `cpuset.mems` (inherit the parent's set) shown so it is visible.
fn display_new(value: &str) -> String {
    if value.is_empty() {
        "\"\"".to_string()
    } else {
        value.to_string()
    }
}

/// Warnings as people read them.
pub fn warning_texts(desired: &DesiredNode) -> Vec<String> {
    desired.warnings.iter().map(Warning::to_string).collect()
}
