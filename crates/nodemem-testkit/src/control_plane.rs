//! A real Kubernetes control plane on loopback: etcd, kube-apiserver (TLS with a
//! generated CA, RBAC, service-account token signing, ValidatingAdmissionPolicy) and
//! kube-controller-manager (DaemonSets get pods, garbage collection, service accounts).
//!
//! Isolation: a [`ControlPlane`] is a whole cluster of its own in a temporary directory
//! on its own free ports; several run side by side. Test binaries share one per
//! process through [`ControlPlane::shared`], and each test works in its own namespace
//! with names unique to the test (cluster-scoped objects such as NodeMemoryPolicies and
//! Nodes carry the test's name). Tests that need a pristine cluster start their own.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::binaries::{control_plane_binaries, Binaries};
use crate::pki::{service_account_keys, Ca, CertPair};
use crate::process::Process;
use crate::Error;

/// How long a component may take to become ready before start fails.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The namespace nodemem runs in, with its controller and agent service accounts.
pub const SYSTEM_NAMESPACE: &str = "nodemem-system";
pub const CONTROLLER_SERVICE_ACCOUNT: &str = "nodemem-controller";
pub const AGENT_SERVICE_ACCOUNT: &str = "nodemem-agent";

/// Who a client acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// `system:masters`: everything, no RBAC checks.
    Admin,
    /// The cluster controller's service account (`nodemem-system/nodemem-controller`).
    Controller,
    /// The node agent on `node`: the agent service account's token bound to a pod on
    /// that node, so the apiserver adds the node name to the user's extra info exactly
    /// as for a DaemonSet pod.
    Agent(String),
    /// Any user name and groups, by client certificate (RBAC sees exactly these).
    User { name: String, groups: Vec<String> },
}

pub struct ControlPlane {
    dir: PathBuf,
    /// `https://127.0.0.1:<port>`
    pub server: String,
    ca: Ca,
    // Drop order: scheduler, controller-manager, apiserver, then etcd.
    /// Only when asked for ([`ControlPlane::start_scheduler`]): simulated nodes' fake
    /// kubelet binds the pods it runs itself.
    scheduler: Option<Process>,
    controller_manager: Process,
    apiserver: Process,
    etcd: Process,
    etcd_port: u16,
    api_port: u16,
    admin_kubeconfig: PathBuf,
    /// Keep the directory on drop (NODEMEM_KEEP_CONTROL_PLANE=1) for post-mortems.
    keep: bool,
}

pub(crate) fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::Setup(format!("no free loopback port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| Error::Setup(e.to_string()))?
        .port())
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text)
        .map_err(|e| Error::Setup(format!("cannot write {}: {e}", path.display())))
}

fn io_err(what: &str) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Setup(format!("{what}: {e}"))
}

/// Removes the harness's directories (`<kind>-<pid>-...`: control planes, real nodes'
/// shares) whose test process is gone (a run killed with SIGKILL cannot clean up; its
/// processes died with it through PDEATHSIG).
pub(crate) fn remove_stale_dirs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name.split('-').nth(1).and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The directory under which the harness keeps what it runs (`nodemem-testkit` in the
/// temporary directory), cleared of what killed runs left.
pub(crate) fn harness_dir() -> Result<std::path::PathBuf, Error> {
    let root = std::env::temp_dir().join("nodemem-testkit");
    std::fs::create_dir_all(&root).map_err(io_err("create the harness directory"))?;
    remove_stale_dirs(&root);
    Ok(root)
}

/// How a control plane differs from the apiserver's defaults.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The PodSecurity level (`baseline`, `restricted`) the apiserver enforces, audits
    /// and warns about in namespaces without `pod-security.kubernetes.io` labels, as a
    /// hardened cluster's admission configuration sets it. None: the apiserver's own
    /// default (privileged).
    pub pod_security_default: Option<String>,
    /// The apiserver's audit log records every write request (create, update, patch,
    /// delete) with its user and times: [`ControlPlane::audit_writes`] shows who wrote
    /// when.
    pub audit_writes: bool,
    /// The apiserver's seats in all (`--max-requests-inflight` two thirds of them,
    /// `--max-mutating-requests-inflight` the rest: with API Priority and Fairness on,
    /// their sum is what the priority levels share), as a small managed control plane
    /// has them (about 200). None: the apiserver's own (400 + 200).
    pub seats: Option<u32>,
}

/// Metadata for every write, nothing for reads and watches.
const AUDIT_WRITES_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n  verbs: [create, update, patch, delete, deletecollection]\n- level: None\n";

/// One write request as the apiserver's audit log has it.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditWrite {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub name: String,
    /// The response's HTTP status code.
    pub code: u16,
    /// When the apiserver received the request.
    pub received: k8s_openapi::jiff::Timestamp,
}

/// The admission configuration that makes `level` PodSecurity's default.
fn pod_security_admission(level: &str) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n    defaults:\n      enforce: {level}\n      enforce-version: latest\n      audit: {level}\n      audit-version: latest\n      warn: {level}\n      warn-version: latest\n    exemptions: {{usernames: [], runtimeClasses: [], namespaces: []}}\n"
    )
}

impl ControlPlane {
    /// The control plane shared by every test in this process, started on first use.
    pub fn shared() -> Result<&'static ControlPlane, Error> {
        static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| ControlPlane::start().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::Setup(format!("the shared control plane did not start: {e}")))
    }

    /// Builds the binaries if needed (see `tests/scripts/build-control-plane.sh`),
    /// starts etcd, the apiserver and the controller-manager, and waits until the
    /// apiserver is ready and the controller-manager has done work. Blocking.
    pub fn start() -> Result<Self, Error> {
        Self::start_with(&Options::default())
    }

    /// [`ControlPlane::start`] with `options`.
    pub fn start_with(options: &Options) -> Result<Self, Error> {
        let bin = control_plane_binaries()?;
        // Ports are probed free and then handed over, so another run may take one in
        // between; a start that fails for that reason is retried.
        let mut last = None;
        for _ in 0..3 {
            match Self::start_once(&bin, options) {
                Ok(cp) => return Ok(cp),
                Err(Error::PortTaken(msg)) => last = Some(msg),
                Err(e) => return Err(e),
            }
        }
        Err(Error::Setup(format!(
            "could not get free ports after 3 attempts: {}",
            last.unwrap_or_default()
        )))
    }

    fn start_once(bin: &Binaries, options: &Options) -> Result<Self, Error> {
        let root = harness_dir()?;
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = root.join(format!("cp-{}-{seq}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("etcd")).map_err(io_err("create the etcd directory"))?;

        let ca = Ca::new("nodemem-testkit-ca")?;
        write(&dir.join("ca.crt"), &ca.pem)?;
        let serving = ca.serving("kube-apiserver")?;
        write_pair(&dir, "apiserver", &serving)?;
        let (sa_key, sa_pub) = service_account_keys()?;
        write(&dir.join("sa.key"), &sa_key)?;
        write(&dir.join("sa.pub"), &sa_pub)?;

        let (etcd_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
        let server = format!("https://127.0.0.1:{api_port}");

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut etcd = Process::spawn(
            "etcd",
            &bin.etcd,
            &[
                "--name=nodemem".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=nodemem={peer_url}"),
                // Test data: durability is not needed, speed is.
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
            &dir.join("etcd.log"),
        )?;
        wait_port(&mut etcd, etcd_port)?;

        // The flags an option adds.
        let mut optional = Vec::new();
        if let Some(level) = &options.pod_security_default {
            let file = dir.join("admission.yaml");
            write(&file, &pod_security_admission(level))?;
            optional.push(format!(
                "--admission-control-config-file={}",
                file.display()
            ));
        }
        if options.audit_writes {
            let file = dir.join("audit-policy.yaml");
            write(&file, AUDIT_WRITES_POLICY)?;
            optional.extend([
                format!("--audit-policy-file={}", file.display()),
                format!("--audit-log-path={}", dir.join("audit.log").display()),
                "--audit-log-format=json".into(),
                // Written before the response: a test that read a response finds its
                // request in the log.
                "--audit-log-mode=blocking".into(),
            ]);
        }
        if let Some(seats) = options.seats {
            let reading = (seats * 2 / 3).max(1);
            optional.extend([
                format!("--max-requests-inflight={reading}"),
                format!(
                    "--max-mutating-requests-inflight={}",
                    seats.saturating_sub(reading).max(1)
                ),
            ]);
        }
        let mut apiserver = Process::spawn(
            "kube-apiserver",
            &bin.kube_apiserver,
            &[
                format!("--etcd-servers={etcd_url}"),
                format!("--secure-port={api_port}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                // From v1.37 the lease reconciler refuses a loopback address for the
                // `kubernetes` endpoints; nothing here reads them (a real node reaches
                // the apiserver through its own NAT of the service address).
                "--endpoint-reconciler-type=none".into(),
                format!("--cert-dir={}", dir.display()),
                format!("--tls-cert-file={}", dir.join("apiserver.crt").display()),
                format!(
                    "--tls-private-key-file={}",
                    dir.join("apiserver.key").display()
                ),
                format!("--client-ca-file={}", dir.join("ca.crt").display()),
                "--authorization-mode=Node,RBAC".into(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!(
                    "--service-account-key-file={}",
                    dir.join("sa.pub").display()
                ),
                format!(
                    "--service-account-signing-key-file={}",
                    dir.join("sa.key").display()
                ),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--allow-privileged=true".into(),
                // ValidatingAdmissionPolicy is on by default since v1.30; named here so
                // a change of defaults cannot turn it off unnoticed.
                "--enable-admission-plugins=NodeRestriction,ValidatingAdmissionPolicy".into(),
                // The profiling endpoints (/debug/pprof) only when a benchmark asks
                // for the apiserver's profile (NODEMEM_APISERVER_PROFILING=1).
                format!("--profiling={}", apiserver_profiling()),
                "--v=1".into(),
            ]
            .into_iter()
            .chain(optional)
            .collect::<Vec<String>>(),
            &dir.join("kube-apiserver.log"),
        )?;
        wait_port(&mut apiserver, api_port)?;

        // Client certificates: the admin, and the controller-manager as the bootstrap
        // RBAC user it is (system:kube-controller-manager).
        let admin = ca.client("nodemem-admin", &["system:masters"])?;
        write_pair(&dir, "admin", &admin)?;
        let admin_kubeconfig = dir.join("admin.kubeconfig");
        write_cert_kubeconfig(&admin_kubeconfig, &server, &dir, "admin")?;
        let kcm = ca.client("system:kube-controller-manager", &[])?;
        write_pair(&dir, "kcm", &kcm)?;
        let kcm_kubeconfig = dir.join("kcm.kubeconfig");
        write_cert_kubeconfig(&kcm_kubeconfig, &server, &dir, "kcm")?;
        write(&dir.join("ca.key"), &ca.key_pem())?;

        let kcm_args: Vec<String> = vec![
            format!("--kubeconfig={}", kcm_kubeconfig.display()),
            format!("--authentication-kubeconfig={}", kcm_kubeconfig.display()),
            format!("--authorization-kubeconfig={}", kcm_kubeconfig.display()),
            "--use-service-account-credentials=true".into(),
            format!(
                "--service-account-private-key-file={}",
                dir.join("sa.key").display()
            ),
            format!("--root-ca-file={}", dir.join("ca.crt").display()),
            format!(
                "--cluster-signing-cert-file={}",
                dir.join("ca.crt").display()
            ),
            format!(
                "--cluster-signing-key-file={}",
                dir.join("ca.key").display()
            ),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--controllers=*".into(),
            "--v=1".into(),
        ];
        let controller_manager = Process::spawn(
            "kube-controller-manager",
            &bin.kube_controller_manager,
            &kcm_args,
            &dir.join("kube-controller-manager.log"),
        )?;

        let keep = std::env::var("NODEMEM_KEEP_CONTROL_PLANE").is_ok_and(|v| v == "1");
        let mut cp = ControlPlane {
            dir,
            server,
            ca,
            scheduler: None,
            controller_manager,
            apiserver,
            etcd,
            etcd_port,
            api_port,
            admin_kubeconfig,
            keep,
        };
        cp.wait_ready()?;
        Ok(cp)
    }

    /// Stops the apiserver (SIGTERM, then SIGKILL after 5 s), as an outage: clients
    /// get connection refused until [`ControlPlane::start_apiserver`].
    pub fn stop_apiserver(&mut self) {
        self.apiserver.stop(Duration::from_secs(5));
    }

    /// Starts the stopped apiserver again with the same flags, port, certificates and
    /// etcd, and waits until it is ready.
    pub fn start_apiserver(&mut self) -> Result<(), Error> {
        self.apiserver.start_again()?;
        wait_port(&mut self.apiserver, self.api_port)?;
        self.wait_ready()
    }

    /// Stops etcd for `down` and starts it again on the same data directory and
    /// port; returns once the apiserver is ready again.
    pub fn restart_etcd(&mut self, down: Duration) -> Result<(), Error> {
        self.etcd.stop(Duration::from_secs(5));
        std::thread::sleep(down);
        self.etcd.start_again()?;
        wait_port(&mut self.etcd, self.etcd_port)?;
        self.wait_ready()
    }

    /// The directory holding certificates, kubeconfigs and component logs.
    /// The write requests in the audit log so far (with [`Options::audit_writes`];
    /// empty otherwise), in the order logged.
    pub fn audit_writes(&self) -> Vec<AuditWrite> {
        let text = std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["stage"] == "ResponseComplete")
            .filter_map(|e| {
                let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
                Some(AuditWrite {
                    user: s(&e["user"]["username"]),
                    verb: s(&e["verb"]),
                    resource: s(&e["objectRef"]["resource"]),
                    name: s(&e["objectRef"]["name"]),
                    code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                    received: e["requestReceivedTimestamp"].as_str()?.parse().ok()?,
                })
            })
            .collect()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The flags the apiserver runs with (a second one on the same etcd takes them).
    pub fn apiserver_args(&self) -> &[String] {
        self.apiserver.args()
    }

    /// A kubeconfig with cluster-admin rights (for kubectl and manual use).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// Starts kube-scheduler (as `system:kube-scheduler`, bootstrap RBAC), which real
    /// nodes need: DaemonSet pods and pods without `nodeName` are bound by it.
    pub fn start_scheduler(&mut self) -> Result<(), Error> {
        if self.scheduler.is_some() {
            return Ok(());
        }
        let bin = control_plane_binaries()?;
        let pair = self.ca.client("system:kube-scheduler", &[])?;
        write_pair(&self.dir, "scheduler", &pair)?;
        let kubeconfig = self.dir.join("scheduler.kubeconfig");
        write_cert_kubeconfig(&kubeconfig, &self.server, &self.dir, "scheduler")?;
        let scheduler = Process::spawn(
            "kube-scheduler",
            &bin.kube_scheduler,
            &[
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--authentication-kubeconfig={}", kubeconfig.display()),
                format!("--authorization-kubeconfig={}", kubeconfig.display()),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--v=1".into(),
            ],
            &self.dir.join("kube-scheduler.log"),
        )?;
        self.scheduler = Some(scheduler);
        Ok(())
    }

    /// The cluster CA's certificate (PEM): what clients verify the apiserver with.
    pub fn ca_pem(&self) -> String {
        self.ca.pem.clone()
    }

    /// A kubelet's client certificate for `node` (`system:node:<node>` in
    /// `system:nodes`), which the Node authorizer and NodeRestriction admit.
    pub fn node_credentials(&self, node: &str) -> Result<crate::pki::CertPair, Error> {
        self.ca
            .client(&format!("system:node:{node}"), &["system:nodes"])
    }

    /// Process IDs of etcd, the apiserver and the controller-manager.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![
            self.etcd.pid(),
            self.apiserver.pid(),
            self.controller_manager.pid(),
        ];
        pids.extend(self.scheduler.as_ref().map(Process::pid));
        pids
    }

    fn processes(&mut self) -> Vec<&mut Process> {
        let mut all = vec![
            &mut self.etcd,
            &mut self.apiserver,
            &mut self.controller_manager,
        ];
        all.extend(self.scheduler.as_mut());
        all
    }

    /// Fails with the component's last log lines if any component has exited.
    pub fn check_alive(&mut self) -> Result<(), Error> {
        for p in self.processes() {
            if let Some(status) = p.exited() {
                return Err(Error::Setup(format!(
                    "{} exited ({status}); last log lines from {}:\n{}",
                    p.name(),
                    p.log_path().display(),
                    p.log_tail(30)
                )));
            }
        }
        Ok(())
    }

    /// Waits on a private runtime in a scoped thread (the caller may be sync code or
    /// inside any async runtime), with one client for every probe.
    fn wait_ready(&mut self) -> Result<(), Error> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a tokio runtime")
                        .block_on(self.probe_until_ready())
                })
                .join()
                .expect("the readiness probe does not panic")
        })
    }

    async fn probe_until_ready(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let client = client_from_kubeconfig(&self.admin_kubeconfig).await?;
        // 1. The apiserver answers /readyz with "ok" (etcd reachable, RBAC bootstrap
        //    roles and the CRD/VAP machinery up).
        let mut last;
        loop {
            self.check_alive()?;
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| Error::Setup(e.to_string()))?;
            match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => break,
                Ok(body) => last = body,
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                return Err(self.timeout("kube-apiserver /readyz", &last));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        // 2. The controller-manager works: its service-account controller creates the
        //    `default` ServiceAccount in every namespace.
        let sas: Api<ServiceAccount> = Api::namespaced(client, "default");
        loop {
            self.check_alive()?;
            match sas.get_opt("default").await {
                Ok(Some(_)) => return Ok(()),
                Ok(None) => last = "no default ServiceAccount yet".into(),
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                return Err(self.timeout("kube-controller-manager (default ServiceAccount)", &last));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn timeout(&self, what: &str, last: &str) -> Error {
        Error::Setup(format!(
            "{what} not ready after {}s (last answer: {last}); logs in {}.\nkube-apiserver:\n{}\nkube-controller-manager:\n{}",
            READY_TIMEOUT.as_secs(),
            self.dir.display(),
            self.apiserver.log_tail(15),
            self.controller_manager.log_tail(15)
        ))
    }

    /// A client acting as `identity`. Call it from the runtime that will use it.
    pub async fn client(&self, identity: &Identity) -> Result<Client, Error> {
        let path = self.kubeconfig(identity).await?;
        client_from_kubeconfig(&path).await
    }

    /// A kubeconfig file for `identity`, created on first use.
    pub async fn kubeconfig(&self, identity: &Identity) -> Result<PathBuf, Error> {
        match identity {
            Identity::Admin => Ok(self.admin_kubeconfig.clone()),
            Identity::User { name, groups } => {
                let stem = format!("user-{}", sanitize(name));
                let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
                let pair = self.ca.client(name, &groups)?;
                write_pair(&self.dir, &stem, &pair)?;
                let path = self.dir.join(format!("{stem}.kubeconfig"));
                write_cert_kubeconfig(&path, &self.server, &self.dir, &stem)?;
                Ok(path)
            }
            Identity::Controller => {
                let admin = self.admin().await?;
                ensure_service_account(&admin, CONTROLLER_SERVICE_ACCOUNT).await?;
                let token = service_account_token(&admin, CONTROLLER_SERVICE_ACCOUNT, None).await?;
                let path = self.dir.join("controller.kubeconfig");
                write_token_kubeconfig(&path, &self.server, &self.dir, &token)?;
                Ok(path)
            }
            Identity::Agent(node) => self.agent_kubeconfig(&self.admin().await?, node).await,
        }
    }

    /// [`Identity::Agent`]'s kubeconfig, its requests made with `admin` (an admin
    /// client of the caller's: a test that starts hundreds of agents makes no new
    /// connection for each).
    pub async fn agent_kubeconfig(&self, admin: &Client, node: &str) -> Result<PathBuf, Error> {
        ensure_service_account(admin, AGENT_SERVICE_ACCOUNT).await?;
        let pod = agent_identity_pod(admin, node).await?;
        let token = service_account_token(admin, AGENT_SERVICE_ACCOUNT, Some(&pod)).await?;
        let path = self
            .dir
            .join(format!("agent-{}.kubeconfig", sanitize(node)));
        write_token_kubeconfig(&path, &self.server, &self.dir, &token)?;
        Ok(path)
    }

    async fn admin(&self) -> Result<Client, Error> {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }
}

/// Creates `nodemem-system` and the service account if missing.
async fn ensure_service_account(admin: &Client, name: &str) -> Result<(), Error> {
    let ns: Api<Namespace> = Api::all(admin.clone());
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": SYSTEM_NAMESPACE}
    }))
    .expect("a namespace");
    create_if_missing(&ns, &namespace).await?;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), SYSTEM_NAMESPACE);
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .expect("a service account");
    create_if_missing(&sas, &sa).await.map(|_| ())
}

/// A pod that stands for the agent on `node` (bound to it, never started): tokens
/// bound to it carry the node's name, as a DaemonSet pod's do. Like the agent's real
/// pods it belongs to a DaemonSet (one that runs nowhere, referenced without being the
/// pod's controller, so the DaemonSet controller leaves the pod alone), which is what
/// makes a node drain leave it in place, as it leaves DaemonSet pods.
async fn agent_identity_pod(admin: &Client, node: &str) -> Result<Pod, Error> {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let daemonsets: Api<DaemonSet> = Api::namespaced(admin.clone(), SYSTEM_NAMESPACE);
    let owner: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "nodemem-agent-identity"},
        "spec": {
            "selector": {"matchLabels": {"nodemem.io/identity-owner": "true"}},
            "template": {
                "metadata": {"labels": {"nodemem.io/identity-owner": "true"}},
                "spec": {
                    "nodeSelector": {"nodemem.io/no-node-has-this": "true"},
                    "containers": [{"name": "none", "image": "nodemem:identity"}]
                }
            }
        }
    }))
    .expect("a DaemonSet");
    let owner = create_if_missing(&daemonsets, &owner).await?;
    let name = format!("nodemem-agent-identity-{}", sanitize(node));
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "nodemem-agent-identity"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": "nodemem-agent-identity", "uid": owner.metadata.uid}]},
        "spec": {
            "nodeName": node,
            "serviceAccountName": AGENT_SERVICE_ACCOUNT,
            "automountServiceAccountToken": false,
            "containers": [{"name": "agent", "image": "nodemem:identity"}]
        }
    }))
    .expect("a pod");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SYSTEM_NAMESPACE);
    create_if_missing(&pods, &pod).await
}

/// A one-hour token for a service account of `nodemem-system` (TokenRequest API),
/// bound to `pod` when given.
async fn service_account_token(
    admin: &Client,
    sa: &str,
    pod: Option<&Pod>,
) -> Result<String, Error> {
    let bound = pod.map(|p| BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: p.metadata.name.clone(),
        uid: p.metadata.uid.clone(),
    });
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            bound_object_ref: bound,
            expiration_seconds: Some(3600),
        }),
        ..Default::default()
    };
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), SYSTEM_NAMESPACE);
    let issued: TokenRequest = sas
        .create_subresource("token", sa, &PostParams::default(), &request)
        .await
        .map_err(|e| Error::Api(format!("token for {SYSTEM_NAMESPACE}/{sa}: {e}")))?;
    issued
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| Error::Api(format!("no token issued for {SYSTEM_NAMESPACE}/{sa}")))
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // In order: scheduler, controller-manager, apiserver, etcd (each SIGTERM, then
        // SIGKILL after a grace period). The directory goes last.
        if let Some(scheduler) = self.scheduler.as_mut() {
            scheduler.stop(Duration::from_secs(5));
        }
        self.controller_manager.stop(Duration::from_secs(5));
        self.apiserver.stop(Duration::from_secs(5));
        self.etcd.stop(Duration::from_secs(5));
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Creates `obj`, or returns the existing object of that name.
async fn create_if_missing<K>(api: &Api<K>, obj: &K) -> Result<K, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    // Read first: a create of what exists still goes through admission (a policy's
    // parameter lookup, which timed out on an apiserver busy with 1,100 agents).
    if let Ok(Some(existing)) = api.get_opt(&name).await {
        return Ok(existing);
    }
    match api.create(&PostParams::default(), obj).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(s)) if s.code == 409 => api
            .get(&name)
            .await
            .map_err(|e| Error::Api(format!("get {name}: {e}"))),
        Err(e) => Err(Error::Api(format!("create {name}: {e}"))),
    }
}

/// A client for a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client, Error> {
    let kubeconfig = Kubeconfig::read_from(path)
        .map_err(|e| Error::Setup(format!("read {}: {e}", path.display())))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Setup(format!("load {}: {e}", path.display())))?;
    Client::try_from(config)
        .map_err(|e| Error::Setup(format!("client for {}: {e}", path.display())))
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

fn write_pair(dir: &Path, stem: &str, pair: &CertPair) -> Result<(), Error> {
    write(&dir.join(format!("{stem}.crt")), &pair.cert_pem)?;
    write(&dir.join(format!("{stem}.key")), &pair.key_pem)
}

fn kubeconfig_text(server: &str, dir: &Path, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: nodemem-testkit\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\ncontexts:\n- name: nodemem-testkit\n  context:\n    cluster: nodemem-testkit\n    user: nodemem-testkit\ncurrent-context: nodemem-testkit\nusers:\n- name: nodemem-testkit\n  user:\n{user}",
        ca = dir.join("ca.crt").display()
    )
}

fn write_cert_kubeconfig(path: &Path, server: &str, dir: &Path, stem: &str) -> Result<(), Error> {
    let user = format!(
        "    client-certificate: {}\n    client-key: {}\n",
        dir.join(format!("{stem}.crt")).display(),
        dir.join(format!("{stem}.key")).display()
    );
    write(path, &kubeconfig_text(server, dir, &user))
}

fn write_token_kubeconfig(path: &Path, server: &str, dir: &Path, token: &str) -> Result<(), Error> {
    write(
        path,
        &kubeconfig_text(server, dir, &format!("    token: {token}\n")),
    )
}

/// Waits until a component accepts TCP connections on `port`, or fails with its log.
pub(crate) fn wait_port(process: &mut Process, port: u16) -> Result<(), Error> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = process.exited() {
            let log = process.log_tail(30);
            if log.contains("address already in use") {
                return Err(Error::PortTaken(format!("{}: {log}", process.name())));
            }
            return Err(Error::Setup(format!(
                "{} exited ({status}) before listening on port {port}; last log lines:\n{log}",
                process.name()
            )));
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Setup(format!(
                "{} did not listen on port {port} within {}s; last log lines:\n{}",
                process.name(),
                READY_TIMEOUT.as_secs(),
                process.log_tail(30)
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// NODEMEM_APISERVER_PROFILING=1: the apiserver serves /debug/pprof (to its admin).
fn apiserver_profiling() -> bool {
    std::env::var("NODEMEM_APISERVER_PROFILING").is_ok_and(|v| v == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of a process that is gone is removed; one of a live process (this
    /// one) and one not named for a process stay.
    #[test]
    fn only_the_directories_of_gone_processes_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        let names = [
            format!("node-{}-a", gone.id()),
            format!("node-{}-b", std::process::id()),
            "kept".to_string(),
        ];
        for n in &names {
            std::fs::create_dir(root.path().join(n)).unwrap();
        }
        remove_stale_dirs(root.path());
        let left: std::collections::BTreeSet<String> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, names[1..].iter().cloned().collect());
    }
}
