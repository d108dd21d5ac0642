//! The agent DaemonSet the controller owns (pure builder): scheduled on the nodes some
//! policy selects (node affinity built from the policies' selectors), and on nodes that
//! still have a NodeMemoryConfig (a node that left every pool keeps its agent until the
//! agent has given back what it set), with the host mounts, identity, security context
//! and probes the agent needs.

use k8s_openapi::api::apps::v1::DaemonSet;
use nodemem_api::policy::{NodeSelector, SelectorOperator};
use serde_json::{json, Value};

use crate::agents::modes::EnforcementModes;
use crate::agents::pod::AgentPod;
use crate::world::World;

/// How the agents are deployed (the controller's flags).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentDeploy {
    pub namespace: String,
    pub image: String,
    /// Secrets in `namespace` the agents' pods pull `image` with.
    pub image_pull_secrets: Vec<String>,
    /// Label `namespace` privileged for PodSecurity ([`pod_security_labels`]).
    pub pod_security_labels: bool,
    /// The controller's Deployment (name, uid), the DaemonSet's owner: Argo CD shows
    /// the agents under it, and they go with it.
    pub owner: Option<(String, String)>,
    pub cgroup_driver: Option<String>,
    /// The kubelet's --config-dir on the hosts, for `enforcement: Kubelet`.
    pub kubelet_config_dir: Option<String>,
    pub kubelet_restart_command: Option<String>,
    /// The kubelet's systemd unit, restarted through systemd's D-Bus API.
    pub kubelet_restart_unit: Option<String>,
    /// The agents' state directory on the hosts.
    pub state_dir: String,
    pub nri: AgentNri,
    /// The enforcement modes the agents are deployed for: each privilege only where
    /// one of them needs it.
    pub enforcement: EnforcementModes,
    /// Resources, placement, priority, metadata, log level, environment.
    pub pod: AgentPod,
}

impl AgentDeploy {
    /// The agents write cgroup files only under `Agent` (under Kubelet and Observe they
    /// write none: the kubelet enforces, or nothing is enforced).
    fn writes_cgroups(&self) -> bool {
        self.enforcement.agent
    }

    /// systemd's sockets: under `Agent` with a driver that may be systemd's (the values
    /// are set as unit properties too), under `Kubelet` to restart the kubelet's unit.
    fn talks_to_systemd(&self) -> bool {
        (self.enforcement.agent && self.cgroup_driver.as_deref() != Some("cgroupfs"))
            || (self.enforcement.kubelet && self.kubelet_restart_unit.is_some())
    }

    /// NRI answers a new container with the values `Agent` writes: without that mode
    /// the socket is not mounted and the runtimes' records name new containers.
    fn nri(&self) -> AgentNri {
        if self.enforcement.agent {
            self.nri
        } else {
            AgentNri::Off
        }
    }
}

/// The agents' `--nri`: what the DaemonSet mounts follows from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentNri {
    #[default]
    Auto,
    On,
    Off,
}

impl AgentNri {
    fn flag(self) -> &'static str {
        match self {
            AgentNri::Auto => "auto",
            AgentNri::On => "on",
            AgentNri::Off => "off",
        }
    }

    /// NRI's socket directory is mounted unless off.
    fn mounts_socket(self) -> bool {
        self != AgentNri::Off
    }

    /// The runtimes' container records are mounted unless NRI alone is chosen.
    fn mounts_records(self) -> bool {
        self != AgentNri::On
    }
}

pub const NAME: &str = "nodemem-agent";

/// One node-affinity term per policy selector (terms are ORed); matchLabels become
/// `In` requirements. An empty selector selects every node.
fn terms(world: &World) -> Vec<Value> {
    let mut terms = Vec::new();
    let mut every_node = false;
    for p in world.policies.values() {
        let s: &NodeSelector = &p.spec.node_selector;
        // A selector the apiserver's node affinity would refuse (a key no node can
        // carry, which admission refuses too, but an older CRD may have stored) places
        // no agent: one policy must never stop the DaemonSet for every pool. Such a
        // policy is never accepted and governs no node.
        if !nodemem_api::convert::to_selector(s).validate("").is_empty() {
            continue;
        }
        if s.match_labels.is_empty() && s.match_expressions.is_empty() {
            every_node = true;
            continue;
        }
        let mut expressions: Vec<Value> = s
            .match_labels
            .iter()
            .map(|(k, v)| json!({"key": k, "operator": "In", "values": [v]}))
            .collect();
        for e in &s.match_expressions {
            let op = match e.operator {
                SelectorOperator::In => "In",
                SelectorOperator::NotIn => "NotIn",
                SelectorOperator::Exists => "Exists",
                SelectorOperator::DoesNotExist => "DoesNotExist",
            };
            let mut x = json!({"key": e.key, "operator": op});
            if !e.values.is_empty() {
                x["values"] = json!(e.values);
            }
            expressions.push(x);
        }
        terms.push(json!({"matchExpressions": expressions}));
    }
    if every_node {
        return Vec::new();
    }
    // Nodes with a config that no policy selects any more keep their agent until it
    // reports the release (the field selector takes one name per term; these are few).
    let selectors: Vec<_> = world
        .policies
        .values()
        .map(|p| nodemem_api::convert::to_selector(&p.spec.node_selector))
        .collect();
    for node in world.configs.keys() {
        let labels = world.nodes.get(node);
        let selected = labels.is_some_and(|l| selectors.iter().any(|s| s.matches(l)));
        if !selected {
            terms.push(json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}));
        }
    }
    terms
}

/// containerd's bundles of the CRI's containers (`<state>/io.containerd.runtime.v2.task/
/// <namespace>`, namespace k8s.io).
const CONTAINERD_TASKS: &str = "/run/containerd/io.containerd.runtime.v2.task/k8s.io";
/// CRI-O's containers (`<runroot>/overlay-containers`).
const CRIO_CONTAINERS: &str = "/run/containers/storage/overlay-containers";
/// Where containerd and CRI-O listen for NRI plugins (`/var/run/nri/nri.sock`).
const NRI_DIR: &str = "/var/run/nri";

/// The PodSecurity labels the agents' namespace needs: the agents mount host paths and
/// share the host's PID namespace, which only the privileged level admits. An apply
/// patch (a label another manager set is a conflict, not overwritten).
pub fn pod_security_labels(namespace: &str) -> Value {
    let labels: serde_json::Map<String, Value> = ["enforce", "audit", "warn"]
        .iter()
        .map(|mode| {
            (
                format!("pod-security.kubernetes.io/{mode}"),
                Value::from("privileged"),
            )
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace, "labels": labels}})
}

/// The DaemonSet for the current policies and configs.
/// Where the agents run: the nodes the policies select and those still holding a config.
fn node_affinity(world: &World) -> Value {
    let terms = terms(world);
    let no_policy = world.policies.is_empty() && world.configs.is_empty();
    if no_policy {
        // No policy selects any node: a term no node satisfies.
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nodemem.io/no-policy-selects-this", "operator": "Exists"}]}]}}})
    } else if terms.is_empty() {
        json!({})
    } else {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})
    }
}

/// The controller's Deployment as the DaemonSet's owner, when known.
fn owner_references(d: &AgentDeploy) -> Vec<Value> {
    d.owner
        .iter()
        .map(|(name, uid)| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid,
                "controller": false, "blockOwnerDeletion": false})
        })
        .collect()
}

/// The agent's arguments, mounts and host volumes: what every mode reads (the cgroup
/// tree, /sys, /proc, the kubelet through its process), the state directory, and what
/// the install's modes add ([`AgentDeploy::writes_cgroups`],
/// [`AgentDeploy::talks_to_systemd`], NRI and the runtimes' records, the kubelet's).
fn host_access(d: &AgentDeploy) -> (Vec<String>, Vec<Value>, Vec<Value>) {
    let nri = d.nri();
    let mut args = vec![
        "agent".to_string(),
        "--log-format=json".into(),
        "--metrics-addr=0.0.0.0:9180".into(),
        "--cgroup-root=/host/sys/fs/cgroup".into(),
        "--sys-root=/host/sys".into(),
        "--proc-root=/host/proc".into(),
        "--state-dir=/var/lib/nodemem".into(),
        format!("--nri={}", nri.flag()),
    ];
    if let Some(driver) = &d.cgroup_driver {
        args.push(format!("--cgroup-driver={driver}"));
    }
    let mut mounts = vec![
        json!({"name": "cgroup", "mountPath": "/host/sys/fs/cgroup", "readOnly": !d.writes_cgroups()}),
        json!({"name": "sys", "mountPath": "/host/sys", "readOnly": true}),
        json!({"name": "proc", "mountPath": "/host/proc", "readOnly": true}),
        json!({"name": "state", "mountPath": "/var/lib/nodemem"}),
    ];
    let mut volumes = vec![
        json!({"name": "cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}}),
        json!({"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}}),
        json!({"name": "proc", "hostPath": {"path": "/proc", "type": "Directory"}}),
        json!({"name": "state", "hostPath": {"path": d.state_dir, "type": "DirectoryOrCreate"}}),
    ];
    if d.talks_to_systemd() {
        args.push("--systemd-run-dir=/host/run".into());
        // systemd's sockets (the system bus's, systemd's own): on a systemd-driver node
        // systemd re-applies every memory setting of a slice or scope from its own
        // record on reload or on any property change (the kubelet changes the QoS
        // slices' every minute), so the agent sets its values as unit properties too,
        // as runc does. Directories, not the sockets: a restarted bus makes a new one.
        // Read-only still connects (a socket is not written through the mount).
        mounts.push(json!({"name": "dbus", "mountPath": "/host/run/dbus", "readOnly": true}));
        mounts.push(json!({"name": "systemd", "mountPath": "/host/run/systemd", "readOnly": true}));
        // OrCreate: a node without a bus daemon, or without systemd (cgroupfs driver),
        // still runs the agent; it then writes the files only.
        volumes.push(
            json!({"name": "dbus", "hostPath": {"path": "/run/dbus", "type": "DirectoryOrCreate"}}),
        );
        volumes.push(json!({"name": "systemd", "hostPath": {"path": "/run/systemd", "type": "DirectoryOrCreate"}}));
    }
    if nri.mounts_socket() {
        // The runtime's NRI socket: its directory, so that a restarted runtime's new
        // socket is seen; read-only still connects. OrCreate: a node whose runtime has
        // NRI off still runs the agent, which reports the reaction as its path.
        args.push(format!("--nri-socket=/host{NRI_DIR}/nri.sock"));
        mounts
            .push(json!({"name": "nri", "mountPath": format!("/host{NRI_DIR}"), "readOnly": true}));
        volumes.push(
            json!({"name": "nri", "hostPath": {"path": NRI_DIR, "type": "DirectoryOrCreate"}}),
        );
    }
    if nri.mounts_records() {
        args.push(format!("--containerd-tasks-dir=/host{CONTAINERD_TASKS}"));
        args.push(format!("--crio-containers-dir=/host{CRIO_CONTAINERS}"));
        // The container runtime's specs of its containers: a new container's cgroup is
        // named from its spec's annotations the moment it appears, instead of seconds
        // later when the kubelet reports the container in the pod status. containerd's
        // bundles hold each container's root file system mount: HostToContainer lets
        // the host's unmounts reach the agent's view, so the agent never keeps a
        // removed container's file system mounted (with no propagation the copies made
        // when the pod started would stay until it restarts).
        mounts.push(
            json!({"name": "containerd-tasks", "mountPath": format!("/host{CONTAINERD_TASKS}"),
               "readOnly": true, "mountPropagation": "HostToContainer"}),
        );
        mounts.push(
            json!({"name": "crio-containers", "mountPath": format!("/host{CRIO_CONTAINERS}"),
               "readOnly": true, "mountPropagation": "HostToContainer"}),
        );
        // OrCreate: a node runs one runtime; the other's directory is made empty on
        // the host's /run (a tmpfs) and never read.
        volumes.push(json!({"name": "containerd-tasks", "hostPath": {"path": CONTAINERD_TASKS, "type": "DirectoryOrCreate"}}));
        volumes.push(json!({"name": "crio-containers", "hostPath": {"path": CRIO_CONTAINERS, "type": "DirectoryOrCreate"}}));
    }
    if d.enforcement.kubelet {
        kubelet_access(d, &mut args, &mut mounts, &mut volumes);
    }
    (args, mounts, volumes)
}

/// What `enforcement: Kubelet` adds: the kubelet's --config-dir when given (otherwise
/// the drop-in is written through the kubelet's root), and how to restart it.
fn kubelet_access(
    d: &AgentDeploy,
    args: &mut Vec<String>,
    mounts: &mut Vec<Value>,
    volumes: &mut Vec<Value>,
) {
    // Without it the agent's kubelet reader writes nothing of the kubelet's.
    args.push("--kubelet-writes".into());
    if let Some(dir) = &d.kubelet_config_dir {
        args.push("--kubelet-config-dir=/host/kubelet-config-dir".into());
        mounts.push(json!({"name": "kubelet-config-dir", "mountPath": "/host/kubelet-config-dir"}));
        volumes.push(json!({"name": "kubelet-config-dir", "hostPath": {"path": dir, "type": "DirectoryOrCreate"}}));
    }
    if let Some(unit) = &d.kubelet_restart_unit {
        args.push(format!("--kubelet-restart-unit={unit}"));
    } else if let Some(cmd) = &d.kubelet_restart_command {
        args.push(format!("--kubelet-restart-command={cmd}"));
    }
    if d.kubelet_restart_unit.is_some() || d.kubelet_restart_command.is_some() {
        // The kubelet's healthz listens on the host's loopback, which the agent's pod
        // (not on the host network) cannot reach; the unit restart waits for a new
        // kubelet process that stays up instead (the pod has hostPID).
        args.push("--kubelet-healthz-url=off".into());
    }
}

pub fn agent_daemonset(d: &AgentDeploy, world: &World) -> DaemonSet {
    let affinity = d.pod.affinity(&node_affinity(world));
    let (mut args, mut mounts, mut volumes) = host_access(d);
    // A team's own, after the controller's (checked when --agent-pod was read).
    args.extend(d.pod.extra_args.iter().cloned());
    mounts.extend(d.pod.extra_volume_mounts.iter().map(|m| json!(m)));
    volumes.extend(d.pod.extra_volumes.iter().map(|v| json!(v)));
    let mut security = json!({"runAsUser": 0, "readOnlyRootFilesystem": true,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"], "add": ["SYS_PTRACE"]},
        "seccompProfile": {"type": "RuntimeDefault"},
        "appArmorProfile": d.pod.app_armor()});
    if let Some(selinux) = &d.pod.se_linux_options {
        security["seLinuxOptions"] = json!(selinux);
    }
    let labels = json!({"app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": "nodemem-controller"});
    let mut pod_metadata = json!({"labels": d.pod.labels(&labels)});
    if !d.pod.pod_annotations.is_empty() {
        pod_metadata["annotations"] = json!(d.pod.pod_annotations);
    }
    let probe = |path: &str| json!({"httpGet": {"path": path, "port": 9180}, "periodSeconds": 10});
    let owners = owner_references(d);
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": d.namespace, "labels": labels,
            "ownerReferences": owners},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "updateStrategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": d.pod.max_unavailable}},
            "template": {
                "metadata": pod_metadata,
                "spec": {
                    "serviceAccountName": NAME,
                    "imagePullSecrets": d.image_pull_secrets.iter()
                        .map(|name| json!({"name": name})).collect::<Vec<_>>(),
                    // The kubelet process is found in the host's PID namespace: its
                    // command line names its configuration, read through its root
                    // (no mount per layout), and enforcement: Kubelet notices a restart
                    // it did not run.
                    "hostPID": true,
                    "priorityClassName": (!d.pod.priority_class_name.is_empty())
                        .then_some(&d.pod.priority_class_name),
                    "affinity": affinity,
                    "nodeSelector": d.pod.node_selector,
                    "tolerations": d.pod.tolerations,
                    "containers": [{
                        "name": "agent",
                        "image": d.image,
                        "args": args,
                        "env": d.pod.env(),
                        "ports": [{"name": "metrics", "containerPort": 9180}],
                        "livenessProbe": probe("/healthz"),
                        "readinessProbe": probe("/readyz"),
                        "resources": d.pod.resources,
                        // Root writes root-owned cgroup files without any capability.
                        // SYS_PTRACE, for the agent's kubelet reader alone (the agent
                        // drops it once the reader runs): the kernel lets a process
                        // read another's root (/proc/<pid>/root) only with it, as the
                        // kubelet holds every capability (ptrace_may_access, read
                        // mode). Unconfined
                        // AppArmor: the runtime's default profile allows ptrace reads
                        // of its own containers only, not of the kubelet. The runtime's
                        // default seccomp profile beneath the agent's own filter
                        // (nodemem_agent::confine), which it installs once started.
                        // seLinuxOptions where a team gives them (SELinux-enforcing
                        // nodes).
                        "securityContext": security,
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    }))
    .expect("a valid DaemonSet")
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_api::NodeMemoryPolicy;

    fn deploy() -> AgentDeploy {
        AgentDeploy {
            namespace: "nodemem-system".into(),
            image: "nodemem:test".into(),
            image_pull_secrets: Vec::new(),
            pod_security_labels: false,
            owner: None,
            cgroup_driver: None,
            kubelet_config_dir: Some("/etc/kubernetes/kubelet.conf.d".into()),
            kubelet_restart_command: None,
            kubelet_restart_unit: None,
            state_dir: "/var/lib/nodemem".into(),
            nri: AgentNri::Auto,
            enforcement: EnforcementModes::default(),
            pod: AgentPod::default(),
        }
    }

    /// The DaemonSet's agent args, mounts (path, read-only) and hostPath volumes.
    fn pod_of(d: &AgentDeploy) -> (Vec<String>, Vec<(String, bool)>, Vec<String>) {
        let w = World::default();
        let spec = agent_daemonset(d, &w).spec.unwrap().template.spec.unwrap();
        let c = &spec.containers[0];
        let mounts = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.mount_path.clone(), m.read_only.unwrap_or(false)))
            .collect();
        let hosts = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.host_path.as_ref().map(|h| h.path.clone()))
            .collect();
        (c.args.clone().unwrap(), mounts, hosts)
    }

    #[test]
    fn a_teams_extra_flags_volumes_and_selinux_options_follow_the_controllers_own() {
        let pod = AgentPod::parse(
            &json!({
                "seLinuxOptions": {"type": "spc_t"},
                "extraArgs": ["--per-container-metrics", "--kubelet-config=/host/kubelet.yaml"],
                "extraVolumes": [{"name": "kubelet-file",
                    "hostPath": {"path": "/etc/kubelet.yaml", "type": "File"}}],
                "extraVolumeMounts": [{"name": "kubelet-file", "mountPath": "/host/kubelet.yaml",
                    "readOnly": true}],
            })
            .to_string(),
        )
        .unwrap();
        let plain = deploy();
        let d = AgentDeploy { pod, ..deploy() };
        let (args, mounts, hosts) = pod_of(&d);
        let (plain_args, plain_mounts, plain_hosts) = pod_of(&plain);
        assert_eq!(args[..plain_args.len()], plain_args[..]);
        assert_eq!(
            args[plain_args.len()..],
            [
                "--per-container-metrics",
                "--kubelet-config=/host/kubelet.yaml"
            ]
        );
        assert_eq!(mounts[..plain_mounts.len()], plain_mounts[..]);
        assert_eq!(
            mounts.last().unwrap(),
            &("/host/kubelet.yaml".to_string(), true)
        );
        assert_eq!(hosts.last().unwrap(), "/etc/kubelet.yaml");
        assert_eq!(hosts.len(), plain_hosts.len() + 1);
        let w = World::default();
        let security = |d: &AgentDeploy| {
            agent_daemonset(d, &w)
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .containers[0]
                .security_context
                .clone()
                .unwrap()
        };
        let given = security(&d);
        assert_eq!(
            given.se_linux_options.as_ref().unwrap().type_.as_deref(),
            Some("spc_t")
        );
        // Everything else as without it: no capability but SYS_PTRACE, no privilege.
        let mut without = given.clone();
        without.se_linux_options = None;
        assert_eq!(without, security(&plain));
        // AppArmor: Unconfined unless a team names its own Localhost profile.
        assert_eq!(
            security(&plain).app_armor_profile.unwrap().type_,
            "Unconfined"
        );
        let localhost = AgentDeploy {
            pod: AgentPod::parse(
                r#"{"appArmorProfile": {"type": "Localhost", "localhostProfile": "nodemem-agent"}}"#,
            )
            .unwrap(),
            ..deploy()
        };
        let confined = security(&localhost);
        let profile = confined.app_armor_profile.clone().unwrap();
        assert_eq!(
            (profile.type_.as_str(), profile.localhost_profile.as_deref()),
            ("Localhost", Some("nodemem-agent"))
        );
        let mut without = confined;
        without.app_armor_profile = security(&plain).app_armor_profile;
        assert_eq!(without, security(&plain));
        assert_eq!(security(&plain).se_linux_options, None);
    }

    #[test]
    fn the_nri_choice_decides_which_host_directories_the_agents_mount() {
        let records = [CONTAINERD_TASKS, CRIO_CONTAINERS];
        // auto: the NRI socket (read-only) and the records for the fallback.
        let (args, mounts, hosts) = pod_of(&deploy());
        assert!(args.contains(&"--nri=auto".to_string()));
        assert!(args.contains(&"--nri-socket=/host/var/run/nri/nri.sock".to_string()));
        assert!(mounts.contains(&("/host/var/run/nri".to_string(), true)));
        assert!(records.iter().all(|r| hosts.contains(&r.to_string())));
        // on: NRI only, one privilege fewer: no runtime records (their bundles hold
        // every container's root file system mount).
        let (args, mounts, hosts) = pod_of(&AgentDeploy {
            nri: AgentNri::On,
            ..deploy()
        });
        assert!(args.contains(&"--nri=on".to_string()));
        assert!(mounts.contains(&("/host/var/run/nri".to_string(), true)));
        assert!(
            records.iter().all(|r| !hosts.contains(&r.to_string())),
            "{hosts:?}"
        );
        assert!(!args
            .iter()
            .any(|a| a.contains("-tasks-dir") || a.contains("-containers-dir")));
        // off: the records, no socket.
        let (args, mounts, hosts) = pod_of(&AgentDeploy {
            nri: AgentNri::Off,
            ..deploy()
        });
        assert!(args.contains(&"--nri=off".to_string()));
        assert!(!args.iter().any(|a| a.starts_with("--nri-socket")));
        assert!(!mounts.iter().any(|(m, _)| m.contains("/nri")));
        assert!(!hosts.contains(&NRI_DIR.to_string()));
        assert!(records.iter().all(|r| hosts.contains(&r.to_string())));
    }

    /// Each install's modes carry their own host access and no more: the cgroup tree
    /// writable only with Agent, systemd's sockets only where a mode talks to systemd,
    /// NRI only with Agent, the kubelet's --config-dir and restart only with Kubelet.
    #[test]
    fn each_modes_daemonset_carries_only_its_own_mounts() {
        let with = |modes: &str, driver: Option<&str>, unit: Option<&str>| {
            pod_of(&AgentDeploy {
                enforcement: modes.parse().unwrap(),
                cgroup_driver: driver.map(String::from),
                kubelet_restart_unit: unit.map(String::from),
                ..deploy()
            })
        };
        let read_only = |mounts: &[(String, bool)], path: &str| {
            mounts
                .iter()
                .find(|(m, _)| m == path)
                .unwrap_or_else(|| panic!("{path} not mounted: {mounts:?}"))
                .1
        };
        let mounted = |mounts: &[(String, bool)]| -> Vec<String> {
            let mut m: Vec<String> = mounts.iter().map(|(p, _)| p.clone()).collect();
            m.sort();
            m
        };
        let base = [
            "/host/proc",
            "/host/sys",
            "/host/sys/fs/cgroup",
            "/var/lib/nodemem",
        ];
        let records = [
            "/host/run/containerd/io.containerd.runtime.v2.task/k8s.io",
            "/host/run/containers/storage/overlay-containers",
        ];
        let systemd = ["/host/run/dbus", "/host/run/systemd"];
        let expect = |extra: &[&str]| -> Vec<String> {
            let mut m: Vec<String> = base.iter().chain(extra).map(|s| s.to_string()).collect();
            m.sort();
            m
        };

        // Observe: everything read-only but the agent's own state; no systemd, no NRI,
        // nothing of the kubelet's.
        let (args, mounts, _) = with("Observe", None, Some("kubelet.service"));
        assert_eq!(mounted(&mounts), expect(&records), "Observe");
        assert!(read_only(&mounts, "/host/sys/fs/cgroup"));
        assert!(mounts.iter().all(|(m, ro)| *ro || m == "/var/lib/nodemem"));
        assert!(args.contains(&"--nri=off".to_string()), "{args:?}");
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--systemd-run-dir") || a.starts_with("--kubelet-")),
            "{args:?}"
        );

        // Agent: the cgroup tree writable, systemd's sockets, NRI and the records.
        let (args, mounts, _) = with("Agent", None, None);
        let mut agent = vec!["/host/var/run/nri"];
        agent.extend(systemd);
        agent.extend(records);
        assert_eq!(mounted(&mounts), expect(&agent), "Agent");
        assert!(!read_only(&mounts, "/host/sys/fs/cgroup"));
        assert!(args.contains(&"--systemd-run-dir=/host/run".to_string()));
        assert!(
            !args.iter().any(|a| a.starts_with("--kubelet-")),
            "{args:?}"
        );
        // ... with the cgroupfs driver: no systemd.
        let (args, mounts, _) = with("Agent", Some("cgroupfs"), None);
        assert!(!mounts.iter().any(|(m, _)| systemd.contains(&m.as_str())));
        assert!(!args.iter().any(|a| a.starts_with("--systemd-run-dir")));

        // Kubelet: the cgroup tree read-only; its --config-dir (given here) writable;
        // systemd's sockets only to restart its unit.
        let (args, mounts, _) = with("Kubelet", Some("cgroupfs"), Some("kubelet.service"));
        let mut kubelet = vec!["/host/kubelet-config-dir"];
        kubelet.extend(systemd);
        kubelet.extend(records);
        assert_eq!(mounted(&mounts), expect(&kubelet), "Kubelet");
        assert!(read_only(&mounts, "/host/sys/fs/cgroup"));
        assert!(!read_only(&mounts, "/host/kubelet-config-dir"));
        assert!(args.contains(&"--kubelet-restart-unit=kubelet.service".to_string()));
        let (_, mounts, _) = with("Kubelet", None, None);
        assert!(!mounts.iter().any(|(m, _)| systemd.contains(&m.as_str())));

        // Every mode finds the kubelet through its process: the host's PID namespace.
        for modes in ["Observe", "Agent", "Kubelet"] {
            let d = AgentDeploy {
                enforcement: modes.parse().unwrap(),
                ..deploy()
            };
            let spec = agent_daemonset(&d, &World::default())
                .spec
                .unwrap()
                .template
                .spec
                .unwrap();
            assert_eq!(spec.host_pid, Some(true), "{modes}");
        }
    }

    fn affinity(ds: &DaemonSet) -> Value {
        serde_json::to_value(
            ds.spec
                .as_ref()
                .unwrap()
                .template
                .spec
                .as_ref()
                .unwrap()
                .affinity
                .clone(),
        )
        .unwrap()
    }

    #[test]
    fn the_agents_go_where_policies_select_and_where_configs_remain() {
        let mut w = World::default();
        let none = agent_daemonset(&deploy(), &w);
        assert_eq!(
            affinity(&none)["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
            "nodemem.io/no-policy-selects-this"
        );
        let p: NodeMemoryPolicy = serde_json::from_value(json!({
            "metadata": {"name": "a"},
            "spec": {"nodeSelector": {"matchLabels": {"pool": "a"},
                "matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z9"]}]}}}))
        .unwrap();
        w.apply_policy(&p);
        w.configs.insert(
            "old-node".into(),
            nodemem_api::report::ConfigEntry {
                generation: None,
                spec: Default::default(),
                status: Default::default(),
                spec_changed_at: None,
                good_seen_at: None,
            },
        );
        let ds = agent_daemonset(&deploy(), &w);
        let terms = &affinity(&ds)["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        assert_eq!(
            terms,
            &json!([
                {"matchExpressions": [
                    {"key": "pool", "operator": "In", "values": ["a"]},
                    {"key": "zone", "operator": "NotIn", "values": ["z9"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["old-node"]}]},
            ])
        );
        let spec = ds.spec.unwrap().template.spec.unwrap();
        let c = &spec.containers[0];
        assert!(c
            .args
            .as_ref()
            .unwrap()
            .contains(&"--kubelet-config-dir=/host/kubelet-config-dir".to_string()));
        assert!(c
            .args
            .as_ref()
            .unwrap()
            .contains(&"--systemd-run-dir=/host/run".to_string()));
        let mounts: Vec<(String, bool)> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.mount_path.clone(), m.read_only.unwrap_or(false)))
            .collect();
        for socket_dir in ["/host/run/dbus", "/host/run/systemd"] {
            assert!(
                mounts.contains(&(socket_dir.to_string(), true)),
                "{socket_dir} read-only in {mounts:?}"
            );
        }
        // The runtimes' container specs: read-only, and host unmounts reach the agent.
        for (flag, dir) in [
            ("--containerd-tasks-dir", CONTAINERD_TASKS),
            ("--crio-containers-dir", CRIO_CONTAINERS),
        ] {
            let at = format!("/host{dir}");
            assert!(c.args.as_ref().unwrap().contains(&format!("{flag}={at}")));
            let m = c
                .volume_mounts
                .iter()
                .flatten()
                .find(|m| m.mount_path == at)
                .unwrap();
            assert_eq!(m.read_only, Some(true));
            assert_eq!(m.mount_propagation.as_deref(), Some("HostToContainer"));
            let v = spec
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == m.name)
                .unwrap();
            assert_eq!(v.host_path.as_ref().unwrap().path, dir);
        }
        assert_eq!(spec.service_account_name.as_deref(), Some("nodemem-agent"));
        assert_eq!(spec.host_pid, Some(true));
        assert!(
            !c.args
                .as_ref()
                .unwrap()
                .iter()
                .any(|a| a.starts_with("--kubelet-restart") || a.starts_with("--kubelet-healthz")),
            "no restart configured"
        );
        // A unit restart: through systemd, with the healthz the pod cannot reach off.
        let by_unit = AgentDeploy {
            kubelet_restart_unit: Some("kubelet.service".into()),
            kubelet_restart_command: Some("ignored".into()),
            ..deploy()
        };
        let ds = agent_daemonset(&by_unit, &w);
        let args = ds.spec.unwrap().template.spec.unwrap().containers[0]
            .args
            .clone()
            .unwrap();
        let restart: Vec<&String> = args
            .iter()
            .filter(|a| a.starts_with("--kubelet-restart") || a.starts_with("--kubelet-healthz"))
            .collect();
        assert_eq!(
            restart,
            [
                "--kubelet-restart-unit=kubelet.service",
                "--kubelet-healthz-url=off"
            ]
        );
        // Every node: no affinity at all.
        let all: NodeMemoryPolicy =
            serde_json::from_value(json!({"metadata": {"name": "all"}, "spec": {}})).unwrap();
        w.apply_policy(&all);
        assert_eq!(affinity(&agent_daemonset(&deploy(), &w)), json!({}));
    }

    /// The agents pull with the Secrets the controller is given, in order; without
    /// any, the pod names none.
    #[test]
    fn the_agents_pull_with_the_given_secrets() {
        let secrets = |d: &AgentDeploy| -> Vec<String> {
            let spec = agent_daemonset(d, &World::default())
                .spec
                .unwrap()
                .template
                .spec
                .unwrap();
            spec.image_pull_secrets
                .into_iter()
                .flatten()
                .map(|r| r.name)
                .collect()
        };
        assert!(secrets(&deploy()).is_empty());
        let private = AgentDeploy {
            image_pull_secrets: vec!["registry-a".into(), "registry-b".into()],
            ..deploy()
        };
        assert_eq!(secrets(&private), ["registry-a", "registry-b"]);
    }

    /// The chart's agent values reach the pod: resources, placement (Linux nodes only
    /// by default, also for a policy that selects every node), tolerations, priority,
    /// metadata, log level and environment.
    #[test]
    fn the_agents_pod_carries_the_given_settings() {
        let mut w = World::default();
        let all: NodeMemoryPolicy =
            serde_json::from_value(json!({"metadata": {"name": "all"}, "spec": {}})).unwrap();
        w.apply_policy(&all);
        let template = |d: &AgentDeploy| {
            serde_json::to_value(agent_daemonset(d, &w).spec.unwrap().template).unwrap()
        };
        let plain = template(&deploy());
        assert_eq!(
            plain["spec"]["nodeSelector"],
            json!({"kubernetes.io/os": "linux"})
        );
        assert_eq!(
            plain["spec"]["tolerations"],
            json!([{"operator": "Exists"}])
        );
        assert_eq!(plain["spec"]["priorityClassName"], "system-node-critical");
        assert_eq!(
            plain["spec"]["containers"][0]["env"][2],
            json!({"name": "RUST_LOG", "value": "info"})
        );
        let given = AgentPod::parse(
            &json!({
                "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                "nodeSelector": {"pool": "x"},
                "tolerations": [],
                "priorityClassName": "",
                "podAnnotations": {"note": "1"},
                "podLabels": {"team": "platform"},
                "logLevel": "debug",
                "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
            })
            .to_string(),
        )
        .unwrap();
        let t = template(&AgentDeploy {
            pod: given,
            ..deploy()
        });
        let c = &t["spec"]["containers"][0];
        assert_eq!(
            c["resources"],
            json!({"requests": {"memory": "64Mi"}, "limits": {"memory": "128Mi"}})
        );
        assert_eq!(t["spec"]["nodeSelector"], json!({"pool": "x"}));
        assert!(t["spec"].get("tolerations").is_none() || t["spec"]["tolerations"] == json!([]));
        assert!(t["spec"].get("priorityClassName").is_none());
        assert_eq!(t["metadata"]["annotations"], json!({"note": "1"}));
        assert_eq!(t["metadata"]["labels"]["team"], "platform");
        assert_eq!(t["metadata"]["labels"]["app.kubernetes.io/name"], NAME);
        assert_eq!(c["env"][2], json!({"name": "RUST_LOG", "value": "debug"}));
        assert_eq!(
            c["env"][3],
            json!({"name": "HTTPS_PROXY", "value": "http://proxy:3128"})
        );
        // How many agents a change restarts at once: 10% unless given.
        let strategy = |d: &AgentDeploy| {
            serde_json::to_value(agent_daemonset(d, &w).spec.unwrap().update_strategy).unwrap()
        };
        assert_eq!(
            strategy(&deploy()),
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}})
        );
        let faster = AgentPod::parse(r#"{"maxUnavailable": 50}"#).unwrap();
        assert_eq!(
            strategy(&AgentDeploy {
                pod: faster,
                ..deploy()
            })["rollingUpdate"]["maxUnavailable"],
            50
        );
    }

    /// A policy whose selector names a key no node can carry (stored before admission
    /// refused it) places no agent and leaves the others' placement as it was.
    #[test]
    fn a_selector_the_apiserver_would_refuse_places_no_agent() {
        let mut w = World::default();
        let policy = |name: &str, selector: Value| -> NodeMemoryPolicy {
            serde_json::from_value(
                json!({"metadata": {"name": name}, "spec": {"nodeSelector": selector}}),
            )
            .unwrap()
        };
        w.apply_policy(&policy("a", json!({"matchLabels": {"pool": "a"}})));
        let before = affinity(&agent_daemonset(&deploy(), &w));
        w.apply_policy(&policy(
            "bad",
            json!({"matchExpressions": [{"key": "bad key!", "operator": "DoesNotExist"}]}),
        ));
        assert_eq!(affinity(&agent_daemonset(&deploy(), &w)), before);
        assert!(!before.to_string().contains("bad key"));
    }
}
