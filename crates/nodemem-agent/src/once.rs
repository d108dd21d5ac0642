//! `nodemem agent --once`: one node by hand, no apiserver. Discovery, the node
//! computation, the applier (`nodemem_apply::applier`) and the state directory, exactly as the in-cluster
//! agent will use them.
//!
//! Exit codes: 0 applied (or nothing to do), 1 bad input or a configuration this node
//! cannot satisfy (nothing written), 3 partial failure (some writes failed; the rest
//! were applied and are recorded).

use std::path::Path;

use k8s_openapi::api::core::v1 as core;
use nodemem_api::convert::node_settings;
use nodemem_api::k8s::{
    node_allocatable_memory, node_capacity_memory, node_pod_from_k8s, node_status_facts,
};
use nodemem_api::NodeMemoryConfig;
use nodemem_apply::ApplyReport;
use nodemem_cgroup::{check_identifier, Roots};
use nodemem_model::cluster::policy::Enforcement;

use nodemem_model::node::NodePod;
use nodemem_model::settings::NodeSettings;

use crate::args::{AgentArgs, DriverArg};
use crate::output::{render, OnceOutput};
use nodemem_apply::applier::{ApplyError, Category, NodeApplier, Reach, WriteMode};
use nodemem_apply::node::{Node, NodeConfig};
use nodemem_plumbing::manifests::{
    check_settings, read_documents, read_node_pods, typed, Document,
};
use nodemem_plumbing::CliError;
use nodemem_plumbing::Outcome;

/// Exit code of a run where some writes failed.
pub const PARTIAL_FAILURE: u8 = 3;

/// Said when the config's enforcement is Observe: the run shows what it would write.
const OBSERVE_WRITES_NOTHING: &str =
    "enforcement: Observe: nothing is written (as the in-cluster agent under Observe); the values shown are what enforcement: Agent would write";

/// The config's `enforcement` decides what the run may write, as it decides the
/// in-cluster agent's: Agent writes (unless `--dry-run`), Observe writes nothing, and
/// Kubelet is refused: the kubelet enforces through nodemem's drop-in, which this
/// command does not write, and cgroup values written by hand would fight the kubelet's.
fn write_mode(inputs: &Inputs, dry_run: bool) -> Result<WriteMode, CliError> {
    match inputs.settings.enforcement {
        Enforcement::Agent => Ok(WriteMode::dry_run(dry_run)),
        Enforcement::Observe => Ok(WriteMode::DryRun),
        Enforcement::Kubelet => Err(CliError::one(format!(
            "{}: enforcement: Kubelet: the kubelet enforces these values through nodemem's drop-in in its --config-dir, which `nodemem agent --once` does not write (the in-cluster agent does, and restarts the kubelet); to write the cgroup values by hand, set enforcement: Agent in the file",
            inputs.config_name
        ))),
    }
}

struct Inputs {
    config_name: String,
    revision: String,
    settings: NodeSettings,
    /// The rollout's health gates, for the `Healthy` verdict the pass would report.
    health: nodemem_api::policy::HealthSpec,
    node_name: String,
    /// The Node's memory figures and kubelet version.
    node: nodemem_model::node::status::NodeStatusFacts,
    pods: Vec<NodePod>,
}

pub fn run(args: &AgentArgs) -> Result<Outcome, CliError> {
    let (Some(config), Some(node), Some(pods)) = (&args.config, &args.node, &args.pods) else {
        return Err(CliError::one(
            "--once needs --config NMC.yaml, --node NODE.yaml and --pods PODS.yaml",
        ));
    };
    let inputs = read_inputs(config, node, pods)?;
    let mode = write_mode(&inputs, args.dry_run)?;
    let node = Node::discover(&node_config(args)).map_err(apply_error)?;
    let mut applier = NodeApplier::open(&node).map_err(apply_error)?;
    let (desired, report) =
        pass(&mut applier, &node, &inputs, mode, Reach::Node).map_err(|e| match e.category() {
            Category::Unsatisfiable => CliError::many(
                e.problems()
                    .iter()
                    .map(|p| format!("{}: {p}", inputs.config_name))
                    .collect(),
            ),
            _ => apply_error(e),
        })?;
    let mut output = OnceOutput::new(
        &inputs.node_name,
        &inputs.config_name,
        &inputs.revision,
        mode,
        &desired,
        &report,
    );
    output.health = Some(health_now(&node, &inputs, &desired, &report));
    let recorded = applier.recorded();
    if let Some(c) = recorded.conflict {
        output.warnings.insert(0, c.message.clone());
    }
    if inputs.settings.enforcement == Enforcement::Observe && !args.dry_run {
        output
            .warnings
            .insert(0, OBSERVE_WRITES_NOTHING.to_string());
    }
    // A state record that could not be trusted was set aside and re-derived: said
    // first, it is what the operator must know before the values.
    for (i, r) in recorded.recoveries.iter().enumerate() {
        output.warnings.insert(i, format!("{}: {r}", r.reason()));
    }
    let outcome = Outcome {
        stdout: render(&output, args.output),
        stderr: problems_of(&report),
        code: if report.ok() { 0 } else { PARTIAL_FAILURE },
    };
    if !args.follow {
        return Ok(outcome);
    }
    drop(desired);
    follow((&node, &mut applier), &inputs, args, &outcome.stdout)
}

/// The `Healthy` verdict the in-cluster agent would report right after this pass (a
/// fresh revision: nothing counted since; the pressure gate on the managed pods'
/// memory.pressure now).
fn health_now(
    node: &Node,
    inputs: &Inputs,
    desired: &nodemem_model::node::DesiredNode<'_>,
    report: &ApplyReport,
) -> crate::output::HealthLine {
    let managed = desired
        .pods
        .iter()
        .filter(|p| p.admission == nodemem_model::node::Admission::Managed)
        .map(|p| p.path.as_str());
    let gate = crate::health::refault_gate(&inputs.health, &inputs.settings);
    // Reclaim does not run here: under Active it has touched nothing to judge.
    let judged = gate.is_some() && !crate::health::reclaim_active(&inputs.settings);
    let readings = crate::health::read_signals(node.cgroup_fs(), managed, &|_| judged);
    let mut baseline = crate::health::Baseline::default();
    let signals = baseline.update(&inputs.revision, &readings, std::time::Instant::now());
    let now = crate::health::Now {
        full: crate::health::current_full(readings.values()),
        refaults: baseline.refaults(gate),
    };
    let v = crate::health::verdict(
        signals,
        now,
        &inputs.health,
        report.failed.len() + report.deferred.len(),
        0,
    );
    crate::output::HealthLine {
        status: match v.healthy {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        },
        reason: v.reason,
        message: v.message,
    }
}

/// `--follow`: stays, and covers every cgroup that appears under kubepods the moment
/// its directory is created (the reaction path of the in-cluster agent, with file
/// inputs). One line per reaction on stdout.
fn follow(
    (node, applier): (&Node, &mut NodeApplier),
    inputs: &Inputs,
    args: &AgentArgs,
    first_report: &str,
) -> Result<Outcome, CliError> {
    use std::io::Write as _;
    let mode = write_mode(inputs, args.dry_run)?;
    let top = nodemem_cgroup::CgroupPath::new(nodemem_model::values::cgroup_layout::kubepods(
        node.discovery().cgroup_driver,
    ))
    .expect("a constant path");
    let mut watcher = nodemem_cgroup::watch::TreeWatcher::new(&args.cgroup_root, &top)
        .map_err(|e| CliError::one(format!("cannot watch {}: {e}", args.cgroup_root.display())))?;
    // A cgroup created between the first pass and the watch: covered now.
    let _ = pass(applier, node, inputs, mode, Reach::Node);
    {
        let mut out = std::io::stdout();
        let _ = write!(out, "{first_report}");
        let _ = writeln!(
            out,
            "following {} for new cgroups",
            args.cgroup_root.join(top.as_str()).display()
        );
        let _ = out.flush();
    }
    loop {
        let changes = watcher
            .wait()
            .map_err(|e| CliError::one(format!("watching {}: {e}", args.cgroup_root.display())))?;
        // Only what appeared is planned, read and written.
        let scope: std::collections::BTreeSet<String> = changes
            .iter()
            .filter_map(|c| match c {
                nodemem_cgroup::watch::TreeChange::Appeared(p) => Some(p.as_str().to_string()),
                nodemem_cgroup::watch::TreeChange::Gone(_) => None,
            })
            .collect();
        if scope.is_empty() {
            continue;
        }
        let appeared: Vec<String> = scope.iter().cloned().collect();
        let line = match pass(applier, node, inputs, mode, Reach::Cgroups(&scope)) {
            Ok((_, report)) => format!(
                "reacted to {}: wrote {} file(s), {} failed",
                appeared.join(", "),
                report.applied.len(),
                report.failed.len()
            ),
            Err(e) => format!("reacted to {}: not applied: {e}", appeared.join(", ")),
        };
        let mut out = std::io::stdout();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// One pass over `reach`: the in-cluster agent's own (`NodeApplier::enforce`) when it
/// writes, which `--once` does only under `enforcement: Agent`; planned only otherwise
/// (`--dry-run`, and Observe, whose values `--once` shows without giving anything back).
fn pass<'p>(
    applier: &mut NodeApplier,
    node: &Node,
    inputs: &'p Inputs,
    mode: WriteMode,
    reach: Reach<'_>,
) -> Result<(nodemem_model::node::DesiredNode<'p>, ApplyReport), ApplyError> {
    let (settings, status, pods) = (&inputs.settings, &inputs.node, &inputs.pods);
    match mode {
        WriteMode::Write => applier.enforce(node, settings, status, pods, reach),
        WriteMode::DryRun => applier.write_node(node, settings, status, pods, mode, reach),
    }
}

fn apply_error(e: ApplyError) -> CliError {
    CliError::many(e.problems())
}

/// Where the node's files are, from the command line.
pub fn node_config(args: &AgentArgs) -> NodeConfig {
    NodeConfig {
        roots: Roots {
            cgroup: args.cgroup_root.clone(),
            sys: args.sys_root.clone(),
            proc: args.proc_root.clone(),
        },
        cgroup_driver: args.cgroup_driver.map(DriverArg::into),
        state_dir: args.state_dir.clone(),
        topology_scope: args.topology_manager_scope.into(),
        kubelet: kubelet_files(args),
        own_cgroup_mount: std::path::PathBuf::from("/sys/fs/cgroup"),
        systemd_units: !args.systemd_buses().is_empty(),
    }
}

/// The kubelet's files as given to the agent, or else those of the kubelet process
/// it finds.
pub(crate) fn kubelet_files(args: &AgentArgs) -> nodemem_apply::kubelet::KubeletFiles {
    use nodemem_apply::kubelet::KubeletFiles;
    let files = match &args.kubelet_config {
        Some(config) => KubeletFiles::given(config.clone(), args.kubelet_config_dir.clone()),
        None => KubeletFiles::process(args.proc_root.clone(), args.kubelet_config_dir.clone()),
    };
    KubeletFiles {
        memory_manager_state: args.kubelet_memory_manager_state.clone(),
        ..files
    }
}

fn problems_of(report: &ApplyReport) -> Vec<String> {
    report
        .refused
        .iter()
        .cloned()
        .chain(report.failed.iter().map(|f| f.error.clone()))
        .collect()
}

fn read_inputs(config: &Path, node: &Path, pods: &Path) -> Result<Inputs, CliError> {
    let mut problems = Vec::new();
    let config_docs = read_documents(config)?;
    let node_docs = read_documents(node)?;
    let pod_docs = read_documents(pods)?;

    let config = match one_of(&config_docs, "--config", "NodeMemoryConfig", &mut problems) {
        Some(doc) if doc.api_version() != Some("nodemem.io/v1alpha1") => {
            problems.push(format!(
                "{}: expected apiVersion nodemem.io/v1alpha1",
                doc.origin
            ));
            None
        }
        Some(doc) => match check_settings(doc).and_then(|()| typed::<NodeMemoryConfig>(doc)) {
            Ok(c) => Some((doc.origin.clone(), c)),
            Err(e) => {
                problems.extend(e.problems);
                None
            }
        },
        None => None,
    };
    let settings = config.as_ref().and_then(|(origin, c)| {
        node_settings(&c.spec.settings)
            .map_err(|ps| problems.extend(ps.iter().map(|p| format!("{origin}: {p}"))))
            .ok()
    });
    let node = one_of(&node_docs, "--node", "Node", &mut problems).and_then(|doc| {
        typed::<core::Node>(doc)
            .map_err(|e| problems.extend(e.problems))
            .ok()
            .map(|n| (doc.origin.clone(), n))
    });
    let node_name = node
        .as_ref()
        .and_then(|(_, n)| n.metadata.name.clone())
        .unwrap_or_default();
    if let Some((origin, n)) = &node {
        for figure in [node_allocatable_memory(n), node_capacity_memory(n)] {
            if let Err(p) = figure {
                problems.push(format!("{origin}: {p}"));
            }
        }
    }
    let facts = node
        .as_ref()
        .map(|(_, n)| node_status_facts(n))
        .unwrap_or_default();
    let pods = read_pods(&pod_docs, &node_name, &mut problems);
    if !problems.is_empty() {
        return Err(CliError::many(problems));
    }
    let (config_origin, config) = config.expect("no problems means the config was read");
    let config_name = config.metadata.name.clone().unwrap_or(config_origin);
    Ok(Inputs {
        config_name,
        revision: config.spec.revision.clone(),
        settings: settings.expect("no problems means the settings converted"),
        health: config.spec.health.clone(),
        node_name,
        node: facts,
        pods,
    })
}

fn one_of<'a>(
    docs: &'a [Document],
    flag: &str,
    kind: &str,
    problems: &mut Vec<String>,
) -> Option<&'a Document> {
    match docs {
        [doc] if doc.kind() == Some(kind) => Some(doc),
        [doc] => {
            problems.push(format!(
                "{}: expected kind {kind}, found {}",
                doc.origin,
                doc.kind().unwrap_or("none")
            ));
            None
        }
        _ => {
            problems.push(format!(
                "{flag}: expected exactly one {kind}, found {} objects",
                docs.len()
            ));
            None
        }
    }
}

/// The pods the kubelet runs on this node: terminated pods (Succeeded, Failed) have no
/// cgroups left and are not counted, as in the kubelet's active-pod sums.
fn read_pods(docs: &[Document], node_name: &str, problems: &mut Vec<String>) -> Vec<NodePod> {
    let mut out = Vec::new();
    for (doc, pod, namespace) in read_node_pods(docs, problems) {
        let at = format!("{}: {}", doc.origin, doc.describe());
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if let Some(bound) = bound.filter(|b| !node_name.is_empty() && *b != node_name) {
            problems.push(format!(
                "{at}: spec.nodeName is {bound}, not this node ({node_name})"
            ));
            continue;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded") | Some("Failed")) {
            continue;
        }
        match node_pod_from_k8s(&pod, &namespace) {
            Ok(p) => {
                let mut bad = Vec::new();
                if let Err(e) = check_identifier("pod UID", &p.pod().uid) {
                    bad.push(e.to_string());
                }
                for id in p.container_ids().values() {
                    if let Err(e) = check_identifier("container ID", &id.id) {
                        bad.push(e.to_string());
                    }
                }
                if bad.is_empty() {
                    out.push(p);
                } else {
                    problems.extend(bad.into_iter().map(|b| format!("{at}: {b}")));
                }
            }
            Err(ps) => problems.extend(ps.iter().map(|p| format!("{at}: {p}"))),
        }
    }
    out
}
