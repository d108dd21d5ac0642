//! A real node: Debian's kernel in qemu (two NUMA nodes, cgroup v2) booting a root file
//! system with systemd as PID 1, containerd, runc and the kubelet, joined to a test
//! control plane on the host. Built offline and cached by `tests/scripts/build-node-*.sh`;
//! what differs per run (node name, client certificate, kubelet and containerd
//! configuration, images) reaches the VM through a 9p share, where a runner also takes
//! the test's commands (`RealNode::run`).
//!
//! The guest reaches the host's loopback at 10.0.2.2 (qemu user networking); the
//! apiserver's certificate names `localhost`, which the node's kubeconfig asks for. Pods
//! reach the apiserver at the `kubernetes` Service (10.0.0.1:443) through one DNAT rule,
//! standing in for kube-proxy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::binaries::repo_root;
use crate::control_plane::ControlPlane;
use crate::cpio::Cpio;
use crate::error::Error;
use crate::process::Process;
use crate::vm::{kernel_image, shared_libraries, two_numa_node_vm};

fn node_err(msg: impl Into<String>) -> Error {
    Error::Vm(msg.into())
}

/// Everything a real node boots, built or taken from the cache.
#[derive(Clone, Debug)]
pub struct NodeImage {
    pub kernel: PathBuf,
    /// The ext4 root file system (booted copy-on-write: the cached image never changes).
    pub root: PathBuf,
    /// The modules the initramfs loads to reach the disk, with their `order` file.
    pub initrd_modules: PathBuf,
    /// OCI archives imported into containerd at boot (pause, workload, nodemem if built).
    pub images: PathBuf,
    /// Measuring tools for the node (`tests/node/probe`), at /mnt/nodemem/tools there.
    pub tools: PathBuf,
}

/// Runs a build script and returns the last line of its stdout (a path).
fn script(name: &str, args: &[&Path]) -> Result<PathBuf, Error> {
    let path = repo_root().join("tests/scripts").join(name);
    let out = Command::new("bash")
        .arg(&path)
        .args(args)
        .output()
        .map_err(|e| node_err(format!("cannot run {}: {e}", path.display())))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(30).collect();
        return Err(node_err(format!(
            "{name} failed ({}):\n{}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .trim(),
    ))
}

impl NodeImage {
    /// Builds (or finds cached) the node runtime, the root file system with `kubelet`
    /// (the control plane build's), and the images; `nodemem_layout` (the OCI layout
    /// from `image/build-oci.sh`) adds the project's image.
    pub fn build(kubelet: &Path, nodemem_layout: Option<&Path>) -> Result<Self, Error> {
        let runtime = script("build-node-runtime.sh", &[])?;
        let root = script("build-node-rootfs.sh", &[kubelet, &runtime])?;
        let images_dir = runtime.join("archives");
        let mut args: Vec<&Path> = vec![&runtime, &images_dir];
        if let Some(layout) = nodemem_layout {
            args.push(layout);
        }
        let images = script("build-node-images.sh", &args)?;
        let tools = script("build-node-probe.sh", &[])?;
        let initrd_modules = root
            .parent()
            .map(|d| d.join("initrd-modules"))
            .ok_or_else(|| node_err("the root image has no directory"))?;
        Ok(NodeImage {
            kernel: kernel_image()?,
            root,
            initrd_modules,
            images,
            tools,
        })
    }
}

/// The kubelet's `--config-dir` on the node.
pub const KUBELET_CONFIG_DIR: &str = "/etc/kubernetes/kubelet.conf.d";

/// The cgroup driver of the kubelet and containerd on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Systemd,
    Cgroupfs,
}

/// How a node is set up.
#[derive(Clone, Debug)]
pub struct RealNodeSpec {
    pub name: String,
    pub driver: Driver,
    /// Fields merged into the kubelet's KubeletConfiguration (feature gates, Memory QoS,
    /// the Memory Manager...), over the node's base configuration.
    pub kubelet: serde_json::Value,
    /// Labels the kubelet registers the Node with (`--node-labels`).
    pub labels: Vec<(String, String)>,
    /// Memory of each of the two NUMA nodes, MiB.
    pub numa_node_mib: u32,
    /// How long boot, join and the first Ready may take.
    pub ready_timeout: Duration,
    /// Whether the node may be rebooted ([`RealNode::reboot`]): a guest reboot resets
    /// the VM (its disk's changes kept) instead of ending qemu (`-no-reboot`, which
    /// makes a kernel panic end the run at once rather than boot again).
    pub rebootable: bool,
}

impl RealNodeSpec {
    pub fn new(name: &str, driver: Driver) -> Self {
        RealNodeSpec {
            name: name.to_string(),
            driver,
            kubelet: serde_json::json!({}),
            labels: Vec::new(),
            numa_node_mib: 1024,
            ready_timeout: Duration::from_secs(300),
            rebootable: false,
        }
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.to_string(), value.to_string()));
        self
    }
}

/// A booted node. Dropping it ends the VM (from the host: a guest poweroff waits for
/// containers).
pub struct RealNode {
    pub name: String,
    share: tempfile::TempDir,
    qemu: Process,
    console: PathBuf,
    next_request: AtomicU64,
    /// How long [`RealNode::run`] waits for an answer.
    request_budget: Duration,
    /// The host's end of the node's virtio port `nodemem.wake` (qemu's socket), once
    /// connected: a line written after each request wakes the node's runner at once.
    wake: Option<std::os::unix::net::UnixStream>,
    /// [`RealNodeSpec::rebootable`].
    rebootable: bool,
}

/// The initramfs: busybox, the disk's modules, and an init that loads them, mounts the
/// root disk and hands over to systemd.
fn initramfs(image: &NodeImage) -> Result<Vec<u8>, Error> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| node_err(format!("{}: {e}", p.display())));
    let busybox =
        PathBuf::from(std::env::var_os("NODEMEM_BUSYBOX").unwrap_or_else(|| "/bin/busybox".into()));
    let mut c = Cpio::new();
    for d in ["proc", "sys", "dev", "newroot", "modules", "bin"] {
        c.dir(d);
    }
    c.char_device("dev/console", 0o600, 5, 1);
    c.file("bin/busybox", 0o755, &read(&busybox)?);
    for lib in shared_libraries(&busybox)? {
        c.file(&lib.to_string_lossy(), 0o755, &read(&lib)?);
    }
    c.symlink("bin/sh", "busybox");
    let order = std::fs::read_to_string(image.initrd_modules.join("order"))
        .map_err(|e| node_err(format!("{}/order: {e}", image.initrd_modules.display())))?;
    let mut loads = String::new();
    for module in order.lines().filter(|l| !l.is_empty()) {
        c.file(
            &format!("modules/{module}"),
            0o644,
            &read(&image.initrd_modules.join(module))?,
        );
        loads.push_str(&format!("insmod /modules/{module} 2>/dev/null || true\n"));
    }
    let init = format!(
        "#!/bin/sh\n\
         /bin/busybox --install -s /bin\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sysfs /sys\n\
         mount -t devtmpfs devtmpfs /dev\n\
         {loads}\
         for i in $(seq 1 100); do [ -b /dev/vda ] && break; sleep 0.1; done\n\
         mount -t ext4 -o rw /dev/vda /newroot || {{ echo 'nodemem: cannot mount /dev/vda'; poweroff -f; }}\n\
         umount /proc /sys\n\
         mount --move /dev /newroot/dev 2>/dev/null || umount /dev\n\
         exec switch_root /newroot /sbin/init\n"
    );
    c.file("init", 0o755, init.as_bytes());
    Ok(c.finish())
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| node_err(format!("{}: {e}", parent.display())))?;
    }
    std::fs::write(path, text).map_err(|e| node_err(format!("{}: {e}", path.display())))
}

/// Merges `patch` into `base` (objects key by key, anything else replaced).
fn merge(base: &mut serde_json::Value, patch: &serde_json::Value) {
    match (base, patch) {
        (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}

/// The kubelet's configuration for a node: the given driver, containerd, the node's
/// client certificate's CA for its own server, and no swap check (the VM has none).
pub fn kubelet_configuration(spec: &RealNodeSpec) -> serde_json::Value {
    let mut config = serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": match spec.driver { Driver::Systemd => "systemd", Driver::Cgroupfs => "cgroupfs" },
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"enabled": false},
            "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"}
        },
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": false,
        "rotateCertificates": false,
        "serializeImagePulls": false,
        "resolvConf": "/etc/resolv.conf",
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
    });
    merge(&mut config, &spec.kubelet);
    config
}

/// containerd's v3 configuration: the run's cgroup driver for runc, the CNI plugins,
/// and the imported pause image as the sandbox image (there is no registry).
fn containerd_config(driver: Driver) -> String {
    format!(
        "version = 3\n\
         [plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = 'registry.k8s.io/pause:3.10'\n\
         [plugins.'io.containerd.cri.v1.runtime'.cni]\n  bin_dirs = ['/opt/cni/bin']\n  conf_dir = '/etc/cni/net.d'\n\
         [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = {}\n",
        driver == Driver::Systemd
    )
}

const CNI: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "nodemem",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
"#;

impl RealNode {
    /// Boots a node and returns once the runner answers (the node's Ready condition is
    /// the apiserver's to tell: the caller waits for it).
    pub fn boot(cp: &ControlPlane, image: &NodeImage, spec: &RealNodeSpec) -> Result<Self, Error> {
        // Named for this process, so that the next run removes it if this one is killed.
        let share = tempfile::Builder::new()
            .prefix(&format!("node-{}-", std::process::id()))
            .tempdir_in(crate::control_plane::harness_dir()?)
            .map_err(|e| node_err(format!("temporary directory: {e}")))?;
        let dir = share.path();
        let root = dir.join("root");
        let port = cp
            .server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| node_err(format!("no port in {}", cp.server)))?;
        let node = cp.node_credentials(&spec.name)?;
        write(&root.join("etc/hostname"), &format!("{}\n", spec.name))?;
        write(&root.join("etc/kubernetes/pki/ca.crt"), &cp.ca_pem())?;
        write(&root.join("etc/kubernetes/pki/node.crt"), &node.cert_pem)?;
        write(&root.join("etc/kubernetes/pki/node.key"), &node.key_pem)?;
        // Where kubeadm puts them: the agent reads the kubelet's configuration there.
        write(
            &root.join("etc/kubernetes/kubelet.conf"),
            &format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: https://10.0.2.2:{port}\n    tls-server-name: localhost\n    certificate-authority: /etc/kubernetes/pki/ca.crt\nusers:\n- name: node\n  user:\n    client-certificate: /etc/kubernetes/pki/node.crt\n    client-key: /etc/kubernetes/pki/node.key\ncontexts:\n- name: test\n  context: {{cluster: test, user: node}}\ncurrent-context: test\n"
            ),
        )?;
        write(
            &root.join("var/lib/kubelet/config.yaml"),
            &serde_json::to_string_pretty(&kubelet_configuration(spec))
                .map_err(|e| node_err(e.to_string()))?,
        )?;
        let labels: Vec<String> = spec
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let labels = if labels.is_empty() {
            String::new()
        } else {
            format!(" --node-labels={}", labels.join(","))
        };
        write(
            &root.join("etc/default/kubelet"),
            &format!(
                "KUBELET_ARGS=--config=/var/lib/kubelet/config.yaml --config-dir={KUBELET_CONFIG_DIR} --kubeconfig=/etc/kubernetes/kubelet.conf --hostname-override={} --node-ip=10.0.2.15{labels}\n",
                spec.name
            ),
        )?;
        // Drop-ins over the configuration file, as kubeadm sets up: where nodemem's
        // agent writes its own under enforcement: Kubelet.
        std::fs::create_dir_all(root.join(KUBELET_CONFIG_DIR.trim_start_matches('/')))
            .map_err(|e| node_err(e.to_string()))?;
        write(
            &root.join("etc/containerd/config.toml"),
            &containerd_config(spec.driver),
        )?;
        write(&root.join("etc/cni/net.d/10-nodemem.conflist"), CNI)?;
        // kube-proxy's one job here: the `kubernetes` Service to the host's apiserver.
        write(
            &dir.join("setup.sh"),
            &format!(
                "#!/bin/sh\nset -e\nnft -f - <<'EOF'\ntable ip nodemem {{\n  chain prerouting {{ type nat hook prerouting priority -100; ip daddr 10.0.0.1 tcp dport 443 dnat to 10.0.2.2:{port}; }}\n  chain output {{ type nat hook output priority -100; ip daddr 10.0.0.1 tcp dport 443 dnat to 10.0.2.2:{port}; }}\n  chain postrouting {{ type nat hook postrouting priority 100; ip saddr 10.88.0.0/16 oifname != \"cni0\" masquerade; }}\n}}\nEOF\n"
            ),
        )?;
        std::fs::set_permissions(
            dir.join("setup.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .map_err(|e| node_err(e.to_string()))?;
        std::fs::create_dir_all(dir.join("requests")).map_err(|e| node_err(e.to_string()))?;
        // The images, linked into the share (9p follows no host symlinks: copy).
        let images = dir.join("images");
        std::fs::create_dir_all(&images).map_err(|e| node_err(e.to_string()))?;
        for entry in std::fs::read_dir(&image.images).map_err(|e| node_err(e.to_string()))? {
            let entry = entry.map_err(|e| node_err(e.to_string()))?;
            if entry.path().extension().is_some_and(|x| x == "tar") {
                std::fs::copy(entry.path(), images.join(entry.file_name()))
                    .map_err(|e| node_err(e.to_string()))?;
            }
        }

        let tools = dir.join("tools");
        std::fs::create_dir_all(&tools).map_err(|e| node_err(e.to_string()))?;
        for entry in std::fs::read_dir(&image.tools).map_err(|e| node_err(e.to_string()))? {
            let entry = entry.map_err(|e| node_err(e.to_string()))?;
            std::fs::copy(entry.path(), tools.join(entry.file_name()))
                .map_err(|e| node_err(e.to_string()))?;
        }

        let initrd = dir.join("initramfs.cpio");
        std::fs::write(&initrd, initramfs(image)?).map_err(|e| node_err(e.to_string()))?;
        let mut args = two_numa_node_vm(
            spec.numa_node_mib,
            &image.kernel,
            &initrd,
            "console=ttyS0 loglevel=4 panic=-1 systemd.unified_cgroup_hierarchy=1",
        );
        args.extend([
            "-drive".into(),
            format!(
                "file={},if=virtio,format=raw,snapshot=on",
                image.root.display()
            ),
            "-virtfs".into(),
            format!(
                "local,path={},mount_tag=nodemem,security_model=none,id=nodemem",
                dir.display()
            ),
            "-nic".into(),
            "user,model=virtio-net-pci".into(),
        ]);
        args.extend(wake_port(&dir.join(WAKE_SOCKET)));
        if spec.rebootable {
            // A reset keeps `snapshot=on`'s overlay: the disk as the node left it.
            args.retain(|a| a != "-no-reboot");
        }
        let console = dir.join("console.log");
        let qemu = Process::spawn(
            "qemu-system-x86_64",
            Path::new("qemu-system-x86_64"),
            &args,
            &console,
        )
        .map_err(|e| node_err(format!("{e} (install Debian's qemu-system-x86)")))?;
        let mut node = RealNode {
            name: spec.name.clone(),
            share,
            qemu,
            console,
            next_request: AtomicU64::new(0),
            request_budget: Self::REQUEST_BUDGET,
            wake: None,
            rebootable: spec.rebootable,
        };
        // The runner answering means systemd ran the setup and the share works.
        node.run_within("true", spec.ready_timeout)?;
        Ok(node)
    }

    /// The directory shared with the node (the run's files, requests and responses).
    /// The CPU time qemu (the whole node: its guest and the emulation) has used so far,
    /// from `/proc/<pid>/stat`; None where that cannot be read. A phase's share of the
    /// node tier's time is its CPU, not its wall time: two nodes side by side fill both
    /// cores (issue 57).
    pub fn cpu_used(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.qemu.pid())).ok()?;
        // After the command's parenthesis: utime and stime are fields 14 and 15.
        let rest = stat.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (hz > 0).then(|| Duration::from_millis(ticks * 1000 / hz as u64))
    }

    pub fn share(&self) -> &Path {
        self.share.path()
    }

    /// What the serial console showed so far (boot messages, systemd's status lines).
    pub fn console(&self) -> String {
        crate::process::tail(&self.console, 60)
    }

    /// What [`RealNode::run`] waits at first: a minute.
    pub const REQUEST_BUDGET: Duration = Duration::from_secs(60);

    /// Sets how long [`RealNode::run`] waits for an answer: a test that measured its
    /// node's pace gives the minute at that pace (a slow machine's node once took
    /// longer than a minute over `systemctl daemon-reload`).
    pub fn set_request_budget(&mut self, budget: Duration) {
        self.request_budget = budget;
    }

    /// Runs `script` with bash as root on the node; its output (stdout and stderr) and
    /// exit code. Fails if the node does not answer within its request budget (a
    /// minute unless [`RealNode::set_request_budget`] said otherwise).
    pub fn run(&mut self, script: &str) -> Result<(String, i32), Error> {
        self.run_within(script, self.request_budget)
    }

    /// [`RealNode::run`] with its own timeout.
    pub fn run_within(&mut self, script: &str, timeout: Duration) -> Result<(String, i32), Error> {
        let n = self.next_request.fetch_add(1, Ordering::SeqCst);
        let dir = self.share.path().to_path_buf();
        let tmp = dir.join(format!("requests/.{n}.sh"));
        std::fs::write(&tmp, script).map_err(|e| node_err(e.to_string()))?;
        std::fs::rename(&tmp, dir.join(format!("requests/{n}.sh")))
            .map_err(|e| node_err(e.to_string()))?;
        self.wake_runner();
        let rc_path = dir.join(format!("responses/{n}.rc"));
        let started = Instant::now();
        loop {
            if let Ok(rc) = std::fs::read_to_string(&rc_path) {
                let out = std::fs::read_to_string(dir.join(format!("responses/{n}.out")))
                    .unwrap_or_default();
                let code = rc.trim().parse::<i32>().unwrap_or(-1);
                return Ok((out, code));
            }
            if let Some(status) = self.qemu.exited() {
                return Err(node_err(format!(
                    "the node's VM ended ({status}); console:\n{}",
                    self.console()
                )));
            }
            if started.elapsed() > timeout {
                return Err(node_err(format!(
                    "node {} did not run a request within {}s; console:\n{}",
                    self.name,
                    timeout.as_secs(),
                    self.console()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Makes each of the run's files that the node's setup copies over `/` at every boot
/// (the share's `root/`) what the node has now: a boot after a reboot then starts from
/// what the node ran (a kubelet restarted with another configuration, say), as a real
/// node's disk does, not from what the harness booted it with.
const KEEP_WHAT_RUNS: &str = "cd /mnt/nodemem/root && find . -type f -print0 | while IFS= read -r -d '' f; do if [ -e \"/$f\" ]; then cp -a \"/$f\" \"$f\"; fi; done; sync";

/// The node's boot, as the kernel names it (`/proc/sys/kernel/random/boot_id`, which
/// the kubelet reports as the Node's `nodeInfo.bootID`).
const BOOT_ID: &str = "cat /proc/sys/kernel/random/boot_id";

impl RealNode {
    /// The node's current boot (`BOOT_ID`).
    pub fn boot_id(&mut self) -> Result<String, Error> {
        let (out, code) = self.run(BOOT_ID)?;
        if code != 0 || out.trim().is_empty() {
            return Err(node_err(format!("{BOOT_ID}: exit {code}: {out}")));
        }
        Ok(out.trim().to_string())
    }

    /// Reboots the node as an operator does (`systemctl reboot`: a clean shutdown, the
    /// same kernel and disk booted again), once what it runs is kept for the boot
    /// (`KEEP_WHAT_RUNS`). Returns the new boot's id once the node's runner answers
    /// from it, within `timeout`. Only a node booted `rebootable`.
    pub fn reboot(&mut self, timeout: Duration) -> Result<String, Error> {
        if !self.rebootable {
            return Err(node_err(format!(
                "{} was booted with -no-reboot (RealNodeSpec::rebootable is false)",
                self.name
            )));
        }
        let before = self.boot_id()?;
        for script in [
            KEEP_WHAT_RUNS,
            // Later, so that the runner answers this request before it stops.
            "systemd-run --on-active=2 --timer-property=AccuracySec=100ms systemctl reboot",
        ] {
            let (out, code) = self.run(script)?;
            if code != 0 {
                return Err(node_err(format!("{script}: exit {code}: {out}")));
            }
        }
        // Each look is answered by the old boot's runner until it stops, then by the
        // new boot's (a request the old one took and never answered is run again:
        // the runner goes on from the first one unanswered).
        let started = Instant::now();
        loop {
            let left = timeout.checked_sub(started.elapsed()).ok_or_else(|| {
                node_err(format!(
                    "{} not back from its reboot within {}s; console:\n{}",
                    self.name,
                    timeout.as_secs(),
                    self.console()
                ))
            })?;
            let (out, code) = self.run_within(BOOT_ID, left)?;
            let now = out.trim();
            if code == 0 && !now.is_empty() && now != before {
                return Ok(now.to_string());
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// The socket, in the node's share directory, behind the node's virtio port.
const WAKE_SOCKET: &str = "wake.sock";

/// qemu's arguments for the virtio port `nodemem.wake` (`/dev/virtio-ports/nodemem.wake`
/// on the node) behind the unix socket `socket`, qemu listening, not waiting for the
/// host: the runner (`tests/node/rootfs/usr/local/sbin/nodemem-node-runner`) waits on
/// it instead of looking for requests over 9p 20 times a second.
fn wake_port(socket: &Path) -> Vec<String> {
    vec![
        "-device".into(),
        "virtio-serial-pci,id=nodemem-serial".into(),
        "-chardev".into(),
        format!(
            "socket,id=nodemem-wake,path={},server=on,wait=off",
            socket.display()
        ),
        "-device".into(),
        "virtserialport,bus=nodemem-serial.0,chardev=nodemem-wake,name=nodemem.wake".into(),
    ]
}

impl RealNode {
    /// Tells the runner a request is there. Best effort: a node without the port, or a
    /// full buffer, leaves the runner to find the request at its next look (at most
    /// half a second later).
    fn wake_runner(&mut self) {
        use std::io::Write;
        if self.wake.is_none() {
            self.wake =
                std::os::unix::net::UnixStream::connect(self.share.path().join(WAKE_SOCKET))
                    .ok()
                    .filter(|s| s.set_nonblocking(true).is_ok());
        }
        if let Some(stream) = self.wake.as_mut() {
            match stream.write(b"\n") {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => self.wake = None,
            }
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.qemu.stop(Duration::from_millis(100));
    }
}
