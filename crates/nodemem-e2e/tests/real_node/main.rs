//! The real-node tier: a qemu VM with Debian's kernel, systemd as PID 1, containerd,
//! runc and a kubelet of each supported version (v1.35.4 and v1.36.3 on one systemd
//! node, one after the other; v1.37.2 on a cgroupfs node), joined to a test control
//! plane (TESTING.md). nodemem is
//! installed as users install it (CRDs, `deploy/`, the controller deploying its agent
//! DaemonSet from the project's image), and the node is the judge of what it does.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use kube::api::{Api, ListParams};
use nodemem_api::NodeMemoryConfig;
use nodemem_e2e::phases::Phases;
use nodemem_e2e::repo_root;
use nodemem_testkit::binaries::control_plane_binaries;
use nodemem_testkit::clients::kubectl;
use nodemem_testkit::process::Process;
use nodemem_testkit::real_node::{Driver, NodeImage, RealNode, RealNodeSpec};
use nodemem_testkit::{ControlPlane, Identity};
use pace::paced;
use serde_json::{json, Value};

/// The project's image as `image/build-oci.sh` wrote it (`make node` builds it first).
fn image_layout() -> PathBuf {
    PathBuf::from(
        std::env::var_os("NODEMEM_IMAGE_LAYOUT")
            .expect("NODEMEM_IMAGE_LAYOUT: run `make node` (it builds the image first)"),
    )
}

const POLICY: &str = "apiVersion: nodemem.io/v1alpha1
kind: NodeMemoryPolicy
metadata:
  name: real
spec:
  nodeSelector:
    matchLabels:
      nodemem.io/pool: real
  memoryQoS:
    throttlingFactor: 0.9
    reservationPolicy: TieredReservation
  enforcement: Agent
  rollout:
    minReadySeconds: 0
";

/// Where a pod's cgroup is on the node, written out for each driver as the kubelet lays
/// it out (not with nodemem's own layout code, which is what is being checked).
fn pod_dir(driver: Driver, qos: &str, uid: &str) -> String {
    let q = qos.to_lowercase();
    match (driver, qos) {
        (Driver::Systemd, "Guaranteed") => {
            format!(
                "/sys/fs/cgroup/kubepods.slice/kubepods-pod{}.slice",
                uid.replace('-', "_")
            )
        }
        (Driver::Systemd, _) => format!(
            "/sys/fs/cgroup/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{}.slice",
            uid.replace('-', "_")
        ),
        (Driver::Cgroupfs, "Guaranteed") => format!("/sys/fs/cgroup/kubepods/pod{uid}"),
        (Driver::Cgroupfs, _) => format!("/sys/fs/cgroup/kubepods/{q}/pod{uid}"),
    }
}

/// A container's cgroup in its pod's: containerd names it after the container ID.
fn container_dir(driver: Driver, pod_dir: &str, id: &str) -> String {
    match driver {
        Driver::Systemd => format!("{pod_dir}/cri-containerd-{id}.scope"),
        Driver::Cgroupfs => format!("{pod_dir}/{id}"),
    }
}

/// Runs a phase (`Phases::run`), then what follows every phase ([`after_phase`]): when
/// it failed, the node's logs in the output; its own pods removed.
macro_rules! phase {
    ($phases:ident, $node:ident, $bed:ident, $name:expr, $needs:expr, $body:expr) => {{
        let before = ($node.cpu_used(), guest_cpu(&mut $node));
        let value = $phases.run($name, $needs, $body).await;
        after_phase(&$phases, &mut $node, &$bed).await;
        let after = ($node.cpu_used(), guest_cpu(&mut $node));
        $phases.spent(before.0, after.0);
        say_where_the_cpu_went(&$node.name, $name, &before.1, &after.1);
        value
    }};
}

mod agents_blocked;
mod classes;
mod configz;
mod decoy;
mod give_back;
mod helm;
mod install;
mod kubelet_discovery;
mod kubelet_float;
mod kubelet_reference;
mod nri;
mod numa;
mod observation;
mod owners;
mod pace;
mod reaction;
mod reboot;
mod reclaim;
mod reclaim_cold;
mod reclaim_latency;
mod reclaim_rollback;
mod relief;
mod shapes;
mod side_by_side;
mod v135;
mod v137;

/// The kubelet every phase but the v1.37 ones runs with.
const KUBELET_V136: &str = "v1.36.3";
const KUBELET_V137: &str = "v1.37.2";
const KUBELET_V135: &str = "v1.35.4";

/// How long a node's phases may take in all (at the node's pace) before no more start:
/// about twice what they take when they pass (TESTING.md: the systemd node's 27 phases
/// 967 s with its boot, the v1.37 node's 16 phases 716 s), so that a node whose pods
/// hang still prints its summary inside CI's limit.
const SYSTEMD_NODE_PHASES: Duration = Duration::from_secs(1_800);
const V137_NODE_PHASES: Duration = Duration::from_secs(1_400);

/// Kubelet v1.36.3, then v1.35.4 in its place (`v135.rs`).
///
/// Its phases: systemd driver, kubelet v1.36.3: kubelet-reference,
/// kubelet-without-memory-qos, install, reports, kubelet-discovery, configz,
/// simulate-prediction, explain, owners, nri, nri-restarts, reaction, observation,
/// relief, agents-blocked, numa, token, give-back, helm; then, on the same node,
/// kubelet v1.35.4 in its place (Memory QoS alpha, gate off by default, no
/// `memoryReservationPolicy`), its phases named `v1.35.4 ...`: kubelet-version (the
/// swap), kubelet-reference, kubelet-without-memory-qos, install, configz,
/// simulate-prediction, explain, owners (the kubelet's events), kubelet-mode, numa.
#[test]
fn a_real_systemd_driver_node_runs_pods_and_nodemem_as_users_install_it() {
    real_node_runs_pods_and_nodemem("real-systemd");
}

/// The v1.37 node runs the cgroupfs driver: one boot per kubelet version, and the
/// driver the v1.35 and v1.36 nodes do not run (the cgroupfs phases were a v1.36 node of
/// their own until 2026-11-29).
///
/// Its phases: kubelet v1.37.2 (Memory QoS beta, gate on by default, no factor by
/// default), cgroupfs driver: kubelet-version, kubelet-reference,
/// pod-level-memory-high, kubelet-reference-without-factor, kubelet-float,
/// kubelet-at-defaults, install, reports, configz, no-conflict-at-defaults,
/// simulate-prediction, explain, owners, reclaim, reboot, give-back, kubelet-mode (on nodemem
/// installed again after the give-back), numa.
#[test]
fn a_real_v1_37_cgroupfs_node_is_the_reference_and_runs_nodemem_beside_its_defaults() {
    v137::a_v1_37_node(Driver::Cgroupfs, "real-v137");
}

/// The node image with the kubelet of `version` (cached per kubelet).
fn node_image(version: &str) -> NodeImage {
    // One build at a time: nodes side by side share the cache the scripts write.
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let bin = control_plane_binaries().expect("control plane binaries");
    let kubelet = bin
        .kubelet_of(version)
        .unwrap_or_else(|| panic!("no kubelet {version} in {:?}", bin.kubelets));
    NodeImage::build(kubelet, Some(&image_layout())).expect("node image")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Polls `check` until it returns Some, or None once `timeout` passed, at a pace set
/// by what a look costs (`poll_pause`).
/// `timeout` is a base budget, taken at the node's pace (`pace::paced`).
/// A wait of [`LONG_WAIT`] or more is printed with its place in the test: the node
/// tier's time is spent in waits, and a run's log says which (issue 57).
#[track_caller]
fn within<T>(
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> impl std::future::Future<Output = Option<T>> {
    let at = std::panic::Location::caller();
    async move {
        let began = Instant::now();
        let deadline = began + paced(timeout);
        let value = loop {
            let look = Instant::now();
            if let Some(v) = check().await {
                break Some(v);
            }
            if Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(poll_pause(look.elapsed())).await;
        };
        let took = began.elapsed();
        if took >= LONG_WAIT {
            let how = if value.is_some() {
                "waited"
            } else {
                "gave up after"
            };
            eprintln!("   ({how} {:.0?} at {}:{})", took, at.file(), at.line());
        }
        value
    }
}

/// The waits [`within`] prints.
const LONG_WAIT: Duration = Duration::from_secs(5);

/// The pause after a look that found nothing: four times what the look took, between
/// [`POLL_FASTEST`] and [`POLL_SLOWEST`]. A look at the apiserver (a few ms, on the
/// host) comes five times a second, so a wait ends within 200 ms of its event instead
/// of half a second on average after it; a look on the node (a script through the
/// runner, a fork and an exec at 40 ms each under TCG) keeps to a fifth of the time,
/// at most once a second, so polling never becomes the node's load (issue 57: a node
/// test has a few hundred waits).
fn poll_pause(look: Duration) -> Duration {
    (look * 4).clamp(POLL_FASTEST, POLL_SLOWEST)
}

const POLL_FASTEST: Duration = Duration::from_millis(200);
const POLL_SLOWEST: Duration = Duration::from_secs(1);

#[test]
fn a_look_at_the_apiserver_is_repeated_sooner_than_one_on_the_node() {
    assert_eq!(poll_pause(Duration::from_millis(3)), POLL_FASTEST);
    assert_eq!(
        poll_pause(Duration::from_millis(120)),
        Duration::from_millis(480)
    );
    assert_eq!(poll_pause(Duration::from_millis(900)), POLL_SLOWEST);
}

/// Polls `check` until it returns Some; fails the test once `timeout` (a base budget,
/// at the node's pace) passed.
#[track_caller]
fn eventually<T>(
    what: &str,
    timeout: Duration,
    check: impl AsyncFnMut() -> Option<T>,
) -> impl std::future::Future<Output = T> {
    let waiting = within(timeout, check);
    let what = what.to_string();
    async move {
        waiting
            .await
            .unwrap_or_else(|| panic!("{what}: not within {:?}", paced(timeout)))
    }
}

/// A control plane with its kube-scheduler, and a node of kubelet `version` booted from
/// `spec` (the start every real-node test shares); with when the node began to boot.
fn boot(spec: &RealNodeSpec, version: &str) -> (ControlPlane, RealNode, Instant) {
    let mut cp = ControlPlane::start().expect("control plane");
    cp.start_scheduler().expect("kube-scheduler");
    let image = node_image(version);
    let started = Instant::now();
    let node = RealNode::boot(&cp, &image, spec).expect("node boots");
    (cp, node, started)
}

/// The admin client once the node is Ready; the node's pace measured from `started`.
async fn joined(cp: &ControlPlane, node: &mut RealNode, started: Instant) -> kube::Client {
    let client = cp.client(&Identity::Admin).await.unwrap();
    node_ready(&client, &node.name.clone()).await;
    pace::measure(node, started.elapsed());
    client
}

/// The Node reports the kubelet version `want`.
async fn reports_kubelet_version(bed: &Bed<'_>, name: &str, want: &str) {
    let nodes: Api<core::Node> = Api::all(bed.client.clone());
    let reported = nodes
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap()
        .node_info
        .unwrap();
    assert_eq!(reported.kubelet_version, want);
}

/// What the phases read of the test bed.
struct Bed<'a> {
    cp: &'a ControlPlane,
    driver: Driver,
    client: kube::Client,
}

impl Bed<'_> {
    fn admin(&self) -> &Path {
        self.cp.admin_kubeconfig()
    }
}

/// The systemd node boots with the v1.36 kubelet and joins; then each phase is reported
/// on its own (`Phases`). It runs the agent's phases that do not depend on the
/// kubelet's version (TESTING.md's matrix says which version runs what, and why), then
/// the v1.35 kubelet's in its place.
fn real_node_runs_pods_and_nodemem(name: &str) {
    let driver = Driver::Systemd;
    let _slot = side_by_side::slot();
    let mut spec = RealNodeSpec::new(name, driver).label("nodemem.io/pool", "real");
    spec.kubelet = kubelets_memory_qos(true);
    let (cp, mut node, started) = boot(&spec, KUBELET_V136);
    let rt = runtime();
    rt.block_on(async {
        let client = joined(&cp, &mut node, started).await;
        let bed = Bed {
            cp: &cp,
            driver,
            client,
        };
        let mut phases = Phases::new(name);
        phases.deadline(paced(SYSTEMD_NODE_PHASES));
        phase!(phases, node, bed, "kubelet-reference", &[], || {
            kubelet_reference::the_kubelets_memory_qos_is_nodemems_prediction(
                bed.cp,
                &mut node,
                driver,
                &bed.client,
                kubelet_reference::Reference {
                    policy: POLICY,
                    tag: "k",
                    departures: kubelet_reference::V136_DEPARTURES,
                },
            )
        });
        // From here on nodemem enforces: the kubelet's own Memory QoS goes off (with it
        // on, nodemem would leave those files to the kubelet: KubeletConflict).
        spec.kubelet = kubelets_memory_qos(false);
        phase!(
            phases,
            node,
            bed,
            "kubelet-without-memory-qos",
            &[],
            || async {
                restart_kubelet_with(&mut node, &spec, &bed.client).await;
                a_workload_runs(&mut node, &bed, name).await;
            }
        );
        let mut installed = phase!(
            phases,
            node,
            bed,
            "install",
            &["kubelet-without-memory-qos"],
            || {
                // The kubelet's unit, for the numa phase's Kubelet mode; no drop-in
                // directory given: the agent finds the kubelet's own (a directory
                // given is the agent's, which the kubelet-discovery phase's moved
                // kubelet would not read: KubeletConfigDirMismatch).
                install_nodemem(
                    bed.cp,
                    &mut node,
                    &bed.client,
                    POLICY,
                    &["--agent-kubelet-restart-unit", "kubelet.service"],
                )
            }
        );
        phase!(phases, node, bed, "reports", &["install"], || {
            let installed = installed.as_ref().expect("install passed");
            install::it_reports_through_its_config(&mut node, &bed, installed)
        });
        // Here only: the v1.35 and v1.37 nodes read their kubelet the same way.
        phase!(phases, node, bed, "kubelet-discovery", &["install"], || {
            kubelet_discovery::the_kubelet_is_read_where_it_runs_from(&mut node, &bed)
        });
        // The kubelet's /configz against what nodemem reads, layout by layout (issue 58).
        phase!(phases, node, bed, "configz", &["install"], || {
            configz::nodemem_reads_what_the_kubelet_runs(&mut node, &bed, KUBELET_V136)
        });
        nodemem_as_predicted(
            &mut phases,
            &mut node,
            &bed,
            installed.as_ref(),
            "v1.36.3 (v1.36 rules",
            &[],
            owners::Events::All,
        )
        .await;
        // The owners' pods (every QoS class, the resized workload) are no later phase's:
        // gone, the node starts the next phases' pods without them.
        remove_pods_or_say(&bed, &ListParams::default()).await;
        let agent_ip = installed.as_ref().map(|i| i.agent_ip.clone());
        let agent_ip = || agent_ip.clone().expect("install passed");
        let nri_start = phase!(phases, node, bed, "nri", &["install"], || async {
            nri::values_before_the_first_instruction(&mut node, &bed, &agent_ip()).await
        });
        phase!(phases, node, bed, "nri-restarts", &["nri"], || async {
            nri::nri_survives_restarts(&mut node, &bed, &agent_ip()).await
        });
        // Before the reaction phase turns NRI off: the class's values at creation.
        phase!(phases, node, bed, "classes", &["nri"], || async {
            let installed = installed.as_ref().expect("install passed");
            classes::classes_on_the_real_node(&mut node, &bed, installed).await
        });
        phase!(phases, node, bed, "reaction", &["install"], || async {
            nri::without_nri_the_reaction_holds(&mut node, &bed, &agent_ip(), nri_start).await
        });
        phase!(phases, node, bed, "observation", &["install"], || {
            observation::observation_on_a_real_kernel(&mut node, driver, &bed.client, bed.admin())
        });
        phase!(phases, node, bed, "relief", &["install"], || async {
            relief::relief_on_a_real_kernel(
                &mut node,
                driver,
                &bed.client,
                bed.admin(),
                &agent_ip(),
            )
            .await
        });
        // Before the token phase, which stops the controller (AgentsBlocked is its
        // word); the agent's pod is another one after it.
        phase!(phases, node, bed, "agents-blocked", &["install"], || {
            let installed = installed.as_mut().expect("install passed");
            agents_blocked::an_agent_that_cannot_pull_is_named_on_its_policy(
                &mut node, &bed, installed,
            )
        });
        // Before the token phase stops the controller (the switch to Kubelet mode is
        // its drain), and back to the installed policy for the phases after it.
        phase!(phases, node, bed, "numa", &["install"], || {
            let installed = installed.as_ref().expect("install passed");
            numa::pins_and_back_to_agent(&mut node, &bed, installed)
        });
        phase!(phases, node, bed, "token", &["install"], || {
            let installed = installed.as_mut().expect("install passed");
            install::its_token_reaches_only_its_own_config(&mut node, &bed, installed)
        });
        // Nothing of nodemem's is left on the node after it.
        phase!(phases, node, bed, "give-back", &["install"], || {
            let installed = installed.as_mut().expect("install passed");
            give_back::an_uninstall_gives_the_node_back(&mut node, &bed, installed)
        });
        // After the give-back, with nothing of nodemem's on the node: the chart's own
        // life, the controller and the hook as pods on the node (here only: the chart is
        // the same for every driver and version).
        phase!(phases, node, bed, "helm", &["give-back"], || {
            let installed = installed.as_ref().expect("install passed");
            helm::helm_install_and_uninstall_leave_nothing_behind(&mut node, &bed, installed)
        });
        // Then the v1.35.4 kubelet in the v1.36.3 one's place, on the node the helm
        // phase left with nothing of nodemem's: its phases, the Static Memory Manager
        // last (issue 57: a boot, a control plane and an image import less than a v1.35
        // node of its own).
        v135::phases_after_a_kubelet_swap(&mut phases, &mut node, &bed, &mut spec, &["helm"]).await;
        phases.finish();
    });
}

/// The phases every kubelet version shares once nodemem is installed: the values are
/// simulate's prediction, `explain` names the kubelet's `rules`, and the values survive
/// their owners (`repaired`: the windows that version's kubelet may open).
async fn nodemem_as_predicted(
    phases: &mut Phases,
    // `mut`: the phase macro takes `&mut node`, a reborrow here.
    mut node: &mut RealNode,
    bed: &Bed<'_>,
    installed: Option<&Installed>,
    rules: &str,
    repaired: owners::Repaired,
    events: owners::Events,
) {
    let installed = || installed.expect("install passed");
    let expected = phase!(
        phases,
        node,
        bed,
        "simulate-prediction",
        &["install"],
        || { install::it_writes_what_simulate_predicts(&mut *node, bed, installed()) }
    );
    phase!(phases, node, bed, "explain", &["install"], || async {
        explain_names_the_rules(bed, &node.name.clone(), rules)
    });
    phase!(
        phases,
        node,
        bed,
        "owners",
        &["simulate-prediction"],
        || {
            let expected = expected.expect("simulate-prediction passed");
            owners::values_survive_their_owners(
                &mut *node,
                bed,
                installed(),
                expected,
                repaired,
                events,
            )
        }
    );
}

/// `kubectl nodemem explain NODE`, as a user types it (the real kubectl, the plugin
/// on PATH), names the node's kubelet version and the rules nodemem computes it with.
fn explain_names_the_rules(bed: &Bed<'_>, node: &str, rules: &str) {
    let plugin_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        nodemem_e2e::nodemem(),
        plugin_dir.path().join("kubectl-nodemem"),
    )
    .unwrap();
    let bin = control_plane_binaries().expect("control plane binaries");
    let out = std::process::Command::new(&bin.kubectl)
        .args(["nodemem", "explain", node])
        .env("KUBECONFIG", bed.admin())
        .env(
            "PATH",
            format!(
                "{}:{}",
                plugin_dir.path().display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("Kubelet:"))
        .unwrap_or_else(|| panic!("no Kubelet: line in\n{text}"));
    assert!(line.contains(rules), "{line}");
    eprintln!("{node}: {line}");
}

/// After a switch to `enforcement: Kubelet`: the node's config applied at a revision
/// past `superseded`, its `Applied` condition saying the kubelet enforces it
/// (`KubeletConfigured`), and the agent having restarted the kubelet (systemd's record
/// of the unit is a new invocation than `kubelet_before`); the config's status.
async fn kubelet_took_over(
    node: &mut RealNode,
    bed: &Bed<'_>,
    superseded: Option<&str>,
    kubelet_before: &str,
) -> nodemem_api::config::NodeMemoryConfigStatus {
    let name = node.name.clone();
    let status = config_applied(
        &bed.client,
        bed.admin(),
        &name,
        superseded,
        Duration::from_secs(300),
    )
    .await;
    let applied = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Applied")
        .expect("an Applied condition");
    assert_eq!(applied.reason, "KubeletConfigured", "{applied:?}");
    assert_ne!(
        kubelet_invocation(node),
        kubelet_before,
        "the agent did not restart the kubelet"
    );
    install::the_agent_runs_confined(node, "enforcement: Kubelet");
    status
}

/// Runs `command` on the node; it must succeed.
fn run_ok(node: &mut RealNode, command: &str) {
    let (out, code) = node.run(command).unwrap();
    assert_eq!(code, 0, "{command}: {out}");
}

/// systemd's invocation ID of `kubelet.service`: a new one each time it starts.
fn kubelet_invocation(node: &mut RealNode) -> String {
    let (out, code) = node
        .run("systemctl show kubelet.service -p InvocationID --value")
        .unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(!out.trim().is_empty(), "no invocation of kubelet.service");
    out.trim().to_string()
}

/// A workload pod runs on the node and its memory is where the kubelet put it.
async fn a_workload_runs(node: &mut RealNode, bed: &Bed<'_>, name: &str) {
    let driver = bed.driver;
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), "default");
    let pod: core::Pod = serde_json::from_value(json!({
        "metadata": {"name": "workload"},
        "spec": {
            "nodeName": name,
            "containers": [{
                "name": "w", "image": "nodemem.local/workload:1", "imagePullPolicy": "Never",
                "args": ["-allocate", "64Mi"],
                "resources": {"requests": {"memory": "128Mi"}, "limits": {"memory": "256Mi"}}
            }]
        }
    }))
    .unwrap();
    nodemem_testkit::clients::create_pod(&pods, &pod)
        .await
        .unwrap();
    let running = within(Duration::from_secs(180), || async {
        let p = pods.get("workload").await.ok()?;
        let status = p.status.as_ref()?;
        if status.phase.as_deref() != Some("Running") {
            return None;
        }
        let id = status
            .container_statuses
            .as_ref()?
            .first()?
            .container_id
            .clone()?;
        Some((p.metadata.uid.clone()?, id))
    })
    .await;
    let Some((uid, container_id)) = running else {
        let status = match pods.get("workload").await {
            Ok(p) => p.status.as_ref().map_or("no status".into(), pod_state),
            Err(e) => format!("not read: {e}"),
        };
        let (journal, _) = node
            .run("journalctl -u kubelet -u containerd --no-pager | grep -iE 'error|fail|warn' | tail -40")
            .unwrap_or_default();
        panic!(
            "pod workload not Running within {:?}: {status}\nnode journal:\n{journal}",
            paced(Duration::from_secs(180))
        );
    };
    let id = container_id
        .strip_prefix("containerd://")
        .expect("a containerd container ID");
    let dir = container_dir(driver, &pod_dir(driver, "Burstable", &uid), id);
    let (out, code) = node.run(&format!("cat {dir}/memory.current")).unwrap();
    assert_eq!(code, 0, "{out}");
    let current: u64 = out.trim().parse().expect(&out);
    assert!(
        current >= 64 << 20,
        "memory.current {current} holds the 64Mi the workload touched"
    );
}

/// Waits for the Node to be Ready (boot and join included).
async fn node_ready(client: &kube::Client, name: &str) {
    let nodes: Api<core::Node> = Api::all(client.clone());
    eventually(
        &format!("node {name} Ready"),
        Duration::from_secs(300),
        || async {
            let n = nodes.get_opt(name).await.ok().flatten()?;
            let ready = n
                .status?
                .conditions?
                .into_iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(())
        },
    )
    .await;
}

/// nodemem installed as users install it, its agent Ready on the node.
struct Installed {
    controller: Process,
    work: tempfile::TempDir,
    /// The policy as applied (a file in `work`).
    policy: PathBuf,
    image: String,
    agent_pod: String,
    agent_ip: String,
}

impl Installed {
    /// The agent's container as `simulate` names it (`namespace/pod/container`).
    fn agent_container(&self) -> String {
        format!("nodemem-system/{}/agent", self.agent_pod)
    }
}

/// nodemem as users install it: CRDs, `deploy/agent` and `deploy/controller` by kubectl,
/// the real controller (on the host, with its service account's token and
/// `controller_args`) deploying its agent DaemonSet with the project's image, and
/// `policy` for the node's pool. Returns once the agent's pod is Ready on the node.
async fn install_nodemem(
    cp: &ControlPlane,
    node: &mut RealNode,
    client: &kube::Client,
    policy_yaml: &str,
    controller_args: &[&str],
) -> Installed {
    let repo = repo_root();
    let admin = cp.admin_kubeconfig();
    for manifests in [
        "crds",
        "deploy/namespace.yaml",
        "deploy/agent",
        "deploy/controller",
    ] {
        kubectl(
            admin,
            &["apply", "-f", repo.join(manifests).to_str().unwrap()],
        )
        .unwrap();
    }
    nodemem_testkit::crds::install_dir(cp, &repo.join("crds"))
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let controller_kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let image = format!("nodemem.local/nodemem:{}", env!("CARGO_PKG_VERSION"));
    let mut args = vec![
        "controller".to_string(),
        "--kubeconfig".into(),
        controller_kubeconfig.display().to_string(),
        "--metrics-addr".into(),
        "127.0.0.1:0".into(),
        "--tick-seconds".into(),
        "1".into(),
        "--agent-image".into(),
        image.clone(),
        // The agent's escape attempts at start-up, for the_agent_runs_confined.
        "--agent-pod".into(),
        r#"{"env":[{"name":"NODEMEM_CONFINEMENT_PROBE","value":"1"}]}"#.into(),
    ];
    args.extend(controller_args.iter().map(|a| a.to_string()));
    // What deploy/install/controller.yaml writes beside the controller's flags: the
    // image its agent DaemonSet may run (nodemem-controller-agent-daemonset).
    nodemem_testkit::admission::write_agent_admission(admin, "nodemem-system", &args).unwrap();
    let controller = Process::spawn(
        "controller",
        nodemem_e2e::nodemem(),
        &args,
        &work.path().join("controller.log"),
    )
    .unwrap();
    let policy = work.path().join("policy.yaml");
    std::fs::write(&policy, policy_yaml).unwrap();
    kubectl(admin, &["apply", "-f", policy.to_str().unwrap()]).unwrap();

    // The DaemonSet's pod on the node, Running and Ready (its /readyz answers after
    // the first pass).
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "nodemem-system");
    let listed = ListParams::default().labels("app.kubernetes.io/name=nodemem-agent");
    let ready = within(Duration::from_secs(240), || async {
        let list = pods.list(&listed).await.ok()?;
        let p = list.items.into_iter().find(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.name.as_str())
        })?;
        let status = p.status.as_ref()?;
        let is_ready = status
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        is_ready.then(|| {
            (
                p.metadata.name.clone().unwrap(),
                status.pod_ip.clone().unwrap_or_default(),
            )
        })
    })
    .await;
    let Some((agent_pod, agent_ip)) = ready else {
        let list = pods.list(&listed).await.map(|l| {
            l.items
                .into_iter()
                .map(|p| (p.metadata.name, p.status))
                .collect::<Vec<_>>()
        });
        let (log, _) = node
            .run("tail -n 30 /var/log/pods/nodemem-system_nodemem-agent-*/agent/*.log; journalctl -u kubelet --no-pager | grep -i nodemem-agent | tail -15")
            .unwrap_or_default();
        panic!(
            "the agent DaemonSet's pod is not Ready on {} within {:?}: {list:?}\nnode:\n{log}\ncontroller:\n{}",
            node.name,
            paced(Duration::from_secs(240)),
            controller.log_tail(20)
        );
    };
    Installed {
        controller,
        work,
        policy,
        image,
        agent_pod,
        agent_ip,
    }
}

/// The agent's /metrics, scraped from the node (the pod network is the node's).
fn agent_metrics(node: &mut RealNode, agent_ip: &str) -> String {
    let (metrics, code) = scrape(node, agent_ip);
    assert_eq!(code, 0, "{metrics}");
    metrics
}

/// The same, or None while nothing listens (an agent restarting after a kill).
fn agent_metrics_if_up(node: &mut RealNode, agent_ip: &str) -> Option<String> {
    let (metrics, code) = scrape(node, agent_ip);
    (code == 0).then_some(metrics)
}

fn scrape(node: &mut RealNode, agent_ip: &str) -> (String, i32) {
    node.run(&format!(
        "exec 3<>/dev/tcp/{agent_ip}/9180 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"
    ))
    .unwrap()
}

/// One series of the agent's /metrics (0 when absent).
fn agent_metric(node: &mut RealNode, agent_ip: &str, series: &str) -> f64 {
    series_value(&agent_metrics(node, agent_ip), series)
}

/// One series' value in a scrape (0 when absent: a counter not yet counted).
fn series_value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Waits for the node's NodeMemoryConfig to report its current revision applied
/// (`Applied=True`), that revision not being `superseded` (one the test moved away
/// from: the controller may not have written the next one yet); its status.
async fn config_applied(
    client: &kube::Client,
    admin: &Path,
    name: &str,
    superseded: Option<&str>,
    timeout: Duration,
) -> nodemem_api::config::NodeMemoryConfigStatus {
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    within(timeout, || async {
        let c = configs.get_opt(name).await.ok().flatten()?;
        let status = c.status.clone()?;
        let applied = status
            .conditions
            .iter()
            .any(|x| x.type_ == "Applied" && x.status == "True");
        let current = Some(c.spec.revision.as_str());
        (status.observed_revision.as_deref() == current && current != superseded && applied)
            .then_some(status)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "NodeMemoryConfig {name} not applied within {timeout:?}: {:?}",
            kubectl(admin, &["get", "nodememoryconfig", name, "-o", "yaml"])
        )
    })
}

/// Where a QoS level's cgroup is on the node.
fn qos_level_dir(driver: Driver, level: &str) -> String {
    match (driver, level) {
        (Driver::Systemd, "kubepods") => "/sys/fs/cgroup/kubepods.slice".into(),
        (Driver::Systemd, q) => format!("/sys/fs/cgroup/kubepods.slice/kubepods-{q}.slice"),
        (Driver::Cgroupfs, "kubepods") => "/sys/fs/cgroup/kubepods".into(),
        (Driver::Cgroupfs, q) => format!("/sys/fs/cgroup/kubepods/{q}"),
    }
}

/// `nodemem simulate -o json` for the node's Node and pods as the apiserver has them
/// now, its kubelet configuration and, with `numa`, its NUMA topology.
fn simulate_node(
    admin: &Path,
    policy: &Path,
    work: &Path,
    driver: Driver,
    node: &str,
    numa: Option<&Path>,
) -> Value {
    let node_yaml = work.join("node.yaml");
    let pods_yaml = work.join("pods.yaml");
    std::fs::write(
        &node_yaml,
        kubectl(admin, &["get", "node", node, "-o", "yaml"]).unwrap(),
    )
    .unwrap();
    let field = format!("spec.nodeName={node}");
    std::fs::write(
        &pods_yaml,
        kubectl(
            admin,
            &[
                "get",
                "pods",
                "-A",
                "--field-selector",
                &field,
                "-o",
                "yaml",
            ],
        )
        .unwrap(),
    )
    .unwrap();
    // The node's kubelet configuration (its evictionHard), as the agent reads it.
    let kubelet_config = work.join("kubelet-config.yaml");
    std::fs::write(
        &kubelet_config,
        serde_json::to_string_pretty(&nodemem_testkit::real_node::kubelet_configuration(
            &RealNodeSpec::new(node, driver),
        ))
        .unwrap(),
    )
    .unwrap();
    let sim = std::process::Command::new(nodemem_e2e::nodemem())
        .args(["simulate", "--policy"])
        .arg(policy)
        .arg("--kubelet-config")
        .arg(&kubelet_config)
        .arg("--node")
        .arg(&node_yaml)
        .arg("--pods")
        .arg(&pods_yaml)
        .args(numa.iter().flat_map(|t| [Path::new("--numa"), *t]))
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    serde_json::from_slice(&sim.stdout).unwrap()
}

/// `nodemem simulate` for the node's Node and pods as the apiserver has them now, and
/// the pods' container IDs: every memory file nodemem computes, where the kubelet put
/// its cgroup, with the value simulate predicts (path -> (owner, value)). The agent's
/// own container is the root of its cgroup namespace, which the kernel does not let
/// it write (nodemem_cgroup::own): it keeps the runtime's.
async fn expected_files(
    client: &kube::Client,
    admin: &Path,
    policy: &Path,
    work: &Path,
    driver: Driver,
    node: &str,
    agent_container: &str,
) -> std::collections::BTreeMap<String, (String, String)> {
    let sim = simulate_node(admin, policy, work, driver, node, None);
    let predicted = nodemem_testkit::simulate::predicted_values(&sim);
    let unset = |file: &str| {
        if file == "memory.high" || file == "memory.max" {
            "max".to_string()
        } else {
            "0".to_string()
        }
    };
    let mut out = std::collections::BTreeMap::new();
    for level in ["kubepods", "burstable", "besteffort"] {
        let dir = qos_level_dir(driver, level);
        // memory.max of the levels is the kubelet's (node allocatable on kubepods).
        for file in ["memory.min", "memory.low", "memory.high"] {
            let want = predicted
                .get(&(level.to_string(), file.to_string()))
                .cloned()
                .unwrap_or_else(|| unset(file));
            out.insert(
                format!("{dir}/{file}"),
                (level.to_string(), as_the_kernel_holds(&want)),
            );
        }
    }
    for pod in sim["pods"].as_array().unwrap() {
        let ns = pod["namespace"].as_str().unwrap();
        let pod_name = pod["name"].as_str().unwrap();
        let live = Api::<core::Pod>::namespaced(client.clone(), ns)
            .get(pod_name)
            .await
            .unwrap();
        let slice = pod_dir(
            driver,
            pod["qosClass"].as_str().unwrap(),
            pod["uid"].as_str().unwrap(),
        );
        let mut cgroups = vec![(format!("{ns}/{pod_name}"), slice.clone())];
        let status = live.status.unwrap();
        // Running containers: the app containers and restartable sidecars (an init
        // container that finished has no cgroup any more).
        let running = status
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .chain(status.init_container_statuses.unwrap_or_default())
            .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
        for c in running {
            let id = c.container_id.unwrap_or_default();
            let id = id.trim_start_matches("containerd://");
            cgroups.push((
                format!("{ns}/{pod_name}/{}", c.name),
                container_dir(driver, &slice, id),
            ));
        }
        for (owner, dir) in cgroups {
            let own = owner == agent_container;
            for file in ["memory.min", "memory.low", "memory.high", "memory.max"] {
                let want = if own && file != "memory.max" {
                    unset(file)
                } else {
                    predicted
                        .get(&(owner.clone(), file.to_string()))
                        .cloned()
                        .unwrap_or_else(|| unset(file))
                };
                out.insert(
                    format!("{dir}/{file}"),
                    (owner.clone(), as_the_kernel_holds(&want)),
                );
            }
        }
    }
    out
}

/// The node's page size (x86_64).
const PAGE: u64 = 4096;

/// A memory file's value as the kernel holds it: bytes in whole pages (the kernel
/// stores a page count: `88000000` written reads back `87998464`, the kubelet's writes
/// as nodemem's, whose own plan compares the same way, `plan::holds`); `max` as it is.
/// `simulate` prints what is written; a request in decimal units (a drawn pod's
/// `88M`, issue 58) is where the two differ.
pub(crate) fn as_the_kernel_holds(value: &str) -> String {
    match value.trim().parse::<u64>() {
        Ok(bytes) => (bytes / PAGE * PAGE).to_string(),
        Err(_) => value.trim().to_string(),
    }
}

#[test]
fn a_value_is_compared_as_the_kernel_holds_it() {
    assert_eq!(as_the_kernel_holds("88000000"), "87998464");
    assert_eq!(as_the_kernel_holds("87998464\n"), "87998464");
    assert_eq!(as_the_kernel_holds("max"), "max");
    assert_ne!(
        as_the_kernel_holds("88000000"),
        as_the_kernel_holds("88002560")
    );
}

/// Polls the files on the node (one request per round) until each reads its value;
/// fails the test with `what` and every file that still does not after a minute.
fn node_values_become(node: &mut RealNode, wanted: &[(&String, &String)], what: &str) {
    let started = Instant::now();
    loop {
        let paths: Vec<&str> = wanted.iter().map(|(p, _)| p.as_str()).collect();
        let read = node_read_all(node, &paths);
        let wrong: Vec<String> = wanted
            .iter()
            .filter_map(|(p, want)| {
                let got = read.get(p.as_str()).cloned().unwrap_or_default();
                (got != **want).then(|| format!("{p}: {got}, predicted {want}"))
            })
            .collect();
        if wrong.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < paced(Duration::from_secs(60)),
            "{what} (path: read, predicted):\n{}",
            wrong.join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Reads files on the node in one request: path -> its first line, or `<unreadable>`
/// where it cannot be opened. The reads are bash's own (`read`): a `$(cat ...)` per
/// file was a fork and an exec each, 40 ms and more under TCG, seconds for the 60
/// files of a node's QoS pods, on every look of a wait (issue 57).
fn node_read_all(
    node: &mut RealNode,
    paths: &[&str],
) -> std::collections::BTreeMap<String, String> {
    let mut script = String::new();
    for p in paths {
        script.push_str(&format!(
            "v='<unreadable>'; {{ read -r v || :; }} 2>/dev/null < '{p}'; printf '%s\\t%s\\n' '{p}' \"$v\"\n"
        ));
    }
    let (out, code) = node.run(&script).unwrap();
    assert_eq!(code, 0, "{out}");
    out.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(p, v)| (p.to_string(), v.trim().to_string()))
        .collect()
}

async fn container_id(pods: &Api<core::Pod>, pod: &str) -> String {
    pods.get(pod)
        .await
        .ok()
        .and_then(|p| p.status?.container_statuses?.first()?.container_id.clone())
        .unwrap_or_default()
        .trim_start_matches("containerd://")
        .to_string()
}

/// The kubelet's own Memory QoS, as the reference: the `MemoryQoS` gate with
/// `memoryReservationPolicy: TieredReservation` and the policy's throttling factor.
fn kubelets_memory_qos(on: bool) -> Value {
    json!({
        "featureGates": {"MemoryQoS": on},
        "memoryThrottlingFactor": 0.9,
        "memoryReservationPolicy": if on { "TieredReservation" } else { "None" },
    })
}

/// Writes the node's kubelet configuration for `spec` and restarts the kubelet; waits
/// for the Node to be Ready again.
async fn restart_kubelet_with(node: &mut RealNode, spec: &RealNodeSpec, client: &kube::Client) {
    let config =
        serde_json::to_string_pretty(&nodemem_testkit::real_node::kubelet_configuration(spec))
            .unwrap();
    std::fs::write(node.share().join("kubelet-config.yaml"), config).unwrap();
    let before = node_clock(node);
    let skew = k8s_openapi::jiff::Timestamp::now().as_second() - before.as_second();
    if skew.abs() > 1 {
        let way = if skew > 0 { "behind" } else { "ahead of" };
        eprintln!(
            "{}: the node's clock is {} s {way} the host's",
            node.name,
            skew.abs()
        );
    }
    let (out, code) = node
        .run_within(
            "cp /mnt/nodemem/kubelet-config.yaml /var/lib/kubelet/config.yaml && systemctl restart kubelet && until systemctl is-active -q kubelet; do sleep 1; done",
            Duration::from_secs(120),
        )
        .unwrap();
    assert_eq!(code, 0, "{out}");
    node_ready_after_restart(node, client, before).await;
}

/// The node's own clock, to the second. The kubelet stamps its heartbeats with it, and
/// a TCG guest's clock is not the host's: a host time taken before a restart can be
/// after every heartbeat the restarted kubelet posts until its next full status report
/// (5 minutes when nothing changes).
fn node_clock(node: &mut RealNode) -> k8s_openapi::jiff::Timestamp {
    let (out, code) = node.run("date +%s").unwrap();
    assert_eq!(code, 0, "date: {out}");
    let seconds: i64 = out
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("the node's date {out:?}: {e}"));
    k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap()
}

/// The kubelet restarted at `restarted` (the node's clock, [`node_clock`], taken before
/// the restart: a kubelet that starts quickly has posted its first status by the time
/// the restart command returns) posts a heartbeat in a later second (heartbeats are
/// whole seconds; a new kubelet takes more than one to post, and the old one's in the
/// same second does not count): waits for Ready then.
async fn node_ready_after_restart(
    node: &mut RealNode,
    client: &kube::Client,
    restarted: k8s_openapi::jiff::Timestamp,
) {
    let nodes: Api<core::Node> = Api::all(client.clone());
    let name = node.name.clone();
    let budget = Duration::from_secs(180);
    let ready = within(budget, || async {
        let n = nodes.get_opt(&name).await.ok().flatten()?;
        n.status?
            .conditions?
            .into_iter()
            .any(|c| {
                c.type_ == "Ready"
                    && c.status == "True"
                    && c.last_heartbeat_time.is_some_and(|t| t.0 > restarted)
            })
            .then_some(())
    })
    .await;
    if ready.is_none() {
        let condition = nodes
            .get_opt(&name)
            .await
            .ok()
            .flatten()
            .and_then(|n| n.status?.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"));
        let now = node_clock(node);
        panic!(
            "the kubelet back and the node Ready: not within {:?} of {restarted} (the node's clock; now {now} there, {} here); the Ready condition: {condition:?}",
            paced(budget),
            k8s_openapi::jiff::Timestamp::now()
        );
    }
}

/// The label of the pods a phase starts for itself (workloads, probes): they are removed
/// after the phase, whatever its outcome, so that a failed phase's pods never run into
/// the next one's (a `grows` pod left by a failed observation phase, still holding
/// 200Mi, was relieved in the relief phase and counted there).
pub(crate) const PHASE_POD: &str = "nodemem.test/phase-pod";

/// After a phase: when it failed, the node's side of the story in the test's output;
/// then the phase's own pods removed (and gone from the node) before the next begins.
async fn after_phase(phases: &Phases, node: &mut RealNode, bed: &Bed<'_>) {
    if phases.last_failed() {
        eprintln!("{}", diagnosis(node, bed));
    }
    remove_pods_or_say(bed, &ListParams::default().labels(PHASE_POD)).await;
}

/// The node's own CPU accounting: microseconds of CPU by whom (the kubelet, containerd
/// and the shims in its unit, every pod, the nodemem agent's container among them, the
/// harness's runner, all of the guest). One script through the runner, its reads
/// builtins but for the agent's `pgrep`. Empty where the node did not answer.
fn guest_cpu(node: &mut RealNode) -> std::collections::BTreeMap<String, u64> {
    const SCRIPT: &str = r#"u() { local l; while read -r l; do case $l in "usage_usec "*) echo "$1 ${l#usage_usec }"; return;; esac; done < "/sys/fs/cgroup/$2/cpu.stat" 2>/dev/null; }
u kubelet system.slice/kubelet.service
u containerd system.slice/containerd.service
u runner system.slice/nodemem-node-runner.service
if [ -d /sys/fs/cgroup/kubepods.slice ]; then u pods kubepods.slice; else u pods kubepods; fi
a=$(pgrep -o -x nodemem) && read -r c < "/proc/$a/cgroup" && u agent "${c#0::/}"
read -r _ us ni sy _ _ ir so _ < /proc/stat; echo "all $(( (us + ni + sy + ir + so) * 10000 ))""#;
    let Ok((out, 0)) = node.run(SCRIPT) else {
        return Default::default();
    };
    out.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Prints a phase's guest CPU by whom (`guest_cpu` before and after it): the node
/// tier's time follows the node's CPU, and this line says whose it was (issue 57).
fn say_where_the_cpu_went(
    node: &str,
    phase: &str,
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) {
    let spent = |k: &str| match (before.get(k), after.get(k)) {
        (Some(b), Some(a)) => Some(a.saturating_sub(*b) as f64 / 1e6),
        _ => None,
    };
    let Some(all) = spent("all") else { return };
    let parts: Vec<String> = ["kubelet", "containerd", "pods", "agent", "runner"]
        .iter()
        .filter_map(|k| spent(k).map(|s| format!("{k} {s:.1}")))
        .collect();
    eprintln!(
        "== {node}: {phase}: the guest's CPU {all:.1} s: {}",
        parts.join(", ")
    );
}

/// What explains a failed phase, the node's own word first (CI shows a part of a long
/// output: its start and its end): the kubelet's and containerd's errors and last
/// lines, the node's memory and kernel, the processes named kubelet, then the pods and
/// the events of those that do not run (not `describe`: 60 lines a pod buried the
/// journal, issue 57), the agent's log.
fn diagnosis(node: &mut RealNode, bed: &Bed<'_>) -> String {
    let mut out = format!("==== {}: the node after the failed phase\n", node.name);
    for (what, script) in [
        (
            "kubelet and containerd: errors and warnings of the last 15 minutes",
            "journalctl -u kubelet -u containerd --no-pager --since -15min | grep -E ' [EW][0-9]{4} |level=(error|warning)' | tail -n 40",
        ),
        ("kubelet: last lines", "journalctl -u kubelet --no-pager -n 25"),
        ("containerd: last lines", "journalctl -u containerd --no-pager -n 25"),
        ("memory and the kernel", "free -m; cat /proc/pressure/memory /proc/pressure/cpu; dmesg | tail -n 10"),
        // What the agent takes for the host's kubelet (a second one is AmbiguousKubelet).
        (
            "processes named kubelet",
            "for d in /proc/[0-9]*; do if [ \"$(cat $d/comm 2>/dev/null)\" = kubelet ]; then echo \"${d#/proc/} ppid $(cut -d' ' -f4 $d/stat) state $(cut -d' ' -f3 $d/stat) cgroup $(cat $d/cgroup) exe $(readlink $d/exe)\"; fi; done",
        ),
    ] {
        out.push_str(&format!("---- {what}\n{}\n", said(node, script)));
    }
    let admin = bed.admin();
    let pods =
        kubectl(admin, &["get", "pods", "-A", "-o", "wide"]).unwrap_or_else(|e| e.to_string());
    out.push_str(&format!("---- pods\n{pods}\n"));
    let not_running = kubectl(
        admin,
        &[
            "get",
            "pods",
            "-A",
            "--field-selector",
            "status.phase!=Running",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name}{\"\\n\"}{end}",
        ],
    )
    .unwrap_or_default();
    for (namespace, pod) in not_running.lines().filter_map(|l| l.split_once(' ')) {
        let selector = format!("involvedObject.name={pod}");
        let events = kubectl(
            admin,
            &[
                "get",
                "events",
                "-n",
                namespace,
                "--field-selector",
                &selector,
            ],
        )
        .unwrap_or_else(|e| e.to_string());
        out.push_str(&format!(
            "---- {namespace}/{pod} (not Running): its events\n{events}\n"
        ));
    }
    let agent = said(
        node,
        "tail -n 25 /var/log/pods/nodemem-system_*/agent/*.log",
    );
    out.push_str(&format!("---- the agent: last lines\n{agent}\n"));
    out
}

/// What `script` printed on the node, or why the node did not answer.
fn said(node: &mut RealNode, script: &str) -> String {
    match node.run(script) {
        Ok((text, _)) => text,
        Err(e) => format!("(the node did not answer: {e})"),
    }
}

/// Deletes the pods of `default` that `listed` selects and waits until the kubelet has
/// finished them (a short grace, not a forced deletion: the object goes only once the
/// node let the pod go). The names of those still there after the budget, if any.
pub(crate) async fn remove_pods(
    client: &kube::Client,
    listed: &ListParams,
) -> Result<(), Vec<String>> {
    let api: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    let delete = kube::api::DeleteParams {
        grace_period_seconds: Some(1),
        ..Default::default()
    };
    if let Err(e) = api.delete_collection(&delete, listed).await {
        eprintln!("pods not deleted: {e}");
    }
    let gone = within(Duration::from_secs(180), || async {
        api.list(listed).await.ok()?.items.is_empty().then_some(())
    })
    .await;
    match gone {
        Some(()) => Ok(()),
        None => Err(api
            .list(listed)
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter_map(|p| p.metadata.name)
                    .collect()
            })
            .unwrap_or_else(|e| vec![e.to_string()])),
    }
}

/// [`remove_pods`] where what is left is only reported: the next phase goes on, and
/// fails with this line above it if the pods are in its way.
async fn remove_pods_or_say(bed: &Bed<'_>, listed: &ListParams) {
    if let Err(left) = remove_pods(&bed.client, listed).await {
        eprintln!(
            "pods not gone within {:?}: {left:?}",
            paced(Duration::from_secs(180))
        );
    }
}

/// Pods of every QoS class for a node, named with `tag`: Guaranteed; Burstable with an
/// init container, a restartable sidecar and a container without a limit; BestEffort;
/// pod-level resources; and, with `opted_out`, a Burstable pod annotated
/// `nodemem.io/memory-qos: disabled` (nodemem's; the kubelet has no such thing).
///
/// The Guaranteed pod's CPU is [`GUARANTEED_CPU`]: its limit is the pod's and its
/// container's cpu.max, and `runc init` runs inside them.
fn qos_pods(node: &str, tag: &str, opted_out: bool) -> Vec<core::Pod> {
    let image = "nodemem.local/workload:1";
    let c = |name: &str, allocate: &str, resources: Value| {
        json!({"name": name, "image": image, "imagePullPolicy": "Never",
               "args": ["-allocate", allocate], "resources": resources})
    };
    let mem = |req: &str, lim: Option<&str>| match lim {
        Some(l) => json!({"requests": {"memory": req, "cpu": "10m"}, "limits": {"memory": l}}),
        None => json!({"requests": {"memory": req, "cpu": "10m"}}),
    };
    let mut pods = vec![
        json!({"metadata": {"name": format!("guaranteed-{tag}")}, "spec": {"nodeName": node,
            "containers": [c("g", "16Mi", json!({"requests": {"memory": "64Mi", "cpu": GUARANTEED_CPU}, "limits": {"memory": "64Mi", "cpu": GUARANTEED_CPU}}))]}}),
        json!({"metadata": {"name": format!("burstable-{tag}")}, "spec": {"nodeName": node,
            "initContainers": [
                {"name": "init", "image": image, "imagePullPolicy": "Never", "args": ["-allocate", "8Mi", "-exit"],
                 "resources": mem("24Mi", Some("48Mi"))},
                {"name": "sidecar", "image": image, "imagePullPolicy": "Never", "args": ["-allocate", "8Mi"],
                 "restartPolicy": "Always", "resources": mem("16Mi", Some("64Mi"))}
            ],
            "containers": [c("app", "32Mi", mem("32Mi", Some("128Mi"))), c("unlimited", "8Mi", mem("16Mi", None))]}}),
        json!({"metadata": {"name": format!("besteffort-{tag}")}, "spec": {"nodeName": node,
            "containers": [c("be", "8Mi", json!({}))]}}),
        json!({"metadata": {"name": format!("pod-level-{tag}")}, "spec": {"nodeName": node,
            "resources": {"requests": {"memory": "96Mi", "cpu": "20m"}, "limits": {"memory": "192Mi"}},
            "containers": [c("a", "16Mi", mem("32Mi", None)), c("b", "8Mi", json!({}))]}}),
    ];
    if opted_out {
        pods.push(json!({"metadata": {"name": format!("opted-out-{tag}"),
                "annotations": {"nodemem.io/memory-qos": "disabled"}},
            "spec": {"nodeName": node, "containers": [c("o", "8Mi", mem("32Mi", Some("96Mi")))]}}));
    }
    pods.into_iter()
        .map(|p| serde_json::from_value(p).unwrap())
        .collect()
}

/// The CPU of the test's Guaranteed pods (request and limit). The limit becomes the
/// pod's and the container's cpu.max, and `runc init` (the runtime's own Go program,
/// about a second of CPU under TCG) runs inside them before the container's process:
/// at 20m (2 ms in each 100 ms) a Guaranteed pod took 82 s to start on a real node
/// where a Burstable one took 7 s; at 250m, 9 s. Four such pods at once stay within the
/// node's two CPUs.
const GUARANTEED_CPU: &str = "250m";

/// Creates the pods in `default` and waits until each is Running with every container
/// started (init containers done, sidecars up).
async fn start_pods(client: &kube::Client, pods: &[core::Pod]) {
    let api: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    for p in pods {
        nodemem_testkit::clients::create_pod(&api, p).await.unwrap();
    }
    for p in pods {
        let name = p.metadata.name.clone().unwrap();
        let ready = within(Duration::from_secs(240), || async {
            let status = api.get(&name).await.ok()?.status?;
            let running =
                |s: &core::ContainerStatus| s.state.as_ref().is_some_and(|s| s.running.is_some());
            let all_running = status.container_statuses.as_ref()?.iter().all(running);
            (status.phase.as_deref() == Some("Running") && all_running).then_some(())
        })
        .await;
        if ready.is_none() {
            let state = match api.get(&name).await {
                Ok(p) => p.status.as_ref().map_or("no status".into(), pod_state),
                Err(e) => format!("not read: {e}"),
            };
            panic!(
                "pod {name} not Running with all its containers within {:?}: {state}",
                paced(Duration::from_secs(240))
            );
        }
    }
}

/// A pod's state in a line: its phase, the conditions not true (with their reasons),
/// each container's state (a status's Debug is 2,000 characters on one line).
fn pod_state(status: &core::PodStatus) -> String {
    let conditions = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.status != "True");
    let conditions: Vec<String> = conditions
        .map(|c| {
            format!(
                "{} ({})",
                c.type_,
                c.reason.as_deref().unwrap_or("no reason")
            )
        })
        .collect();
    let statuses = [&status.init_container_statuses, &status.container_statuses];
    let containers: Vec<String> = statuses
        .into_iter()
        .flatten()
        .flatten()
        .map(|c| {
            let state = c.state.as_ref();
            let said = match (
                state.and_then(|s| s.waiting.as_ref()),
                state.and_then(|s| s.terminated.as_ref()),
            ) {
                (Some(w), _) => format!(
                    "waiting: {} {}",
                    w.reason.as_deref().unwrap_or(""),
                    w.message.as_deref().unwrap_or("")
                ),
                (_, Some(t)) => format!(
                    "terminated: {} exit {}",
                    t.reason.as_deref().unwrap_or(""),
                    t.exit_code
                ),
                _ if state.is_some_and(|s| s.running.is_some()) => "running".to_string(),
                _ => "no state".to_string(),
            };
            format!("{}: {}", c.name, said.trim())
        })
        .collect();
    format!(
        "phase {}; not true: [{}]; containers: [{}]",
        status.phase.as_deref().unwrap_or("none"),
        conditions.join(", "),
        containers.join("; ")
    )
}

/// The notes of the Events of `reason` on pod `pod` in `default`.
async fn pod_events(client: &kube::Client, pod: &str, reason: &str) -> Vec<String> {
    nodemem_testkit::clients::events_about(client, "default", pod, reason)
        .await
        .into_iter()
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// Patches policy `real` with `patch` (merge JSON) and waits for the node to apply the
/// new revision; its status.
async fn repolicy(
    client: &kube::Client,
    admin: &Path,
    node: &str,
    patch: &str,
) -> nodemem_api::config::NodeMemoryConfigStatus {
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    let before = configs.get(node).await.unwrap().spec.revision;
    kubectl(
        admin,
        &["patch", "nmp", "real", "--type=merge", "-p", patch],
    )
    .unwrap();
    config_applied(client, admin, node, Some(&before), Duration::from_secs(180)).await
}

/// A workload pod: its name, its arguments, its memory request and limit.
type Workload<'a> = (&'a str, &'a [&'a str], &'a str, &'a str);

/// A Burstable pod of the phase (`PHASE_POD`) on `node`: one container `w` running the
/// workload with `args`, its memory `request` and `limit`.
pub(crate) fn workload_pod(
    node: &str,
    name: &str,
    args: &[&str],
    request: &str,
    limit: &str,
) -> core::Pod {
    let resources = json!({"requests": {"memory": request, "cpu": "10m"},
        "limits": {"memory": limit}});
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {PHASE_POD: "true"}}, "spec": {"nodeName": node,
        "containers": [{"name": "w", "image": "nodemem.local/workload:1",
            "imagePullPolicy": "Never", "args": args, "resources": resources}]}}),
    )
    .unwrap()
}

/// Starts workload pods in `default` (one container `w` each) and returns their
/// container cgroups, in order.
async fn start_workloads(
    client: &kube::Client,
    node: &str,
    driver: Driver,
    workloads: &[Workload<'_>],
) -> Vec<String> {
    let pods: Vec<core::Pod> = workloads
        .iter()
        .map(|(pod, args, request, limit)| workload_pod(node, pod, args, request, limit))
        .collect();
    start_pods(client, &pods).await;
    let api: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    let mut dirs = Vec::new();
    for (pod, ..) in workloads {
        let uid = api.get(pod).await.unwrap().metadata.uid.unwrap();
        let id = container_id(&api, pod).await;
        dirs.push(container_dir(
            driver,
            &pod_dir(driver, "Burstable", &uid),
            &id,
        ));
    }
    dirs
}
