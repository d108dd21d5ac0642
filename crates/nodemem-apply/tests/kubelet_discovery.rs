//! The kubelet found where each distribution runs it: a procfs holding its process
//! (comm, stat, cmdline, and its root and working directory), and its files under that
//! root, as each distribution's documentation describes them. The agent reads exactly
//! what that kubelet reads: its --config, its --config-dir drop-ins, the flags over
//! them, and for k3s the kubelet-args of its own configuration.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::fs;
use std::path::{Path, PathBuf};

use nodemem_apply::kubelet::{KubeletFiles, KubeletSettings, OwnDropIn};
use nodemem_model::kubelet::eviction::MemoryEviction;
use nodemem_model::kubelet::writes::Named;
use nodemem_model::node::kubelet_dropin::DROPIN_FILE;
use nodemem_model::quantity::Quantity;

/// Where a process runs: its mount namespace (as `readlink /proc/<pid>/ns/mnt` names
/// it), its cgroup, its parent and its root.
struct Place<'a> {
    mnt: &'a str,
    cgroup: &'a str,
    ppid: u32,
    root: &'a Path,
}

/// The host's mount namespace as `readlink /proc/1/ns/mnt` names it.
const HOST_MNT: &str = "mnt:[4026531841]";

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/// A node: its root file system, and a procfs whose process `pid` runs `argv` as
/// `comm` with that root.
struct Node {
    _dir: tempfile::TempDir,
    root: PathBuf,
    proc: PathBuf,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        let proc = dir.path().join("proc");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&proc).unwrap();
        // Another process that is no kubelet: the host's init, whose mount namespace
        // is the host's.
        write(&proc.join("1/comm"), "systemd\n");
        write(&proc.join("1/stat"), &stat(1, "systemd", 1));
        std::fs::create_dir_all(proc.join("1/ns")).unwrap();
        std::os::unix::fs::symlink(HOST_MNT, proc.join("1/ns/mnt")).unwrap();
        Node {
            _dir: dir,
            root,
            proc,
        }
    }

    /// A process of the host's, as systemd runs the kubelet: the host's mount
    /// namespace, the unit's cgroup.
    fn run(&self, pid: u32, comm: &str, argv: &[&str]) {
        let host = Place {
            mnt: HOST_MNT,
            cgroup: "/system.slice/kubelet.service",
            ppid: 1,
            root: &self.root,
        };
        self.run_as(pid, comm, argv, &host);
    }

    /// A process in `place`.
    fn run_as(&self, pid: u32, comm: &str, argv: &[&str], place: &Place<'_>) {
        let Place {
            mnt,
            cgroup,
            ppid,
            root,
        } = place;
        let d = self.proc.join(pid.to_string());
        std::fs::create_dir_all(d.join("ns")).unwrap();
        std::os::unix::fs::symlink(mnt, d.join("ns/mnt")).unwrap();
        write(&d.join("cgroup"), &format!("0::{cgroup}\n"));
        write(&d.join("comm"), &format!("{comm}\n"));
        write(
            &d.join("stat"),
            &stat(pid, comm, 1000 + u64::from(pid)).replacen(" S 1 ", &format!(" S {ppid} "), 1),
        );
        let mut cmdline = argv.join("\0");
        cmdline.push('\0');
        write(&d.join("cmdline"), &cmdline);
        std::os::unix::fs::symlink(root, d.join("root")).unwrap();
        std::os::unix::fs::symlink(root, d.join("cwd")).unwrap();
    }

    /// The process ends (its procfs directory goes).
    fn stop(&self, pid: u32) {
        fs::remove_dir_all(self.proc.join(pid.to_string())).unwrap();
    }

    fn file(&self, path: &str, text: &str) {
        write(&self.root.join(path.trim_start_matches('/')), text);
    }

    fn files(&self) -> KubeletFiles {
        KubeletFiles::process(self.proc.clone(), None)
    }

    fn read(&self) -> KubeletSettings {
        self.files().read(OwnDropIn::OnDisk).unwrap()
    }
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn stat(pid: u32, comm: &str, start: u64) -> String {
    format!("{pid} ({comm}) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n")
}

fn q(s: &str) -> Option<Quantity> {
    Some(Quantity::parse(s).unwrap())
}

/// kubeadm: the kubelet unit's drop-in (10-kubeadm.conf) runs
/// `kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS
/// $KUBELET_EXTRA_ARGS`, with --config=/var/lib/kubelet/config.yaml and the flags of
/// /var/lib/kubelet/kubeadm-flags.env
/// (kubernetes.io/docs/setup/production-environment/tools/kubeadm/kubelet-integration/).
/// A flag from KUBELET_EXTRA_ARGS (/etc/default/kubelet) wins over the file.
#[test]
fn kubeadm_config_file_with_extra_args() {
    let node = Node::new();
    node.run(
        4312,
        "kubelet",
        &[
            "/usr/bin/kubelet",
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--config=/var/lib/kubelet/config.yaml",
            "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
            "--eviction-hard=memory.available<300Mi,nodefs.available<10%",
        ],
    );
    node.file(
        "/var/lib/kubelet/config.yaml",
        &format!("{HEADER}cgroupDriver: systemd\nfeatureGates:\n  MemoryQoS: true\nmemoryThrottlingFactor: 0.8\nkubeReserved:\n  memory: 256Mi\n"),
    );
    let s = node.read();
    assert_eq!(s.qos.gate, Some(true));
    assert_eq!(s.qos.throttling_factor, Named::Value(0.8));
    assert_eq!(s.reserved.kube_reserved, q("256Mi"));
    assert_eq!(
        s.memory_eviction,
        MemoryEviction::Bytes(300 << 20),
        "the flag wins over the file's default"
    );
    assert_eq!(s.cgroup_driver.as_deref(), Some("systemd"));
    assert_eq!(s.origin.process, Some((4312, "kubelet".to_string())));
    assert_eq!(
        s.origin.config.as_deref(),
        Some("/var/lib/kubelet/config.yaml")
    );
    assert_eq!(
        s.origin.flags,
        ["--eviction-hard=memory.available<300Mi,nodefs.available<10%"],
        "only the flags that set what nodemem reads"
    );
    assert_eq!(
        s.origin.memory_manager_state.as_deref(),
        Some("/var/lib/kubelet/memory_manager_state")
    );
    assert!(
        node.files()
            .dropin_path()
            .unwrap_err()
            .to_string()
            .contains("kubelet (pid 4312) runs without one, so a drop-in would not be read"),
        "no --config-dir: nowhere to put a drop-in"
    );
}

/// EKS on AL2023: nodeadm writes /etc/kubernetes/kubelet/config.json and puts the
/// NodeConfig's kubelet.config in the drop-in directory config.json.d
/// (40-nodeadm.conf), and runs `kubelet --config=... --config-dir=...`
/// (awslabs.github.io/amazon-eks-ami/nodeadm/doc/examples, "Modifying kubelet
/// configuration"). JSON files are read as YAML, as the kubelet reads them.
#[test]
fn eks_al2023_json_config_and_nodeadm_drop_in() {
    let node = Node::new();
    node.run(
        2210,
        "kubelet",
        &[
            "/usr/bin/kubelet",
            "--config=/etc/kubernetes/kubelet/config.json",
            "--config-dir=/etc/kubernetes/kubelet/config.json.d",
            "--kubeconfig=/var/lib/kubelet/kubeconfig",
            "--image-credential-provider-bin-dir=/etc/eks/image-credential-provider",
            "--image-credential-provider-config=/etc/eks/image-credential-provider/config.json",
            "--node-ip=10.0.1.23",
            "--cloud-provider=external",
            "--hostname-override=ip-10-0-1-23.ec2.internal",
        ],
    );
    node.file(
        "/etc/kubernetes/kubelet/config.json",
        r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","cgroupDriver":"systemd","evictionHard":{"memory.available":"100Mi","nodefs.available":"10%","nodefs.inodesFree":"5%"},"kubeReserved":{"cpu":"70m","ephemeral-storage":"1Gi","memory":"442Mi"}}"#,
    );
    node.file(
        "/etc/kubernetes/kubelet/config.json.d/40-nodeadm.conf",
        r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","featureGates":{"MemoryQoS":true},"memoryThrottlingFactor":0.7,"evictionHard":{"memory.available":"500Mi"}}"#,
    );
    let s = node.read();
    assert_eq!(s.qos.gate, Some(true));
    assert_eq!(s.qos.throttling_factor, Named::Value(0.7));
    assert_eq!(s.reserved.kube_reserved, q("442Mi"));
    assert_eq!(
        s.memory_eviction,
        MemoryEviction::Bytes(500 << 20),
        "the drop-in's threshold merges into the file's map"
    );
    assert_eq!(
        s.origin.drop_ins,
        ["/etc/kubernetes/kubelet/config.json.d/40-nodeadm.conf"]
    );
    // nodemem's drop-in goes where this kubelet reads drop-ins, through its root.
    let path = node.files().dropin_path().unwrap();
    assert_eq!(
        path,
        node.proc
            .join("2210/root/etc/kubernetes/kubelet/config.json.d")
            .join(DROPIN_FILE)
    );
    node.files()
        .write_dropin(&format!("{HEADER}memoryThrottlingFactor: 0.9\n"))
        .unwrap();
    assert!(node
        .root
        .join("etc/kubernetes/kubelet/config.json.d")
        .join(DROPIN_FILE)
        .exists());
    assert_eq!(node.read().qos.throttling_factor, Named::Value(0.9));
    assert_eq!(
        node.files()
            .read(OwnDropIn::Without)
            .unwrap()
            .qos
            .throttling_factor,
        Named::Value(0.7)
    );
}

/// GKE: the node's configure-helper.sh writes /home/kubernetes/kubelet-config.yaml and
/// starts `/home/kubernetes/bin/kubelet ... --config /home/kubernetes/kubelet-config.yaml`
/// (kubernetes/kubernetes cluster/gce/gci/configure-helper.sh, `start-kubelet`), with
/// the value as the next argument.
#[test]
fn gke_config_in_home_kubernetes() {
    let node = Node::new();
    node.run(
        987,
        "kubelet",
        &[
            "/home/kubernetes/bin/kubelet",
            "--v=2",
            "--cloud-provider=external",
            "--experimental-mounter-path=/home/kubernetes/containerized_mounter/mounter",
            "--cert-dir=/var/lib/kubelet/pki/",
            "--kubeconfig=/var/lib/kubelet/kubeconfig",
            "--max-pods=110",
            "--volume-plugin-dir=/home/kubernetes/flexvolume",
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
            "--runtime-cgroups=/system.slice/containerd.service",
            "--config",
            "/home/kubernetes/kubelet-config.yaml",
        ],
    );
    node.file(
        "/home/kubernetes/kubelet-config.yaml",
        &format!("{HEADER}cgroupDriver: systemd\nevictionHard:\n  memory.available: 100Mi\n  nodefs.available: 10%\n  nodefs.inodesFree: 5%\n  pid.available: 10%\nkubeReserved:\n  cpu: 1060m\n  ephemeral-storage: 41Gi\n  memory: 1019Mi\n"),
    );
    let s = node.read();
    assert_eq!(s.reserved.kube_reserved, q("1019Mi"));
    assert_eq!(s.memory_eviction, MemoryEviction::Bytes(100 << 20));
    assert_eq!(s.qos.gate, None, "not named: the version's default");
    assert_eq!(
        s.origin.config.as_deref(),
        Some("/home/kubernetes/kubelet-config.yaml")
    );
}

/// AKS: the kubelet unit runs `/usr/local/bin/kubelet ... $KUBELET_CONFIG_FILE_FLAGS
/// ... $KUBELET_FLAGS` with /etc/default/kubelet's flags (AgentBaker's kubelet.service),
/// and its memory reservations as flags (learn.microsoft.com/azure/aks/
/// node-resource-reservations: kube-reserved memory, eviction-hard
/// memory.available<100Mi): flags after the file win.
#[test]
fn aks_flags_over_a_config_file() {
    let node = Node::new();
    node.run(
        1502,
        "kubelet",
        &[
            "/usr/local/bin/kubelet",
            "--enable-server",
            "--node-labels=kubernetes.azure.com/role=agent,agentpool=nodepool1",
            "--v=2",
            "--volume-plugin-dir=/etc/kubernetes/volumeplugins",
            "--config",
            "/etc/default/kubeletconfig.json",
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
            "--kube-reserved=cpu=100m,memory=1638Mi",
            "--eviction-hard=memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%",
            "--feature-gates=MemoryQoS=true,RotateKubeletServerCertificate=true",
        ],
    );
    node.file(
        "/etc/default/kubeletconfig.json",
        r#"{"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1","kubeReserved":{"cpu":"100m","memory":"1Gi"},"evictionHard":{"memory.available":"750Mi"},"featureGates":{"MemoryQoS":false,"KubeletPodResources":true},"memoryManagerPolicy":"None"}"#,
    );
    let s = node.read();
    assert_eq!(s.reserved.kube_reserved, q("1638Mi"), "the flag wins");
    assert_eq!(s.memory_eviction, MemoryEviction::Bytes(100 << 20));
    assert_eq!(
        s.qos.gate,
        Some(true),
        "gates merge by name, the flag's wins"
    );
    assert_eq!(s.memory_manager().0, "None");
    assert_eq!(s.origin.flags.len(), 3);
    assert_eq!(
        s.feature_gates,
        [
            "KubeletPodResources",
            "MemoryQoS",
            "RotateKubeletServerCertificate"
        ],
        "every gate named, the file's and the flag's"
    );
}

/// k3s: the kubelet runs inside `k3s server`, configured by k3s's defaults drop-in
/// (/var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf, k3s v1.32+,
/// whose evictionHard names no memory threshold) and by `kubelet-arg`s from
/// /etc/rancher/k3s/config.yaml and the command line (docs.k3s.io/advanced,
/// "Kubelet Configuration Files"; docs.k3s.io/installation/configuration).
#[test]
fn k3s_kubelet_args_from_its_config_and_command_line() {
    let node = Node::new();
    node.run(
        640,
        "k3s-server",
        &[
            "/usr/local/bin/k3s",
            "server",
            "--kubelet-arg=feature-gates=MemoryQoS=true",
        ],
    );
    node.file(
        "/etc/rancher/k3s/config.yaml",
        "write-kubeconfig-mode: \"0644\"\nkubelet-arg:\n  - \"kube-reserved=memory=512Mi\"\n",
    );
    node.file(
        "/etc/rancher/k3s/config.yaml.d/50-memory.yaml",
        "kubelet-arg+:\n  - \"system-reserved=memory=256Mi\"\n",
    );
    node.file(
        "/var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf",
        &format!("{HEADER}cgroupDriver: cgroupfs\nevictionHard:\n  imagefs.available: 5%\n  nodefs.available: 5%\nevictionMinimumReclaim:\n  imagefs.available: 10%\n  nodefs.available: 10%\nfailSwapOn: false\n"),
    );
    let s = node.read();
    assert_eq!(s.qos.gate, Some(true));
    assert_eq!(s.reserved.kube_reserved, q("512Mi"));
    assert_eq!(s.reserved.system_reserved, q("256Mi"));
    assert_eq!(
        s.memory_eviction,
        MemoryEviction::None,
        "k3s's kubelet has no --config file, so no default threshold, and its drop-in names none"
    );
    assert_eq!(s.origin.process, Some((640, "k3s server".to_string())));
    assert_eq!(s.origin.config, None);
    assert_eq!(
        s.origin.drop_ins,
        ["/var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf"]
    );
    assert_eq!(
        s.origin.flags,
        [
            "--kube-reserved=memory=512Mi",
            "--system-reserved=memory=256Mi",
            "--feature-gates=MemoryQoS=true"
        ]
    );
}

/// RKE2 runs the kubelet binary with its drop-in directory under its data directory
/// (docs.rke2.io: /var/lib/rancher/rke2/agent/etc/kubelet.conf.d); drop-ins in
/// subdirectories are read too, in the kubelet's walk order.
#[test]
fn rke2_drop_ins_in_walk_order() {
    let node = Node::new();
    node.run(
        733,
        "kubelet",
        &[
            "kubelet",
            "--config-dir=/var/lib/rancher/rke2/agent/etc/kubelet.conf.d",
            "--root-dir=/var/lib/kubelet",
        ],
    );
    let dir = "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d";
    node.file(
        &format!("{dir}/00-rke2-defaults.conf"),
        &format!("{HEADER}memoryThrottlingFactor: 0.9\n"),
    );
    node.file(
        &format!("{dir}/50-site/10-qos.conf"),
        &format!("{HEADER}memoryThrottlingFactor: 0.6\n"),
    );
    node.file(
        &format!("{dir}/60-late.conf"),
        &format!("{HEADER}memoryThrottlingFactor: 0.5\n"),
    );
    node.file(&format!("{dir}/README.md"), "not a drop-in\n");
    let s = node.read();
    assert_eq!(s.qos.throttling_factor, Named::Value(0.5));
    assert_eq!(
        s.origin.drop_ins,
        [
            format!("{dir}/00-rke2-defaults.conf"),
            format!("{dir}/50-site/10-qos.conf"),
            format!("{dir}/60-late.conf"),
        ]
    );
}

/// What cannot be read is said: no kubelet visible, a file the command line names
/// that is not there, a flag value the kubelet would refuse, and a drop-in directory
/// given to the agent that is not the kubelet's.
#[test]
fn what_cannot_be_read_is_named() {
    let node = Node::new();
    let err = node.files().read(OwnDropIn::OnDisk).unwrap_err();
    assert_eq!(err.reason(), "NoKubeletProcess", "{err}");
    node.run(
        55,
        "kubelet",
        &[
            "/usr/bin/kubelet",
            "--config=/etc/kubelet/config.yaml",
            "--config-dir=/etc/kubelet/conf.d",
            "--kube-reserved=memory",
        ],
    );
    let err = node.files().read(OwnDropIn::OnDisk).unwrap_err();
    assert_eq!(err.reason(), "KubeletConfigUnreadable");
    assert!(
        err.to_string().starts_with("/etc/kubelet/config.yaml: "),
        "named as the kubelet names it: {err}"
    );
    node.file("/etc/kubelet/config.yaml", HEADER);
    let err = node.files().read(OwnDropIn::OnDisk).unwrap_err();
    assert_eq!(err.reason(), "KubeletFlagNotUnderstood");
    assert_eq!(
        err.to_string(),
        "kubelet (pid 55): kubelet flag --kube-reserved=memory: malformed pair \"memory\", expect string=string"
    );
    // After a restart (the old process gone) the new one, with good flags, is read.
    node.stop(55);
    node.run(
        56,
        "kubelet",
        &[
            "/usr/bin/kubelet",
            "--config=/etc/kubelet/config.yaml",
            "--config-dir=/etc/kubelet/conf.d",
        ],
    );
    assert_eq!(node.read().origin.process, Some((56, "kubelet".into())));
    // The agent's drop-in mount must be the kubelet's drop-in directory.
    fs::create_dir_all(node.root.join("etc/kubelet/conf.d")).unwrap();
    let elsewhere = node.root.join("etc/other.d");
    fs::create_dir_all(&elsewhere).unwrap();
    let err = KubeletFiles::process(node.proc.clone(), Some(elsewhere))
        .dropin_path()
        .unwrap_err();
    assert_eq!(err.reason(), "KubeletConfigDirMismatch", "{err}");
    let same = KubeletFiles::process(
        node.proc.clone(),
        Some(node.root.join("etc/kubelet/conf.d")),
    );
    assert_eq!(
        same.dropin_path().unwrap(),
        node.root.join("etc/kubelet/conf.d").join(DROPIN_FILE),
        "the same directory: written through the agent's mount"
    );
}

/// Only the host's kubelet is read (issue 58): a process named `kubelet` in another
/// mount namespace (kind's node, a kubelet in a CI pod), in a pod's cgroup, or below a
/// container runtime's shim is named with the reason and none of its files is read,
/// though it started later and its files say otherwise; two that qualify are an error,
/// never a guess; and when the host's mount namespace cannot be read, no process is
/// taken for the host's.
#[test]
fn only_the_hosts_kubelet_is_read() {
    let node = Node::new();
    node.file(
        "/var/lib/kubelet/config.yaml",
        &format!("{HEADER}evictionHard:\n  memory.available: 300Mi\n"),
    );
    let argv = ["/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml"];
    node.run(100, "kubelet", &argv);
    // The decoys' own root says Memory QoS is on and another threshold.
    let decoy_root = node.root.parent().unwrap().join("decoy");
    write(
        &decoy_root.join("var/lib/kubelet/config.yaml"),
        &format!(
            "{HEADER}featureGates:\n  MemoryQoS: true\nevictionHard:\n  memory.available: 1Gi\n"
        ),
    );
    let pod = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-ab.scope";
    let decoy = |mnt, cgroup, ppid| Place {
        mnt,
        cgroup,
        ppid,
        root: &decoy_root,
    };
    node.run_as(200, "kubelet", &argv, &decoy("mnt:[4026532999]", pod, 1));
    node.run_as(
        201,
        "kubelet",
        &argv,
        &decoy(HOST_MNT, "/kubepods/besteffort/pod2/cd", 1),
    );
    write(&node.proc.join("150/comm"), "containerd-shim\n");
    write(
        &node.proc.join("150/stat"),
        &stat(150, "containerd-shim", 500),
    );
    node.run_as(202, "kubelet", &argv, &decoy(HOST_MNT, "/../../ef", 150));
    let s = node.read();
    assert_eq!(s.origin.process, Some((100, "kubelet".into())));
    assert_eq!(s.memory_eviction, MemoryEviction::Bytes(300 << 20));
    assert_eq!(s.qos.gate, None, "the decoys' gate is not read");
    let ignored: Vec<String> = s.origin.ignored.iter().map(ToString::to_string).collect();
    assert_eq!(ignored.len(), 3, "{ignored:#?}");
    assert!(
        ignored[0].starts_with("kubelet (pid 200): runs in another mount namespace (mnt:[4026532999]) than the host's (mnt:[4026531841])"),
        "{}",
        ignored[0]
    );
    assert_eq!(
        ignored[1],
        "kubelet (pid 201): runs in a pod's cgroup (/kubepods/besteffort/pod2/cd)"
    );
    assert_eq!(
        ignored[2],
        "kubelet (pid 202): runs below a container runtime's shim (containerd-shim, pid 150): a container's"
    );

    // The kubelet's own child between its fork and its exec (to run `umount`, say):
    // the kubelet's name, command line, namespace and cgroup, the kubelet its parent.
    // No second kubelet, and no other process named like one: the kubelet is read, the
    // child is not among the ignored (each fork a pass saw would be a Warning Event).
    let child = Place {
        mnt: HOST_MNT,
        cgroup: "/system.slice/kubelet.service",
        ppid: 100,
        root: &node.root,
    };
    node.run_as(101, "kubelet", &argv, &child);
    let s = node.read();
    assert_eq!(s.origin.process, Some((100, "kubelet".into())));
    assert_eq!(s.origin.ignored.len(), 3, "{:#?}", s.origin.ignored);
    node.stop(101);

    // A second process that qualifies: neither is read.
    node.run(300, "kubelet", &argv);
    let err = node.files().read(OwnDropIn::OnDisk).unwrap_err();
    assert_eq!(err.reason(), "AmbiguousKubelet", "{err}");
    assert!(
        err.to_string().starts_with(
            "2 processes could each be the host's kubelet (kubelet (pid 100), kubelet (pid 300))"
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("kubelet (pid 201): runs in a pod's cgroup"),
        "{err}"
    );
    node.stop(300);

    // The host's mount namespace unknown: nothing is the host's.
    fs::remove_file(node.proc.join("1/ns/mnt")).unwrap();
    let err = node.files().read(OwnDropIn::OnDisk).unwrap_err();
    assert_eq!(err.reason(), "NoKubeletProcess", "{err}");
    assert!(
        err.to_string()
            .contains("kubelet (pid 100): the host's mount namespace"),
        "{err}"
    );
}

/// Kubelet mode checks that its drop-in decides what the kubelet runs (issue 58): the
/// kubelet applies its drop-ins in name order and its flags last, so a site drop-in
/// sorting after `~nodemem.conf` or a flag on the kubelet's command line that sets a
/// field again is named, with the field; `zz-site.conf`, which sorted after nodemem's
/// `99-nodemem.conf` until 2026-11-30, sorts before its drop-in now and loses to it.
#[test]
fn a_drop_in_or_flag_that_overrides_nodemems_drop_in_is_named() {
    let node = Node::new();
    node.file("/etc/kubelet/config.yaml", HEADER);
    node.file(
        "/etc/kubelet/conf.d/10-early.conf",
        &format!("{HEADER}featureGates:\n  MemoryQoS: false\n"),
    );
    node.run(
        70,
        "kubelet",
        &[
            "/usr/bin/kubelet",
            "--config=/etc/kubelet/config.yaml",
            "--config-dir=/etc/kubelet/conf.d",
            "--eviction-hard=memory.available<300Mi",
        ],
    );
    let ours = format!(
        "{HEADER}featureGates:\n  MemoryQoS: true\nmemoryThrottlingFactor: 0.8\nevictionHard:\n  memory.available: \"100Mi\"\n"
    );
    let said = |files: &KubeletFiles| -> Vec<String> {
        files
            .overrides_of(&ours)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    // An earlier drop-in is overridden by nodemem's, not the other way round.
    assert_eq!(
        said(&node.files()),
        ["evictionHard.memory.available is set again by flag --eviction-hard=memory.available<300Mi"]
    );
    node.file(
        "/etc/kubelet/conf.d/zz-site.conf",
        &format!("{HEADER}memoryThrottlingFactor: 0.6\n"),
    );
    assert_eq!(
        said(&node.files()),
        ["evictionHard.memory.available is set again by flag --eviction-hard=memory.available<300Mi"],
        "zz-site.conf sorts before ~nodemem.conf"
    );
    node.file(
        "/etc/kubelet/conf.d/~site.conf",
        &format!("{HEADER}memoryThrottlingFactor: 0.6\n"),
    );
    assert_eq!(
        said(&node.files()),
        [
            "memoryThrottlingFactor is set again by drop-in /etc/kubelet/conf.d/~site.conf",
            "evictionHard.memory.available is set again by flag --eviction-hard=memory.available<300Mi",
        ]
    );
}
