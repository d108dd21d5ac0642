//! NRI's own runtime side as a process (tests/nri/runtime: containerd/nri's adaptation
//! package, as containerd runs it), driven one JSON line at a time: what it is told to
//! relay to the plugins, and what they answered.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::Value;

/// The runtime, listening on its socket.
pub struct NriRuntime {
    pub child: Child,
    stdin: ChildStdin,
    lines: BufReader<ChildStdout>,
}

impl NriRuntime {
    /// Starts the binary named by `NODEMEM_NRI_RUNTIME` on `socket`; `sync_pods` pods and
    /// containers are what it lists to a plugin that registers. Returns once it listens.
    pub fn start(socket: &Path, sync_pods: usize) -> NriRuntime {
        let bin = PathBuf::from(std::env::var("NODEMEM_NRI_RUNTIME").expect(
            "NODEMEM_NRI_RUNTIME: the NRI test runtime (bash tests/scripts/build-nri-runtime.sh)",
        ));
        let mut child = Command::new(bin)
            .arg("-socket")
            .arg(socket)
            .arg("-sync-pods")
            .arg(sync_pods.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the NRI test runtime starts");
        let stdin = child.stdin.take().expect("piped");
        let lines = BufReader::new(child.stdout.take().expect("piped"));
        let mut rt = NriRuntime {
            child,
            stdin,
            lines,
        };
        assert_eq!(rt.line()["event"], "listening");
        rt
    }

    /// The next thing the runtime says (blocks).
    pub fn line(&mut self) -> Value {
        let mut s = String::new();
        self.lines
            .read_line(&mut s)
            .expect("a line from the runtime");
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s:?}"))
    }

    /// Has the runtime relay `command` to its plugins; their combined answer.
    pub fn relay(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("the runtime reads its commands");
        self.line()
    }
}
