//! The kubelet reader (issue 59): privilege separation for the one thing the agent
//! needs `CAP_SYS_PTRACE` for. The kernel opens `/proc/<kubelet>/root` (and `cwd`,
//! `ns/mnt`) only to a process that may ptrace the kubelet, and the same capability
//! would let the agent write the kubelet's or systemd's memory through
//! `/proc/<pid>/mem`. So the agent starts this reader (itself, run as
//! `nodemem agent --kubelet-reader`) before anything else, hands it every operation on
//! a process's files (`nodemem_apply::kubelet::access`), and drops every capability;
//! the reader keeps only `CAP_SYS_PTRACE` and answers only for the files the host
//! kubelet names (`nodemem_apply::kubelet::allowance`).
//!
//! The wire: one JSON request per line on the reader's stdin, one JSON reply per line
//! on its stdout, in order. The reader dies with the agent (its stdin closes, and
//! `PR_SET_PDEATHSIG`); an agent whose reader is gone exits, so that its container
//! restarts with a new pair (the agent, holding no capability, cannot start a reader
//! that holds one).

use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use nodemem_apply::kubelet::access::{self, Reply, Request};
use nodemem_apply::kubelet::allowance::Allowance;
use nodemem_apply::kubelet::KubeletFiles;

/// The agent's end: the reader's process and its pipes.
pub struct ReaderClient {
    pid: u32,
    pipes: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
    // Kept so that the reader is reaped only when the agent ends.
    _child: Child,
}

/// Starts the reader for procfs at `proc_root` (this same binary, the arguments it
/// needs); `writes` when it may write nodemem's drop-in and remove the Memory
/// Manager's state file (the agent runs `enforcement: Kubelet`).
pub fn start(proc_root: &Path, writes: bool) -> io::Result<ReaderClient> {
    let exe = std::env::current_exe()?;
    let mut command = Command::new(exe);
    command
        .args(["agent", "--kubelet-reader", "--proc-root"])
        .arg(proc_root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if writes {
        command.arg("--kubelet-writes");
    }
    let mut child = command.spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("no stdin"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("no stdout"))?;
    Ok(ReaderClient {
        pid: child.id(),
        pipes: Mutex::new((stdin, BufReader::new(stdout))),
        _child: child,
    })
}

impl ReaderClient {
    /// The reader's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `request` and waits for its reply. A reader that is gone ends the agent
    /// (see the module's comment).
    pub fn call(&self, request: &Request) -> io::Result<Reply> {
        let mut pipes = self.pipes.lock().unwrap_or_else(|e| e.into_inner());
        let (to, from) = &mut *pipes;
        match exchange(to, from, request) {
            Ok(reply) => Ok(reply),
            Err(e) => {
                tracing::error!(pid = self.pid, error = %e, "nodemem's kubelet reader is gone: the agent exits so that its container restarts with a new one");
                std::process::exit(70);
            }
        }
    }
}

fn exchange(to: &mut impl Write, from: &mut impl BufRead, request: &Request) -> io::Result<Reply> {
    let mut line = serde_json::to_string(request).map_err(io::Error::other)?;
    line.push('\n');
    to.write_all(line.as_bytes())?;
    to.flush()?;
    let mut answer = String::new();
    if from.read_line(&mut answer)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the reader closed its output",
        ));
    }
    serde_json::from_str(&answer).map_err(io::Error::other)
}

/// Runs the reader: answers requests on stdin until it closes.
pub fn serve(proc_root: PathBuf, writes: bool) -> io::Result<()> {
    die_with_the_agent();
    match crate::confine::confine() {
        Ok(_) => {}
        Err(e) => eprintln!("nodemem's kubelet reader runs without its seccomp filter: {e}"),
    }
    let files = KubeletFiles::process(proc_root.clone(), None);
    let mut allowance = Allowance {
        writes,
        ..Allowance::default()
    };
    let mut out = io::stdout().lock();
    for line in io::stdin().lock().lines() {
        let line = line?;
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(request) => answer(&files, &mut allowance, &proc_root, &request),
            Err(e) => Reply::Error {
                kind: "Other".into(),
                message: format!("not a request: {e}"),
            },
        };
        let mut text = serde_json::to_string(&reply).map_err(io::Error::other)?;
        text.push('\n');
        out.write_all(text.as_bytes())?;
        out.flush()?;
    }
    Ok(())
}

/// Carries out `request` when the allowance permits it, the allowance read again from
/// the host's kubelet first when it does not (the kubelet may have restarted under
/// another pid or with another command line).
fn answer(
    files: &KubeletFiles,
    allowance: &mut Allowance,
    proc_root: &Path,
    request: &Request,
) -> Reply {
    if allowance.permits(proc_root, request).is_err() {
        allowance.reachable = files.reachable().unwrap_or_default();
        if let Err(why) = allowance.permits(proc_root, request) {
            return Reply::Error {
                kind: "PermissionDenied".into(),
                message: format!("nodemem's kubelet reader refuses {request:?}: {why}"),
            };
        }
    }
    access::perform(request)
}

/// The reader is killed when the agent that started it ends, and cannot be attached to
/// or have its memory read by a process without `CAP_SYS_PTRACE` (the agent).
fn die_with_the_agent() {
    // SAFETY: prctl with these options reads no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A stand-in procfs with one host kubelet (pid 7) whose root is a directory.
    fn node() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc");
        let root = dir.path().join("host");
        fs::create_dir_all(root.join("etc/kubernetes/conf.d")).unwrap();
        fs::write(
            root.join("etc/kubernetes/config.yaml"),
            "kind: KubeletConfiguration\n",
        )
        .unwrap();
        fs::write(root.join("etc/kubernetes/admin.conf"), "secret\n").unwrap();
        fs::write(root.join("etc/kubernetes/conf.d/10-a.conf"), "a\n").unwrap();
        for pid in ["1", "7"] {
            fs::create_dir_all(proc.join(pid).join("ns")).unwrap();
            std::os::unix::fs::symlink("mnt:[4026531841]", proc.join(pid).join("ns/mnt")).unwrap();
            fs::write(
                proc.join(pid).join("cgroup"),
                "0::/system.slice/kubelet.service\n",
            )
            .unwrap();
        }
        fs::write(proc.join("7/comm"), "kubelet\n").unwrap();
        fs::write(
            proc.join("7/stat"),
            "7 (kubelet) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n",
        )
        .unwrap();
        fs::write(
            proc.join("7/cmdline"),
            "/usr/bin/kubelet\0--config=/etc/kubernetes/config.yaml\0--config-dir=/etc/kubernetes/conf.d\0",
        )
        .unwrap();
        std::os::unix::fs::symlink(&root, proc.join("7/root")).unwrap();
        (dir, proc)
    }

    #[test]
    fn the_reader_answers_for_the_kubelets_files_and_refuses_the_rest() {
        let (_dir, proc) = node();
        let files = KubeletFiles::process(proc.clone(), None);
        let mut allowance = Allowance::default();
        let read = |p: &str| Request::Read { path: proc.join(p) };
        assert_eq!(
            answer(
                &files,
                &mut allowance,
                &proc,
                &read("7/root/etc/kubernetes/config.yaml")
            ),
            Reply::Text {
                text: "kind: KubeletConfiguration\n".into()
            }
        );
        assert_eq!(
            answer(
                &files,
                &mut allowance,
                &proc,
                &read("7/root/etc/kubernetes/conf.d/10-a.conf")
            ),
            Reply::Text { text: "a\n".into() }
        );
        let refused = answer(
            &files,
            &mut allowance,
            &proc,
            &read("7/root/etc/kubernetes/admin.conf"),
        );
        assert!(
            matches!(&refused, Reply::Error { kind, message } if kind == "PermissionDenied" && message.contains("admin.conf")),
            "{refused:?}"
        );
        let write = Request::Write {
            path: proc
                .join("7/root/etc/kubernetes/conf.d")
                .join(nodemem_model::node::kubelet_dropin::DROPIN_FILE),
            text: "x\n".into(),
            mode: 0o644,
        };
        assert!(matches!(
            answer(&files, &mut allowance, &proc, &write),
            Reply::Error { .. }
        ));
        allowance.writes = true;
        assert_eq!(answer(&files, &mut allowance, &proc, &write), Reply::Done);
    }

    #[test]
    fn requests_and_replies_cross_the_pipes_in_order_and_a_closed_reader_is_an_error() {
        let request = Request::Link {
            path: "/host/proc/1/ns/mnt".into(),
        };
        let reply = Reply::Link {
            target: "mnt:[1]".into(),
        };
        let mut sent = Vec::new();
        let answer_line = format!("{}\n", serde_json::to_string(&reply).unwrap());
        let mut from = io::Cursor::new(answer_line.into_bytes());
        assert_eq!(exchange(&mut sent, &mut from, &request).unwrap(), reply);
        let back: Request = serde_json::from_slice(sent.strip_suffix(b"\n").unwrap()).unwrap();
        assert_eq!(back, request);
        let mut closed = io::Cursor::new(Vec::new());
        assert_eq!(
            exchange(&mut Vec::new(), &mut closed, &request)
                .unwrap_err()
                .kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
