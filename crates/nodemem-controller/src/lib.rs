//! The cluster controller (`nodemem controller`): turns NodeMemoryPolicies into one
//! NodeMemoryConfig per node and rolls each pool to a new revision safely.
//!
//! * [`world`]: what the watches said (pure index).
//! * [`decide`]: resolution, rollout steps and config writes (pure), into a
//!   [`decision::Decision`]; beside its stages, `decide::policy_status` builds each
//!   policy's status, `decide::health` its `Ready`, `Reconciling` and `Stalled` (what
//!   GitOps tools read), `decide::handoff` moves nodes leaving a policy and lets go of
//!   its finalizer, [`decide::node_failure`] says why a node failed its rollout,
//!   `decide::recommendation` the factor a pool tolerates, `decide::settings` the
//!   rollout parameters.
//! * [`mod@run`]: the watches and the writes around them, through [`queue`], [`mod@write`]
//!   (backoff, retries, failures, field managers) and [`metrics`].
//! * [`agents`]: the agents' DaemonSet ([`agents::daemonset`]) and what blocks them.
//! * [`leadership`]: the Lease ([`leadership::lease`]), `nodemem check`, the stand-down
//!   and the give-back.
//!
//! An agent's report on its config is read with `nodemem_api::report`, the rule
//! `kubectl nodemem` shows too.

pub mod agents;
mod crd_check;
pub mod decide;
pub mod decision;
mod drain;
pub mod leadership;
pub mod metrics;
pub mod queue;
pub mod run;
pub mod world;
pub mod write;

use std::path::PathBuf;

use nodemem_plumbing::logs::LogFormat;
use nodemem_plumbing::{CliError, Outcome};

/// NodeMemoryConfig writes in flight at once by default: the fastest plain client's
/// writer count at 500 to 20,000 nodes on the test bed (BENCHMARKS.md, section 1); 16
/// left the apiserver's cores partly idle at 500 nodes (1.24x to 1.26x of the ceiling
/// against 1.09x with 64).
pub const DEFAULT_WRITE_CONCURRENCY: u16 = 64;

/// Arguments of `nodemem controller`.
#[derive(Clone, Debug, clap::Args)]
pub struct ControllerArgs {
    /// Logs on stderr: human text, or one JSON object per line.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// A kubeconfig to reach the apiserver with (default: KUBECONFIG, else the pod's
    /// service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Where to serve /metrics, /healthz and /readyz (host:port, or off).
    #[arg(long, default_value = "0.0.0.0:9181")]
    pub metrics_addr: String,
    /// Seconds between checks of time-based rollout steps (minReadySeconds, deadlines).
    #[arg(long, default_value_t = 5)]
    pub tick_seconds: u64,
    /// NodeMemoryConfig writes in flight at once during a fan-out (the apiserver serves
    /// many at a time: BENCHMARKS.md measures the default against plain clients with
    /// 1 to 64 writers).
    #[arg(long, default_value_t = DEFAULT_WRITE_CONCURRENCY, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub write_concurrency: u16,
    /// Watch events queued for the decisions at most; at the cap the watches are read
    /// no further until the decisions catch up.
    #[arg(long, default_value_t = queue::DEFAULT_CAPACITY, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub event_queue: u64,
    /// Elect a leader through the Lease `nodemem-controller` in --namespace: with several
    /// replicas only the holder writes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Where the Lease lives.
    #[arg(long, default_value = "nodemem-system")]
    pub namespace: String,
    /// Seconds a follower waits, after it last saw the Lease change, before it may take
    /// it over (client-go's leaseDuration). The leader renews every 2/15 of it and stops
    /// when a renewal has not succeeded within 2/3 of it (its renew deadline).
    #[arg(long, default_value_t = 15)]
    pub lease_seconds: u64,
    /// This replica's name in the Lease (default: POD_NAME, else host name and pid).
    #[arg(long)]
    pub identity: Option<String>,
    /// Deploy the node agents as a DaemonSet (in --namespace) with this image; without
    /// it the agents are deployed some other way.
    #[arg(long, conflicts_with = "agent_image_from_container")]
    pub agent_image: Option<String>,
    /// Deploy the node agents with the image of this container of the controller's own
    /// pod (POD_NAME in --namespace), read once at start: an install then names its image
    /// in one place (the chart and deploy/ pass `controller`).
    #[arg(long, value_name = "CONTAINER")]
    pub agent_image_from_container: Option<String>,
    /// A Secret in --namespace the agents' pods pull their image with (repeatable; the
    /// chart passes its imagePullSecrets): without it a private registry refuses every
    /// node's agent.
    #[arg(long = "agent-image-pull-secret", value_name = "SECRET")]
    pub agent_image_pull_secrets: Vec<String>,
    /// Label --namespace `pod-security.kubernetes.io/enforce=privileged` (and audit,
    /// warn) before deploying the agents: they need host paths and the host's PID
    /// namespace, which a cluster whose PodSecurity default is baseline or restricted
    /// refuses in an unlabelled namespace. A label someone else set is left alone (and
    /// reported).
    #[arg(long)]
    pub agent_pod_security_labels: bool,
    /// The agents' cgroup driver (default: detected on each node).
    #[arg(long)]
    pub agent_cgroup_driver: Option<String>,
    /// The kubelet's --config-dir on the nodes (needed for enforcement: Kubelet).
    #[arg(long)]
    pub agent_kubelet_config_dir: Option<String>,
    /// The kubelet's systemd unit on the nodes (for example kubelet.service): the
    /// agents restart it through systemd's D-Bus API after its drop-in changed.
    #[arg(long, conflicts_with = "agent_kubelet_restart_command")]
    pub agent_kubelet_restart_unit: Option<String>,
    /// How the agents restart the kubelet after its drop-in changed (a command run in
    /// the agent's container with `sh -c`).
    #[arg(long)]
    pub agent_kubelet_restart_command: Option<String>,
    /// How the agents give new containers their values: through the container
    /// runtime's NRI socket where it answers, else the reaction (auto); NRI only, without
    /// mounting the runtimes' container records (on); the reaction only, without
    /// mounting the NRI socket (off).
    #[arg(long, value_enum, default_value_t = agents::daemonset::AgentNri::Auto)]
    pub agent_nri: agents::daemonset::AgentNri,
    /// The agents' state directory on the hosts (a hostPath).
    #[arg(long, default_value = "/var/lib/nodemem")]
    pub agent_state_dir: String,
    /// The enforcement modes the agents are deployed for, comma-separated (Agent,
    /// Kubelet, Observe): the agents' DaemonSet carries only the privileges these need
    /// (the cgroup tree writable only with Agent, systemd's sockets only where a mode
    /// talks to systemd, the kubelet's restart and --config-dir only with Kubelet), and
    /// a policy asking for another mode is refused (Accepted=False).
    #[arg(long, default_value = "Agent,Kubelet,Observe")]
    pub agent_enforcement_modes: agents::modes::EnforcementModes,
    /// The agents' pods as a JSON object (the chart's agent values): resources,
    /// nodeSelector (default: Linux nodes), affinity (ANDed with the policies'
    /// selectors), tolerations (default: all), priorityClassName, podAnnotations,
    /// podLabels, logLevel (error, warn, info, debug, trace), env. Absent fields take
    /// their defaults; an unknown one is refused by name.
    #[arg(long, value_name = "JSON", value_parser = agents::pod::AgentPod::parse_boxed)]
    pub agent_pod: Option<Box<agents::pod::AgentPod>>,
    /// The controller's own Deployment in --namespace: stopped (SIGTERM) while it is
    /// gone, being deleted or scaled to zero, the controller stands down: it removes its
    /// handoff finalizer from every policy, so that none is left Terminating without a
    /// controller. Without it the finalizers stay (`kubectl nodemem release --now`).
    #[arg(long)]
    pub deployment: Option<String>,
}

/// Arguments of `nodemem check`.
#[derive(Clone, Debug, clap::Args)]
pub struct CheckArgs {
    /// A kubeconfig to reach the apiserver with (default: KUBECONFIG, else the pod's
    /// service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The controller's namespace.
    #[arg(long, default_value = "nodemem-system")]
    pub namespace: String,
    /// The controller's Deployment.
    #[arg(long, default_value = "nodemem-controller")]
    pub deployment: String,
    /// Seconds to keep asking while the answer is no (a replica starting, a leader
    /// being elected).
    #[arg(long, default_value_t = 60)]
    pub timeout_seconds: u64,
}

/// Runs `nodemem check` (the chart's `helm test`): exit 0 and what leads, or exit 1
/// and what is wrong.
pub fn check_command(args: &CheckArgs) -> Result<Outcome, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::one(format!("cannot start the async runtime: {e}")))?;
    let said = runtime.block_on(async {
        let client = nodemem_plumbing::kubeclient::client(args.kubeconfig.as_deref(), None).await?;
        leadership::check::check(
            &client,
            &args.namespace,
            &args.deployment,
            std::time::Duration::from_secs(args.timeout_seconds),
        )
        .await
        .map_err(CliError::one)
    })?;
    Ok(Outcome::ok(format!("{said}\n")))
}

/// Arguments of `nodemem stand-down`.
#[derive(Clone, Debug, clap::Args)]
pub struct StandDownArgs {
    /// A kubeconfig to reach the apiserver with (default: KUBECONFIG, else the pod's
    /// service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The controller's namespace.
    #[arg(long, default_value = "nodemem-system")]
    pub namespace: String,
    /// The controller's Deployment.
    #[arg(long, default_value = "nodemem-controller")]
    pub deployment: String,
    /// Seconds to wait for the controller's replicas to stop.
    #[arg(long, default_value_t = 120)]
    pub timeout_seconds: u64,
    /// Then give every node back to its kubelet (each config gets the released
    /// settings and its agent's report is awaited) and delete every NodeMemoryConfig,
    /// the controller's Lease and the agent DaemonSet: an uninstall leaves nothing but
    /// Events and the policies.
    #[arg(long)]
    pub give_back: bool,
    /// Seconds to wait for the agents' reports with --give-back.
    #[arg(long, default_value_t = 300)]
    pub give_back_seconds: u64,
    /// Run as the chart's uninstall hook of this Helm release: refuse (changing
    /// nothing) unless the controller's Deployment was installed by that release or is
    /// tracked by Argo CD, the only installs that run the hook at uninstall time
    /// (`helm template | kubectl apply` would run it at install). Left out when a
    /// person runs the command by hand.
    #[arg(long, value_name = "RELEASE")]
    pub hook_of_release: Option<String>,
}

/// Runs `nodemem stand-down`: the controller scaled to zero and every policy let go of
/// (before an uninstall; the chart's pre-delete hook).
pub fn stand_down_command(args: &StandDownArgs) -> Result<Outcome, CliError> {
    nodemem_plumbing::logs::init_logs(LogFormat::Text);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::one(format!("cannot start the async runtime: {e}")))?;
    let (released, given) = runtime.block_on(async {
        let client = nodemem_plumbing::kubeclient::client(args.kubeconfig.as_deref(), None).await?;
        if let Some(release) = &args.hook_of_release {
            leadership::stand_down::check_hook(&client, &args.namespace, &args.deployment, release)
                .await
                .map_err(CliError::one)?;
        }
        let released = leadership::stand_down::before_uninstall(
            &client,
            &args.namespace,
            &args.deployment,
            std::time::Duration::from_secs(args.timeout_seconds),
        )
        .await
        .map_err(CliError::one)?;
        let given = if args.give_back {
            Some(
                leadership::give_back::give_back(
                    &client,
                    &args.namespace,
                    leadership::lease::LEASE,
                    agents::daemonset::NAME,
                    std::time::Duration::from_secs(args.give_back_seconds),
                )
                .await
                .map_err(CliError::one)?,
            )
        } else {
            None
        };
        Ok::<_, CliError>((released, given))
    })?;
    let mut said = format!(
        "the controller is scaled to zero; {released} polic(y/ies) let go of the handoff finalizer: nothing is left Terminating\n"
    );
    if let Some(g) = given {
        said += &format!(
            "{} node(s) gave back what nodemem set{}; every NodeMemoryConfig, the controller's Lease and the agent DaemonSet are deleted\n",
            g.reported,
            if g.unreported.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} did not report in time and keep their values: {})",
                    g.unreported.len(),
                    g.unreported.join(", ")
                )
            }
        );
    }
    Ok(Outcome::ok(said))
}

/// The agents' image: --agent-image, or the named container's of the controller's own
/// pod; none when the agents are deployed some other way.
async fn agent_image(
    args: &ControllerArgs,
    client: &kube::Client,
) -> Result<Option<String>, CliError> {
    match (&args.agent_image, &args.agent_image_from_container) {
        (Some(image), _) => Ok(Some(image.clone())),
        (None, Some(container)) => {
            let pod = std::env::var("POD_NAME").ok();
            let image =
                agents::own_image::read(client, &args.namespace, pod.as_deref(), container).await?;
            tracing::info!(%image, container = %container, "the agents take the image of the controller's own container");
            Ok(Some(image))
        }
        (None, None) => Ok(None),
    }
}

/// How the agents' DaemonSet is built, from the controller's --agent-* arguments.
fn agent_deploy(args: &ControllerArgs, image: String) -> agents::daemonset::AgentDeploy {
    agents::daemonset::AgentDeploy {
        namespace: args.namespace.clone(),
        image,
        image_pull_secrets: args.agent_image_pull_secrets.clone(),
        pod_security_labels: args.agent_pod_security_labels,
        owner: None,
        cgroup_driver: args.agent_cgroup_driver.clone(),
        kubelet_config_dir: args.agent_kubelet_config_dir.clone(),
        kubelet_restart_command: args.agent_kubelet_restart_command.clone(),
        kubelet_restart_unit: args.agent_kubelet_restart_unit.clone(),
        state_dir: args.agent_state_dir.clone(),
        nri: args.agent_nri,
        enforcement: args.agent_enforcement_modes,
        pod: args.agent_pod.as_deref().cloned().unwrap_or_default(),
    }
}

fn identity(args: &ControllerArgs) -> String {
    args.identity
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "nodemem".into());
            format!("{host}-{}", std::process::id())
        })
}

/// The kubelet's restart and --config-dir serve `enforcement: Kubelet` only: given
/// without that mode they would be dropped without a word.
fn check_kubelet_flags(args: &ControllerArgs) -> Result<(), CliError> {
    let given: Vec<&str> = [
        (
            args.agent_kubelet_config_dir.is_some(),
            "--agent-kubelet-config-dir",
        ),
        (
            args.agent_kubelet_restart_unit.is_some(),
            "--agent-kubelet-restart-unit",
        ),
        (
            args.agent_kubelet_restart_command.is_some(),
            "--agent-kubelet-restart-command",
        ),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, flag)| *flag)
    .collect();
    if args.agent_enforcement_modes.kubelet || given.is_empty() {
        return Ok(());
    }
    Err(CliError::one(format!(
        "{} {} enforcement: Kubelet, which --agent-enforcement-modes ({}) does not install: add Kubelet or leave {} out",
        given.join(", "),
        if given.len() == 1 { "serves" } else { "serve" },
        args.agent_enforcement_modes,
        if given.len() == 1 { "it" } else { "them" },
    )))
}

/// Runs `nodemem controller` until it fails or loses the leader Lease.
pub fn run(args: &ControllerArgs) -> Result<Outcome, CliError> {
    nodemem_plumbing::logs::init_logs(args.log_format);
    check_kubelet_flags(args)?;
    let metrics_addr: Option<std::net::SocketAddr> = match args.metrics_addr.as_str() {
        "" | "off" => None,
        a => Some(a.parse().map_err(|e| {
            CliError::one(format!(
                "--metrics-addr {a:?}: {e}; give host:port such as 0.0.0.0:9181, or off"
            ))
        })?),
    };
    let mut controller = run::Controller {
        metrics: Default::default(),
        draining: Default::default(),
        tick: std::time::Duration::from_secs(args.tick_seconds.max(1)),
        write_concurrency: usize::from(args.write_concurrency),
        event_queue: usize::try_from(args.event_queue).unwrap_or(usize::MAX),
        enforcement: args.agent_enforcement_modes,
        deployment: args.deployment.clone(),
        agents: None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::one(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        let stop = leadership::stand_down::Stop::listen();
        if let Some(addr) = metrics_addr {
            let bound = nodemem_plumbing::endpoints::serve(addr, controller.metrics.clone())
                .await
                .map_err(|e| CliError::one(e.to_string()))?;
            tracing::info!(%bound, "serving /metrics, /healthz and /readyz");
        }
        let client =
            nodemem_plumbing::kubeclient::client_with_brief_retries(args.kubeconfig.as_deref())
                .await?;
        controller.agents = agent_image(args, &client)
            .await?
            .map(|image| agent_deploy(args, image));
        if !args.leader_elect {
            controller.metrics.leading();
            return tokio::select! {
                r = controller.run(client.clone()) => r.map_err(|e| CliError::one(e.to_string())),
                () = leadership::stand_down::no_controller_follows(&client, &args.namespace, args.deployment.as_deref()) => {
                    leadership::stand_down::stand_down(&client, &args.namespace, args.deployment.as_deref()).await;
                    stop.requested().await;
                    Ok(())
                }
                () = stop.requested() => {
                    leadership::stand_down::stand_down(&client, &args.namespace, args.deployment.as_deref()).await;
                    Ok(())
                }
            };
        }
        let lock = leadership::lease::LeaseLock::new(
            client.clone(),
            &args.namespace,
            leadership::lease::LEASE,
            identity(args),
            std::time::Duration::from_secs(args.lease_seconds.max(3)),
        );
        let standing_by = || controller.metrics.standing_by();
        // A follower stopped while it waits for the Lease simply ends: the leader
        // decides whether to stand down.
        let renewed = tokio::select! {
            // A replica standing by is ready (its Deployment rolls out, `helm install
            // --wait` and Argo CD see it available) while another leads.
            at = lock.acquire(&standing_by) => at,
            () = stop.requested() => {
                tracing::info!("stopped before leading");
                return Ok(());
            }
        };
        if leadership::stand_down::none_follows_now(&client, &args.namespace, args.deployment.as_deref()).await {
            tracing::info!("took the Lease, but the controller's Deployment is gone, being deleted or at zero: not deciding");
            stop.requested().await;
            return Ok(());
        }
        tracing::info!(identity = %lock.identity, "leading");
        controller.metrics.leading();
        // The Lease is kept by a task of its own: a poll of the controller's loop that
        // runs long (a decision over many nodes) would otherwise delay its renewals
        // past the renew deadline, and the leader would lose the Lease to its own work.
        let lock = std::sync::Arc::new(lock);
        let mut kept = AbortOnDrop(tokio::spawn({
            let lock = lock.clone();
            async move { lock.keep(renewed).await }
        }));
        // Whichever ends first: losing the Lease stops this replica (its pod restarts
        // as a follower) so two never write at once.
        tokio::select! {
            r = controller.run(client.clone()) => r.map_err(|e| CliError::one(e.to_string())),
            _ = &mut kept.0 => Err(CliError::one("lost the leader Lease; exiting so that one replica leads")),
            // Stops deciding before its SIGTERM: an uninstall's hook is about to give
            // the nodes back and delete what this controller would put back.
            () = leadership::stand_down::no_controller_follows(&client, &args.namespace, args.deployment.as_deref()) => {
                leadership::stand_down::stand_down(&client, &args.namespace, args.deployment.as_deref()).await;
                stop.requested().await;
                Ok(())
            }
            () = stop.requested() => {
                leadership::stand_down::stand_down(&client, &args.namespace, args.deployment.as_deref()).await;
                Ok(())
            }
        }
    })?;
    Ok(Outcome::default())
}

#[cfg(test)]
mod excluded_tests;
#[cfg(test)]
mod tests;

/// A task that ends with its handle: the Lease is not renewed after the replica stopped
/// leading for another reason.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
