//! `nodemem sandbox`: nodemem on a real control plane in one command. Three simulated
//! node pools (general, numa-database with two NUMA nodes per node, batch), each node
//! with its own cgroup tree, fake kubelet and real agent process; the real controller;
//! `examples/` applied with `kubectl apply -k`; pods of every QoS class; the rollout
//! shown live. Ctrl-C (or SIGTERM) stops every process and removes every directory.

mod build;
pub mod view;
mod workloads;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use kube::api::{Api, ListParams, PostParams};
use nodemem_testkit::bed::{Bed, BedSpec, PoolSpec};

use nodemem_plugin::cluster::Snapshot;
use nodemem_plumbing::CliError;
use nodemem_plumbing::Outcome;

/// Arguments of `nodemem sandbox`.
#[derive(Clone, Debug, clap::Args)]
pub struct SandboxArgs {
    /// Plain lines instead of the live view (also whenever the output is not a
    /// terminal: piped, redirected to a file, or run from a script).
    #[arg(long)]
    pub no_ui: bool,
    /// The nodemem repository (CRDs, deploy manifests, examples).
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The node whose cgroup values are shown.
    #[arg(long, default_value = "general-1")]
    pub focus: String,
}

const GI: i64 = 1 << 30;

/// examples/ with 10-second minReadySeconds, so a rollout takes a minute, not ten.
const SANDBOX_OVERLAY: &str = "deploy/sandbox";

fn pools() -> Vec<PoolSpec> {
    vec![
        PoolSpec::new("general", 3).numa(1, 16 * GI, 0),
        // The numa-database policy reserves 1124Mi on NUMA node 0 and 1Gi on node 1, as
        // kubeReserved + systemReserved + evictionHard (2148Mi) require.
        PoolSpec::new("numa-database", 2)
            .numa(2, 16 * GI, GI)
            .reserved(2148 << 20),
        PoolSpec::new("batch", 2).numa(1, 8 * GI, 0),
    ]
}

/// Prints a line above the live view, or as is with `--no-ui`.
struct Out {
    bar: Option<indicatif::ProgressBar>,
}

impl Out {
    fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => println!("{text}"),
        }
    }

    fn status(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(text.to_string()),
            None => println!("{text}"),
        }
    }
}

/// The live view redraws one terminal screen (and indicatif hides it entirely when the
/// output is not a terminal, so a piped sandbox printed nothing): plain lines unless
/// asked for none and writing to a terminal.
fn live_view(no_ui: bool, stdout_is_terminal: bool) -> bool {
    !no_ui && stdout_is_terminal
}

pub fn run(args: &SandboxArgs) -> Result<Outcome, CliError> {
    let repo = args
        .repo
        .canonicalize()
        .map_err(|e| CliError::one(format!("--repo {}: {e}", args.repo.display())))?;
    for needed in ["crds", "deploy/agent", "deploy/controller", SANDBOX_OVERLAY] {
        if !repo.join(needed).exists() {
            return Err(CliError::one(format!(
                "--repo {}: no {needed}; run the sandbox from a nodemem checkout (or pass --repo)",
                repo.display()
            )));
        }
    }
    let nodemem = std::env::current_exe()
        .map_err(|e| CliError::one(format!("cannot find the nodemem binary: {e}")))?;
    let live = live_view(
        args.no_ui,
        std::io::IsTerminal::is_terminal(&std::io::stdout()),
    );
    let out = Out {
        bar: live.then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg}")
                    .expect("a valid template"),
            );
            bar
        }),
    };
    let bin = build::control_plane(&repo, &|l| out.status(l))?;
    // SAFETY: this process has one thread here (the build's reader thread has ended,
    // the spinner's ticker starts below), so nothing reads the environment concurrently.
    unsafe { std::env::set_var("NODEMEM_CONTROL_PLANE_BIN", &bin) };
    if let Some(bar) = &out.bar {
        bar.enable_steady_tick(Duration::from_millis(200));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::one(format!("cannot start the async runtime: {e}")))?;
    let result = runtime.block_on(sandbox(args, &repo, &nodemem, &bin, &out));
    if let Some(bar) = &out.bar {
        bar.finish_and_clear();
    }
    drop(runtime);
    println!("sandbox stopped: every process ended and its temporary directories are removed");
    result.map(|()| Outcome::default())
}

async fn sandbox(
    args: &SandboxArgs,
    repo: &Path,
    nodemem: &Path,
    bin: &Path,
    out: &Out,
) -> Result<(), CliError> {
    let started = Instant::now();
    let spec = BedSpec {
        nodemem: nodemem.to_path_buf(),
        repo: repo.to_path_buf(),
        pools: pools(),
        // A full pass (which reads memory.events and PSI) every 5 s, so a broken node shows
        // within seconds.
        agent_resync_seconds: 5,
        install: nodemem_testkit::bed::Install::Manifests,
        controller_args: Vec::new(),
        pod_security_default: None,
    };
    let setup = async {
        let bed = Bed::start(&spec, &|s| out.status(&format!("{s}...")))
            .await
            .map_err(|e| CliError::one(e.to_string()))?;
        out.status("applying examples/ (kubectl apply -k deploy/sandbox)...");
        let applied = bed
            .kubectl(&[
                "apply",
                "-k",
                repo.join(SANDBOX_OVERLAY).to_str().unwrap_or_default(),
            ])
            .map_err(|e| CliError::one(e.to_string()))?;
        for l in applied.lines() {
            out.line(&format!("  {l}"));
        }
        out.status("creating workload pods of every QoS class...");
        create_workloads(&bed).await?;
        Ok::<Bed, CliError>(bed)
    };
    // One listener for the whole run: a signal that arrives while no listener exists
    // (between two waits) would be lost.
    let mut stop = std::pin::pin!(stop_signal());
    let mut bed = tokio::select! {
        bed = setup => bed?,
        _ = &mut stop => return Ok(()),
    };
    // kubectl and the plugin, for the user's shell.
    let tools = bed.dir().join("bin");
    std::fs::create_dir_all(&tools).map_err(|e| CliError::one(e.to_string()))?;
    let _ = std::os::unix::fs::symlink(bin.join("kubectl"), tools.join("kubectl"));
    let _ = std::os::unix::fs::symlink(nodemem, tools.join(nodemem_plugin::PLUGIN_BINARY));
    // kubectl (1.26+) completes `kubectl nodemem <TAB>` by running this one.
    let _ = std::os::unix::fs::symlink(nodemem, tools.join(nodemem_plugin::COMPLETION_BINARY));
    out.line(&format!(
        "control plane up in {:.0}s; {} nodes in 3 pools, agents and controller running",
        started.elapsed().as_secs_f64(),
        bed.nodes.len()
    ));
    if out.bar.is_none() {
        for (name, n) in &bed.nodes {
            out.line(&format!(
                "node {name}: pool {}, cgroup root {}, agent log {}",
                n.pool,
                n.tree.root().display(),
                n.agent_log().display()
            ));
        }
        out.line(&format!(
            "controller log {}",
            bed.controller_log().display()
        ));
    }

    let nodes = bed.nodes.len();
    let mut last = view::View::default();
    let mut announced = false;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut ticks: u64 = 0;
    let mut restarts = nodemem_testkit::bed::Restarts::default();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut stop => break,
        }
        // The observed pool's containers use memory as their workloads would (the
        // files a kernel keeps; written again while their cgroups come and go).
        if ticks.is_multiple_of(10) {
            use_memory(&bed).await;
        }
        ticks += 1;
        // A killed agent or controller comes back as its DaemonSet or Deployment would
        // bring it back, and says so: a user can watch the recovery.
        for line in bed.restart_exited(&mut restarts) {
            out.line(&line);
        }
        let read = tokio::select! {
            v = read_view(&bed, &args.focus) => v,
            _ = &mut stop => break,
        };
        let Ok(v) = read else {
            continue;
        };
        let up = started.elapsed().as_secs();
        let header = format!(
            "nodemem sandbox: {nodes} nodes in 3 pools, up {}:{:02}; Ctrl-C stops everything",
            up / 60,
            up % 60
        );
        match &out.bar {
            Some(bar) => bar.set_message(view::frame(&v, &header)),
            None => {
                for l in view::changes(&last, &v) {
                    println!("{l}");
                }
            }
        }
        if v.settled() && !announced {
            announced = true;
            out.line(&ready_text(&bed, &tools));
        }
        last = v;
    }
    out.status("stopping the controller, the agents and the control plane...");
    Ok(())
}

/// Ctrl-C, SIGTERM, or SIGHUP (the terminal closed): every way a user stops it ends in
/// the same clean-up.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = hup.recv() => {}
    }
}

async fn read_view(bed: &Bed, focus: &str) -> Result<view::View, CliError> {
    let snapshot = Snapshot::read(&bed.client).await?;
    let pods = Api::<core::Pod>::all(bed.client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={focus}")))
        .await
        .map_err(|e| CliError::one(e.to_string()))?
        .items;
    let tree = bed.nodes.get(focus).map(|n| n.tree.clone());
    let read = |path: &str, file: &str| tree.as_ref().and_then(|t| t.read(path, file).ok());
    Ok(view::build(
        &snapshot,
        tree.as_ref().map(|_| (focus, pods.as_slice())),
        workloads::NAMESPACE,
        &read,
    ))
}

/// Writes each observed container's memory use into its cgroup (what the kernel
/// would report), once the fake kubelet has created it.
async fn use_memory(bed: &Bed) {
    const MI: i64 = 1 << 20;
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), workloads::NAMESPACE);
    let Ok(list) = pods.list(&ListParams::default()).await else {
        return;
    };
    for pod in list.items {
        let (Some(node), Some(uid)) = (
            pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            pod.metadata.uid.clone(),
        ) else {
            continue;
        };
        let Some(tree) = bed.nodes.get(&node).map(|n| &n.tree) else {
            continue;
        };
        let qos = match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
            Some("BestEffort") => nodemem_model::pod::qos::QosClass::BestEffort,
            Some("Guaranteed") => nodemem_model::pod::qos::QosClass::Guaranteed,
            _ => nodemem_model::pod::qos::QosClass::Burstable,
        };
        for c in pod.spec.iter().flat_map(|s| &s.containers) {
            let Some((working_set, cache)) = workloads::usage_mib(&node, &c.name) else {
                continue;
            };
            let id = nodemem_model::values::cgroup_layout::ContainerId {
                runtime: nodemem_model::values::cgroup_layout::ContainerRuntime::Containerd,
                id: nodemem_testkit::kubelet::container_id(&uid, &c.name),
            };
            let path =
                nodemem_model::values::cgroup_layout::container_dir(tree.driver(), qos, &uid, &id);
            if tree.root().join(&path).is_dir() {
                let _ = tree.set_usage(&path, (working_set + cache) * MI, cache * MI);
            }
        }
    }
}

async fn create_workloads(bed: &Bed) -> Result<(), CliError> {
    let namespaces: Api<core::Namespace> = Api::all(bed.client.clone());
    let ns: core::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": workloads::NAMESPACE}}))
            .expect("a namespace");
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(CliError::one(format!("namespace: {e}"))),
    }
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), workloads::NAMESPACE);
    for (node, n) in &bed.nodes {
        for pod in workloads::pods_for(&n.pool, node) {
            let pod: core::Pod = serde_json::from_value(pod).expect("a pod");
            nodemem_testkit::clients::create_pod(&pods, &pod)
                .await
                .map_err(|e| CliError::one(format!("on {node}: {e}")))?;
        }
    }
    Ok(())
}

fn ready_text(bed: &Bed, tools: &Path) -> String {
    format!(
        "\nsandbox ready: every policy rolled out.\n\
         In another terminal:\n\
         \x20 export KUBECONFIG={kubeconfig}\n\
         \x20 export PATH={tools}:$PATH\n\
         \x20 kubectl get nmp,nmc\n\
         \x20 kubectl nodemem status\n\
         \x20 kubectl nodemem explain numa-database-1\n\
         \x20 kubectl nodemem recommend batch    (batch is observed, not enforced: enforcement: Observe)\n\
         Then try:\n\
         \x20 edit a policy and watch the canary:  kubectl patch nmp general --type merge -p '{{\"spec\":{{\"memoryQoS\":{{\"throttlingFactor\":0.8}}}}}}'\n\
         \x20 preview a change first:              kubectl nodemem diff -f my-policy.yaml\n\
         \x20 break a node and see the rollout stop: edit the policy again, then while general-2 updates:\n\
         \x20   for f in {tree}/kubepods.slice/kubepods-burstable.slice/*/memory.events; do printf 'low 0\\nhigh 0\\nmax 0\\noom 3\\noom_kill 3\\n' > $f; done\n\
         \x20 pause, resume, roll back:             kubectl nodemem pause general; kubectl nodemem rollback general\n\
         Logs: {dir}\n",
        kubeconfig = bed.admin_kubeconfig().display(),
        tools = tools.display(),
        tree = bed
            .nodes
            .get("general-2")
            .map_or(String::new(), |n| n.tree.root().display().to_string()),
        dir = bed.dir().display(),
    )
}

#[cfg(test)]
mod tests {
    use super::live_view;

    #[test]
    fn the_live_view_needs_a_terminal_and_no_flag_against_it() {
        assert!(live_view(false, true));
        assert!(!live_view(true, true), "--no-ui");
        assert!(!live_view(false, false), "piped or redirected: plain lines");
        assert!(!live_view(true, false));
    }
}
