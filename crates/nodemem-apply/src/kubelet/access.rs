//! How the kubelet's files are reached. They are read through the kubelet's own view of
//! the file system (`/proc/<pid>/root`, `/proc/<pid>/cwd`) and its mount namespace is
//! compared with the host's (`/proc/<pid>/ns/mnt`); the kernel opens each of those only
//! to a process allowed to ptrace the kubelet (`ptrace_may_access`, read mode), which
//! for a kubelet holding every capability means `CAP_SYS_PTRACE`. The running agent
//! does not hold it (issue 59): it hands these operations to its kubelet reader, a
//! process of its own that holds only that capability and answers only for the files
//! the kubelet itself names ([`super::allowance`]). Everything else, and every
//! operation where no reader is installed (`--once`, `--print-kubelet`, tests), goes
//! straight to the file system.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// One file-system operation on the kubelet's side, as the agent asks it of its reader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Request {
    /// A file's text.
    Read {
        /// The file.
        path: PathBuf,
    },
    /// A directory's entries, each with whether it is a directory.
    List {
        /// The directory.
        path: PathBuf,
    },
    /// A file's device and inode (whether it exists, and which it is).
    Identity {
        /// The file or directory.
        path: PathBuf,
    },
    /// A symbolic link's target (`ns/mnt`).
    Link {
        /// The link.
        path: PathBuf,
    },
    /// Replaces a file atomically with `text`.
    Write {
        /// The file.
        path: PathBuf,
        /// Its new text.
        text: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Renames a file within its directory.
    Rename {
        /// The file.
        from: PathBuf,
        /// Its new name.
        to: PathBuf,
    },
    /// Removes a file.
    Remove {
        /// The file.
        path: PathBuf,
    },
}

impl Request {
    /// Every path the request names.
    pub fn paths(&self) -> Vec<&Path> {
        match self {
            Request::Read { path }
            | Request::List { path }
            | Request::Identity { path }
            | Request::Link { path }
            | Request::Write { path, .. }
            | Request::Remove { path } => vec![path],
            Request::Rename { from, to } => vec![from, to],
        }
    }

    /// Whether it changes the file system.
    pub fn writes(&self) -> bool {
        matches!(
            self,
            Request::Write { .. } | Request::Rename { .. } | Request::Remove { .. }
        )
    }
}

/// The answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "camelCase")]
pub enum Reply {
    /// A file's text.
    Text {
        /// The text.
        text: String,
    },
    /// A directory's entries.
    Entries {
        /// The entries, in no particular order.
        entries: Vec<Entry>,
    },
    /// Which file it is.
    Identity {
        /// Its device.
        dev: u64,
        /// Its inode.
        ino: u64,
        /// Whether it is a directory.
        dir: bool,
    },
    /// A symbolic link's target.
    Link {
        /// The target, as the link holds it.
        target: PathBuf,
    },
    /// The write, rename or removal is done.
    Done,
    /// The operation failed or was refused; `kind` is the `io::ErrorKind`'s name for
    /// the two kinds callers tell apart (`NotFound`, `PermissionDenied`), else `Other`.
    Error {
        /// `NotFound`, `PermissionDenied` or `Other`.
        kind: String,
        /// What failed, naming the path.
        message: String,
    },
}

/// A directory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The entry's name.
    pub name: String,
    /// Whether it is a directory.
    pub dir: bool,
}

impl Reply {
    /// The reply for a failed operation.
    pub fn error(e: &io::Error) -> Reply {
        let kind = match e.kind() {
            io::ErrorKind::NotFound => "NotFound",
            io::ErrorKind::PermissionDenied => "PermissionDenied",
            _ => "Other",
        };
        Reply::Error {
            kind: kind.to_string(),
            message: e.to_string(),
        }
    }

    fn into_io(self) -> io::Result<Reply> {
        match self {
            Reply::Error { kind, message } => Err(io::Error::new(
                match kind.as_str() {
                    "NotFound" => io::ErrorKind::NotFound,
                    "PermissionDenied" => io::ErrorKind::PermissionDenied,
                    _ => io::ErrorKind::Other,
                },
                message,
            )),
            other => Ok(other),
        }
    }
}

/// Carries requests to the reader and brings back its replies; an error is the
/// channel's own (the reader gone).
pub type Channel = Box<dyn Fn(&Request) -> io::Result<Reply> + Send + Sync>;

struct Reader {
    proc_root: PathBuf,
    channel: Channel,
}

static READER: OnceLock<Reader> = OnceLock::new();

/// From now on, operations on paths of processes under `proc_root` go through
/// `channel`. Once per process; a second call is refused.
pub fn install(proc_root: &Path, channel: Channel) -> Result<(), &'static str> {
    READER
        .set(Reader {
            proc_root: proc_root.to_path_buf(),
            channel,
        })
        .map_err(|_| "a kubelet reader is installed already")
}

/// Whether `path` is a process's under `proc_root` (`<proc_root>/<pid>/...`).
pub fn of_a_process(proc_root: &Path, path: &Path) -> bool {
    path.strip_prefix(proc_root)
        .ok()
        .and_then(|rest| rest.components().next())
        .is_some_and(|c| matches!(c, Component::Normal(n) if n.to_str().is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))))
}

/// Runs `request` through the installed reader when it names a process's path, else
/// here.
fn run(request: Request) -> io::Result<Reply> {
    match READER.get() {
        Some(r)
            if request
                .paths()
                .iter()
                .any(|p| of_a_process(&r.proc_root, p)) =>
        {
            (r.channel)(&request)?.into_io()
        }
        _ => perform(&request).into_io(),
    }
}

/// Carries out `request` on this process's file system (what the reader does once it
/// has allowed it).
pub fn perform(request: &Request) -> Reply {
    let done = match request {
        Request::Read { path } => fs::read_to_string(path).map(|text| Reply::Text { text }),
        Request::List { path } => list(path).map(|entries| Reply::Entries { entries }),
        Request::Identity { path } => fs::metadata(path).map(|m| {
            use std::os::unix::fs::MetadataExt;
            Reply::Identity {
                dev: m.dev(),
                ino: m.ino(),
                dir: m.is_dir(),
            }
        }),
        Request::Link { path } => fs::read_link(path).map(|target| Reply::Link { target }),
        Request::Write { path, text, mode } => {
            crate::state::write_atomically(path, text.as_bytes(), *mode).map(|()| Reply::Done)
        }
        Request::Rename { from, to } => fs::rename(from, to).map(|()| Reply::Done),
        Request::Remove { path } => fs::remove_file(path).map(|()| Reply::Done),
    };
    done.unwrap_or_else(|e| Reply::error(&e))
}

fn list(path: &Path) -> io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(path)? {
        let entry = entry?;
        entries.push(Entry {
            name: entry.file_name().to_string_lossy().into_owned(),
            // As `Path::is_dir` answers: through a link to a directory.
            dir: entry.path().is_dir(),
        });
    }
    Ok(entries)
}

fn unexpected(reply: Reply) -> io::Error {
    io::Error::other(format!("the kubelet reader answered {reply:?}"))
}

/// `fs::read_to_string`, through the reader where it applies.
pub fn read_to_string(path: &Path) -> io::Result<String> {
    match run(Request::Read {
        path: path.to_path_buf(),
    })? {
        Reply::Text { text } => Ok(text),
        other => Err(unexpected(other)),
    }
}

/// A directory's entries as paths, each with whether it is a directory.
pub fn read_dir(path: &Path) -> io::Result<Vec<(PathBuf, bool)>> {
    match run(Request::List {
        path: path.to_path_buf(),
    })? {
        Reply::Entries { entries } => Ok(entries
            .into_iter()
            .map(|e| (path.join(e.name), e.dir))
            .collect()),
        other => Err(unexpected(other)),
    }
}

/// A file's device and inode.
pub fn identity(path: &Path) -> io::Result<(u64, u64)> {
    match run(Request::Identity {
        path: path.to_path_buf(),
    })? {
        Reply::Identity { dev, ino, .. } => Ok((dev, ino)),
        other => Err(unexpected(other)),
    }
}

/// Whether a file exists (as `Path::exists`: an error reads as no).
pub fn exists(path: &Path) -> bool {
    identity(path).is_ok()
}

/// `fs::read_link`, through the reader where it applies.
pub fn read_link(path: &Path) -> io::Result<PathBuf> {
    match run(Request::Link {
        path: path.to_path_buf(),
    })? {
        Reply::Link { target } => Ok(target),
        other => Err(unexpected(other)),
    }
}

/// [`crate::state::write_atomically`], through the reader where it applies.
pub fn write_atomically(path: &Path, text: &str, mode: u32) -> io::Result<()> {
    done(run(Request::Write {
        path: path.to_path_buf(),
        text: text.to_string(),
        mode,
    })?)
}

/// `fs::rename`, through the reader where it applies.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    done(run(Request::Rename {
        from: from.to_path_buf(),
        to: to.to_path_buf(),
    })?)
}

/// `fs::remove_file`, through the reader where it applies.
pub fn remove_file(path: &Path) -> io::Result<()> {
    done(run(Request::Remove {
        path: path.to_path_buf(),
    })?)
}

fn done(reply: Reply) -> io::Result<()> {
    match reply {
        Reply::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_of_a_process_under_the_proc_root_go_to_the_reader() {
        let proc = Path::new("/host/proc");
        assert!(of_a_process(
            proc,
            Path::new("/host/proc/42/root/etc/kubelet.yaml")
        ));
        assert!(of_a_process(proc, Path::new("/host/proc/1/ns/mnt")));
        assert!(!of_a_process(proc, Path::new("/host/proc/self/root/etc")));
        assert!(!of_a_process(proc, Path::new("/host/proc/stat")));
        assert!(!of_a_process(
            proc,
            Path::new("/host/kubelet-config-dir/a.conf")
        ));
        assert!(!of_a_process(proc, Path::new("/proc/42/root/etc")));
    }

    #[test]
    fn a_request_and_its_reply_survive_the_wire_and_errors_keep_their_kind() {
        let request = Request::Write {
            path: "/p/7/root/etc/kubelet.d/~nodemem.conf".into(),
            text: "a: 1\n".into(),
            mode: 0o644,
        };
        let line = serde_json::to_string(&request).unwrap();
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), request);
        let missing = perform(&Request::Read {
            path: "/nonexistent/nodemem/file".into(),
        });
        let line = serde_json::to_string(&missing).unwrap();
        let back: Reply = serde_json::from_str(&line).unwrap();
        let err = back.into_io().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn performed_here_each_operation_does_what_std_does() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.conf");
        write_atomically(&file, "x: 1\n", 0o600).unwrap();
        assert_eq!(read_to_string(&file).unwrap(), "x: 1\n");
        fs::create_dir(dir.path().join("sub")).unwrap();
        let mut entries = read_dir(dir.path()).unwrap();
        entries.sort();
        assert_eq!(
            entries,
            vec![(file.clone(), false), (dir.path().join("sub"), true)]
        );
        assert!(exists(&file));
        let moved = dir.path().join("b.conf");
        rename(&file, &moved).unwrap();
        assert!(!exists(&file));
        remove_file(&moved).unwrap();
        assert_eq!(
            remove_file(&moved).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
