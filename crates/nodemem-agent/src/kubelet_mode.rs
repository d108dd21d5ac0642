//! `enforcement: Kubelet`: the agent renders a KubeletConfiguration drop-in for the
//! node's kubelet version, writes it atomically, removes the kubelet's Memory Manager
//! state first when the kubelet's memoryManagerPolicy or reservedMemory changes with it,
//! and restarts the kubelet (through systemd's D-Bus API, or with a configured command),
//! reporting `Applied` only once the kubelet is back (a new kubelet process that stays
//! up, and its healthz where reachable). Without either the config says
//! `KubeletRestartRequired` until the kubelet process is seen to start after the write.
//! Leaving Kubelet mode removes the drop-in the same way.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use nodemem_apply::kubelet::{
    kubelet_started_at, remove_memory_manager_state, KubeletFileError, KubeletFiles, OwnDropIn,
};
use nodemem_apply::state::StateDir;
use nodemem_model::node::kubelet_dropin::{render, DropInOwner, KubeletRefusal};
use nodemem_model::settings::NodeSettings;
use nodemem_systemd::{BusAddress, Systemd, SystemdError};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

const RECORD_FILE: &str = "kubelet.json";
const RECORD_KIND: &str = "kubelet";
/// Restart attempts after a failure wait this long, doubling up to the cap.
const RETRY_FIRST: Duration = Duration::from_secs(10);
const RETRY_CAP: Duration = Duration::from_secs(600);

/// How the kubelet is restarted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartBy {
    /// `RestartUnit(unit, "replace")` on systemd's D-Bus API (what `systemctl restart`
    /// sends), reached at these addresses: works from the agent's pod with the host's
    /// /run mounted and uid 0, no capability and no host namespace needed.
    Unit {
        unit: String,
        systemd: Vec<BusAddress>,
    },
    /// Run with `sh -c` (for example `nsenter -t 1 -m -- systemctl restart kubelet`).
    Command(String),
}

/// How the kubelet is restarted and seen back.
#[derive(Clone, Debug)]
pub struct KubeletRestart {
    pub by: Option<RestartBy>,
    /// `http://host:port/path` that answers 200 once the kubelet is back (the
    /// kubelet's healthz is `http://127.0.0.1:10248/healthz`, on the host's loopback:
    /// not reachable from a pod that is not on the host network).
    pub healthz: Option<String>,
    /// After a unit restart, the new kubelet process must stay this long: a kubelet that
    /// refuses its configuration exits within a second or two and systemd starts
    /// another.
    pub stable_for: Duration,
    /// For the restart and the wait together.
    pub timeout: Duration,
}

impl Default for KubeletRestart {
    fn default() -> Self {
        KubeletRestart {
            by: None,
            healthz: None,
            stable_for: Duration::from_secs(5),
            timeout: Duration::from_secs(120),
        }
    }
}

/// Where Kubelet mode reads and writes.
#[derive(Clone, Debug)]
pub struct KubeletModeConfig {
    /// The kubelet's configuration, drop-in directory and Memory Manager state file.
    pub files: KubeletFiles,
    /// procfs of the host's PID namespace, to see when the kubelet started.
    pub proc_root: PathBuf,
    pub restart: KubeletRestart,
}

/// What the kubelet side of a pass ended with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeletOutcome {
    /// The settings cannot be rendered for this kubelet; nothing was written.
    Refused(Vec<KubeletRefusal>),
    /// Reading or writing the kubelet's files, or restarting it, failed.
    Failed {
        reason: &'static str,
        message: String,
    },
    /// The drop-in is written (or removed) and the kubelet has not restarted since.
    RestartRequired { message: String },
    /// The kubelet runs with the drop-in.
    Configured { message: String },
}

impl KubeletOutcome {
    /// The `Applied` condition's status, reason and message.
    pub fn applied(&self) -> (bool, &'static str, String) {
        match self {
            KubeletOutcome::Refused(r) => (
                false,
                r.first()
                    .map_or("KubeletCannotExpress", KubeletRefusal::reason),
                r.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            KubeletOutcome::Failed { reason, message } => (false, reason, message.clone()),
            KubeletOutcome::RestartRequired { message } => {
                (false, "KubeletRestartRequired", message.clone())
            }
            KubeletOutcome::Configured { message } => (true, "KubeletConfigured", message.clone()),
        }
    }
}

/// What the agent did to the kubelet, kept in the state directory so a restarted agent
/// neither restarts the kubelet twice nor forgets a restart it still owes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    /// When nodemem last wrote or removed its drop-in (milliseconds since the epoch).
    changed_at_ms: u64,
    /// The kubelet has not restarted since.
    restart_pending: bool,
    /// The Memory Manager state must be gone when the kubelet restarts.
    remove_memory_manager_state: bool,
}

/// Why a kubelet restart did not bring the kubelet back; [`RestartError::reason`] is
/// the condition reason.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    #[error("the restart command {command:?} did not finish within {seconds} s")]
    CommandTimedOut { command: String, seconds: u64 },
    #[error("cannot run the restart command {command:?}: {source}")]
    CommandNotRun {
        command: String,
        source: std::io::Error,
    },
    #[error("the restart command {command:?} failed ({status}): {stderr_tail}")]
    CommandFailed {
        command: String,
        status: std::process::ExitStatus,
        stderr_tail: String,
    },
    #[error("cannot restart {unit}: {}", joined(.failures))]
    SystemdUnreachable {
        unit: String,
        failures: Vec<SystemdError>,
    },
    #[error(transparent)]
    RestartUnit(SystemdError),
    #[error(
        "{what} within {seconds} s of the restart; check the kubelet's log (journalctl -u kubelet)"
    )]
    NotBack { what: &'static str, seconds: u64 },
    #[error("the kubelet was restarted but {url} did not answer 200 within {seconds} s ({answer}); check the kubelet's log (journalctl -u kubelet)")]
    HealthzSilent {
        url: String,
        seconds: u64,
        answer: String,
    },
}

impl RestartError {
    pub fn reason(&self) -> &'static str {
        match self {
            RestartError::NotBack { .. } | RestartError::HealthzSilent { .. } => "KubeletNotBack",
            _ => "KubeletRestartFailed",
        }
    }
}

fn joined(failures: &[SystemdError]) -> String {
    failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

pub struct KubeletMode {
    config: KubeletModeConfig,
    record: Record,
    /// Restart failures in a row, and when the next attempt may run.
    failures: u32,
    retry_at: Option<Instant>,
    last_failure: Option<(&'static str, String)>,
}

impl KubeletMode {
    /// Loads what the last agent did to the kubelet (an unusable record is reported and
    /// treated as nothing pending: the drop-in on disk is compared again anyway).
    pub fn new(config: KubeletModeConfig, state: &StateDir) -> Self {
        let record = match state.load::<Record>(RECORD_FILE, RECORD_KIND) {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                warn!(error = %e, "the kubelet record is not usable; starting from the drop-in on disk");
                Record::default()
            }
        };
        KubeletMode {
            config,
            record,
            failures: 0,
            retry_at: None,
            last_failure: None,
        }
    }

    /// Brings the kubelet's drop-in to `settings` for a kubelet of `version`.
    pub async fn configure(
        &mut self,
        settings: &NodeSettings,
        version: Option<&str>,
        owner: DropInOwner<'_>,
        state: &StateDir,
    ) -> KubeletOutcome {
        let files = self.config.files.clone();
        let path = match files.dropin_path() {
            Ok(p) => p,
            Err(e) => return failed(e.reason(), e),
        };
        let own = match files.read(OwnDropIn::Without) {
            Ok(s) => s,
            Err(e) => return failed(e.reason(), e),
        };
        let dropin = match render(settings, version.unwrap_or(""), &own.reserved, owner) {
            Ok(d) => d,
            Err(refusals) => return KubeletOutcome::Refused(refusals),
        };
        // The kubelet applies drop-ins in name order and its flags last: a later file
        // or a flag that sets a field again wins over nodemem's. Nothing is written or
        // restarted for a drop-in that would not decide what the kubelet runs.
        match files.overrides_of(&dropin.text) {
            Ok(found) if found.is_empty() => {}
            Ok(found) => {
                let each: Vec<String> = found.iter().map(ToString::to_string).collect();
                return KubeletOutcome::Failed {
                    reason: "KubeletDropInOverridden",
                    message: format!(
                        "nodemem's drop-in {} would not decide what the kubelet runs: {}; nothing is written or restarted (the kubelet applies its drop-ins in name order, then its command-line flags: remove those settings or give them nodemem's values)",
                        path.display(),
                        each.join("; ")
                    ),
                };
            }
            Err(e) => return failed(e.reason(), e),
        }
        match files.current_dropin() {
            Ok(Some(current)) if current == dropin.text => {}
            Ok(_) => {
                if let Err(e) = self.restart_reaches_kubelet() {
                    return e;
                }
                if let Err(e) = self.change(OwnDropIn::As(&dropin.text), state) {
                    return e;
                }
                if let Err(e) = files.write_dropin(&dropin.text) {
                    return failed("KubeletConfigUnwritable", e);
                }
                info!(path = %path.display(), "wrote the kubelet drop-in");
            }
            Err(e) => return failed(e.reason(), e),
        }
        self.settle(&format!("{} is in effect", path.display()), state)
            .await
    }

    /// Outside Kubelet mode: removes nodemem's drop-in if there is one, and restarts the
    /// kubelet so it stops enforcing it. None when there is nothing to undo.
    pub async fn leave(&mut self, state: &StateDir) -> Option<KubeletOutcome> {
        let files = self.config.files.clone();
        // A kubelet without a drop-in directory has no drop-in of nodemem's.
        files.dropin_path().ok()?;
        match files.current_dropin() {
            Ok(None) if !self.record.restart_pending => return None,
            Ok(None) => {}
            Ok(Some(_)) => {
                if let Err(e) = self.restart_reaches_kubelet() {
                    return Some(e);
                }
                if let Err(e) = self.change(OwnDropIn::Without, state) {
                    return Some(e);
                }
                if let Err(e) = self.config.files.remove_dropin() {
                    return Some(failed("KubeletConfigUnwritable", e));
                }
                info!("removed the kubelet drop-in (the node left enforcement: Kubelet)");
            }
            Err(e) => return Some(failed(e.reason(), e)),
        }
        Some(
            self.settle(
                "the kubelet drop-in is removed and the kubelet runs without it",
                state,
            )
            .await,
        )
    }

    /// Under a unit restart, the kubelet whose files nodemem writes must run in that
    /// unit: restarting another unit would leave it running without the drop-in.
    /// Checked before the drop-in is written and again before the restart.
    fn restart_reaches_kubelet(&self) -> Result<(), KubeletOutcome> {
        let Some(RestartBy::Unit { unit, .. }) = &self.config.restart.by else {
            return Ok(());
        };
        let process = match self.config.files.kubelet_process() {
            Ok(Some(p)) => p,
            // Files given to the agent: which process reads them is not known.
            Ok(None) => return Ok(()),
            Err(e) => return Err(failed(e.reason(), e)),
        };
        let who = format!("{} (pid {})", process.command(), process.pid);
        let why = match process.runs_in_unit(unit) {
            Ok(true) => return Ok(()),
            Ok(false) => format!("runs in cgroup {}, not in {unit}", process.cgroup()),
            Err(e) => format!("its cgroup cannot be read ({e})"),
        };
        Err(KubeletOutcome::Failed {
            reason: "KubeletNotInRestartUnit",
            message: format!(
                "the kubelet nodemem reads, {who}, {why}: restarting {unit} would not make it read nodemem's drop-in, so nothing is written or restarted (give the agent the kubelet's own unit with --kubelet-restart-unit)"
            ),
        })
    }

    /// Before the drop-in changes: when the kubelet's Memory Manager changes with it,
    /// its state file goes first (the kubelet would refuse to start on it). The change
    /// is recorded before the file changes, so a crash in between still restarts.
    fn change(&mut self, after: OwnDropIn<'_>, state: &StateDir) -> Result<(), KubeletOutcome> {
        let files = &self.config.files;
        let before = files
            .read(OwnDropIn::OnDisk)
            .map_err(|e| failed(e.reason(), e))?;
        let after = files.read(after).map_err(|e| failed(e.reason(), e))?;
        if before.memory_manager() != after.memory_manager() {
            self.record.remove_memory_manager_state = true;
            self.remove_memory_manager_state()?;
        }
        self.record.restart_pending = true;
        self.record.changed_at_ms = unix_now_ms();
        self.failures = 0;
        self.retry_at = None;
        self.save(state);
        Ok(())
    }

    fn remove_memory_manager_state(&self) -> Result<(), KubeletOutcome> {
        let path = &self
            .config
            .files
            .memory_manager_state()
            .map_err(|e| failed("MemoryManagerStateNotRemoved", e))?;
        match remove_memory_manager_state(path) {
            Ok(true) => {
                info!(path = %path.display(), "removed the kubelet's Memory Manager state (its policy or reservedMemory changes)");
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) => Err(failed("MemoryManagerStateNotRemoved", e)),
        }
    }

    /// After the drop-in is as wanted: restart the kubelet if one is owed.
    async fn settle(&mut self, done: &str, state: &StateDir) -> KubeletOutcome {
        if !self.record.restart_pending {
            return KubeletOutcome::Configured {
                message: done.to_string(),
            };
        }
        let Some(by) = self.config.restart.by.clone() else {
            let changed = SystemTime::UNIX_EPOCH + Duration::from_millis(self.record.changed_at_ms);
            if kubelet_started_at(&self.config.proc_root).is_some_and(|s| s > changed) {
                info!("the kubelet restarted since its drop-in changed");
                self.restarted(state);
                return KubeletOutcome::Configured {
                    message: done.to_string(),
                };
            }
            return KubeletOutcome::RestartRequired {
                message: format!(
                    "the kubelet drop-in changed; restart the kubelet to apply it{} (or give the agent --kubelet-restart-unit or --kubelet-restart-command)",
                    if self.record.remove_memory_manager_state {
                        format!(
                            ", after making sure {} is gone (its Memory Manager settings change)",
                            self.config
                                .files
                                .memory_manager_state()
                                .map_or_else(|e| e.to_string(), |p| p.display().to_string())
                        )
                    } else {
                        String::new()
                    }
                ),
            };
        };
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            let (reason, message) = self
                .last_failure
                .clone()
                .unwrap_or(("KubeletRestartFailed", "restart failed".into()));
            return KubeletOutcome::Failed { reason, message };
        }
        if let Err(e) = self.restart_reaches_kubelet() {
            return e;
        }
        // The running kubelet may have checkpointed its state again since it was removed.
        if self.record.remove_memory_manager_state {
            if let Err(e) = self.remove_memory_manager_state() {
                return e;
            }
        }
        match self.restart(&by).await {
            Ok(()) => {
                info!(how = ?by, "restarted the kubelet");
                self.restarted(state);
                KubeletOutcome::Configured {
                    message: format!("{done}; the kubelet was restarted"),
                }
            }
            Err(e) => {
                let (reason, message) = (e.reason(), e.to_string());
                self.failures += 1;
                let wait = RETRY_FIRST
                    .saturating_mul(1 << self.failures.min(8).saturating_sub(1))
                    .min(RETRY_CAP);
                self.retry_at = Some(Instant::now() + wait);
                let message = format!(
                    "{message} (attempt {}; next in {} s)",
                    self.failures,
                    wait.as_secs()
                );
                warn!(reason, %message, "kubelet restart failed");
                self.last_failure = Some((reason, message.clone()));
                KubeletOutcome::Failed { reason, message }
            }
        }
    }

    fn restarted(&mut self, state: &StateDir) {
        self.record.restart_pending = false;
        self.record.remove_memory_manager_state = false;
        self.failures = 0;
        self.retry_at = None;
        self.last_failure = None;
        self.save(state);
    }

    fn save(&self, state: &StateDir) {
        if let Err(e) = state.save(RECORD_FILE, RECORD_KIND, &self.record) {
            warn!(error = %e, "the kubelet record was not saved");
        }
    }

    /// Restarts the kubelet, then waits for it to be back, all within the timeout.
    async fn restart(&self, by: &RestartBy) -> Result<(), RestartError> {
        let restart = &self.config.restart;
        let deadline = Instant::now() + restart.timeout;
        match by {
            RestartBy::Command(command) => self.run_command(command).await?,
            RestartBy::Unit { unit, systemd } => {
                let before = kubelet_started_at(&self.config.proc_root);
                restart_unit(unit, systemd).await?;
                self.new_kubelet_stays(before, deadline).await?;
            }
        }
        let Some(url) = &restart.healthz else {
            return Ok(());
        };
        loop {
            match healthz(url).await {
                Ok(()) => return Ok(()),
                Err(answer) if Instant::now() >= deadline => {
                    return Err(RestartError::HealthzSilent {
                        url: url.clone(),
                        seconds: restart.timeout.as_secs(),
                        answer,
                    })
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// systemd answers RestartUnit once the job is queued: the kubelet is back when a
    /// kubelet process other than `before` runs and is still the same process
    /// `stable_for` later (seen in the host's /proc: the DaemonSet runs with hostPID).
    async fn new_kubelet_stays(
        &self,
        before: Option<SystemTime>,
        deadline: Instant,
    ) -> Result<(), RestartError> {
        let restart = &self.config.restart;
        let mut seen: Option<(SystemTime, Instant)> = None;
        // Whether any new kubelet ran meanwhile: the last look may fall between two of
        // a crash-looping kubelet's processes, which is still "did not stay up".
        let mut any_new = false;
        loop {
            let now = kubelet_started_at(&self.config.proc_root);
            match (now, seen) {
                (Some(started), Some((same, since))) if started == same => {
                    if since.elapsed() >= restart.stable_for {
                        return Ok(());
                    }
                }
                (Some(started), _) if Some(started) != before => {
                    seen = Some((started, Instant::now()));
                    any_new = true;
                }
                _ => seen = None,
            }
            if Instant::now() >= deadline {
                let what = if any_new {
                    "the restarted kubelet did not stay up"
                } else {
                    "no new kubelet process started"
                };
                return Err(RestartError::NotBack {
                    what,
                    seconds: restart.timeout.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Runs the restart command to its end.
    async fn run_command(&self, command: &str) -> Result<(), RestartError> {
        let restart = &self.config.restart;
        let run = tokio::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = match tokio::time::timeout(restart.timeout, run).await {
            Err(_) => {
                return Err(RestartError::CommandTimedOut {
                    command: command.to_string(),
                    seconds: restart.timeout.as_secs(),
                })
            }
            Ok(Err(source)) => {
                return Err(RestartError::CommandNotRun {
                    command: command.to_string(),
                    source,
                })
            }
            Ok(Ok(o)) => o,
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: String = stderr
                .trim()
                .chars()
                .rev()
                .take(300)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Err(RestartError::CommandFailed {
                command: command.to_string(),
                status: output.status,
                stderr_tail: tail,
            });
        }
        Ok(())
    }
}

/// `RestartUnit(unit, "replace")` at the first of `systemd` that answers.
async fn restart_unit(unit: &str, systemd: &[BusAddress]) -> Result<(), RestartError> {
    let conn = Systemd::connect_any(systemd).await.map_err(|failures| {
        RestartError::SystemdUnreachable {
            unit: unit.to_string(),
            failures,
        }
    })?;
    conn.restart_unit(unit)
        .await
        .map(drop)
        .map_err(RestartError::RestartUnit)
}

fn failed(reason: &'static str, e: KubeletFileError) -> KubeletOutcome {
    KubeletOutcome::Failed {
        reason,
        message: e.to_string(),
    }
}

fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One GET of a plain-HTTP healthz URL (the kubelet serves it on localhost without
/// TLS); Ok on status 200.
async fn healthz(url: &str) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?} is not an http:// URL"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut stream = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(authority),
    )
    .await
    .map_err(|_| "connect timed out".to_string())?
    .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut head))
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| e.to_string())?;
    let line = String::from_utf8_lossy(&head[..n]);
    match line.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        Some(code) => Err(format!("status {code}")),
        None => Err("not an HTTP answer".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn healthz_is_ok_on_200_only() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answers = [
            "HTTP/1.1 200 OK\r\n\r\nok",
            "HTTP/1.1 500 Internal\r\n\r\nno",
        ];
        let server = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            for answer in answers {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 256];
                let _ = s.read(&mut buf).await;
                s.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        let url = format!("http://{addr}/healthz");
        assert_eq!(healthz(&url).await, Ok(()));
        assert_eq!(healthz(&url).await, Err("status 500".to_string()));
        server.await.unwrap();
        assert!(healthz(&url).await.is_err(), "nothing listening");
        assert_eq!(
            healthz("https://127.0.0.1:10250/healthz").await,
            Err("\"https://127.0.0.1:10250/healthz\" is not an http:// URL".to_string())
        );
    }
}

#[cfg(test)]
mod mode_tests {
    use super::*;
    use nodemem_model::cluster::policy::{
        Enforcement, MemoryManagerPolicy, NodeReserved, ReservedMemory,
    };
    use nodemem_model::node::kubelet_dropin::DROPIN_FILE;
    use nodemem_model::quantity::Quantity;
    use nodemem_model::values::memory_qos::ReservationPolicy;
    use std::path::Path;

    const OWNER: DropInOwner<'static> = DropInOwner {
        node: "n1",
        revision: "r1",
    };

    struct Bed {
        _dir: tempfile::TempDir,
        root: PathBuf,
        state: StateDir,
    }

    impl Bed {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().to_path_buf();
            std::fs::create_dir_all(root.join("conf.d")).unwrap();
            std::fs::create_dir_all(root.join("proc")).unwrap();
            std::fs::write(root.join("config.yaml"), "kind: KubeletConfiguration\n").unwrap();
            let state = StateDir::open(root.join("state")).unwrap();
            Bed {
                _dir: dir,
                root,
                state,
            }
        }

        fn mode(&self, command: Option<String>) -> KubeletMode {
            KubeletMode::new(
                KubeletModeConfig {
                    files: KubeletFiles {
                        memory_manager_state: Some(self.root.join("memory_manager_state")),
                        ..KubeletFiles::given(
                            self.root.join("config.yaml"),
                            Some(self.root.join("conf.d")),
                        )
                    },
                    proc_root: self.root.join("proc"),
                    restart: KubeletRestart {
                        by: command.map(RestartBy::Command),
                        healthz: None,
                        stable_for: Duration::from_millis(300),
                        timeout: Duration::from_secs(10),
                    },
                },
                &self.state,
            )
        }

        /// Restarts `unit` through the systemd at `<root>/run`.
        fn unit_mode(&self, unit: &str, timeout: Duration) -> KubeletMode {
            let mut mode = self.mode(None);
            mode.config.restart.by = Some(RestartBy::Unit {
                unit: unit.into(),
                systemd: BusAddress::host(&self.root.join("run")).to_vec(),
            });
            mode.config.restart.timeout = timeout;
            mode
        }

        /// One pass of `mode` with the settings of `policy` on a v1.36.3 kubelet.
        async fn configure(
            &self,
            mode: &mut KubeletMode,
            policy: MemoryManagerPolicy,
        ) -> KubeletOutcome {
            mode.configure(&settings(policy), Some("v1.36.3"), OWNER, &self.state)
                .await
        }

        fn dropin(&self) -> Option<String> {
            std::fs::read_to_string(self.root.join("conf.d").join(DROPIN_FILE)).ok()
        }

        fn restarts(&self) -> usize {
            std::fs::read_to_string(self.root.join("restarts")).map_or(0, |s| s.lines().count())
        }

        fn counting_command(&self) -> Option<String> {
            Some(format!(
                "echo restarted >> {}",
                self.root.join("restarts").display()
            ))
        }

        /// A kubelet process that started `secs_from_now` seconds from now.
        fn kubelet_started(&self, secs_from_now: i64) {
            kubelet_process(&self.root.join("proc"), secs_from_now);
        }
    }

    /// Writes a kubelet process into a stand-in /proc, started `secs_from_now` seconds
    /// from now.
    fn kubelet_process(proc: &Path, secs_from_now: i64) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let btime = now - 1000;
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as i64;
        std::fs::write(proc.join("stat"), format!("btime {btime}\n")).unwrap();
        std::fs::create_dir_all(proc.join("4242")).unwrap();
        std::fs::write(proc.join("4242/comm"), "kubelet\n").unwrap();
        let start = (1000 + secs_from_now) * ticks;
        std::fs::write(
            proc.join("4242/stat"),
            format!("4242 (kubelet) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n"),
        )
        .unwrap();
        std::fs::write(
            proc.join("4242/cgroup"),
            "0::/../../system.slice/kubelet.service\n",
        )
        .unwrap();
        // The host's mount namespace, PID 1's and the kubelet's.
        for pid in ["1", "4242"] {
            let ns = proc.join(pid).join("ns");
            std::fs::create_dir_all(&ns).unwrap();
            if std::fs::symlink_metadata(ns.join("mnt")).is_err() {
                std::os::unix::fs::symlink("mnt:[4026531841]", ns.join("mnt")).unwrap();
            }
        }
    }

    /// Under a unit restart, a kubelet that does not run in that unit (its drop-in
    /// would not be read by the process the restart starts) gets nothing written and
    /// nothing restarted; once it runs in the unit, the drop-in is written.
    #[tokio::test]
    async fn a_unit_restart_that_would_miss_the_kubelet_writes_nothing() {
        let bed = Bed::new();
        bed.kubelet_started(-100);
        let proc = bed.root.join("proc");
        std::fs::write(
            proc.join("4242/cmdline"),
            "/usr/bin/kubelet\0--config=/config.yaml\0--config-dir=/conf.d\0",
        )
        .unwrap();
        for link in ["root", "cwd"] {
            std::os::unix::fs::symlink(&bed.root, proc.join("4242").join(link)).unwrap();
        }
        std::fs::write(
            proc.join("4242/cgroup"),
            "0::/../../system.slice/kubelet-custom.service\n",
        )
        .unwrap();
        let mut mode = bed.unit_mode("kubelet.service", Duration::from_secs(2));
        mode.config.files = KubeletFiles {
            memory_manager_state: Some(bed.root.join("memory_manager_state")),
            ..KubeletFiles::process(proc.clone(), None)
        };
        let out = bed.configure(&mut mode, MemoryManagerPolicy::None).await;
        let (ok, why, message) = out.applied();
        assert_eq!((ok, why), (false, "KubeletNotInRestartUnit"), "{message}");
        assert!(
            message.starts_with("the kubelet nodemem reads, kubelet (pid 4242), runs in cgroup /../../system.slice/kubelet-custom.service, not in kubelet.service"),
            "{message}"
        );
        assert_eq!(bed.dropin(), None, "nothing written");
        std::fs::write(
            proc.join("4242/cgroup"),
            "0::/../../system.slice/kubelet.service\n",
        )
        .unwrap();
        let out = bed.configure(&mut mode, MemoryManagerPolicy::None).await;
        assert_ne!(reason(&out), "KubeletNotInRestartUnit", "{out:?}");
        assert!(bed.dropin().is_some(), "written: {out:?}");
    }

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    /// A site drop-in that sorts after nodemem's (`~site.conf` after `~nodemem.conf`)
    /// and turns the gate off: nodemem's values would not be what the kubelet runs, so
    /// nothing is written or restarted and the condition names the file; once it
    /// agrees, the drop-in is written.
    #[tokio::test]
    async fn a_later_drop_in_that_overrides_nodemems_values_is_named_and_nothing_is_written() {
        let bed = Bed::new();
        let site = bed.root.join("conf.d/~site.conf");
        std::fs::write(
            &site,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  MemoryQoS: false\n",
        )
        .unwrap();
        let mut mode = bed.mode(bed.counting_command());
        let out = bed.configure(&mut mode, MemoryManagerPolicy::None).await;
        let (ok, why, message) = out.applied();
        assert_eq!((ok, why), (false, "KubeletDropInOverridden"), "{message}");
        assert!(
            message.contains(&format!(
                "featureGates.MemoryQoS is set again by drop-in {}",
                site.display()
            )),
            "{message}"
        );
        assert_eq!(bed.dropin(), None, "nothing written");
        assert_eq!(bed.restarts(), 0, "nothing restarted");
        std::fs::write(
            &site,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  MemoryQoS: true\n",
        )
        .unwrap();
        let out = bed.configure(&mut mode, MemoryManagerPolicy::None).await;
        assert_eq!(reason(&out), "KubeletConfigured", "{out:?}");
        assert!(bed.dropin().is_some());
        assert_eq!(bed.restarts(), 1);
    }

    fn settings(policy: MemoryManagerPolicy) -> NodeSettings {
        let mut s = NodeSettings {
            enforcement: Enforcement::Kubelet,
            ..NodeSettings::default()
        };
        s.memory_qos.reservation_policy = ReservationPolicy::TieredReservation;
        if policy == MemoryManagerPolicy::Static {
            s.memory_manager.policy = policy;
            s.memory_manager.reserved_memory = vec![ReservedMemory {
                numa_node: 0,
                limits: [("memory".to_string(), q("300Mi"))].into(),
            }];
            s.node_reserved = Some(NodeReserved {
                kube_reserved: Some(q("100Mi")),
                system_reserved: Some(q("100Mi")),
                eviction_hard: None,
            });
        }
        s
    }

    fn reason(o: &KubeletOutcome) -> &'static str {
        o.applied().1
    }

    #[tokio::test]
    async fn without_a_command_the_restart_is_owed_until_the_kubelet_is_seen_to_start() {
        let bed = Bed::new();
        let mut mode = bed.mode(None);
        let s = settings(MemoryManagerPolicy::None);
        let o = mode.configure(&s, Some("v1.36.3"), OWNER, &bed.state).await;
        assert_eq!(reason(&o), "KubeletRestartRequired", "{o:?}");
        assert!(bed
            .dropin()
            .unwrap()
            .contains("memoryReservationPolicy: TieredReservation"));
        // A kubelet that started before the write does not count.
        bed.kubelet_started(-30);
        let o = mode.configure(&s, Some("v1.36.3"), OWNER, &bed.state).await;
        assert_eq!(reason(&o), "KubeletRestartRequired");
        // A restarted agent still owes it (the record is in the state directory).
        let mut mode = bed.mode(None);
        let o = mode.configure(&s, Some("v1.36.3"), OWNER, &bed.state).await;
        assert_eq!(reason(&o), "KubeletRestartRequired");
        bed.kubelet_started(2);
        let o = mode.configure(&s, Some("v1.36.3"), OWNER, &bed.state).await;
        assert_eq!(
            o.applied(),
            (
                true,
                "KubeletConfigured",
                format!(
                    "{} is in effect",
                    bed.root.join("conf.d").join(DROPIN_FILE).display()
                )
            )
        );
    }

    #[tokio::test]
    async fn a_command_restarts_once_per_change_and_the_memory_manager_state_goes_first() {
        let bed = Bed::new();
        let mm_state = bed.root.join("memory_manager_state");
        std::fs::write(&mm_state, "{\"policyName\":\"None\"}").unwrap();
        let mut mode = bed.mode(bed.counting_command());
        let none = settings(MemoryManagerPolicy::None);
        let o = mode
            .configure(&none, Some("v1.36.3"), OWNER, &bed.state)
            .await;
        assert_eq!(reason(&o), "KubeletConfigured", "{o:?}");
        assert_eq!(bed.restarts(), 1);
        assert!(
            mm_state.exists(),
            "the Memory Manager does not change: its state stays"
        );
        let o = mode
            .configure(&none, Some("v1.36.3"), OWNER, &bed.state)
            .await;
        assert_eq!(reason(&o), "KubeletConfigured");
        assert_eq!(bed.restarts(), 1, "nothing changed: no restart");

        let fixed = settings(MemoryManagerPolicy::Static);
        let o = mode
            .configure(&fixed, Some("v1.36.3"), OWNER, &bed.state)
            .await;
        assert_eq!(reason(&o), "KubeletConfigured", "{o:?}");
        assert_eq!(bed.restarts(), 2);
        assert!(
            !mm_state.exists(),
            "the policy changes: the state file goes before the restart"
        );
        assert!(bed
            .dropin()
            .unwrap()
            .contains("memoryManagerPolicy: Static"));

        // Only reservedMemory changes (same Static policy): the kubelet checks its state
        // against the reservations at start (KEP-1769), so the state goes again.
        std::fs::write(&mm_state, "{\"policyName\":\"Static\"}").unwrap();
        let mut more = fixed.clone();
        more.memory_manager.reserved_memory[0]
            .limits
            .insert("memory".into(), q("400Mi"));
        more.node_reserved.as_mut().unwrap().kube_reserved = Some(q("200Mi"));
        let o = mode
            .configure(&more, Some("v1.36.3"), OWNER, &bed.state)
            .await;
        assert_eq!(reason(&o), "KubeletConfigured", "{o:?}");
        assert_eq!(bed.restarts(), 3);
        assert!(!mm_state.exists(), "reservedMemory changed: the state goes");
        // A Memory QoS change only: the state stays.
        std::fs::write(&mm_state, "{\"policyName\":\"Static\"}").unwrap();
        let mut factor = more.clone();
        factor.memory_qos.throttling_factor =
            Some(nodemem_model::values::factor::ThrottlingFactor::from_f64(0.7).unwrap());
        mode.configure(&factor, Some("v1.36.3"), OWNER, &bed.state)
            .await;
        assert_eq!(bed.restarts(), 4);
        assert!(
            mm_state.exists(),
            "the Memory Manager is unchanged: its state stays"
        );

        // Leaving Kubelet mode removes the drop-in and restarts once more.
        std::fs::write(&mm_state, "{\"policyName\":\"Static\"}").unwrap();
        let o = mode.leave(&bed.state).await.unwrap();
        assert_eq!(reason(&o), "KubeletConfigured");
        assert_eq!(bed.dropin(), None);
        assert_eq!(bed.restarts(), 5);
        assert!(
            !mm_state.exists(),
            "back to the kubelet's own policy (None)"
        );
        assert_eq!(mode.leave(&bed.state).await, None, "nothing left to undo");
    }

    #[tokio::test]
    async fn a_failing_restart_is_reported_and_retried_with_backoff_not_in_a_loop() {
        let bed = Bed::new();
        let attempts = bed.root.join("attempts");
        let mut mode = bed.mode(Some(format!(
            "echo try >> {}; echo 'Failed to restart kubelet.service: Unit not found.' >&2; exit 5",
            attempts.display()
        )));
        let s = settings(MemoryManagerPolicy::None);
        let o = mode.configure(&s, Some("v1.36.3"), OWNER, &bed.state).await;
        let (ok, reason, message) = o.applied();
        assert!(!ok);
        assert_eq!(reason, "KubeletRestartFailed");
        assert!(
            message.contains("failed (exit status: 5): Failed to restart kubelet.service: Unit not found. (attempt 1; next in 10 s)"),
            "{message}"
        );
        for _ in 0..5 {
            let o = mode.configure(&s, Some("v1.36.3"), OWNER, &bed.state).await;
            assert_eq!(o.applied().1, "KubeletRestartFailed");
        }
        assert_eq!(
            std::fs::read_to_string(&attempts).unwrap().lines().count(),
            1,
            "retried after the backoff, not on every pass"
        );
    }

    #[tokio::test]
    async fn a_unit_restart_goes_through_systemd_and_waits_for_a_new_kubelet_that_stays() {
        use nodemem_systemd::fake::FakeSystemd;
        let bed = Bed::new();
        bed.kubelet_started(-60);
        let socket = bed.root.join("run/systemd/private");
        let proc = bed.root.join("proc");
        // systemd starting the unit's new process: a kubelet that started just now.
        let fake = FakeSystemd::listen_with(
            &socket,
            &["absent.service"],
            std::sync::Arc::new(move |_: &str| kubelet_process(&proc, 1)),
        )
        .unwrap();
        let mm_state = bed.root.join("memory_manager_state");
        std::fs::write(&mm_state, "{\"policyName\":\"None\"}").unwrap();
        let mut mode = bed.unit_mode("kubelet.service", Duration::from_secs(10));
        let o = bed.configure(&mut mode, MemoryManagerPolicy::Static).await;
        assert_eq!(reason(&o), "KubeletConfigured", "{o:?}");
        let calls = fake.calls();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(
            (calls[0].member.as_str(), calls[0].unit.as_str()),
            ("RestartUnit", "kubelet.service")
        );
        assert!(!mm_state.exists(), "the state went before the restart");

        // A unit systemd does not know: the restart fails with systemd's words.
        let mut mode = bed.unit_mode("absent.service", Duration::from_secs(10));
        let o = bed.configure(&mut mode, MemoryManagerPolicy::None).await;
        let (ok, reason, message) = o.applied();
        assert!(!ok);
        assert_eq!(reason, "KubeletRestartFailed");
        assert!(
            message.contains("systemd did not restart absent.service")
                && message.contains("NoSuchUnit"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_unit_restart_without_a_new_kubelet_is_not_back() {
        use nodemem_systemd::fake::FakeSystemd;
        let bed = Bed::new();
        bed.kubelet_started(-60);
        let socket = bed.root.join("run/systemd/private");
        // systemd takes the job, but no new kubelet process appears (it fails to start).
        let _fake = FakeSystemd::listen(&socket, &[]).unwrap();
        let mut mode = bed.unit_mode("kubelet.service", Duration::from_secs(1));
        let o = bed.configure(&mut mode, MemoryManagerPolicy::None).await;
        let (ok, reason, message) = o.applied();
        assert!(!ok);
        assert_eq!(reason, "KubeletNotBack");
        assert!(
            message.contains("no new kubelet process started within 1 s"),
            "{message}"
        );
        // A kubelet that refuses its configuration: systemd starts one after another,
        // none stays up for stable_for (300 ms here).
        let looping = Bed::new();
        looping.kubelet_started(-60);
        let proc = looping.root.join("proc");
        let _fake = FakeSystemd::listen_with(
            &looping.root.join("run/systemd/private"),
            &[],
            std::sync::Arc::new(move |_: &str| {
                let proc = proc.clone();
                std::thread::spawn(move || {
                    for n in 1..=30 {
                        kubelet_process(&proc, n);
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
            }),
        )
        .unwrap();
        let mut mode = looping.unit_mode("kubelet.service", Duration::from_secs(1));
        let o = looping
            .configure(&mut mode, MemoryManagerPolicy::None)
            .await;
        let (_, reason, message) = o.applied();
        assert_eq!(reason, "KubeletNotBack");
        assert!(
            message.contains("the restarted kubelet did not stay up within 1 s"),
            "{message}"
        );
        // No systemd at all: a failed restart naming both sockets.
        let bed = Bed::new();
        let mut mode = bed.unit_mode("kubelet.service", Duration::from_secs(1));
        let o = bed.configure(&mut mode, MemoryManagerPolicy::None).await;
        let (_, reason, message) = o.applied();
        assert_eq!(reason, "KubeletRestartFailed");
        assert!(
            message.contains("cannot restart kubelet.service")
                && message.contains("system bus")
                && message.contains("private socket"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn what_the_kubelet_cannot_take_is_refused_and_nothing_is_written() {
        let bed = Bed::new();
        let mut mode = bed.mode(bed.counting_command());
        let s = settings(MemoryManagerPolicy::None);
        let o = mode.configure(&s, Some("v1.35.2"), OWNER, &bed.state).await;
        assert_eq!(reason(&o), "KubeletCannotExpress", "{o:?}");
        assert_eq!(bed.dropin(), None);
        assert_eq!(bed.restarts(), 0);
        let o = mode.configure(&s, None, OWNER, &bed.state).await;
        assert_eq!(reason(&o), "KubeletVersionUnknown");
        // Without a config dir there is nowhere to write.
        let mut nowhere = bed.mode(None);
        nowhere.config.files = KubeletFiles::given(bed.root.join("config.yaml"), None);
        let o = nowhere
            .configure(&s, Some("v1.36.3"), OWNER, &bed.state)
            .await;
        assert_eq!(reason(&o), "KubeletWithoutConfigDir");
        assert!(Path::new(&bed.root)
            .join("conf.d")
            .read_dir()
            .unwrap()
            .next()
            .is_none());
    }

    #[test]
    fn a_restart_error_keeps_its_source_and_names_its_reason() {
        let e = RestartError::CommandNotRun {
            command: "systemctl restart kubelet".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no /bin/sh"),
        };
        assert_eq!(e.reason(), "KubeletRestartFailed");
        assert_eq!(
            e.to_string(),
            "cannot run the restart command \"systemctl restart kubelet\": no /bin/sh"
        );
        assert!(std::error::Error::source(&e).is_some());
        let e = RestartError::NotBack {
            what: "no new kubelet process started",
            seconds: 30,
        };
        assert_eq!(e.reason(), "KubeletNotBack");
        assert!(e
            .to_string()
            .starts_with("no new kubelet process started within 30 s"));
    }
}
