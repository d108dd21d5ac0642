//! The running kubelet, found in procfs (the agent runs in the host's PID namespace):
//! its process, command line and start time, and its own view of the file system
//! (`/proc/<pid>/root`, `/proc/<pid>/cwd`), through which its files are read wherever
//! the node keeps them, with no mount of their own.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A process that runs a kubelet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletProcess {
    /// Its process ID under the procfs read.
    pub pid: u32,
    /// Its command line, the program first.
    pub argv: Vec<String>,
    /// When it started, in clock ticks since boot (`<pid>/stat` field 22).
    pub started_ticks: u64,
    /// `<proc>/<pid>`.
    dir: PathBuf,
}

/// The process names (`comm`) that run a kubelet: the kubelet itself, and k3s, which
/// runs it inside its `k3s server` / `k3s agent` process (k3s execs itself as
/// `k3s-server` / `k3s-agent`). RKE2 runs the kubelet binary.
const KUBELET_COMMS: &[&str] = &["kubelet", "k3s-server", "k3s-agent"];

impl KubeletProcess {
    /// A path as the kubelet names it (absolute, or relative to its working
    /// directory), as the agent reaches it.
    pub fn path(&self, named: &str) -> PathBuf {
        match named.strip_prefix('/') {
            Some(rest) => self.dir.join("root").join(rest),
            None => self.dir.join("cwd").join(named),
        }
    }

    /// `<proc_root>/<pid>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the process runs as: `kubelet` or `k3s agent`.
    pub fn command(&self) -> String {
        let program = self
            .argv
            .first()
            .map_or("", |p| p.rsplit('/').next().unwrap_or(p));
        match self.argv.get(1) {
            Some(sub) if program.starts_with("k3s") && !sub.starts_with('-') => {
                format!("{program} {sub}")
            }
            _ => program.to_string(),
        }
    }

    /// Whether it runs in systemd's `unit` (`kubelet.service`): a service's processes
    /// live in its cgroup, so restarting the unit restarts this process. Read from its
    /// `cgroup` file, whose paths are relative to the reader's cgroup namespace (a
    /// pod's: `/../../system.slice/kubelet.service`), so the unit is looked for among
    /// the path's parts.
    pub fn runs_in_unit(&self, unit: &str) -> std::io::Result<bool> {
        let text = fs::read_to_string(self.dir.join("cgroup"))?;
        Ok(text
            .lines()
            .filter_map(|l| l.splitn(3, ':').nth(2))
            .any(|path| path.split('/').any(|c| c == unit)))
    }

    /// Its cgroup as `/proc/<pid>/cgroup` names it (the unified hierarchy's line),
    /// for messages.
    pub fn cgroup(&self) -> String {
        fs::read_to_string(self.dir.join("cgroup"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("0::").map(str::to_string))
            })
            .unwrap_or_else(|| "(unknown)".to_string())
    }

    /// When it started, from `stat`'s `btime` and the process's ticks.
    pub fn started_at(&self, proc_root: &Path) -> Option<SystemTime> {
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
        let since_boot = Duration::from_millis(self.started_ticks * 1000 / ticks);
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(btime) + since_boot)
    }
}

/// Processes whose children run in containers: a process below one of these is a
/// container's, whatever its namespaces (`comm` is cut at 15 bytes:
/// `containerd-shim-runc-v2` reads `containerd-shim`).
const CONTAINER_PARENTS: &[&str] = &["containerd-shim", "conmon", "conmonrs"];

/// A process named like a kubelet that is not the host's, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IgnoredKubelet {
    /// Its process ID.
    pub pid: u32,
    /// `kubelet`, `k3s agent`.
    pub command: String,
    /// Why it is not the host's kubelet.
    pub why: String,
}

impl std::fmt::Display for IgnoredKubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pid {}): {}", self.command, self.pid, self.why)
    }
}

/// The processes named like a kubelet under a procfs: those that are the host's
/// kubelet (one on a sound node) and those that are not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeletSearch {
    /// Each runs in the host's mount namespace (PID 1's), outside every pod's cgroup
    /// and below no container runtime's shim.
    pub host: Vec<KubeletProcess>,
    /// Named like a kubelet, and not the host's: kind's nodes, a kubelet in a CI pod,
    /// or a pod's process named so on purpose. None of their files is read.
    pub ignored: Vec<IgnoredKubelet>,
}

impl KubeletSearch {
    /// The host's kubelet: exactly one, or why not.
    pub fn the_host_kubelet(&self) -> Result<&KubeletProcess, NoHostKubelet> {
        match &self.host[..] {
            [one] => Ok(one),
            [] => Err(NoHostKubelet::None),
            more => Err(NoHostKubelet::More(
                more.iter()
                    .map(|p| format!("{} (pid {})", p.command(), p.pid))
                    .collect(),
            )),
        }
    }
}

/// Why no single process is the host's kubelet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoHostKubelet {
    /// No process qualifies.
    None,
    /// Two or more qualify: nodemem does not guess which the node runs.
    More(Vec<String>),
}

/// Every process named like a kubelet under `proc_root`, sorted into the host's and
/// the others (zombies and the host kubelet's children before their exec left out:
/// they run no kubelet). A missing signal (a namespace or
/// cgroup that cannot be read) never makes a process the host's.
pub fn find_kubelets(proc_root: &Path) -> KubeletSearch {
    let mut search = KubeletSearch::default();
    let Ok(entries) = fs::read_dir(proc_root) else {
        return search;
    };
    let host_mnt = super::access::read_link(&proc_root.join("1/ns/mnt"));
    // The host's candidates with their parents.
    let mut host: Vec<(KubeletProcess, u32)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let dir = entry.path();
        let Ok(comm) = fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if !KUBELET_COMMS.contains(&comm.trim_end()) {
            continue;
        }
        let Some(stat) = fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| Stat::parse(&s))
        else {
            continue;
        };
        if matches!(stat.state, 'Z' | 'X') {
            continue;
        }
        let argv = fs::read(dir.join("cmdline"))
            .map(|b| {
                b.split(|c| *c == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let process = KubeletProcess {
            pid,
            argv,
            started_ticks: stat.started_ticks,
            dir,
        };
        match not_the_hosts(proc_root, &process, stat.ppid, host_mnt.as_deref()) {
            None => host.push((process, stat.ppid)),
            Some(why) => search.ignored.push(IgnoredKubelet {
                pid,
                command: process.command(),
                why,
            }),
        }
    }
    search.host = own_children_left_out(host);
    search.host.sort_by_key(|p| p.pid);
    search.ignored.sort_by_key(|p| p.pid);
    search
}

/// The host's candidates less those whose parent is another of them: a process the
/// kubelet forked (to run `umount`, `nsenter`, a probe's command) carries the kubelet's
/// name, namespace and cgroup until it execs, which under a slow node's load is long
/// enough for a pass to see it (seen on a real node, 2026-11-30, while the kubelet tore
/// down the volumes of deleted pods: `AmbiguousKubelet`). It is the kubelet's own
/// passing child, never a second kubelet, and left out like a zombie: listed among the
/// ignored it would be a `KubeletIgnored` Warning for every fork a pass happens to see.
fn own_children_left_out(host: Vec<(KubeletProcess, u32)>) -> Vec<KubeletProcess> {
    let pids: Vec<u32> = host.iter().map(|(p, _)| p.pid).collect();
    host.into_iter()
        .filter(|(_, ppid)| !pids.contains(ppid))
        .map(|(p, _)| p)
        .collect()
}

/// Why `process` is not the host's kubelet; None when it is.
fn not_the_hosts(
    proc_root: &Path,
    process: &KubeletProcess,
    ppid: u32,
    host_mnt: Result<&Path, &std::io::Error>,
) -> Option<String> {
    let host_mnt = match host_mnt {
        Ok(mnt) => mnt,
        Err(e) => {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (the kernel lets only a process holding CAP_SYS_PTRACE read it: the agent's DaemonSet adds it for the agent's kubelet reader)"
            } else {
                ""
            };
            return Some(format!(
                "the host's mount namespace ({}) cannot be read: {e}{hint}, so no process is known to be the host's",
                proc_root.join("1/ns/mnt").display()
            ));
        }
    };
    match super::access::read_link(&process.dir.join("ns/mnt")) {
        Ok(mnt) if mnt == host_mnt => {}
        Ok(mnt) => {
            return Some(format!(
                "runs in another mount namespace ({}) than the host's ({}): a container's",
                mnt.display(),
                host_mnt.display()
            ))
        }
        Err(e) => return Some(format!("its mount namespace cannot be read: {e}")),
    }
    match fs::read_to_string(process.dir.join("cgroup")) {
        Ok(text) => {
            if let Some(path) = pod_cgroup(&text) {
                return Some(format!("runs in a pod's cgroup ({path})"));
            }
        }
        Err(e) => return Some(format!("its cgroup cannot be read: {e}")),
    }
    container_parent(proc_root, ppid).map(|(pid, comm)| {
        format!("runs below a container runtime's shim ({comm}, pid {pid}): a container's")
    })
}

/// The cgroup path of `/proc/<pid>/cgroup` that lies in the kubelet's pod tree
/// (`kubepods`, `kubepods.slice`, `kubepods-burstable.slice`, ...), if any.
fn pod_cgroup(text: &str) -> Option<&str> {
    text.lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find(|path| path.split('/').any(|c| c.starts_with("kubepods")))
}

/// The nearest ancestor from `ppid` up that is a container runtime's shim.
fn container_parent(proc_root: &Path, mut ppid: u32) -> Option<(u32, String)> {
    // A chain is short; the bound keeps a hand-made or changing procfs from looping.
    for _ in 0..64 {
        if ppid <= 1 {
            return None;
        }
        let dir = proc_root.join(ppid.to_string());
        let comm = fs::read_to_string(dir.join("comm")).ok()?;
        let comm = comm.trim_end();
        if CONTAINER_PARENTS.iter().any(|c| comm.starts_with(c)) {
            return Some((ppid, comm.to_string()));
        }
        ppid = fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| Stat::parse(&s))?
            .ppid;
    }
    None
}

/// The host's kubelet when exactly one runs (see [`find_kubelets`]).
pub fn find_kubelet(proc_root: &Path) -> Option<KubeletProcess> {
    find_kubelets(proc_root).the_host_kubelet().ok().cloned()
}

/// When the host's kubelet started. None when no single host kubelet is visible.
pub fn kubelet_started_at(proc_root: &Path) -> Option<SystemTime> {
    find_kubelet(proc_root)?.started_at(proc_root)
}

/// What nodemem reads of `/proc/<pid>/stat`.
struct Stat {
    /// Field 3: `R`, `S`, `Z` (a zombie), ...
    state: char,
    /// Field 4.
    ppid: u32,
    /// Field 22: the start time in clock ticks since boot.
    started_ticks: u64,
}

impl Stat {
    /// The command (field 2) may hold spaces and parentheses, so fields are counted
    /// after its last `)`.
    fn parse(stat: &str) -> Option<Stat> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // Field 3 is the first after the command.
        Some(Stat {
            state: fields.first()?.chars().next()?,
            ppid: fields.get(1)?.parse().ok()?,
            started_ticks: fields.get(19)?.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_field_is_counted_after_the_command() {
        let stat = "4242 (kube let) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 987654 1000000 500 18446744073709551615";
        let parsed = Stat::parse(stat).unwrap();
        assert_eq!(
            (parsed.state, parsed.ppid, parsed.started_ticks),
            ('S', 1, 987654)
        );
        assert!(Stat::parse("garbage").is_none());
    }

    #[test]
    fn paths_are_reached_through_the_kubelets_root_or_working_directory() {
        let p = KubeletProcess {
            pid: 7,
            argv: vec!["/usr/local/bin/k3s".into(), "agent".into()],
            started_ticks: 1,
            dir: PathBuf::from("/host/proc/7"),
        };
        assert_eq!(
            p.path("/etc/kubernetes/kubelet/config.json"),
            Path::new("/host/proc/7/root/etc/kubernetes/kubelet/config.json")
        );
        assert_eq!(
            p.path("config.yaml"),
            Path::new("/host/proc/7/cwd/config.yaml")
        );
        assert_eq!(p.command(), "k3s agent");
    }
}
