//! The node agent (`nodemem agent`): it enforces its node's NodeMemoryConfig on the
//! node's cgroup v2 tree (or renders a kubelet drop-in under `enforcement: Kubelet`)
//! and reports back. `--once` computes and applies one node from files (no
//! apiserver); the in-cluster mode builds on the same applier
//! (`nodemem_apply::applier`, which has no client and no runtime).
//!
//! * [`args`]: the command line.
//! * [`node_sync`]: the in-cluster agent: watches feed `nodemem_api::node_index`, passes
//!   call the applier once each, [`status`] and [`health`] report, [`metrics`] count.
//! * [`kubelet_mode`]: `enforcement: Kubelet` (the drop-in, the restart, the state).
//! * [`units`]: systemd's record of the slices and scopes nodemem writes, kept in step
//!   over D-Bus (systemd-driver nodes).
//! * [`observer`]: what the managed containers' working sets do against memory.high
//!   (`enforcement: Observe`, and under `Agent` too).
//! * [`relief`]: `memoryQoS.relief`: PSI triggers per container, memory.high raised for
//!   a container that chokes at it, then restored; repeat offenders reported.
//! * [`cgroup_events`]: new cgroups, and which container each is, as they appear.
//! * [`runtime_record`]: which container a new cgroup is, from the runtime's own record.
//! * [`nri`]: the agent as the runtime's NRI plugin: new containers created with
//!   nodemem's values.
//! * [`once`] and `output`: `--once` from files, and what it prints.
//! * `print_kubelet`: `--print-kubelet`, what the agent reads of the host's kubelet.

pub mod args;
pub mod cgroup_events;
pub mod confine;
pub mod confine_probe;
mod crd_skew;
pub mod health;
pub mod kubelet_mode;
pub mod kubelet_reader;
pub mod kubelet_status;
pub mod metrics;
pub mod node_sync;
pub mod nri;
pub mod observer;
pub mod once;
mod output;
mod print_kubelet;
pub mod reclaim;
pub mod relief;
pub mod runtime_record;
pub mod status;
mod status_writer;
#[cfg(test)]
mod test_node;
pub mod units;

use nodemem_plumbing::logs::init_logs;
use nodemem_plumbing::{CliError, Outcome};

pub use args::AgentArgs;

/// How the agent restarts the kubelet: its systemd unit, else a command, else not.
fn restart_by(args: &AgentArgs) -> Option<kubelet_mode::RestartBy> {
    let given = |s: &Option<String>| s.clone().filter(|c| !c.trim().is_empty());
    let systemd = args.systemd_buses();
    if let Some(unit) = given(&args.kubelet_restart_unit).filter(|_| !systemd.is_empty()) {
        return Some(kubelet_mode::RestartBy::Unit { unit, systemd });
    }
    given(&args.kubelet_restart_command).map(kubelet_mode::RestartBy::Command)
}

/// The agent's confinement before it starts a thread (docs/security.md): its kubelet
/// reader started where it reads the kubelet through procfs, every capability dropped,
/// its writes restricted to its trees.
fn confine_at_start(args: &AgentArgs) -> Result<(), CliError> {
    if args.kubelet_config.is_none() {
        let reader = kubelet_reader::start(&args.proc_root, args.kubelet_writes)
            .map_err(|e| CliError::one(format!("cannot start nodemem's kubelet reader: {e}")))?;
        let pid = reader.pid();
        nodemem_apply::kubelet::access::install(
            &args.proc_root,
            Box::new(move |request| reader.call(request)),
        )
        .map_err(CliError::one)?;
        tracing::info!(pid, "nodemem's kubelet reader runs: it alone holds CAP_SYS_PTRACE and reads only the files the host's kubelet names");
    }
    match confine::drop_capabilities() {
        Ok(held) => tracing::info!(dropped = ?held, "the agent holds no capability"),
        Err(e) => {
            return Err(CliError::one(format!(
                "the agent cannot drop its capabilities: {e}"
            )))
        }
    }
    if args.kubelet_restart_command.is_some() {
        tracing::warn!("the agent's writes are not restricted (Landlock): --kubelet-restart-command runs a command whose writes nodemem cannot know");
        return Ok(());
    }
    let writable = writable_trees(args);
    match confine::restrict_writes(&writable) {
        Ok(confine::Restricted::Not) => tracing::warn!("the agent's writes are not restricted: this kernel has no Landlock (Linux 5.13 and later, with landlock among its security modules)"),
        Ok(how) => tracing::info!(?how, writable = ?writable, "the agent writes only beneath these (Landlock)"),
        Err(e) => tracing::warn!(error = %e, "the agent's writes are not restricted (Landlock)"),
    }
    Ok(())
}

/// What the agent writes beneath: the cgroup tree, its state directory (created now:
/// Landlock names existing files), the kubelet's drop-in directory and the Memory
/// Manager's state file's directory when given, and /dev/null (a child's stdin).
fn writable_trees(args: &AgentArgs) -> Vec<std::path::PathBuf> {
    let _ = std::fs::create_dir_all(&args.state_dir);
    let mut trees = vec![
        args.cgroup_root.clone(),
        args.state_dir.clone(),
        "/dev/null".into(),
    ];
    trees.extend(args.kubelet_config_dir.clone());
    trees.extend(
        args.kubelet_memory_manager_state
            .as_deref()
            .and_then(std::path::Path::parent)
            .map(std::path::Path::to_path_buf),
    );
    trees
}

/// Runs `nodemem agent`: `--once` from files, else the in-cluster agent until it fails.
pub fn run(args: &AgentArgs) -> Result<Outcome, CliError> {
    if let Some(n) = nodemem_apply::fault::arm_from_env() {
        // Never silent: a process that will kill itself says so first.
        eprintln!(
            "{}={n}: this agent kills itself (SIGKILL) right after its cgroup write number {n} (a test's fault)",
            nodemem_apply::fault::KILL_AFTER_WRITES_ENV
        );
    }
    if args.print_kubelet {
        return print_kubelet::run(args);
    }
    if args.once {
        return once::run(args);
    }
    if args.kubelet_reader {
        return kubelet_reader::serve(args.proc_root.clone(), args.kubelet_writes)
            .map(|()| Outcome::default())
            .map_err(|e| CliError::one(format!("nodemem's kubelet reader: {e}")));
    }
    let node_name = args
        .node_name
        .clone()
        .or_else(|| std::env::var("NODE_NAME").ok())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            CliError::one("the agent needs its node's name: --node-name or NODE_NAME (the downward API's spec.nodeName)")
        })?;
    init_logs(args.log_format);
    // While the agent runs one thread: capabilities and Landlock are per thread.
    confine_at_start(args)?;
    let node = once::node_config(args);
    let kubelet = kubelet_mode::KubeletModeConfig {
        files: node.kubelet.clone(),
        proc_root: args.proc_root.clone(),
        restart: kubelet_mode::KubeletRestart {
            by: restart_by(args),
            healthz: Some(args.kubelet_healthz_url.clone()).filter(|u| !u.is_empty() && u != "off"),
            timeout: std::time::Duration::from_secs(args.kubelet_restart_timeout_seconds.max(1)),
            ..Default::default()
        },
    };
    let mut agent = node_sync::NodeSync::new(
        node_name,
        node,
        kubelet,
        std::time::Duration::from_secs(args.resync_seconds.max(1)),
    );
    agent.observe_every =
        (args.observe_seconds > 0).then(|| std::time::Duration::from_secs(args.observe_seconds));
    agent.status_refresh = std::time::Duration::from_secs(args.status_refresh_seconds);
    agent.systemd = args.systemd_buses();
    // With --nri=on the runtime names each container itself: its records are not read.
    if args.nri != nri::NriMode::On {
        agent.runtime_records = runtime_record::RuntimeRecords {
            containerd: args.containerd_tasks_dir.clone(),
            crio: args.crio_containers_dir.clone(),
        };
    }
    agent.nri = nri::NriConfig {
        mode: args.nri,
        socket: args.nri_socket.clone(),
        index: args.nri_index.clone(),
    };
    if args.per_container_metrics {
        agent.metrics = std::sync::Arc::new(metrics::Metrics::with_container_series(
            args.per_container_metrics_cap,
        ));
    }
    agent.metrics_addr = match args.metrics_addr.as_str() {
        "" | "off" => None,
        a => Some(a.parse().map_err(|e| {
            CliError::one(format!(
                "--metrics-addr {a:?}: {e}; give host:port such as 0.0.0.0:9180, or off"
            ))
        })?),
    };
    // One thread: the agent waits on the network and the kernel nearly all the time
    // (a worker pool would add threads and per-thread allocator arenas that idle
    // agents on every node pay for). The inotify reader has a thread of its own.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::one(format!("cannot start the async runtime: {e}")))?;
    let kubeconfig = args.kubeconfig.clone();
    let proc_root = args.proc_root.clone();
    let own = writable_trees(args);
    runtime.block_on(async move {
        // A request the apiserver refuses for load is retried briefly in the client,
        // then fails to its caller: the status writer backs off and writes its newest
        // status (kube's default client would hold a stale one through 15 retries).
        let client =
            nodemem_plumbing::kubeclient::client_with_brief_retries(kubeconfig.as_deref())
                .await?;
        // Started (its kubeconfig read, its client built): from here on the agent
        // makes none of the system calls its filter refuses.
        match confine::confine() {
            Ok(refused) => tracing::info!(
                refused,
                "the agent confines itself: its seccomp filter refuses ptrace, process_vm_readv/writev, mounts, BPF, kernel modules, kexec and the other calls it never makes (no_new_privs set)"
            ),
            Err(e) => tracing::warn!(error = %e, "the agent runs without its own seccomp filter"),
        }
        if std::env::var_os(confine_probe::PROBE_ENV).is_some_and(|v| v == "1") {
            confine_probe::run(&proc_root, &own);
        }
        agent
            .run(client)
            .await
            .map_err(|e| CliError::one(e.to_string()))
    })?;
    Ok(Outcome::default())
}
