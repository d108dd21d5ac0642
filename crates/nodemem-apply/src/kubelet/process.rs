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

/// The newest process running a kubelet under `proc_root` (after a restart the old
/// one may linger a moment). None when none is visible: the agent needs the host's PID
/// namespace to see it.
pub fn find_kubelet(proc_root: &Path) -> Option<KubeletProcess> {
    let mut newest: Option<KubeletProcess> = None;
    for entry in fs::read_dir(proc_root).ok()?.flatten() {
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
        let Some(started_ticks) = fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| start_ticks(&s))
        else {
            continue;
        };
        if newest
            .as_ref()
            .is_some_and(|n| n.started_ticks >= started_ticks)
        {
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
        newest = Some(KubeletProcess {
            pid,
            argv,
            started_ticks,
            dir,
        });
    }
    newest
}

/// When the newest kubelet started. None when no kubelet is visible.
pub fn kubelet_started_at(proc_root: &Path) -> Option<SystemTime> {
    find_kubelet(proc_root)?.started_at(proc_root)
}

/// Field 22 of `/proc/<pid>/stat`; the command (field 2) may hold spaces and
/// parentheses, so fields are counted after its last `)`.
fn start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 is the first after the command; 22 is the 20th from there.
    rest.split_whitespace().nth(19)?.parse().ok()
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
