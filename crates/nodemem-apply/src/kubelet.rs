//! The node's kubelet as files: its configuration (the file and its `--config-dir`
//! drop-ins, read from a read-only host mount), nodemem's own drop-in (written
//! atomically), the Memory Manager's state file, and when the kubelet process started
//! (from procfs, to notice a restart nodemem did not run).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nodemem_model::eviction::MemoryEviction;
use nodemem_model::kubelet_dropin::{KubeletReserved, DROPIN_FILE};
use nodemem_model::kubelet_writes::{KubeletQosConfig, Named};
use nodemem_model::quantity::Quantity;

use crate::state::write_atomically;

/// Where the kubelet keeps its configuration.
#[derive(Clone, Debug)]
pub struct KubeletFiles {
    /// `--config`.
    pub config: PathBuf,
    /// `--config-dir`: `*.conf` drop-ins, applied in name order over the file.
    pub config_dir: Option<PathBuf>,
}

/// What the kubelet's configuration says about memory, after its drop-ins.
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
    /// `evictionHard` `memory.available` as written (its default, 100Mi, when the
    /// configuration names no evictionHard).
    pub memory_eviction: MemoryEviction,
    /// The files read, for messages.
    pub sources: Vec<PathBuf>,
}

impl Default for KubeletSettings {
    /// A kubelet with no configuration: its defaults.
    fn default() -> Self {
        let reserved = KubeletReserved::default();
        KubeletSettings {
            qos: KubeletQosConfig::default(),
            memory_manager_policy: None,
            reserved_memory: None,
            memory_eviction: MemoryEviction::Bytes(reserved.eviction_hard.map_or(0, |q| q.value())),
            reserved,
            sources: Vec::new(),
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

#[derive(Debug, thiserror::Error)]
pub enum KubeletFileError {
    #[error("{}: not a KubeletConfiguration: {reason}", .path.display())]
    NotAConfiguration { path: PathBuf, reason: String },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("enforcement: Kubelet needs the kubelet's --config-dir (give the agent --kubelet-config-dir, mounted read-write)")]
    NoConfigDir,
}

impl KubeletFiles {
    /// nodemem's drop-in.
    pub fn dropin_path(&self) -> Result<PathBuf, KubeletFileError> {
        self.config_dir
            .as_ref()
            .map(|d| d.join(DROPIN_FILE))
            .ok_or(KubeletFileError::NoConfigDir)
    }

    /// The configuration as the kubelet reads it. `dropin` decides nodemem's own
    /// drop-in: as on disk (`OnDisk`), left out (`Without`: what the kubelet says on its
    /// own), or replaced by this text (`As`: what it would say once written). A missing
    /// file means nothing is known (the agent may run without the host mount).
    pub fn read(&self, dropin: OwnDropIn<'_>) -> Result<KubeletSettings, KubeletFileError> {
        let mut files: Vec<(PathBuf, Option<String>)> = vec![(self.config.clone(), None)];
        if let Some(dir) = &self.config_dir {
            let mut dropins: Vec<PathBuf> = fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "conf"))
                .filter(|p| p.file_name().is_none_or(|n| n != DROPIN_FILE))
                .collect();
            let own = dir.join(DROPIN_FILE);
            match dropin {
                OwnDropIn::OnDisk => dropins.push(own.clone()),
                OwnDropIn::Without => {}
                OwnDropIn::As(_) => {}
            }
            dropins.sort();
            files.extend(dropins.into_iter().map(|p| (p, None)));
            if let OwnDropIn::As(text) = dropin {
                // Sorted last by name among the usual numbered drop-ins.
                files.push((own, Some(text.to_string())));
            }
        }
        let mut out = KubeletSettings::default();
        let mut eviction: Option<BTreeMap<String, String>> = None;
        for (path, text) in files {
            let text = match text {
                Some(t) => t,
                None => match fs::read_to_string(&path) {
                    Ok(t) => t,
                    Err(_) => continue,
                },
            };
            let doc: KubeletDoc =
                serde_yaml::from_str(&text).map_err(|e| KubeletFileError::NotAConfiguration {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            if let Some(on) = doc.feature_gates.get("MemoryQoS") {
                out.qos.gate = Some(*on);
            }
            out.qos.throttling_factor = std::mem::take(&mut out.qos.throttling_factor)
                .overlaid_by(doc.memory_throttling_factor);
            if let Some(policy) = doc.memory_reservation_policy {
                out.qos.reservation_policy = Some(policy);
            }
            if let Some(policy) = doc.memory_manager_policy {
                out.memory_manager_policy = Some(policy);
            }
            if let Some(r) = doc.reserved_memory {
                out.reserved_memory = Some(r);
            }
            let memory = |map: &BTreeMap<String, String>, key: &str| {
                map.get(key).and_then(|v| Quantity::parse(v).ok())
            };
            if let Some(q) = doc.kube_reserved.as_ref().and_then(|m| memory(m, "memory")) {
                out.reserved.kube_reserved = Some(q);
            }
            if let Some(q) = doc
                .system_reserved
                .as_ref()
                .and_then(|m| memory(m, "memory"))
            {
                out.reserved.system_reserved = Some(q);
            }
            // Maps merge across drop-ins, as the kubelet merges them.
            if let Some(m) = doc.eviction_hard {
                eviction.get_or_insert_with(BTreeMap::new).extend(m);
            }
            out.sources.push(path);
        }
        // No evictionHard: the kubelet's default (100Mi). A map without
        // memory.available: no memory threshold. A percentage: a fraction of capacity
        // (not a fixed amount for the sum rule). Unreadable: the kubelet would not
        // start; nothing is assumed.
        if let Some(map) = eviction {
            out.memory_eviction = match map.get("memory.available") {
                None => MemoryEviction::None,
                Some(v) => MemoryEviction::parse(v).unwrap_or(MemoryEviction::None),
            };
            out.reserved.eviction_hard = out.memory_eviction.quantity();
        }
        Ok(out)
    }

    /// nodemem's drop-in as on disk, if any.
    pub fn current_dropin(&self) -> Result<Option<String>, KubeletFileError> {
        let path = self.dropin_path()?;
        match fs::read_to_string(&path) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(KubeletFileError::Io { path, source }),
        }
    }

    /// Writes nodemem's drop-in atomically (the kubelet reads the whole old file or
    /// the whole new one, whenever it starts).
    pub fn write_dropin(&self, text: &str) -> Result<(), KubeletFileError> {
        let path = self.dropin_path()?;
        write_atomically(&path, text.as_bytes(), 0o644)
            .map_err(|source| KubeletFileError::Io { path, source })
    }

    /// Removes nodemem's drop-in; true when there was one.
    pub fn remove_dropin(&self) -> Result<bool, KubeletFileError> {
        let path = self.dropin_path()?;
        remove_if_present(&path)
    }
}

/// How [`KubeletFiles::read`] treats nodemem's own drop-in.
#[derive(Clone, Copy, Debug)]
pub enum OwnDropIn<'a> {
    OnDisk,
    Without,
    As(&'a str),
}

/// Removes the kubelet's Memory Manager state file; true when there was one. A kubelet
/// whose memoryManagerPolicy or reservedMemory changed refuses to start on the old file
/// (KEP-1769, "known failure modes").
pub fn remove_memory_manager_state(path: &Path) -> Result<bool, KubeletFileError> {
    remove_if_present(path)
}

fn remove_if_present(path: &Path) -> Result<bool, KubeletFileError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(KubeletFileError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// When the newest process named `kubelet` started, from procfs (`<pid>/stat` field 22
/// in clock ticks since boot, `stat`'s `btime`). None when no kubelet is visible (the
/// agent needs the host's PID namespace to see it).
pub fn kubelet_started_at(proc_root: &Path) -> Option<SystemTime> {
    let stat = fs::read_to_string(proc_root.join("stat")).ok()?;
    let btime: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        t if t > 0 => t as u64,
        _ => 100,
    };
    let mut newest: Option<u64> = None;
    for entry in fs::read_dir(proc_root).ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(comm) = fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        if comm.trim_end() != "kubelet" {
            continue;
        }
        let Some(start) = fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| start_ticks(&s))
        else {
            continue;
        };
        newest = Some(newest.map_or(start, |n| n.max(start)));
    }
    let since_boot = Duration::from_millis(newest? * 1000 / ticks);
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(btime) + since_boot)
}

/// Field 22 of `/proc/<pid>/stat`; the command (field 2) may hold spaces and
/// parentheses, so fields are counted after its last `)`.
fn start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 is the first after the command; 22 is the 20th from there.
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct KubeletDoc {
    feature_gates: BTreeMap<String, bool>,
    #[serde(deserialize_with = "named")]
    memory_throttling_factor: Named<f64>,
    memory_reservation_policy: Option<String>,
    memory_manager_policy: Option<String>,
    reserved_memory: Option<serde_json::Value>,
    kube_reserved: Option<BTreeMap<String, String>>,
    system_reserved: Option<BTreeMap<String, String>>,
    eviction_hard: Option<BTreeMap<String, String>>,
}

/// A field present (`null` or a value); an absent one is `Named::Absent` by default.
fn named<'de, D, T>(d: D) -> Result<Named<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    use serde::Deserialize;
    Ok(match Option::<T>::deserialize(d)? {
        Some(v) => Named::Value(v),
        None => Named::Null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_field_is_counted_after_the_command() {
        let stat = "4242 (kube let) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 987654 1000000 500 18446744073709551615";
        assert_eq!(start_ticks(stat), Some(987654));
        assert_eq!(start_ticks("garbage"), None);
    }
}
