//! Escape attempts made from inside the running agent, under its own filter,
//! capabilities and Landlock domain (issue 59's proof on the real node). Run once at
//! start-up when `NODEMEM_CONFINEMENT_PROBE=1` is in the agent's environment (the
//! chart's and the controller's `agent.env`); each attempt is one log line saying
//! `refused` or `ALLOWED`, then a summary line. A test reads them; nothing else acts
//! on them.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The environment variable that asks for the probe.
pub const PROBE_ENV: &str = "NODEMEM_CONFINEMENT_PROBE";

/// One escape attempt and how it ended.
#[derive(Debug)]
pub struct Attempt {
    pub what: String,
    /// The error that stopped it; None when it succeeded.
    pub refused: Option<io::Error>,
}

/// Makes every attempt and logs each.
pub fn run(proc_root: &Path, own: &[PathBuf]) {
    let attempts = attempts(proc_root, own);
    let refused = attempts.iter().filter(|a| a.refused.is_some()).count();
    // The host's pid (the agent runs in the host's PID namespace): which agent said it.
    let pid = std::process::id();
    for a in &attempts {
        match &a.refused {
            Some(e) => {
                tracing::info!(pid, attempt = %a.what, error = %e, "confinement probe: refused")
            }
            None => tracing::warn!(pid, attempt = %a.what, "confinement probe: ALLOWED"),
        }
    }
    tracing::info!(
        pid,
        attempts = attempts.len(),
        refused,
        "confinement probe: done"
    );
}

/// The attempts: attaching to systemd and the kubelet, opening their memory for
/// writing, reading systemd's memory, and creating or appending to a file on every
/// writable mount outside the agent's own trees (`own`).
pub fn attempts(proc_root: &Path, own: &[PathBuf]) -> Vec<Attempt> {
    let mut pids = vec![1u32];
    pids.extend(nodemem_apply::kubelet::find_kubelet(proc_root).map(|k| k.pid));
    let mut out = Vec::new();
    for pid in &pids {
        out.push(Attempt {
            what: format!("ptrace(PTRACE_ATTACH, {pid})"),
            refused: ptrace_attach(*pid).err(),
        });
        // The pod's own procfs is mounted read-write (the host's, at proc_root, is
        // read-only, which would refuse the open before the kernel's ptrace check).
        for procfs in [Path::new("/proc"), proc_root] {
            let mem = procfs.join(pid.to_string()).join("mem");
            out.push(Attempt {
                what: format!("open {} for writing", mem.display()),
                refused: OpenOptions::new().write(true).open(&mem).err(),
            });
        }
        out.push(Attempt {
            what: format!("process_vm_readv({pid})"),
            refused: process_vm_read(*pid).err(),
        });
    }
    let host_tmp = proc_root.join("1/root/tmp/nodemem-confinement-probe");
    out.push(Attempt {
        what: format!("create {}", host_tmp.display()),
        refused: create(&host_tmp).err(),
    });
    for target in writable_mounts(own) {
        out.push(Attempt {
            what: format!("write to {}", target.display()),
            refused: write_into(&target).err(),
        });
    }
    out
}

fn ptrace_attach(pid: u32) -> io::Result<()> {
    // SAFETY: PTRACE_ATTACH takes no pointers; a success is undone at once.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_ATTACH,
            pid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            pid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    Ok(())
}

fn process_vm_read(pid: u32) -> io::Result<()> {
    let mut buf = [0u8; 8];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // An address no process maps: a permitted call fails with EFAULT, not EPERM.
    let remote = libc::iovec {
        iov_base: 0x1000 as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` points at `buf`, alive for the call.
    let r = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    match io::Error::last_os_error() {
        e if r == -1 && e.raw_os_error() != Some(libc::EFAULT) => Err(e),
        _ => Ok(()),
    }
}

fn create(path: &Path) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    let _ = std::fs::remove_file(path);
    Ok(())
}

/// A directory: a new file in it; a file: opened for appending (nothing written).
fn write_into(target: &Path) -> io::Result<()> {
    if target.is_dir() {
        create(&target.join(".nodemem-confinement-probe"))
    } else {
        OpenOptions::new().append(true).open(target).map(|_| ())
    }
}

/// The agent's mounts that are mounted read-write, other than its own trees, the
/// kernel's file systems (procfs, sysfs, cgroups: they hold no files but the kernel's)
/// and the container's root.
fn writable_mounts(own: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let mount_point = *fields.get(4)?;
            let options = *fields.get(5)?;
            let fs_type = fields
                .iter()
                .position(|f| *f == "-")
                .and_then(|i| fields.get(i + 1))?;
            let writable = options.split(',').any(|o| o == "rw");
            let kernels = ["proc", "sysfs", "cgroup2", "cgroup", "mqueue", "devpts"];
            let path = PathBuf::from(mount_point.replace("\\040", " "));
            (writable && mount_point != "/" && !kernels.contains(fs_type) && !is_own(&path, own))
                .then_some(path)
        })
        .collect()
}

/// Whether `path` is one of the agent's own trees or beneath one, by path or by
/// identity: the same directory reached through another mount (the state directory
/// as the runtime's task directory shows it) or the same file (runc masks /proc's
/// files with /dev/null, which the agent may write).
fn is_own(path: &Path, own: &[PathBuf]) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    own.iter().any(|o| path.starts_with(o)) || {
        let mine = id(path);
        mine.is_some() && own.iter().any(|o| id(o) == mine)
    }
}
