//! Interface files under an injected cgroup root.
//!
//! Files are opened without `O_CREAT`: the kernel refuses to create interface files,
//! and a test tree must not hide a typo by creating one. The final component is opened
//! with `O_NOFOLLOW` (cgroupfs has no symlinks; a test tree must not grow one). A value
//! is written whole in one `write`, as the kernel parses each write on its own.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
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

/// A cgroup directory held open (`O_PATH`): its files are opened relative to it with
/// `openat`, so the path is resolved once per cgroup rather than once per file, and a
/// rename of a parent cannot redirect a later write.
#[derive(Debug)]
pub struct OpenCgroup {
    fd: OwnedFd,
    dir: PathBuf,
    cgroup: CgroupPath,
    truncate: bool,
}

fn c_name(file: &str) -> Result<CString, CgroupError> {
    check_file_name(file)?;
    // check_file_name refused NUL bytes.
    Ok(CString::new(file).expect("no NUL in a checked name"))
}

fn openat(dir: &OwnedFd, name: &CString, flags: libc::c_int) -> io::Result<File> {
    // SAFETY: `dir` is an open descriptor and `name` a NUL-terminated string; the
    // returned descriptor is owned by the File.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: fd is a fresh descriptor nobody else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }
}

/// Reads a whole interface file without the `fstat` `read_to_string` does to size its
/// buffer: cgroup files are small, and a read shorter than the space offered is the
/// end of the file (for cgroupfs, procfs, sysfs and regular files alike).
fn read_small(f: &mut File) -> io::Result<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let n = match f.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            break;
        }
    }
    String::from_utf8(out).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// An interface file held open for reading now and, maybe, rewriting later in place:
/// observing and writing a file costs one open instead of two.
#[derive(Debug)]
pub struct HeldFile {
    file: File,
    path: PathBuf,
    dir: PathBuf,
    /// Regular files (test trees) need an old tail longer than the new value cut;
    /// cgroupfs parses each write whole and has no tail.
    truncate: bool,
    /// Bytes the file held when last read or written.
    len: usize,
}

/// The bytes a write of `value` sends: an empty value as a newline, since a zero-length
/// write would not reach the kernel (and cpuset.mems is emptied by writing "\n").
fn whole(value: &str) -> &[u8] {
    if value.is_empty() {
        b"\n"
    } else {
        value.as_bytes()
    }
}

/// Opens directory `name` relative to `at` (`AT_FDCWD` for a path) as an `O_PATH`
/// handle; None when it does not exist.
fn open_dir_at(
    at: std::os::fd::RawFd,
    name: &CString,
    dir: PathBuf,
    cgroup: CgroupPath,
    truncate: bool,
) -> Result<Option<OpenCgroup>, CgroupError> {
    // SAFETY: `at` is an open directory or AT_FDCWD and `name` is NUL-terminated; the
    // returned descriptor is owned below.
    let fd = unsafe {
        libc::openat(
            at,
            name.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) {
            return Ok(None);
        }
        return Err(CgroupError::Io {
            op: Op::Read,
            path: dir,
            value: None,
            source: e,
            vanished: false,
        });
    }
    Ok(Some(OpenCgroup {
        // SAFETY: fd is a fresh descriptor nobody else owns.
        fd: unsafe { OwnedFd::from_raw_fd(fd) },
        dir,
        cgroup,
        truncate,
    }))
}

/// The file or its cgroup is gone: ENOENT opening it, ENODEV (kernfs) writing to a
/// file of a removed cgroup.
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

impl HeldFile {
    fn error(&self, op: Op, value: Option<&str>, source: io::Error) -> CgroupError {
        let vanished = gone(&source) && !self.dir.is_dir();
        CgroupError::Io {
            op,
            path: self.path.clone(),
            value: value.map(str::to_string),
            source,
            vanished,
        }
    }

    /// The file's text, from the start.
    pub fn read(&mut self) -> Result<String, CgroupError> {
        let text = read_small(&mut self.file).map_err(|e| self.error(Op::Read, None, e))?;
        self.len = text.len();
        Ok(text)
    }

    /// Replaces the content with `value`, written whole at offset 0 (empty as "\n").
    pub fn rewrite(&mut self, value: &str) -> Result<(), CgroupError> {
        use std::os::unix::fs::FileExt;
        let bytes = whole(value);
        let result = self.file.write_at(bytes, 0).and_then(|n| {
            if n != bytes.len() {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
            }
            // Only a shorter value leaves an old tail behind (nodemem reads before it
            // rewrites, so it knows the length).
            if self.truncate && bytes.len() < self.len {
                self.file.set_len(bytes.len() as u64)?;
            }
            Ok(())
        });
        match result {
            Ok(()) => {
                self.len = bytes.len();
                Ok(())
            }
            Err(e) => Err(self.error(Op::Write, Some(value), e)),
        }
    }
}

impl OpenCgroup {
    /// Opens a file for reading and rewriting (read-only when `writable` is false);
    /// never creates it.
    pub fn hold(&self, file: &str, writable: bool) -> Result<HeldFile, CgroupError> {
        let name = c_name(file)?;
        let flags = if writable {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        };
        openat(&self.fd, &name, flags)
            .map(|f| HeldFile {
                file: f,
                path: self.dir.join(file),
                dir: self.dir.clone(),
                truncate: self.truncate,
                len: usize::MAX,
            })
            .map_err(|e| self.error(Op::Read, file, None, e))
    }

    /// Opens a file of the child cgroup `leaf` (one component) relative to this
    /// directory, resolving two components instead of the whole path; never creates.
    pub fn hold_in_child(
        &self,
        leaf: &str,
        file: &str,
        writable: bool,
    ) -> Result<HeldFile, CgroupError> {
        check_file_name(leaf)?;
        check_file_name(file)?;
        let name = CString::new(format!("{leaf}/{file}")).expect("checked names hold no NUL");
        let dir = self.dir.join(leaf);
        let flags = if writable {
            libc::O_RDWR
        } else {
            libc::O_RDONLY
        };
        match openat(&self.fd, &name, flags) {
            Ok(f) => Ok(HeldFile {
                file: f,
                path: dir.join(file),
                dir,
                truncate: self.truncate,
                len: usize::MAX,
            }),
            Err(e) => {
                let vanished = e.kind() == io::ErrorKind::NotFound && !dir.is_dir();
                Err(CgroupError::Io {
                    op: Op::Read,
                    path: dir.join(file),
                    value: None,
                    source: e,
                    vanished,
                })
            }
        }
    }

    pub fn cgroup(&self) -> &CgroupPath {
        &self.cgroup
    }

    /// True when the child directory `leaf` exists (one component resolved).
    pub fn has_child(&self, leaf: &str) -> bool {
        let Ok(name) = c_name(leaf) else {
            return false;
        };
        // SAFETY: an open directory descriptor, a NUL-terminated name and a zeroed
        // struct to fill.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstatat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            ) == 0
                && (st.st_mode & libc::S_IFMT) == libc::S_IFDIR
        }
    }

    /// Holds a child cgroup (`child` is `self`'s path plus one component) open,
    /// resolving only that last component; None when it does not exist.
    pub fn open_child(&self, child: &CgroupPath) -> Result<Option<OpenCgroup>, CgroupError> {
        let leaf = child
            .as_str()
            .strip_prefix(self.cgroup.as_str())
            .map(|rest| rest.trim_start_matches('/'))
            .filter(|rest| !rest.is_empty() && !rest.contains('/'))
            .ok_or_else(|| UnsafeName {
                what: "cgroup path",
                value: child.as_str().to_string(),
                problem: crate::path::NameProblem::Slash,
            })?;
        let name = c_name(leaf)?;
        open_dir_at(
            self.fd.as_raw_fd(),
            &name,
            self.dir.join(leaf),
            child.clone(),
            self.truncate,
        )
    }

    fn error(&self, op: Op, file: &str, value: Option<&str>, source: io::Error) -> CgroupError {
        let vanished = gone(&source) && !self.dir.is_dir();
        CgroupError::Io {
            op,
            path: self.dir.join(file),
            value: value.map(str::to_string),
            source,
            vanished,
        }
    }

    pub fn read(&self, file: &str) -> Result<String, CgroupError> {
        let name = c_name(file)?;
        openat(&self.fd, &name, libc::O_RDONLY)
            .and_then(|mut f| read_small(&mut f))
            .map_err(|e| self.error(Op::Read, file, None, e))
    }

    /// As [`CgroupFs::write`], relative to the held directory.
    pub fn write(&self, file: &str, value: &str) -> Result<(), CgroupError> {
        let name = c_name(file)?;
        let bytes = whole(value);
        openat(&self.fd, &name, libc::O_WRONLY | libc::O_TRUNC)
            .and_then(|mut f| f.write_all(bytes))
            .map_err(|e| self.error(Op::Write, file, Some(value), e))
    }
}

/// A cgroup v2 hierarchy at `root`.
#[derive(Clone, Debug)]
pub struct CgroupFs {
    root: PathBuf,
    /// The root is a cgroup2 mount (statfs), not a test tree of regular files.
    is_cgroup2: bool,
    /// On a tree of regular files, check after writing that the cgroups written to
    /// still exist (the kernel reports a removed cgroup itself, with ENODEV).
    removal_checks: bool,
}

/// `CGROUP2_SUPER_MAGIC` from linux/magic.h.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

fn is_cgroup2(root: &Path) -> bool {
    let Ok(c) = CString::new(root.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs with a NUL-terminated path and a zeroed struct to fill.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == CGROUP2_SUPER_MAGIC
    }
}

impl CgroupFs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let is_cgroup2 = is_cgroup2(&root);
        CgroupFs {
            is_cgroup2,
            removal_checks: !is_cgroup2,
            root,
        }
    }

    /// Turns the removal checks of regular-file trees off (benchmarks of the write
    /// path as it runs on cgroupfs, where the kernel needs none) or on.
    pub fn with_removal_checks(mut self, on: bool) -> Self {
        self.removal_checks = on && !self.is_cgroup2;
        self
    }

    /// True when writes through held files must be checked for removed cgroups.
    pub fn removal_checks(&self) -> bool {
        self.removal_checks
    }

    /// True when the root is a cgroup2 mount.
    pub fn is_cgroup2(&self) -> bool {
        self.is_cgroup2
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

    /// Holds a cgroup directory open; None when it does not exist. Other failures (for
    /// example too many open files) are errors the caller may fall back from.
    pub fn open_dir(&self, cgroup: &CgroupPath) -> Result<Option<OpenCgroup>, CgroupError> {
        let dir = self.dir(cgroup);
        let c_dir = CString::new(dir.as_os_str().as_bytes()).map_err(|_| UnsafeName {
            what: "cgroup root",
            value: dir.display().to_string(),
            problem: crate::path::NameProblem::Nul,
        })?;
        open_dir_at(
            libc::AT_FDCWD,
            &c_dir,
            dir,
            cgroup.clone(),
            !self.is_cgroup2,
        )
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
        let result = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .and_then(|mut f| read_small(&mut f));
        result.map_err(|e| self.io_error(Op::Read, cgroup, path, None, e))
    }

    /// Writes `value` whole to an existing file; never creates one. An empty value is
    /// written as a newline: a zero-length write would not reach the kernel at all,
    /// and `cpuset.mems` is emptied (back to the parent's set) by writing "\n".
    pub fn write(&self, cgroup: &CgroupPath, file: &str, value: &str) -> Result<(), CgroupError> {
        let path = self.file(cgroup, file)?;
        let bytes = whole(value);
        let result = OpenOptions::new()
            .write(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .and_then(|mut f: File| f.write_all(bytes));
        result.map_err(|e| self.io_error(Op::Write, cgroup, path, Some(value), e))
    }
}

/// Raises the soft limit on open files to the hard limit, as the Go runtime does for
/// every program: the agent holds a cgroup directory open per managed cgroup during an
/// apply. Returns the soft limit in force afterwards.
pub fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    limit.rlim_cur
}

/// The current soft limit on open files.
pub fn open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer to an rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    limit.rlim_cur
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
        // Longer than one read buffer: read to the end.
        let long = "x".repeat(5000);
        fs.write(&kp, "memory.min", &long).unwrap();
        assert_eq!(fs.read(&kp, "memory.min").unwrap(), long);
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
    fn a_held_directory_reads_writes_and_refuses_like_paths_do() {
        let (dir, fs, kp) = tree();
        let open = fs.open_dir(&kp).unwrap().unwrap();
        open.write("memory.min", "8192").unwrap();
        assert_eq!(open.read("memory.min").unwrap(), "8192");
        assert!(open.write("memory.mni", "1").is_err());
        assert!(
            !dir.path().join("kubepods/memory.mni").exists(),
            "never created"
        );
        assert!(matches!(
            open.write("../memory.min", "1"),
            Err(CgroupError::Unsafe(_))
        ));
        assert!(fs
            .open_dir(&CgroupPath::new("kubepods/gone").unwrap())
            .unwrap()
            .is_none());
        assert!(open
            .open_child(&CgroupPath::new("kubepods/gone").unwrap())
            .unwrap()
            .is_none());
        assert!(
            open.open_child(&CgroupPath::new("kubepods/a/b").unwrap())
                .is_err(),
            "one level only"
        );
        assert!(
            open.open_child(&CgroupPath::new("other/x").unwrap())
                .is_err(),
            "a child of this cgroup only"
        );
        // The cgroup disappears while held: its writes report it as vanished.
        let pod = CgroupPath::new("kubepods/pod").unwrap();
        std::fs::create_dir(dir.path().join("kubepods/pod")).unwrap();
        std::fs::write(dir.path().join("kubepods/pod/memory.low"), "0").unwrap();
        let held = open.open_child(&pod).unwrap().unwrap();
        assert_eq!(held.read("memory.low").unwrap(), "0");
        let mut file = held.hold("memory.low", true).unwrap();
        assert_eq!(file.read().unwrap(), "0");
        file.rewrite("123456").unwrap();
        file.rewrite("7").unwrap();
        assert_eq!(
            held.read("memory.low").unwrap(),
            "7",
            "rewritten whole, the old tail cut"
        );
        assert!(held.hold("memory.nope", true).is_err(), "never created");
        let mut via_parent = open.hold_in_child("pod", "memory.low", true).unwrap();
        assert_eq!(via_parent.read().unwrap(), "7");
        assert!(matches!(
            open.hold_in_child("..", "memory.low", true),
            Err(CgroupError::Unsafe(_))
        ));
        assert!(open
            .hold_in_child("gone", "memory.low", true)
            .unwrap_err()
            .is_vanished());
        std::fs::remove_dir_all(dir.path().join("kubepods/pod")).unwrap();
        assert!(held.write("memory.low", "1").unwrap_err().is_vanished());
        // A regular file keeps taking writes after its directory is gone (the kernel
        // answers ENODEV; the agent's executor checks test trees itself).
        assert!(!open.has_child("pod"));
        assert!(!open.has_child("gone") && !open.has_child(".."));
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
