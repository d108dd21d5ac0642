//! A child process of the harness: output to a log file, killed (with its process
//! group) when dropped, and also when the test process dies, through
//! `PR_SET_PDEATHSIG`, so a crashed or killed test run leaves nothing behind.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
    program: PathBuf,
    args: Vec<String>,
}

impl Process {
    /// Starts `program args...` with stdout and stderr written to `log` (a new file).
    pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> Result<Self, Error> {
        let _ = std::fs::remove_file(log);
        let child = start(name, program, args, log)?;
        Ok(Process {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
            program: program.to_path_buf(),
            args: args.to_vec(),
        })
    }

    /// Starts the same command again once it has ended (stopped by a test that makes
    /// a component fail), its output appended to the same log.
    pub fn start_again(&mut self) -> Result<(), Error> {
        if self.exited().is_none() {
            return Err(Error::Setup(format!("{} is still running", self.name)));
        }
        self.child = start(&self.name, &self.program, &self.args, &self.log)?;
        Ok(())
    }

    /// Starts the command again with `args` instead once it has ended (a component
    /// restarted with other settings, as a new Deployment revision would), its output
    /// appended to the same log.
    pub fn start_again_with(&mut self, args: Vec<String>) -> Result<(), Error> {
        if self.exited().is_none() {
            return Err(Error::Setup(format!("{} is still running", self.name)));
        }
        self.args = args;
        self.start_again()
    }

    /// The arguments it runs with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The exit status if the process has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of the log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// Sends SIGTERM to the process group, waits up to `grace`, then SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        let pgid = self.child.id() as i32;
        // SAFETY: signalling our own child's process group.
        unsafe {
            libc::kill(-pgid, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Starts `program args...` in its own process group, output appended to `log`, killed
/// when the harness dies.
fn start(name: &str, program: &Path, args: &[String], log: &Path) -> Result<Child, Error> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| Error::Setup(format!("{name}: cannot open {}: {e}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(|e| Error::Setup(format!("{name}: {e}")))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = spawn_from_keeper(cmd)
        .map_err(|e| Error::Setup(format!("{name}: cannot start {}: {e}", program.display())))?;
    Ok(child)
}

type SpawnRequest = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);

/// Spawns from one thread that lives as long as the test process. `PR_SET_PDEATHSIG`
/// fires when the *thread* that forked the child exits; a tokio worker or a test
/// thread would take a shared control plane down with it.
fn spawn_from_keeper(cmd: Command) -> std::io::Result<Child> {
    use std::sync::mpsc;
    use std::sync::{Mutex, OnceLock};
    static KEEPER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("nodemem-testkit-keeper".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The sender lives in a static: this loop ends only with the process.
            })
            .expect("start the keeper thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    keeper
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("the keeper thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("the keeper thread is gone"))?
}

/// The last `lines` lines of a text file (empty if unreadable).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The processes below `root` (its children, theirs, and so on) with their command
/// lines, arguments joined by spaces. Tests find what they started this way, never by
/// matching command lines across the machine, where a user's own sandbox or another
/// test run has processes with the same arguments.
pub fn descendants(root: u32) -> Vec<(u32, String)> {
    let mut parent_of = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(ppid) = parent_pid(pid) {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, _) in parent_of.iter().filter(|(_, ppid)| *ppid == parent) {
            frontier.push(pid);
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            found.push((pid, cmd.trim_end().to_string()));
        }
    }
    found
}

/// A process's parent, from `/proc/PID/stat` (None once it is gone).
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The field after the state, counted from the command's closing parenthesis (the
    // command may hold spaces and parentheses).
    stat.get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grandchild is found under its grandparent with its arguments; the same command
    /// started outside the tree is not.
    #[test]
    fn descendants_are_the_tree_below_a_process_only() {
        let marker = format!("{}", 4_000_000 + std::process::id());
        let mut outside = Command::new("sleep").arg(&marker).spawn().unwrap();
        let mut tree = Command::new("sh")
            .args(["-c", &format!("sleep {marker} & wait")])
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let below = loop {
            let below = descendants(tree.id());
            if below.iter().any(|(_, c)| c.starts_with("sleep")) || Instant::now() > deadline {
                break below;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for (pid, _) in &below {
            // SAFETY: a process this test started (the shell's sleep).
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        let _ = (tree.kill(), outside.kill(), tree.wait(), outside.wait());
        let sleeps: Vec<_> = below.iter().filter(|(_, c)| c.contains(&marker)).collect();
        assert_eq!(sleeps.len(), 1, "{below:?}");
        assert_eq!(sleeps[0].1, format!("sleep {marker}"));
        assert_ne!(sleeps[0].0, outside.id(), "the sleep outside the tree");
    }
}
