//! `kubectl nodemem`: the `nodemem` binary invoked as `kubectl-nodemem` (a kubectl
//! plugin: kubectl runs `kubectl-nodemem` from PATH for `kubectl nodemem ...`).
//!
//! * [`status`]: policies, pools, rollouts, failing nodes, conflicts.
//! * [`explain`]: one node: which policy and why, its rollout state, its pods' values.
//! * [`diff`]: what a policy file would change, node by node and cgroup by cgroup.
//! * [`recommend`]: the throttling factor a pool tolerates, and the policy with it.
//! * `pause`, `resume`, `rollback`: rollout control through the API.
//!
//! Values come from the agent's own code ([`node_view`]) on the live objects.

mod cli;
pub mod cluster;
pub mod complete;
pub mod diff;
pub mod explain;
pub mod node_view;
pub mod recommend;
pub mod render;
pub mod status;

use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use nodemem_api::revision::revision;
use nodemem_api::NodeMemoryPolicy;
use serde_json::json;

use nodemem_plumbing::manifests::read_documents;
use nodemem_plumbing::CliError;
use nodemem_plumbing::Outcome;
use render::Format;

pub use cli::{DryRun, PluginCli, PluginCommand, COMPLETION_BINARY, FIELD_MANAGER, PLUGIN_BINARY};

/// Runs the plugin; errors are exit 1, except for `diff`, where they are 2 (changes
/// are 1), as with `kubectl diff`.
pub fn run(cli: &PluginCli) -> Outcome {
    let is_diff = matches!(cli.command, PluginCommand::Diff { .. });
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            return failed(
                CliError::one(format!("cannot start a runtime: {e}")),
                is_diff,
            )
        }
    };
    match runtime.block_on(run_async(cli)) {
        Ok(out) => out,
        Err(e) => failed(e, is_diff),
    }
}

/// `kubectl nodemem version`: the version and the platform the binary was built for,
/// in Go's names (as krew's selectors and release archives name them).
fn version() -> String {
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!(
        "kubectl nodemem {} {os}/{arch}\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn failed(e: CliError, is_diff: bool) -> Outcome {
    Outcome {
        stdout: String::new(),
        stderr: e.problems,
        code: if is_diff { 2 } else { 1 },
    }
}

async fn run_async(cli: &PluginCli) -> Result<Outcome, CliError> {
    if let PluginCommand::Completion { shell } = &cli.command {
        return Ok(Outcome::ok(complete::script(*shell)));
    }
    if let PluginCommand::Version = &cli.command {
        return Ok(Outcome::ok(version()));
    }
    // The file is read and checked before connecting: a bad file is the first thing
    // to report.
    let file_policies = match &cli.command {
        PluginCommand::Diff { filename } => {
            let docs = read_documents(filename)?;
            let mut problems = Vec::new();
            let policies = nodemem_plumbing::manifests::read_policies(&docs, &mut problems);
            if !problems.is_empty() {
                return Err(CliError::many(problems));
            }
            policies.into_iter().map(|(p, _)| p).collect()
        }
        _ => Vec::new(),
    };
    let client = cluster::client(cli.kubeconfig.as_deref(), cli.context.as_deref()).await?;
    match &cli.command {
        PluginCommand::Status { policy } => {
            let snapshot = cluster::Snapshot::read(&client).await?;
            let mut report = status::build(&snapshot);
            if let Some(policy) = policy {
                report = status::only(report, policy).map_err(CliError::one)?;
            }
            render::render(cli.output, &report, status::render_table).map(Outcome::ok)
        }
        PluginCommand::Explain { node } => {
            let snapshot = cluster::Snapshot::read(&client).await?;
            let Some(n) = snapshot
                .nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
            else {
                return Err(CliError::one(format!("node {node} not found")));
            };
            let (pods, namespaces) = cluster::node_pods(&client, node).await?;
            let report = explain::build(&snapshot, n, &pods, &namespaces);
            render::render(cli.output, &report, explain::render_table).map(Outcome::ok)
        }
        PluginCommand::Diff { filename } => {
            run_diff(&client, filename, &file_policies, cli.output).await
        }
        PluginCommand::Recommend { policy } => {
            let policy = get_policy(&client, policy).await?;
            let report = recommend::build(&policy)?;
            match cli.output {
                Format::Table => Ok(Outcome::ok(recommend::render_table(&report))),
                format => {
                    let manifest = recommend::manifest(&policy, &report)?;
                    render::render(format, &manifest, |_| String::new()).map(Outcome::ok)
                }
            }
        }
        PluginCommand::Pause { policy } => set_paused(&client, policy, true, cli.dry_run).await,
        PluginCommand::Resume { policy } => set_paused(&client, policy, false, cli.dry_run).await,
        PluginCommand::Rollback { policy } => rollback(&client, policy, cli.dry_run).await,
        PluginCommand::Release { policy, now } => {
            release_now(&client, policy, *now, cli.dry_run).await
        }
        PluginCommand::Completion { .. } | PluginCommand::Version => {
            unreachable!("answered before connecting")
        }
    }
}

async fn run_diff(
    client: &Client,
    filename: &std::path::Path,
    file_policies: &[NodeMemoryPolicy],
    format: Format,
) -> Result<Outcome, CliError> {
    // The apiserver's own validation (schema, CEL rules) on a dry run, as `kubectl diff`.
    let api = Api::<NodeMemoryPolicy>::all(client.clone());
    for p in file_policies {
        let name = p.metadata.name.clone().unwrap_or_default();
        let mut object =
            serde_json::to_value(p).map_err(|e| CliError::one(format!("policy {name}: {e}")))?;
        object["apiVersion"] = json!("nodemem.io/v1alpha1");
        object["kind"] = json!("NodeMemoryPolicy");
        if let Some(o) = object.as_object_mut() {
            o.remove("status");
        }
        api.patch(
            &name,
            &PatchParams::apply("kubectl-nodemem-diff").force().dry_run(),
            &Patch::Apply(&object),
        )
        .await
        .map_err(|e| cluster::api_error(&format!("{}: policy {name}", filename.display()), e))?;
    }

    let snapshot = cluster::Snapshot::read(client).await?;
    let involved = diff::involved_nodes(&snapshot, file_policies);
    let pods_by_node = cluster::pods_of_nodes(client, &involved).await?;
    let namespaces = cluster::namespaces(client).await?;
    let report = diff::build(&snapshot, file_policies, &pods_by_node, &namespaces);
    let stdout = render::render(format, &report, diff::render_table)?;
    Ok(Outcome {
        stdout,
        stderr: Vec::new(),
        // As for an invalid file: 2 when the controller or an agent would refuse it.
        code: if report.refused {
            2
        } else {
            u8::from(report.changes)
        },
    })
}

async fn get_policy(client: &Client, name: &str) -> Result<NodeMemoryPolicy, CliError> {
    Api::<NodeMemoryPolicy>::all(client.clone())
        .get(name)
        .await
        .map_err(|e| cluster::api_error(&format!("nodememorypolicy {name}"), e))
}

async fn set_paused(
    client: &Client,
    name: &str,
    paused: bool,
    dry: DryRun,
) -> Result<Outcome, CliError> {
    let policy = get_policy(client, name).await?;
    let verb = if paused { "paused" } else { "resumed" };
    if policy.spec.rollout.paused == paused {
        return Ok(Outcome::ok(format!(
            "nodememorypolicy.nodemem.io/{name} already {verb}\n"
        )));
    }
    if dry.sends() {
        Api::<NodeMemoryPolicy>::all(client.clone())
            .patch(
                name,
                &dry.params(),
                &Patch::Merge(json!({"spec": {"rollout": {"paused": paused}}})),
            )
            .await
            .map_err(|e| cluster::api_error(&format!("nodememorypolicy {name}"), e))?;
    }
    Ok(Outcome::ok(format!(
        "nodememorypolicy.nodemem.io/{name} {verb}{}\n",
        dry.suffix()
    )))
}

async fn rollback(client: &Client, name: &str, dry: DryRun) -> Result<Outcome, CliError> {
    let policy = get_policy(client, name).await?;
    let status = policy.status.clone().unwrap_or_default();
    let current = revision(&policy.spec.settings);
    if status.revision.as_deref() != Some(current.as_str()) {
        return Err(CliError::one(format!(
            "nodememorypolicy {name}: the controller has not seen its current spec (revision {current}) yet; try again"
        )));
    }
    if status.rolled_back_revision.as_deref() == Some(current.as_str()) {
        return Err(CliError::one(format!(
            "nodememorypolicy {name}: revision {current} is already rolled back; change the spec to roll out again"
        )));
    }
    let Some(previous) = status.revisions.get(1) else {
        return Err(CliError::one(format!(
            "nodememorypolicy {name}: no previous revision to roll back to (revision {current} is its first)"
        )));
    };
    if dry.sends() {
        Api::<NodeMemoryPolicy>::all(client.clone())
            .patch(
                name,
                &dry.params(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    nodemem_api::ROLLBACK_ANNOTATION: current
                }}})),
            )
            .await
            .map_err(|e| cluster::api_error(&format!("nodememorypolicy {name}"), e))?;
    }
    Ok(Outcome::ok(format!(
        "nodememorypolicy.nodemem.io/{name} rolling back from revision {current} to {}{}\n",
        previous.revision,
        dry.suffix()
    )))
}

async fn release_now(
    client: &Client,
    name: &str,
    now: bool,
    dry: DryRun,
) -> Result<Outcome, CliError> {
    if !now {
        return Err(CliError::one(format!(
            "kubectl nodemem release {name} needs --now: deleting the policy already releases its nodes gradually, through rollouts; --now lets the rest go at once"
        )));
    }
    let policy = get_policy(client, name).await?;
    if policy.metadata.deletion_timestamp.is_none() {
        return Err(CliError::one(format!(
            "nodememorypolicy {name} is not being deleted: delete it first (kubectl delete nmp {name}); its nodes then leave through rollouts, and release --now lets the rest go at once"
        )));
    }
    let leaving = policy.status.as_ref().map_or(0, |s| s.leaving_nodes);
    let api = Api::<NodeMemoryPolicy>::all(client.clone());
    let unmarked = if dry.sends() {
        mark_to_give_back(client, name, dry).await
    } else {
        None
    };
    let released = if dry.sends() {
        nodemem_plumbing::finalizer::let_go(&api, name, &dry.params())
            .await
            .map_err(|e| cluster::api_error(&format!("nodememorypolicy {name}"), e))?
    } else {
        policy
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == nodemem_api::HANDOFF_FINALIZER)
    };
    if !released {
        return Ok(Outcome::ok(format!(
            "nodememorypolicy.nodemem.io/{name} holds no nodemem finalizer: it goes as soon as any other finalizer lets it\n"
        )));
    }
    Ok(Outcome::ok(format!(
        "nodememorypolicy.nodemem.io/{name} released now{}: its {leaving} remaining node(s) lose its values at once (their configs are garbage-collected); the policy that selects each next takes it through its rollout\n{}",
        dry.suffix(),
        unmarked.map_or(String::new(), |why| format!(
            "note: its configs could not be marked to be given back at once ({why}): their agents give back {} s after their config goes\n",
            nodemem_api::DELETED_CONFIG_GRACE.as_secs()
        ))
    )))
}

/// Marks every config that still runs `policy`'s values to be given back at once
/// (`nodemem_api::GIVE_BACK_ANNOTATION`, naming its revision): released now, those
/// configs are garbage-collected, and an agent whose config goes unmarked keeps its
/// values for its grace, in case the controller writes it again. Returns why a mark
/// failed (a user who may release policies but not patch configs): the release goes
/// on, and its nodes give back after the grace.
async fn mark_to_give_back(client: &Client, policy: &str, dry: DryRun) -> Option<String> {
    let configs = Api::<nodemem_api::NodeMemoryConfig>::all(client.clone());
    let listed = match configs.list(&Default::default()).await {
        Ok(l) => l,
        Err(e) => return Some(format!("listing nodememoryconfigs: {e}")),
    };
    let released = revision(&nodemem_api::NodeSettings::released());
    for c in listed.items.iter().filter(|c| c.spec.policy == policy) {
        let Some(node) = c.metadata.name.as_deref() else {
            continue;
        };
        if c.spec.revision == released {
            continue;
        }
        let patch = json!({"metadata": {"annotations": {
            nodemem_api::GIVE_BACK_ANNOTATION: c.spec.revision}}});
        if let Err(e) = configs
            .patch(node, &dry.params(), &Patch::Merge(&patch))
            .await
        {
            return Some(format!("nodememoryconfig {node}: {e}"));
        }
    }
    None
}

/// True when the program was started as the kubectl plugin.
pub fn invoked_as_plugin(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == PLUGIN_BINARY)
}

/// True when the program was started as the plugin's completion executable.
pub fn invoked_for_completion(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == COMPLETION_BINARY)
}
