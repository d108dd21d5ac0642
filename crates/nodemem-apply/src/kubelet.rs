//! The node's kubelet as files: its configuration (the `--config` file, its
//! `--config-dir` drop-ins and the command-line flags over them, read as the kubelet
//! reads them), nodemem's own drop-in (written atomically), the Memory Manager's state
//! file, and the kubelet's process.
//!
//! Where the files are: found from the running kubelet's command line and read through
//! its own root ([`KubeletSource::Process`], the agent on a node), or given to the agent
//! ([`KubeletSource::Given`], a node whose kubelet process it cannot see, and tests).

pub mod access;
pub mod allowance;
mod as_run;
pub mod command_line;
pub mod conflict;
pub mod overrides;
pub mod process;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nodemem_model::kubelet::defaults::DEFAULT_EVICTION_HARD;
use nodemem_model::kubelet::eviction::MemoryEviction;
use nodemem_model::kubelet::writes::{KubeletQosConfig, Named};
use nodemem_model::node::kubelet_dropin::{KubeletReserved, DROPIN_FILE, LEGACY_DROPIN_FILES};
use nodemem_model::quantity::Quantity;
use serde_json::Value;

use command_line::{flag_settings, FlagError, K3sFiles, KubeletCommandLine, KubeletHost};
pub use process::{
    find_kubelet, find_kubelets, kubelet_started_at, IgnoredKubelet, KubeletProcess, KubeletSearch,
    NoHostKubelet,
};

/// Why the kubelet's configuration could not be read, and what stands in for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletUnread {
    /// The condition reason.
    pub reason: &'static str,
    /// What is wrong, naming the file or the process.
    pub message: String,
    /// What the agent read last is kept (a file changed since the kubelet started may
    /// be unreadable while the kubelet still runs what it read); otherwise nothing was
    /// ever read and a configuration that names nothing is assumed.
    pub kept_last: bool,
}

/// Where the kubelet's configuration is read.
#[derive(Clone, Debug)]
pub enum KubeletSource {
    /// Files given to the agent (`--kubelet-config`, `--kubelet-config-dir`).
    Given {
        /// The kubelet's configuration file.
        config: PathBuf,
        /// Its drop-in directory, when the kubelet has one.
        config_dir: Option<PathBuf>,
    },
    /// The running kubelet, found under this procfs: its command line names the files,
    /// read through its root.
    Process {
        /// The host's procfs.
        proc_root: PathBuf,
    },
}

/// The kubelet's configuration, and where nodemem's drop-in and the Memory Manager's
/// state file are.
#[derive(Clone, Debug)]
pub struct KubeletFiles {
    /// Where the configuration is read.
    pub source: KubeletSource,
    /// Under [`KubeletSource::Process`]: a mount of the kubelet's `--config-dir` given
    /// to the agent for its drop-in, checked to be that same directory. Without it the
    /// drop-in is written through the kubelet's root.
    pub dropin_dir: Option<PathBuf>,
    /// The Memory Manager's state file when given; otherwise `memory_manager_state`
    /// under the kubelet's `--root-dir`.
    pub memory_manager_state: Option<PathBuf>,
}

/// Where the kubelet's settings were read from, as the kubelet names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeletOrigin {
    /// The process found in procfs (pid, command), None when the files were given.
    pub process: Option<(u32, String)>,
    /// `--config` (None: the kubelet runs without one).
    pub config: Option<String>,
    /// `--config-dir`.
    pub config_dir: Option<String>,
    /// The drop-ins read, in the kubelet's order.
    pub drop_ins: Vec<String>,
    /// The command-line flags that set what nodemem reads, as given.
    pub flags: Vec<String>,
    /// The Memory Manager's state file.
    pub memory_manager_state: Option<String>,
    /// Processes named like a kubelet that are not the host's, and why: none of their
    /// files was read.
    pub ignored: Vec<IgnoredKubelet>,
}

impl KubeletOrigin {
    /// Every file and flag read, for messages.
    pub fn sources(&self) -> Vec<String> {
        self.config
            .iter()
            .chain(&self.drop_ins)
            .chain(&self.flags)
            .cloned()
            .collect()
    }

    /// `kubelet (pid 812)`, or `the files given to the agent`.
    pub fn who(&self) -> String {
        match &self.process {
            Some((pid, command)) => format!("{command} (pid {pid})"),
            None => "the kubelet (its files given to the agent)".to_string(),
        }
    }
}

/// What the kubelet's configuration says about memory, after its drop-ins and flags.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeletSettings {
    /// The Memory QoS fields (gate, factor, reservation policy) as named: what the
    /// kubelet writes of its own follows from them and its version
    /// (`KubeletQosWrites`).
    pub qos: KubeletQosConfig,
    /// `memoryManagerPolicy` (the kubelet's default is None).
    pub memory_manager_policy: Option<String>,
    /// `reservedMemory` as written: compared, never interpreted.
    pub reserved_memory: Option<serde_json::Value>,
    /// kubeReserved / systemReserved / evictionHard memory, for the sum rule.
    pub reserved: KubeletReserved,
    /// `evictionHard` `memory.available` as the kubelet runs it.
    pub memory_eviction: MemoryEviction,
    /// `cgroupDriver`, when named.
    pub cgroup_driver: Option<String>,
    /// Every feature gate the files and flags name (sorted), whatever its value.
    pub feature_gates: Vec<String>,
    /// Where it was read from.
    pub origin: KubeletOrigin,
}

impl Default for KubeletSettings {
    /// What nodemem assumes of a kubelet it could not read: a configuration file that
    /// names nothing (its default hard eviction threshold, 100Mi).
    fn default() -> Self {
        let reserved = KubeletReserved::default();
        KubeletSettings {
            qos: KubeletQosConfig::default(),
            memory_manager_policy: None,
            reserved_memory: None,
            memory_eviction: MemoryEviction::Bytes(reserved.eviction_hard.map_or(0, |q| q.value())),
            reserved,
            cgroup_driver: None,
            feature_gates: Vec::new(),
            origin: KubeletOrigin::default(),
        }
    }
}

impl KubeletSettings {
    /// `memoryManagerPolicy: Static`: the kubelet pins containers (cpuset.mems).
    pub fn static_memory_manager(&self) -> bool {
        self.memory_manager_policy.as_deref() == Some("Static")
    }

    /// The `memory.available` hard eviction threshold in bytes on a node of
    /// `capacity` (a percentage is resolved against it as the kubelet does; None when
    /// it cannot be), which the Node's allocatable subtracts and the kubelet's
    /// memory.high ceiling does not (`NodeMemoryFacts::hard_eviction_memory`).
    pub fn hard_eviction_memory(&self, capacity: Option<i64>) -> Option<i64> {
        self.memory_eviction.bytes(capacity)
    }

    /// What the kubelet's Memory Manager state file is checked against when it starts:
    /// a change of either means the file must go first (KEP-1769).
    pub fn memory_manager(&self) -> (&str, Option<&serde_json::Value>) {
        (
            self.memory_manager_policy.as_deref().unwrap_or("None"),
            self.reserved_memory.as_ref(),
        )
    }
}

/// Why the kubelet's configuration could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum KubeletFileError {
    /// No process under the procfs is the host's kubelet.
    #[error("no kubelet process under {}: the agent finds the kubelet in the host's PID namespace (hostPID) and reads its files through its root{}", .proc_root.display(), ignoring(.ignored))]
    NoKubeletProcess {
        /// The procfs searched.
        proc_root: PathBuf,
        /// Processes named like a kubelet that are not the host's, and why.
        ignored: Vec<IgnoredKubelet>,
    },
    /// More than one process could be the host's kubelet.
    #[error("{} processes could each be the host's kubelet ({}): nodemem does not guess which the node runs, and reads neither{}", .candidates.len(), .candidates.join(", "), ignoring(.ignored))]
    AmbiguousKubelet {
        /// Each candidate, by pid and command.
        candidates: Vec<String>,
        /// Processes named like a kubelet that are not the host's, and why.
        ignored: Vec<IgnoredKubelet>,
    },
    /// A file that should be a KubeletConfiguration is not one.
    #[error("{named}: not a KubeletConfiguration: {reason}")]
    NotAConfiguration {
        /// The file, as the kubelet names it.
        named: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{named}: {source}")]
    Io {
        /// The file, as the kubelet names it.
        named: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A kubelet flag nodemem reads has a value the kubelet would not accept either.
    #[error("{who}: {source}")]
    FlagNotUnderstood {
        /// The process, by pid and command.
        who: String,
        /// The flag and why.
        #[source]
        source: FlagError,
    },
    /// k3s's own configuration file could not be read as k3s reads it.
    #[error("{config}: k3s's configuration: {reason}")]
    K3sConfig {
        /// The file.
        config: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `enforcement: Kubelet` on a kubelet without a drop-in directory.
    #[error("enforcement: Kubelet needs the kubelet's --config-dir: {who} runs without one, so a drop-in would not be read")]
    NoConfigDir {
        /// The process, by pid and command.
        who: String,
    },
    /// The `--kubelet-config-dir` given to the agent is not the kubelet's.
    #[error("the agent's --kubelet-config-dir ({}) is not the directory {who} reads drop-ins from ({kubelet})", .given.display())]
    ConfigDirMismatch {
        /// The directory given to the agent.
        given: PathBuf,
        /// The process, by pid and command.
        who: String,
        /// The directory the kubelet reads drop-ins from.
        kubelet: String,
    },
}

impl KubeletFileError {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            KubeletFileError::NoKubeletProcess { .. } => "NoKubeletProcess",
            KubeletFileError::AmbiguousKubelet { .. } => "AmbiguousKubelet",
            KubeletFileError::NotAConfiguration { .. } => "NotAKubeletConfiguration",
            KubeletFileError::Io { .. } | KubeletFileError::K3sConfig { .. } => {
                "KubeletConfigUnreadable"
            }
            KubeletFileError::FlagNotUnderstood { .. } => "KubeletFlagNotUnderstood",
            KubeletFileError::NoConfigDir { .. } => "KubeletWithoutConfigDir",
            KubeletFileError::ConfigDirMismatch { .. } => "KubeletConfigDirMismatch",
        }
    }
}

/// The host's kubelet under `proc_root`, and the processes named like one that are
/// not; an error when none or more than one qualifies.
fn host_kubelet(
    proc_root: &Path,
) -> Result<(KubeletProcess, Vec<IgnoredKubelet>), KubeletFileError> {
    let search = find_kubelets(proc_root);
    match search.the_host_kubelet() {
        Ok(p) => Ok((p.clone(), search.ignored)),
        Err(NoHostKubelet::None) => Err(KubeletFileError::NoKubeletProcess {
            proc_root: proc_root.to_path_buf(),
            ignored: search.ignored,
        }),
        Err(NoHostKubelet::More(candidates)) => Err(KubeletFileError::AmbiguousKubelet {
            candidates,
            ignored: search.ignored,
        }),
    }
}

/// `; not the host's kubelet: kubelet (pid 9): ...` for an error's message, or nothing.
fn ignoring(ignored: &[IgnoredKubelet]) -> String {
    if ignored.is_empty() {
        return String::new();
    }
    let each: Vec<String> = ignored.iter().map(ToString::to_string).collect();
    format!("; not the host's kubelet: {}", each.join("; "))
}

/// The files of one kubelet as the agent reaches them.
struct Located {
    origin: KubeletOrigin,
    config: Option<PathBuf>,
    /// The kubelet's drop-in directory (nodemem's drop-in is in it).
    config_dir: Option<PathBuf>,
    flags: Vec<command_line::KubeletFlag>,
    memory_manager_state: PathBuf,
    /// k3s's own configuration file, through which its kubelet's flags are given.
    k3s_config: Option<PathBuf>,
}

/// What of the host kubelet's file system nodemem reads or writes: the files its
/// command line names, as reached through its root. The kubelet reader answers for
/// these only ([`allowance`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reachable {
    /// `<proc_root>/<pid>`.
    pub process_dir: PathBuf,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--config-dir` (its `*.conf` files, subdirectories included).
    pub config_dir: Option<PathBuf>,
    /// The Memory Manager's state file.
    pub memory_manager_state: PathBuf,
    /// k3s's `config.yaml` (and its `config.yaml.d/*.yaml`).
    pub k3s_config: Option<PathBuf>,
}

impl KubeletFiles {
    /// Files given to the agent.
    pub fn given(config: PathBuf, config_dir: Option<PathBuf>) -> KubeletFiles {
        KubeletFiles {
            source: KubeletSource::Given { config, config_dir },
            dropin_dir: None,
            memory_manager_state: None,
        }
    }

    /// The running kubelet under `proc_root`.
    pub fn process(proc_root: PathBuf, dropin_dir: Option<PathBuf>) -> KubeletFiles {
        KubeletFiles {
            source: KubeletSource::Process { proc_root },
            dropin_dir,
            memory_manager_state: None,
        }
    }

    fn locate(&self) -> Result<Located, KubeletFileError> {
        match &self.source {
            KubeletSource::Given { config, config_dir } => {
                let state = self.memory_manager_state.clone().unwrap_or_else(|| {
                    Path::new(command_line::DEFAULT_ROOT_DIR).join("memory_manager_state")
                });
                Ok(Located {
                    origin: KubeletOrigin {
                        process: None,
                        config: Some(config.display().to_string()),
                        config_dir: config_dir.as_ref().map(|d| d.display().to_string()),
                        memory_manager_state: Some(state.display().to_string()),
                        ..KubeletOrigin::default()
                    },
                    config: Some(config.clone()),
                    config_dir: config_dir.clone(),
                    flags: Vec::new(),
                    memory_manager_state: state,
                    k3s_config: None,
                })
            }
            KubeletSource::Process { proc_root } => self.locate_process(proc_root),
        }
    }

    fn locate_process(&self, proc_root: &Path) -> Result<Located, KubeletFileError> {
        let (process, ignored) = host_kubelet(proc_root)?;
        let mut line = KubeletCommandLine::parse(&process.argv, &K3sFiles::default());
        let mut k3s_config = None;
        if let KubeletHost::K3s { config, .. } = &line.host {
            k3s_config = Some(process.path(config));
            let files = k3s_files(&process, config)?;
            line = KubeletCommandLine::parse(&process.argv, &files);
        }
        let who = format!("{} (pid {})", process.command(), process.pid);
        let state_named = format!(
            "{}/memory_manager_state",
            line.root_dir.trim_end_matches('/')
        );
        let config_dir = match (&line.config_dir, &self.dropin_dir) {
            (Some(named), Some(given)) => {
                if !same_directory(&process.path(named), given) {
                    return Err(KubeletFileError::ConfigDirMismatch {
                        given: given.clone(),
                        who,
                        kubelet: named.clone(),
                    });
                }
                Some(given.clone())
            }
            (Some(named), None) => Some(process.path(named)),
            (None, _) => None,
        };
        Ok(Located {
            origin: KubeletOrigin {
                process: Some((process.pid, process.command())),
                config: line.config.clone(),
                config_dir: line.config_dir.clone(),
                drop_ins: Vec::new(),
                flags: line.flags.iter().map(ToString::to_string).collect(),
                memory_manager_state: Some(state_named.clone()),
                ignored,
            },
            config: line.config.as_deref().map(|c| process.path(c)),
            config_dir,
            memory_manager_state: self
                .memory_manager_state
                .clone()
                .unwrap_or_else(|| process.path(&state_named)),
            flags: line.flags,
            k3s_config,
        })
    }

    /// The host kubelet's files that nodemem reaches through its root (see
    /// [`Reachable`]); an error when no single host kubelet runs or its k3s
    /// configuration cannot be read.
    pub fn reachable(&self) -> Result<Reachable, KubeletFileError> {
        let KubeletSource::Process { proc_root } = &self.source else {
            return Ok(Reachable::default());
        };
        let (process, _) = host_kubelet(proc_root)?;
        let located = self.locate_process(proc_root)?;
        Ok(Reachable {
            process_dir: process.dir().to_path_buf(),
            config: located.config,
            config_dir: located.config_dir,
            memory_manager_state: located.memory_manager_state,
            k3s_config: located.k3s_config,
        })
    }

    /// The host's kubelet process these files are read from; None when the files were
    /// given to the agent.
    pub fn kubelet_process(&self) -> Result<Option<KubeletProcess>, KubeletFileError> {
        let KubeletSource::Process { proc_root } = &self.source else {
            return Ok(None);
        };
        host_kubelet(proc_root).map(|(p, _)| Some(p))
    }

    /// nodemem's drop-in.
    pub fn dropin_path(&self) -> Result<PathBuf, KubeletFileError> {
        let located = self.locate()?;
        located
            .config_dir
            .map(|d| d.join(DROPIN_FILE))
            .ok_or_else(|| KubeletFileError::NoConfigDir {
                who: located.origin.who(),
            })
    }

    /// The kubelet's Memory Manager state file.
    pub fn memory_manager_state(&self) -> Result<PathBuf, KubeletFileError> {
        Ok(self.locate()?.memory_manager_state)
    }

    /// The configuration as the kubelet reads it: the `--config` file (the kubelet's
    /// default eviction thresholds when it names none), its `--config-dir` drop-ins in
    /// the kubelet's order (`*.conf`, subdirectories included, each a JSON merge patch
    /// over what came before, v1.37.2 `cmd/kubelet/app/server.go`
    /// `mergeKubeletConfigurations`), then the command-line flags. `dropin` decides
    /// nodemem's own drop-in: as on disk (`OnDisk`), left out (`Without`: what the
    /// kubelet says on its own), or replaced by this text (`As`: what it would say
    /// once written). A file the kubelet names that cannot be read is an error.
    pub fn read(&self, dropin: OwnDropIn<'_>) -> Result<KubeletSettings, KubeletFileError> {
        let located = self.locate()?;
        let mut origin = located.origin.clone();
        let mut merged = Value::Object(serde_json::Map::new());
        if let (Some(path), Some(named)) = (&located.config, &origin.config) {
            let text = access::read_to_string(path).map_err(|source| KubeletFileError::Io {
                named: named.clone(),
                source,
            })?;
            merged = parse_config(&text, named, false)?;
            default_eviction(&mut merged);
        }
        if let Some(dir) = &located.config_dir {
            let own = dir.join(DROPIN_FILE);
            let mut dropins: Vec<(PathBuf, Option<String>)> = Vec::new();
            walk_dropins(dir, &mut dropins);
            // On disk, a drop-in under a name nodemem used before is read where it
            // sorts, as the kubelet reads it; without nodemem's own or with its text
            // in its place, it is nodemem's and goes.
            match dropin {
                OwnDropIn::OnDisk => dropins.retain(|(p, _)| *p != own),
                OwnDropIn::Without | OwnDropIn::As(_) => {
                    dropins.retain(|(p, _)| *p != own && !is_legacy(dir, p))
                }
            }
            match dropin {
                OwnDropIn::OnDisk if access::exists(&own) => dropins.push((own.clone(), None)),
                OwnDropIn::As(text) => dropins.push((own.clone(), Some(text.to_string()))),
                _ => {}
            }
            dropins.sort_by(|a, b| a.0.cmp(&b.0));
            let named_dir = origin.config_dir.clone().unwrap_or_default();
            for (path, text) in dropins {
                let relative = path.strip_prefix(dir).unwrap_or(&path);
                let named = format!("{}/{}", named_dir.trim_end_matches('/'), relative.display());
                let text = match text {
                    Some(t) => t,
                    None => {
                        access::read_to_string(&path).map_err(|source| KubeletFileError::Io {
                            named: named.clone(),
                            source,
                        })?
                    }
                };
                merge_patch(&mut merged, parse_config(&text, &named, true)?);
                origin.drop_ins.push(named);
            }
        }
        let flags = flag_settings(&located.flags).map_err(|source| {
            KubeletFileError::FlagNotUnderstood {
                who: origin.who(),
                source,
            }
        })?;
        Ok(settings_of(&merged, flags, origin))
    }
    /// What the kubelet would run other than nodemem's drop-in `text` says: each field
    /// it sets that a drop-in sorting after it or a command-line flag sets to another
    /// value, with what sets it. Empty when nodemem's drop-in decides every field it
    /// names.
    pub fn overrides_of(&self, text: &str) -> Result<Vec<overrides::Overridden>, KubeletFileError> {
        let located = self.locate()?;
        let Some(dir) = &located.config_dir else {
            return Err(KubeletFileError::NoConfigDir {
                who: located.origin.who(),
            });
        };
        let own = dir.join(DROPIN_FILE);
        let ours = parse_config(text, &own.display().to_string(), true)?;
        let mut dropins = Vec::new();
        walk_dropins(dir, &mut dropins);
        let named_dir = located.origin.config_dir.clone().unwrap_or_default();
        let mut later = Vec::new();
        for (path, _) in dropins.into_iter().filter(|(p, _)| *p > own) {
            let relative = path.strip_prefix(dir).unwrap_or(&path);
            let named = format!("{}/{}", named_dir.trim_end_matches('/'), relative.display());
            let text = access::read_to_string(&path).map_err(|source| KubeletFileError::Io {
                named: named.clone(),
                source,
            })?;
            let doc = parse_config(&text, &named, true)?;
            later.push((named, doc));
        }
        let settings = flag_settings(&located.flags).map_err(|source| {
            KubeletFileError::FlagNotUnderstood {
                who: located.origin.who(),
                source,
            }
        })?;
        Ok(overrides::overrides(
            &ours,
            &later,
            &located.flags,
            &settings,
        ))
    }

    /// nodemem's drop-in as on disk, if any. One found only under a name nodemem used
    /// before ([`LEGACY_DROPIN_FILES`]) is moved to [`DROPIN_FILE`] first when no other
    /// drop-in sorts between the two names: the kubelet then runs the same fields from
    /// it, and no restart is needed. Otherwise it is not current: written again under
    /// the new name, the old one removed and the kubelet restarted, as for a change.
    pub fn current_dropin(&self) -> Result<Option<String>, KubeletFileError> {
        let path = self.dropin_path()?;
        move_legacy_dropin(&path)?;
        match access::read_to_string(&path) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(KubeletFileError::Io {
                named: path.display().to_string(),
                source,
            }),
        }
    }

    /// Writes nodemem's drop-in atomically (the kubelet reads the whole old file or
    /// the whole new one, whenever it starts).
    pub fn write_dropin(&self, text: &str) -> Result<(), KubeletFileError> {
        let path = self.dropin_path()?;
        access::write_atomically(&path, text, 0o644).map_err(|source| KubeletFileError::Io {
            named: path.display().to_string(),
            source,
        })?;
        // The old name's file after the new one is in place: the kubelet never starts
        // on neither.
        for name in LEGACY_DROPIN_FILES {
            remove_if_present(&path.with_file_name(name))?;
        }
        Ok(())
    }

    /// Removes nodemem's drop-in (under every name it had); true when there was one.
    pub fn remove_dropin(&self) -> Result<bool, KubeletFileError> {
        let path = self.dropin_path()?;
        let mut removed = remove_if_present(&path)?;
        for name in LEGACY_DROPIN_FILES {
            removed |= remove_if_present(&path.with_file_name(name))?;
        }
        Ok(removed)
    }
}

/// How [`KubeletFiles::read`] treats nodemem's own drop-in.
#[derive(Clone, Copy, Debug)]
pub enum OwnDropIn<'a> {
    /// Read as it is on disk.
    OnDisk,
    /// Left out, as if it were not there (what the kubelet runs without nodemem).
    Without,
    /// Read with this text in its place (what the kubelet would run with it).
    As(&'a str),
}

/// Removes the kubelet's Memory Manager state file; true when there was one. A kubelet
/// whose memoryManagerPolicy or reservedMemory changed refuses to start on the old file
/// (KEP-1769, "known failure modes").
pub fn remove_memory_manager_state(path: &Path) -> Result<bool, KubeletFileError> {
    remove_if_present(path)
}

/// Whether `path` is nodemem's drop-in under a name it used before, in `dir`.
fn is_legacy(dir: &Path, path: &Path) -> bool {
    LEGACY_DROPIN_FILES.iter().any(|n| dir.join(n) == path)
}

/// Moves nodemem's drop-in from a name it used before to `path` when `path` does not
/// exist and no other drop-in sorts between the two names (the kubelet applies the
/// same files in the same order after the move). A rename in one directory: the
/// kubelet, whenever it starts, finds the file under one name or the other.
fn move_legacy_dropin(path: &Path) -> Result<(), KubeletFileError> {
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    if access::exists(path) {
        return Ok(());
    }
    for name in LEGACY_DROPIN_FILES {
        let old = dir.join(name);
        if !access::exists(&old) {
            continue;
        }
        let mut dropins = Vec::new();
        walk_dropins(dir, &mut dropins);
        if dropins.iter().any(|(p, _)| *p > old && p.as_path() < path) {
            return Ok(());
        }
        return access::rename(&old, path).map_err(|source| KubeletFileError::Io {
            named: old.display().to_string(),
            source,
        });
    }
    Ok(())
}

fn remove_if_present(path: &Path) -> Result<bool, KubeletFileError> {
    match access::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(KubeletFileError::Io {
            named: path.display().to_string(),
            source,
        }),
    }
}

/// k3s's configuration files through its root: `config.yaml`, then `config.yaml.d/*.yaml`
/// in name order. A missing `config.yaml` is k3s's default (none).
fn k3s_files(process: &KubeletProcess, config: &str) -> Result<K3sFiles, KubeletFileError> {
    let mut files = K3sFiles::default();
    let path = process.path(config);
    let mut paths = vec![(path.clone(), config.to_string())];
    let dir = PathBuf::from(format!("{}.d", path.display()));
    let mut extra: Vec<PathBuf> = access::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter(|(_, dir)| !dir)
        .map(|(p, _)| p)
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    extra.sort();
    paths.extend(extra.into_iter().map(|p| {
        let named = format!(
            "{config}.d/{}",
            p.file_name().unwrap_or_default().to_string_lossy()
        );
        (p, named)
    }));
    for (path, named) in paths {
        let text = match access::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(KubeletFileError::Io { named, source }),
        };
        files
            .add(&text)
            .map_err(|reason| KubeletFileError::K3sConfig {
                config: named,
                reason,
            })?;
    }
    Ok(files)
}

/// The two paths name one directory (the same device and inode).
fn same_directory(a: &Path, b: &Path) -> bool {
    match (access::identity(a), access::identity(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `*.conf` files under `dir`, subdirectories included, as filepath.WalkDir visits
/// them (lexical order within each directory). A missing directory holds none.
fn walk_dropins(dir: &Path, out: &mut Vec<(PathBuf, Option<String>)>) {
    let mut entries: Vec<(PathBuf, bool)> = access::read_dir(dir).unwrap_or_default();
    entries.sort();
    for (path, is_dir) in entries {
        if is_dir {
            walk_dropins(&path, out);
        } else if path.extension().is_some_and(|e| e == "conf") {
            out.push((path, None));
        }
    }
}

/// One configuration file as a JSON document, its fields checked for type. Drop-ins
/// must name their apiVersion and kind (the kubelet refuses to start otherwise).
fn parse_config(text: &str, named: &str, dropin: bool) -> Result<Value, KubeletFileError> {
    let bad = |reason: String| KubeletFileError::NotAConfiguration {
        named: named.to_string(),
        reason,
    };
    let doc: Value = serde_yaml::from_str(text).map_err(|e| bad(e.to_string()))?;
    let doc = match doc {
        Value::Null => Value::Object(serde_json::Map::new()),
        Value::Object(_) => doc,
        _ => return Err(bad("not a map".to_string())),
    };
    serde_json::from_value::<KubeletDoc>(doc.clone()).map_err(|e| bad(e.to_string()))?;
    if dropin && (doc.get("apiVersion").is_none() || doc.get("kind").is_none()) {
        return Err(bad(
            "no apiVersion/kind (the kubelet refuses to start with it)".to_string(),
        ));
    }
    Ok(doc)
}

/// `loadConfigFile`: a file without evictionHard gets the defaults; with
/// `mergeDefaultEvictionSettings: true` the defaults fill what it leaves out.
fn default_eviction(config: &mut Value) {
    let merge = config
        .get("mergeDefaultEvictionSettings")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let Value::Object(map) = config else { return };
    let eviction = map.entry("evictionHard").or_insert(Value::Null);
    if eviction.is_null() {
        *eviction = Value::Object(serde_json::Map::new());
    } else if !merge {
        return;
    }
    if let Value::Object(m) = eviction {
        for (k, v) in DEFAULT_EVICTION_HARD {
            m.entry(*k).or_insert_with(|| Value::String(v.to_string()));
        }
    }
}

/// RFC 7386 JSON merge patch (`jsonpatch.MergePatch`): maps merge, `null` removes,
/// anything else replaces.
fn merge_patch(target: &mut Value, patch: Value) {
    let Value::Object(patch) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in patch {
        if v.is_null() {
            t.remove(&k);
        } else {
            merge_patch(t.entry(k).or_insert(Value::Null), v);
        }
    }
}

/// The fields nodemem reads, from the merged configuration and the flags over it.
fn settings_of(
    merged: &Value,
    flags: command_line::FlagSettings,
    origin: KubeletOrigin,
) -> KubeletSettings {
    // Checked file by file; the merge of valid files is valid.
    let doc: KubeletDoc = serde_json::from_value(merged.clone()).unwrap_or_default();
    let mut gates = doc.feature_gates;
    gates.extend(flags.feature_gates);
    let throttling_factor = match merged.get("memoryThrottlingFactor") {
        None => Named::Absent,
        Some(Value::Null) => Named::Null,
        Some(v) => v.as_f64().map_or(Named::Null, Named::Value),
    };
    let memory = |map: &Option<BTreeMap<String, String>>| {
        map.as_ref()
            .and_then(|m| m.get("memory"))
            .and_then(|v| Quantity::parse(v).ok())
    };
    let kube_reserved = flags.kube_reserved.or(doc.kube_reserved);
    let system_reserved = flags.system_reserved.or(doc.system_reserved);
    // No evictionHard (a kubelet without --config): no threshold at all.
    let eviction = flags.eviction_hard.or(doc.eviction_hard);
    let memory_eviction = match eviction.as_ref().and_then(|m| m.get("memory.available")) {
        None => MemoryEviction::None,
        Some(v) => MemoryEviction::parse(v).unwrap_or(MemoryEviction::None),
    };
    KubeletSettings {
        qos: KubeletQosConfig {
            gate: gates.get("MemoryQoS").copied(),
            throttling_factor,
            reservation_policy: doc.memory_reservation_policy,
        },
        memory_manager_policy: flags.memory_manager_policy.or(doc.memory_manager_policy),
        reserved_memory: flags.reserved_memory.or(doc.reserved_memory),
        reserved: KubeletReserved {
            kube_reserved: memory(&kube_reserved),
            system_reserved: memory(&system_reserved),
            eviction_hard: memory_eviction.quantity(),
        },
        memory_eviction,
        cgroup_driver: flags.cgroup_driver.or(doc.cgroup_driver),
        feature_gates: gates.keys().cloned().collect(),
        origin,
    }
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct KubeletDoc {
    feature_gates: BTreeMap<String, bool>,
    memory_throttling_factor: Option<f64>,
    memory_reservation_policy: Option<String>,
    memory_manager_policy: Option<String>,
    reserved_memory: Option<serde_json::Value>,
    kube_reserved: Option<BTreeMap<String, String>>,
    system_reserved: Option<BTreeMap<String, String>>,
    eviction_hard: Option<BTreeMap<String, String>>,
    cgroup_driver: Option<String>,
}
