//! The shipped binary as the agent's kubelet reader (`nodemem agent --kubelet-reader`,
//! which the agent starts itself): one JSON request per line in, one reply per line out,
//! over a stand-in procfs whose host kubelet (pid 7) names its files. It answers for
//! the kubelet's configuration and drop-ins and any process's `ns/mnt`, refuses the
//! node's other files (the kubeconfig beside the configuration), writes only with
//! `--kubelet-writes` and only nodemem's drop-in, and exits when the agent closes its
//! input.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

fn node(dir: &Path) {
    let proc = dir.join("proc");
    let root = dir.join("host");
    fs::create_dir_all(root.join("etc/kubernetes/kubelet.conf.d")).unwrap();
    fs::write(
        root.join("etc/kubernetes/kubelet.yaml"),
        "kind: KubeletConfiguration\n",
    )
    .unwrap();
    fs::write(
        root.join("etc/kubernetes/kubelet.conf"),
        "client-key-data: secret\n",
    )
    .unwrap();
    fs::write(
        root.join("etc/kubernetes/kubelet.conf.d/10-site.conf"),
        "site\n",
    )
    .unwrap();
    for pid in ["1", "7"] {
        fs::create_dir_all(proc.join(pid).join("ns")).unwrap();
        symlink("mnt:[4026531841]", proc.join(pid).join("ns/mnt")).unwrap();
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
        "/usr/bin/kubelet\0--config=/etc/kubernetes/kubelet.yaml\0--config-dir=/etc/kubernetes/kubelet.conf.d\0--kubeconfig=/etc/kubernetes/kubelet.conf\0",
    )
    .unwrap();
    symlink(&root, proc.join("7/root")).unwrap();
}

/// Runs the reader with `extra` arguments, sends `requests`, returns the replies.
fn ask(dir: &Path, extra: &[&str], requests: &[Value]) -> Vec<Value> {
    let proc = dir.join("proc");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodemem"))
        .args(["agent", "--kubelet-reader", "--proc-root"])
        .arg(&proc)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut replies = Vec::new();
    for request in requests {
        writeln!(input, "{request}").unwrap();
        input.flush().unwrap();
        let mut line = String::new();
        assert!(
            output.read_line(&mut line).unwrap() > 0,
            "no reply to {request}"
        );
        replies.push(serde_json::from_str(&line).unwrap());
    }
    drop(input);
    assert!(
        child.wait().unwrap().success(),
        "the reader exits 0 once its input closes"
    );
    replies
}

#[test]
fn the_reader_answers_for_the_kubelets_files_only() {
    let dir = tempfile::tempdir().unwrap();
    node(dir.path());
    let p = |rest: &str| dir.path().join("proc").join(rest);
    let replies = ask(
        dir.path(),
        &[],
        &[
            json!({"op": "read", "path": p("7/root/etc/kubernetes/kubelet.yaml")}),
            json!({"op": "list", "path": p("7/root/etc/kubernetes/kubelet.conf.d")}),
            json!({"op": "link", "path": p("1/ns/mnt")}),
            json!({"op": "read", "path": p("7/root/etc/kubernetes/kubelet.conf")}),
            json!({"op": "write", "path": p("7/root/etc/kubernetes/kubelet.conf.d/~nodemem.conf"), "text": "x", "mode": 420}),
            json!({"op": "nonsense"}),
        ],
    );
    assert_eq!(
        replies[0],
        json!({"reply": "text", "text": "kind: KubeletConfiguration\n"})
    );
    assert_eq!(
        replies[1],
        json!({"reply": "entries", "entries": [{"name": "10-site.conf", "dir": false}]})
    );
    assert_eq!(
        replies[2],
        json!({"reply": "link", "target": "mnt:[4026531841]"})
    );
    for (i, what) in [(3, "kubelet.conf"), (4, "does not write")] {
        assert_eq!(replies[i]["reply"], "error", "{}", replies[i]);
        assert_eq!(replies[i]["kind"], "PermissionDenied", "{}", replies[i]);
        assert!(
            replies[i]["message"].as_str().unwrap().contains(what),
            "{}",
            replies[i]
        );
    }
    assert!(replies[5]["message"]
        .as_str()
        .unwrap()
        .starts_with("not a request"));
    assert!(!dir
        .path()
        .join("host/etc/kubernetes/kubelet.conf.d/~nodemem.conf")
        .exists());
}

#[test]
fn with_kubelet_writes_the_reader_writes_nodemems_drop_in_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    node(dir.path());
    let p = |rest: &str| dir.path().join("proc").join(rest);
    let dropin = nodemem_model::node::kubelet_dropin::DROPIN_FILE;
    let replies = ask(
        dir.path(),
        &["--kubelet-writes"],
        &[
            json!({"op": "write", "path": p(&format!("7/root/etc/kubernetes/kubelet.conf.d/{dropin}")), "text": "ours\n", "mode": 420}),
            json!({"op": "write", "path": p("7/root/etc/kubernetes/kubelet.conf.d/10-site.conf"), "text": "x", "mode": 420}),
            json!({"op": "remove", "path": p("7/root/etc/kubernetes/kubelet.yaml")}),
        ],
    );
    assert_eq!(replies[0], json!({"reply": "done"}));
    assert_eq!(
        fs::read_to_string(
            dir.path()
                .join("host/etc/kubernetes/kubelet.conf.d")
                .join(dropin)
        )
        .unwrap(),
        "ours\n"
    );
    for reply in &replies[1..] {
        assert_eq!(reply["kind"], "PermissionDenied", "{reply}");
    }
    assert_eq!(
        fs::read_to_string(
            dir.path()
                .join("host/etc/kubernetes/kubelet.conf.d/10-site.conf")
        )
        .unwrap(),
        "site\n"
    );
    assert!(dir.path().join("host/etc/kubernetes/kubelet.yaml").exists());
}
