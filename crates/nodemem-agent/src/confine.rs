//! The agent confines itself once it runs (issue 59): a seccomp filter, installed on
//! every thread at once (`SECCOMP_FILTER_FLAG_TSYNC`) after `no_new_privs`, refuses with
//! EPERM the system calls the agent never makes, and every thread and child it starts
//! later inherits it (the reclaim writer, the inotify reader, NRI's connection, the
//! D-Bus client, a `--kubelet-restart-command`). The container runtime's own profile
//! (`seccompProfile: RuntimeDefault` on the DaemonSet) still applies beneath it.
//!
//! A deny list, not an allow list: the agent's libraries (tokio, rustls, zbus, ttrpc,
//! inotify) and the kernels it meets make a complete allow list brittle, and a missed
//! call would stop an agent on a node nodemem has never seen. Each entry says why the
//! agent never needs it.
//!
//! Before the filter, while it runs one thread, the agent drops every capability
//! ([`drop_capabilities`]; its kubelet reader keeps `SYS_PTRACE`, see
//! `kubelet_reader`) and restricts its writes with Landlock ([`restrict_writes`]) to
//! the trees it writes: the cgroup tree, its state directory and, under
//! `enforcement: Kubelet`, the kubelet's drop-in directory and the Memory Manager's
//! state file. Landlock also denies it ptrace access to every process outside its
//! domain (`/proc/<pid>/mem`, `/proc/<pid>/root`) and, from Linux 6.12, signals to them.

/// Each refused system call: its name, and why the agent never makes it.
#[cfg(target_os = "linux")]
pub const REFUSED: &[(&str, i64, &str)] = &[
    ("ptrace", libc::SYS_ptrace, "attaching to another process: the kubelet reader opens the kubelet's /proc/<pid>/root, which needs the capability's access check, not the call"),
    ("process_vm_readv", libc::SYS_process_vm_readv, "reading another process's memory"),
    ("process_vm_writev", libc::SYS_process_vm_writev, "writing another process's memory"),
    ("kexec_load", libc::SYS_kexec_load, "loading another kernel"),
    ("kexec_file_load", libc::SYS_kexec_file_load, "loading another kernel"),
    ("init_module", libc::SYS_init_module, "loading a kernel module"),
    ("finit_module", libc::SYS_finit_module, "loading a kernel module"),
    ("delete_module", libc::SYS_delete_module, "removing a kernel module"),
    ("bpf", libc::SYS_bpf, "loading BPF programs"),
    ("perf_event_open", libc::SYS_perf_event_open, "profiling other processes"),
    ("mount", libc::SYS_mount, "changing the mount table"),
    ("umount2", libc::SYS_umount2, "changing the mount table"),
    ("pivot_root", libc::SYS_pivot_root, "changing the root"),
    ("chroot", libc::SYS_chroot, "changing the root"),
    ("open_tree", libc::SYS_open_tree, "changing the mount table"),
    ("move_mount", libc::SYS_move_mount, "changing the mount table"),
    ("fsopen", libc::SYS_fsopen, "mounting a file system"),
    ("fsconfig", libc::SYS_fsconfig, "mounting a file system"),
    ("fsmount", libc::SYS_fsmount, "mounting a file system"),
    ("fspick", libc::SYS_fspick, "remounting a file system"),
    ("open_by_handle_at", libc::SYS_open_by_handle_at, "opening host files by handle, past the mount namespace"),
    ("name_to_handle_at", libc::SYS_name_to_handle_at, "file handles for open_by_handle_at"),
    ("keyctl", libc::SYS_keyctl, "the kernel's key rings"),
    ("add_key", libc::SYS_add_key, "the kernel's key rings"),
    ("request_key", libc::SYS_request_key, "the kernel's key rings"),
    ("userfaultfd", libc::SYS_userfaultfd, "handling page faults in user space"),
    ("reboot", libc::SYS_reboot, "rebooting the node"),
    ("swapon", libc::SYS_swapon, "swap"),
    ("swapoff", libc::SYS_swapoff, "swap"),
    ("acct", libc::SYS_acct, "process accounting"),
    ("settimeofday", libc::SYS_settimeofday, "the node's clock"),
    ("clock_settime", libc::SYS_clock_settime, "the node's clock"),
    ("clock_adjtime", libc::SYS_clock_adjtime, "the node's clock"),
    ("adjtimex", libc::SYS_adjtimex, "the node's clock"),
    ("mknodat", libc::SYS_mknodat, "creating device nodes"),
    ("quotactl", libc::SYS_quotactl, "disk quotas"),
];

/// Installs the agent's filter on every thread of this process; the number of system
/// calls it refuses. An error says what the kernel refused (a kernel without seccomp
/// filters, another filter that forbids adding one).
#[cfg(target_os = "linux")]
pub fn confine() -> Result<usize, String> {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};
    let rules = REFUSED.iter().map(|(_, nr, _)| (*nr, Vec::new())).collect();
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("no seccomp filter for {}: {e:?}", std::env::consts::ARCH))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("the seccomp filter: {e}"))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e| format!("the seccomp filter's program: {e:?}"))?;
    seccompiler::apply_filter_all_threads(&program)
        .map_err(|e| format!("installing the seccomp filter: {e}"))?;
    Ok(REFUSED.len())
}

/// Elsewhere there is nothing to install.
#[cfg(not(target_os = "linux"))]
pub fn confine() -> Result<usize, String> {
    Err("seccomp filters exist on Linux only".into())
}

/// Drops every capability of this thread (effective, permitted, inheritable, ambient):
/// the agent needs none once its kubelet reader runs (root writes root-owned cgroup
/// files without one; systemd and the runtime authorize uid 0 on their sockets). Call
/// it while the process has one thread: capabilities are per thread. With
/// `no_new_privs` (the DaemonSet's `allowPrivilegeEscalation: false`), no later
/// `execve` gives them back. The capabilities held before.
#[cfg(target_os = "linux")]
pub fn drop_capabilities() -> Result<Vec<String>, String> {
    use caps::CapSet;
    let held =
        caps::read(None, CapSet::Permitted).map_err(|e| format!("reading capabilities: {e}"))?;
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("dropping {set:?} capabilities: {e}"))?;
    }
    let mut names: Vec<String> = held.iter().map(ToString::to_string).collect();
    names.sort();
    Ok(names)
}

#[cfg(not(target_os = "linux"))]
pub fn drop_capabilities() -> Result<Vec<String>, String> {
    Ok(Vec::new())
}

/// How far Landlock confines the agent on this kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restricted {
    /// Every right nodemem asks for is enforced.
    Fully,
    /// The kernel's Landlock is older than the rights asked for (on 6.1: files, not
    /// truncation or signals); what it has is enforced.
    Partly,
    /// The kernel has no Landlock, or it is not among its security modules.
    Not,
}

/// Restricts this thread and the threads and processes it starts later to reading
/// and executing anywhere and writing beneath `writable` only (Landlock; files and
/// directories). Call it while the process has one thread. The ruleset's status on
/// this kernel.
#[cfg(target_os = "linux")]
pub fn restrict_writes(writable: &[std::path::PathBuf]) -> Result<Restricted, String> {
    use landlock::{
        path_beneath_rules, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr,
        RulesetStatus, Scope, ABI,
    };
    let abi = ABI::V3;
    let err = |e: landlock::RulesetError| format!("Landlock: {e}");
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?
        .scope(Scope::Signal)
        .map_err(err)?
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
        .map_err(err)?
        .add_rules(path_beneath_rules(writable, AccessFs::from_all(abi)))
        .map_err(err)?
        .restrict_self()
        .map_err(err)?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => Restricted::Fully,
        RulesetStatus::PartiallyEnforced => Restricted::Partly,
        RulesetStatus::NotEnforced => Restricted::Not,
    })
}

#[cfg(not(target_os = "linux"))]
pub fn restrict_writes(_: &[std::path::PathBuf]) -> Result<Restricted, String> {
    Ok(Restricted::Not)
}
