//! Interface files under an injected cgroup root.
//!
//! Files are opened without `O_CREAT`: the kernel refuses to create interface files,
//! and a test tree must not hide a typo by creating one. The final component is opened
//! with `O_NOFOLLOW` (cgroupfs has no symlinks; a test tree must not grow one). A value
//! is written whole in one `write`, as the kernel parses each write on its own.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::path::{check_file_name, CgroupPath, UnsafeName};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

/// A failed read or write, with the file, the value and the errno.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(transparent)]
    Unsafe(#[from] UnsafeName),
    #[error("{}", describe(*.op, .path, .value.as_deref(), .source))]
    Io {
        op: Op,
        path: PathBuf,
        value: Option<String>,
        source: io::Error,
        /// The cgroup directory is gone (the pod was deleted meanwhile).
        vanished: bool,
    },
}

fn describe(op: Op, path: &Path, value: Option<&str>, source: &io::Error) -> String {
    let errno = source
        .raw_os_error()
        .map(|n| format!(" (errno {n})"))
        .unwrap_or_default();
    match (op, value) {
        (Op::Write, Some(v)) => format!("write {v:?} to {}: {source}{errno}", path.display()),
        _ => format!("read {}: {source}{errno}", path.display()),
    }
}

impl CgroupError {
    /// The cgroup disappeared between planning and the operation: normal, not a fault.
    pub fn is_vanished(&self) -> bool {
        matches!(self, CgroupError::Io { vanished: true, .. })
    }

    pub fn errno(&self) -> Option<i32> {
        match self {
            CgroupError::Io { source, .. } => source.raw_os_error(),
            CgroupError::Unsafe(_) => None,
        }
    }
}

/// A cgroup v2 hierarchy at `root`.
#[derive(Clone, Debug)]
pub struct CgroupFs {
    root: PathBuf,
}

impl CgroupFs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        CgroupFs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of a cgroup. `CgroupPath` guarantees it is under the root.
    pub fn dir(&self, cgroup: &CgroupPath) -> PathBuf {
        if cgroup.as_str().is_empty() {
            self.root.clone()
        } else {
            self.root.join(cgroup.as_str())
        }
    }

    pub fn exists(&self, cgroup: &CgroupPath) -> bool {
        self.dir(cgroup).is_dir()
    }

    fn file(&self, cgroup: &CgroupPath, file: &str) -> Result<PathBuf, CgroupError> {
        check_file_name(file)?;
        Ok(self.dir(cgroup).join(file))
    }

    fn io_error(
        &self,
        op: Op,
        cgroup: &CgroupPath,
        path: PathBuf,
        value: Option<&str>,
        source: io::Error,
    ) -> CgroupError {
        let vanished = source.kind() == io::ErrorKind::NotFound && !self.exists(cgroup);
        CgroupError::Io {
            op,
            path,
            value: value.map(str::to_string),
            source,
            vanished,
        }
    }

    /// The file's text as the kernel gives it.
    pub fn read(&self, cgroup: &CgroupPath, file: &str) -> Result<String, CgroupError> {
        let path = self.file(cgroup, file)?;
        let mut text = String::new();
        let result = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .and_then(|mut f: File| f.read_to_string(&mut text));
        match result {
            Ok(_) => Ok(text),
            Err(e) => Err(self.io_error(Op::Read, cgroup, path, None, e)),
        }
    }

    /// Writes `value` whole to an existing file; never creates one. An empty value is
    /// written as a newline: a zero-length write would not reach the kernel at all,
    /// and `cpuset.mems` is emptied (back to the parent's set) by writing "\n".
    pub fn write(&self, cgroup: &CgroupPath, file: &str, value: &str) -> Result<(), CgroupError> {
        let path = self.file(cgroup, file)?;
        let bytes: &[u8] = if value.is_empty() {
            b"\n"
        } else {
            value.as_bytes()
        };
        let result = OpenOptions::new()
            .write(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .and_then(|mut f: File| f.write_all(bytes));
        result.map_err(|e| self.io_error(Op::Write, cgroup, path, Some(value), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, CgroupFs, CgroupPath) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kubepods")).unwrap();
        std::fs::write(dir.path().join("kubepods/memory.min"), "0\n").unwrap();
        let fs = CgroupFs::new(dir.path());
        (dir, fs, CgroupPath::new("kubepods").unwrap())
    }

    #[test]
    fn writes_whole_and_reads_back() {
        let (_d, fs, kp) = tree();
        fs.write(&kp, "memory.min", "4096").unwrap();
        assert_eq!(fs.read(&kp, "memory.min").unwrap(), "4096");
    }

    #[test]
    fn an_empty_value_reaches_the_file() {
        let (dir, fs, kp) = tree();
        std::fs::write(dir.path().join("kubepods/cpuset.mems"), "1\n").unwrap();
        fs.write(&kp, "cpuset.mems", "").unwrap();
        assert_eq!(fs.read(&kp, "cpuset.mems").unwrap(), "\n");
    }

    #[test]
    fn a_missing_file_is_refused_not_created() {
        let (dir, fs, kp) = tree();
        let err = fs.write(&kp, "memory.mni", "1").unwrap_err();
        assert!(!dir.path().join("kubepods/memory.mni").exists());
        assert!(!err.is_vanished(), "the cgroup is there; the file is not");
        assert_eq!(err.errno(), Some(libc::ENOENT));
        let text = err.to_string();
        assert!(text.starts_with("write \"1\" to "), "{text}");
        assert!(
            text.ends_with("kubepods/memory.mni: No such file or directory (os error 2) (errno 2)"),
            "{text}"
        );
    }

    #[test]
    fn a_vanished_cgroup_is_told_apart() {
        let (_d, fs, _) = tree();
        let gone = CgroupPath::new("kubepods/pod-gone").unwrap();
        let err = fs.write(&gone, "memory.min", "1").unwrap_err();
        assert!(err.is_vanished());
        assert!(fs.read(&gone, "memory.min").unwrap_err().is_vanished());
    }

    #[test]
    fn symlinks_and_bad_file_names_are_refused() {
        let (dir, fs, kp) = tree();
        std::fs::write(dir.path().join("outside"), "x").unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("outside"),
            dir.path().join("kubepods/memory.low"),
        )
        .unwrap();
        let err = fs.write(&kp, "memory.low", "1").unwrap_err();
        assert_eq!(err.errno(), Some(libc::ELOOP));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("outside")).unwrap(),
            "x"
        );
        assert!(matches!(
            fs.write(&kp, "../x", "1"),
            Err(CgroupError::Unsafe(_))
        ));
    }
}
