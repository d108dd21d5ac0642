//! A real Linux kernel for tests: Debian's kernel image booted in qemu (software
//! emulation) with two NUMA nodes, an initramfs built from `busybox-static`, the
//! binaries under test and their shared libraries. The init script mounts cgroup2,
//! enables the controllers, runs the test's shell script and reports its output and
//! exit code over the serial console; the VM is killed on a timeout.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::binaries::repo_root;
use crate::cpio::Cpio;
use crate::process::Process;
use crate::Error;

const BEGIN: &str = "NODEMEM-VM-BEGIN";
const EXIT: &str = "NODEMEM-VM-EXIT";

/// What one run printed and how the script ended.
#[derive(Clone, Debug)]
pub struct VmOutput {
    /// stdout and stderr of the script, in order.
    pub output: String,
    pub exit_code: i32,
    /// Everything the serial console showed (kernel messages included), for failures.
    pub console: String,
    pub boot_and_run: Duration,
}

#[derive(Clone, Debug)]
pub struct Vm {
    kernel: PathBuf,
    busybox: PathBuf,
    /// Memory of each of the two NUMA nodes, MiB.
    pub node_memory_mib: u32,
    /// Extra kernel command line (for example `hugepages=64`).
    pub cmdline: String,
    pub timeout: Duration,
    files: Vec<(String, Vec<u8>, u32)>,
    binaries: Vec<(PathBuf, String)>,
}

fn vm_err(msg: impl Into<String>) -> Error {
    Error::Vm(msg.into())
}

/// Debian's kernel image, from `tests/scripts/fetch-kernel.sh` (cached) or
/// `NODEMEM_KERNEL`.
pub fn kernel_image() -> Result<PathBuf, Error> {
    if let Some(k) = std::env::var_os("NODEMEM_KERNEL") {
        return Ok(PathBuf::from(k));
    }
    let script = repo_root().join("tests/scripts/fetch-kernel.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| vm_err(format!("cannot run {}: {e}", script.display())))?;
    if !out.status.success() {
        return Err(vm_err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
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

/// qemu's arguments for a VM of two NUMA nodes of `node_mib` each (one CPU each),
/// booting `kernel` with `initrd` and the command line `append`, its console on
/// stdio, nothing else attached (the caller adds disks, shares and networks).
/// `NODEMEM_VM_ACCEL` picks the accelerator (tcg by default: no KVM on CI machines).
pub(crate) fn two_numa_node_vm(
    node_mib: u32,
    kernel: &Path,
    initrd: &Path,
    append: &str,
) -> Vec<String> {
    let accel = std::env::var("NODEMEM_VM_ACCEL").unwrap_or_else(|_| "tcg".into());
    let mut args: Vec<String> = vec![
        "-accel".into(),
        accel,
        "-m".into(),
        format!("{}M", 2 * node_mib),
        "-smp".into(),
        "2".into(),
    ];
    for i in 0..2 {
        args.push("-object".into());
        args.push(format!("memory-backend-ram,id=m{i},size={node_mib}M"));
        args.push("-numa".into());
        args.push(format!("node,nodeid={i},cpus={i},memdev=m{i}"));
    }
    args.extend([
        "-kernel".into(),
        kernel.display().to_string(),
        "-initrd".into(),
        initrd.display().to_string(),
        "-append".into(),
        append.to_string(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-serial".into(),
        "stdio".into(),
        "-monitor".into(),
        "none".into(),
    ]);
    args
}

/// Shared libraries a dynamically linked program needs (by `ldd`), as host paths.
pub fn shared_libraries(program: &Path) -> Result<Vec<PathBuf>, Error> {
    let out = Command::new("ldd")
        .arg(program)
        .output()
        .map_err(|e| vm_err(format!("cannot run ldd: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.contains("not a dynamic executable") {
        return Ok(Vec::new()); // statically linked
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
        // "/lib64/ld-linux-x86-64.so.2 (0x...)"; "linux-vdso.so.1 (0x...)" has no file.
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/')),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
mkdir -p /sys/fs/cgroup
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# Delegate every controller to children, as systemd does for kubepods.slice.
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
  echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control
done
echo NODEMEM-VM-BEGIN
sh /test.sh 2>&1
echo "NODEMEM-VM-EXIT $?"
reboot -f
"#;

impl Vm {
    /// Two NUMA nodes of 256 MiB each, a 180 s timeout.
    pub fn new() -> Result<Self, Error> {
        let busybox = PathBuf::from(
            std::env::var_os("NODEMEM_BUSYBOX").unwrap_or_else(|| "/bin/busybox".into()),
        );
        if !busybox.is_file() {
            return Err(vm_err(format!(
                "{} is missing: install Debian's busybox-static",
                busybox.display()
            )));
        }
        Ok(Vm {
            kernel: kernel_image()?,
            busybox,
            node_memory_mib: 256,
            cmdline: String::new(),
            timeout: Duration::from_secs(180),
            files: Vec::new(),
            binaries: Vec::new(),
        })
    }

    /// Puts a host program at `/bin/<name>` in the VM, with its shared libraries.
    pub fn with_binary(mut self, host: &Path, name: &str) -> Self {
        self.binaries.push((host.to_path_buf(), name.to_string()));
        self
    }

    /// Puts a file with this content at `path` in the VM.
    pub fn with_file(mut self, path: &str, content: &[u8], mode: u32) -> Self {
        self.files.push((path.to_string(), content.to_vec(), mode));
        self
    }

    fn initramfs(&self, script: &str) -> Result<Vec<u8>, Error> {
        let read = |p: &Path| std::fs::read(p).map_err(|e| vm_err(format!("{}: {e}", p.display())));
        let mut c = Cpio::new();
        for d in ["proc", "sys", "dev", "tmp", "etc", "root"] {
            c.dir(d);
        }
        c.char_device("dev/console", 0o600, 5, 1);
        c.file("bin/busybox", 0o755, &read(&self.busybox)?);
        for lib in shared_libraries(&self.busybox)? {
            c.file(&lib.to_string_lossy(), 0o755, &read(&lib)?);
        }
        c.symlink("bin/sh", "busybox");
        c.file("init", 0o755, INIT.as_bytes());
        c.file("test.sh", 0o755, script.as_bytes());
        let mut seen = std::collections::BTreeSet::new();
        for (host, name) in &self.binaries {
            c.file(&format!("bin/{name}"), 0o755, &read(host)?);
            for lib in shared_libraries(host)? {
                if seen.insert(lib.clone()) {
                    c.file(&lib.to_string_lossy(), 0o755, &read(&lib)?);
                }
            }
        }
        for (path, content, mode) in &self.files {
            c.file(path, *mode, content);
        }
        Ok(c.finish())
    }

    /// Boots the VM, runs `script` with `sh` as root, and returns its output and exit
    /// code. Fails if qemu cannot start, or the script does not finish in time.
    pub fn run(&self, script: &str) -> Result<VmOutput, Error> {
        let dir = tempfile::Builder::new()
            .prefix("nodemem-vm-")
            .tempdir()
            .map_err(|e| vm_err(format!("temporary directory: {e}")))?;
        let initrd = dir.path().join("initramfs.cpio");
        std::fs::write(&initrd, self.initramfs(script)?)
            .map_err(|e| vm_err(format!("{}: {e}", initrd.display())))?;
        let mut args = two_numa_node_vm(
            self.node_memory_mib,
            &self.kernel,
            &initrd,
            &format!(
                "console=ttyS0 quiet loglevel=1 panic=-1 {ROOTFS} {}",
                self.cmdline
            ),
        );
        args.extend(["-nic".into(), "none".into()]);
        let console_path = dir.path().join("console.log");
        let started = Instant::now();
        let mut qemu = Process::spawn(
            "qemu-system-x86_64",
            Path::new("qemu-system-x86_64"),
            &args,
            &console_path,
        )
        .map_err(|e| vm_err(format!("{e} (install Debian's qemu-system-x86)")))?;
        let status = loop {
            if let Some(s) = qemu.exited() {
                break s;
            }
            if started.elapsed() > self.timeout {
                qemu.stop(Duration::from_millis(100));
                return Err(vm_err(format!(
                    "the VM did not finish within {}s; console:\n{}",
                    self.timeout.as_secs(),
                    crate::process::tail(&console_path, 40)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let console = String::from_utf8_lossy(
            &std::fs::read(&console_path).map_err(|e| vm_err(e.to_string()))?,
        )
        .replace('\r', "");
        if let Some(line) = unpacking_failure(&console) {
            return Err(vm_err(format!(
                "the kernel did not unpack the whole initramfs ({} MiB in a VM of {} MiB): {line}",
                std::fs::metadata(&initrd).map_or(0, |m| m.len() >> 20),
                2 * self.node_memory_mib
            )));
        }
        parse_console(&console, started.elapsed()).ok_or_else(|| {
            vm_err(format!(
                "qemu ended ({status}) without the script's exit marker; console:\n{}",
                crate::process::tail(&console_path, 40)
            ))
        })
    }
}

/// The root file system the initramfs is unpacked into. Without `root=` the kernel makes
/// it a tmpfs, whose size cap is half the memory counted when it is mounted, and the
/// initramfs itself is not counted yet: a 152 MB debug `nodemem` then did not fit
/// ("Initramfs unpacking failed: write error"; the files after it, the dynamic loader
/// among them, were missing and the script's `nodemem` was "not found"). ramfs has no
/// cap; the tests' own files live on the tmpfs the init script mounts on /tmp.
const ROOTFS: &str = "rootfstype=ramfs";

/// The kernel's line saying the initramfs was unpacked only in part, if it printed one
/// (at KERN_EMERG, so `loglevel=1` shows it).
fn unpacking_failure(console: &str) -> Option<&str> {
    console
        .lines()
        .find(|l| l.contains("Initramfs unpacking failed"))
}

/// The script's output between the markers and its exit code.
fn parse_console(console: &str, elapsed: Duration) -> Option<VmOutput> {
    let mut lines = console.lines();
    lines.by_ref().find(|l| l.trim_end() == BEGIN)?;
    let mut output = Vec::new();
    for line in lines {
        if let Some(code) = line.trim_end().strip_prefix(EXIT) {
            return Some(VmOutput {
                output: output.join("\n"),
                exit_code: code.trim().parse().ok()?,
                console: console.to_string(),
                boot_and_run: elapsed,
            });
        }
        output.push(line);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_parsing_finds_output_and_exit_code() {
        let console = "SeaBIOS\n[ 1.0] boot\nNODEMEM-VM-BEGIN\nhello\nworld\nNODEMEM-VM-EXIT 3\n[ 2.0] reboot\n";
        let out = parse_console(console, Duration::ZERO).unwrap();
        assert_eq!(out.output, "hello\nworld");
        assert_eq!(out.exit_code, 3);
        assert!(parse_console("NODEMEM-VM-BEGIN\nno end\n", Duration::ZERO).is_none());
        assert!(parse_console("kernel panic\n", Duration::ZERO).is_none());
    }

    #[test]
    fn a_partly_unpacked_initramfs_is_found_on_the_console() {
        let console = "[ 1.1] Trying to unpack rootfs image as initramfs...\n[ 1.7] Initramfs unpacking failed: write error\nNODEMEM-VM-BEGIN\n";
        assert_eq!(
            unpacking_failure(console),
            Some("[ 1.7] Initramfs unpacking failed: write error")
        );
        assert_eq!(
            unpacking_failure("NODEMEM-VM-BEGIN\nNODEMEM-VM-EXIT 0\n"),
            None
        );
    }

    #[test]
    fn ldd_lists_host_libraries_of_a_dynamic_program() {
        let libs = shared_libraries(Path::new("/bin/sh")).unwrap();
        assert!(
            libs.iter().any(|l| l.to_string_lossy().contains("libc.so")),
            "{libs:?}"
        );
    }
}
