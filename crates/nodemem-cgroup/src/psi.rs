//! PSI triggers (Documentation/accounting/psi.rst): a cgroup's `memory.pressure`
//! opened for writing takes `<some|full> <stall us> <window us>`, and the open file
//! then polls `POLLPRI` whenever the tasks stalled that long within a window, at most
//! once per window. The agent waits on such a file per container instead of reading
//! pressure in a loop; a calm container costs nothing.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;

use crate::fs::{CgroupError, CgroupFs, Op};
use crate::CgroupPath;

/// What a trigger waits for: all tasks stalled on memory (`full`) for at least
/// `stall_us` within any `window_us`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FullTrigger {
    pub stall_us: u64,
    pub window_us: u64,
}

impl FullTrigger {
    /// The kernel's window bounds: 500 ms to 10 s.
    pub const MIN_WINDOW_US: u64 = 500_000;
    pub const MAX_WINDOW_US: u64 = 10_000_000;

    /// A trigger for `percent` of a window of `window_us` (clamped to the kernel's
    /// bounds; a writer without CAP_SYS_RESOURCE needs a multiple of 2 s, which the
    /// agent's 10 s is).
    pub fn percent_of(percent: u32, window_us: u64) -> Self {
        let window_us = window_us.clamp(Self::MIN_WINDOW_US, Self::MAX_WINDOW_US);
        FullTrigger {
            stall_us: (window_us * u64::from(percent.clamp(1, 100)) / 100).max(1),
            window_us,
        }
    }

    /// The line the kernel takes.
    pub fn line(&self) -> String {
        format!("full {} {}", self.stall_us, self.window_us)
    }
}

impl CgroupFs {
    /// Opens `memory.pressure` of `cgroup` with `trigger` armed, non-blocking, for
    /// `poll`/`epoll` on `POLLPRI`. Fails with the path and the line when the kernel
    /// refuses (no PSI, `psi=0`, a bad window) or the cgroup is gone.
    pub fn pressure_trigger(
        &self,
        cgroup: &CgroupPath,
        trigger: FullTrigger,
    ) -> Result<OwnedFd, CgroupError> {
        let path = self.dir(cgroup).join("memory.pressure");
        let line = trigger.line();
        let result = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&path)
            // The line with its NUL, as the kernel documentation writes it.
            .and_then(|mut f| {
                let mut bytes = line.clone().into_bytes();
                bytes.push(0);
                f.write_all(&bytes)?;
                Ok(OwnedFd::from(f))
            });
        result.map_err(|source| CgroupError::Io {
            op: Op::Write,
            vanished: source.kind() == std::io::ErrorKind::NotFound && !self.exists(cgroup),
            path,
            value: Some(line),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_of_the_window_within_the_kernels_bounds() {
        assert_eq!(
            FullTrigger::percent_of(20, 10_000_000).line(),
            "full 2000000 10000000"
        );
        let short = FullTrigger::percent_of(50, 100);
        assert_eq!(short.window_us, FullTrigger::MIN_WINDOW_US);
        assert_eq!(short.stall_us, 250_000);
        assert_eq!(FullTrigger::percent_of(0, 20_000_000).stall_us, 100_000);
    }

    #[test]
    fn a_missing_cgroup_is_an_error_naming_the_file() {
        let root = tempfile::tempdir().unwrap();
        let fs = CgroupFs::new(root.path());
        let missing = CgroupPath::new("gone").unwrap();
        let e = fs
            .pressure_trigger(&missing, FullTrigger::percent_of(20, 10_000_000))
            .unwrap_err();
        assert!(e.is_vanished(), "{e}");
        assert!(e.to_string().contains("memory.pressure"), "{e}");
    }
}
