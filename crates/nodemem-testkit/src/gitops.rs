//! How GitOps tools judge an object, by their own code, built from their modules
//! (`tests/scripts/build-kstatus.sh`): kstatus (sigs.k8s.io/cli-utils: `kubectl`'s and
//! kpt's), Flux's fork of it and Flux's evaluator of a Kustomization's
//! `healthCheckExprs` (github.com/fluxcd/pkg/runtime); and nodemem's Argo CD health
//! check (`deploy/argocd/nodememorypolicy-health.lua`) run in a real Lua 5.1
//! interpreter (Debian's `lua5.1`; Argo CD runs Lua 5.1 too).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use crate::binaries::repo_root;
use crate::Error;

/// The shipped Argo CD health check.
pub fn argocd_health_check() -> PathBuf {
    repo_root().join("deploy/argocd/nodememorypolicy-health.lua")
}

fn kstatus_binary() -> Result<PathBuf, Error> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let script = repo_root().join("tests/scripts/build-kstatus.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed ({}):\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        Ok(PathBuf::from(stdout.lines().last().unwrap_or("").trim()))
    })
    .clone()
    .map_err(Error::Setup)
}

/// Runs `program` with `input` on stdin; its stdout split at the first tab.
fn judged(mut program: Command, input: &str) -> Result<(String, String), Error> {
    let what = format!("{program:?}");
    let mut child = program
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Setup(format!("cannot run {what}: {e}")))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(input.as_bytes())
        .map_err(|e| Error::Setup(format!("{what}: stdin: {e}")))?;
    let out = child
        .wait_with_output()
        .map_err(|e| Error::Setup(format!("{what}: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(Error::Setup(format!(
            "{what} failed ({}): {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let line = stdout.trim_end_matches('\n');
    let (status, message) = line.split_once('\t').unwrap_or((line, ""));
    Ok((status.to_string(), message.to_string()))
}

/// kstatus's status of `object` (Current, InProgress, Failed, Terminating) and message.
pub fn kstatus(object: &Value) -> Result<(String, String), Error> {
    judged(Command::new(kstatus_binary()?), &object.to_string())
}

/// The status Flux's kstatus fork gives `object`: what a Kustomization with `wait: true`
/// reads of a custom kind.
pub fn flux_kstatus(object: &Value) -> Result<(String, String), Error> {
    let mut flux = Command::new(kstatus_binary()?);
    flux.arg("-flux");
    judged(flux, &object.to_string())
}

/// The shipped Flux Kustomization.
pub fn flux_kustomization() -> PathBuf {
    repo_root().join("deploy/flux/nodemem-policies.yaml")
}

/// The status Flux's evaluator gives `object` under one `healthCheckExprs` entry
/// (`current`, and `failed` and `inProgress` when present).
pub fn flux_health_exprs(object: &Value, exprs: &Value) -> Result<(String, String), Error> {
    let mut flux = Command::new(kstatus_binary()?);
    flux.arg("-flux");
    for (key, flag) in [
        ("current", "-current"),
        ("failed", "-failed"),
        ("inProgress", "-in-progress"),
    ] {
        if let Some(expr) = exprs[key].as_str() {
            flux.args([flag, expr]);
        }
    }
    judged(flux, &object.to_string())
}

/// The Argo CD health (Healthy, Progressing, Degraded, Suspended) and message the shipped
/// check gives `object`, which it sees as the Lua table Argo CD makes of it.
pub fn argocd_health(object: &Value) -> Result<(String, String), Error> {
    let chunk = format!(
        "obj = {}\nlocal hs = dofile({})\nio.write(hs.status, \"\\t\", hs.message or \"\", \"\\n\")\n",
        lua_literal(object),
        lua_string(&argocd_health_check().to_string_lossy())
    );
    let mut lua = Command::new("lua5.1");
    lua.arg("-");
    judged(lua, &chunk)
}

/// `value` as a Lua 5.1 table constructor: objects keyed by string, arrays from 1, null
/// as nil (a key whose value is nil is absent, as in the tables Argo CD builds).
pub fn lua_literal(value: &Value) -> String {
    match value {
        Value::Null => "nil".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => lua_string(s),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(lua_literal).collect();
            format!("{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("[{}] = {}", lua_string(k), lua_literal(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

/// A Lua string literal: quotes, backslashes and every byte outside printable ASCII
/// escaped as `\ddd` (Lua 5.1 has no `\x` or `\u` escapes).
fn lua_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03}")),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What Lua reads back from the literal is the JSON it was made of: nested tables,
    /// arrays from 1, escapes (quotes, backslashes, a newline, UTF-8), numbers, nil.
    #[test]
    fn a_lua_literal_reads_back_as_its_json() {
        let value = json!({"metadata": {"name": "a \"b\" \\ c\nd é", "generation": 3},
            "list": [{"type": "Ready"}, {"type": "Stalled"}], "gone": null, "on": true});
        let chunk = format!(
            "local o = {}\nio.write(o.metadata.name, '|', o.metadata.generation + 1, '|', o.list[2].type, '|', #o.list, '|', tostring(o.gone), '|', tostring(o.on))",
            lua_literal(&value)
        );
        let out = Command::new("lua5.1")
            .args(["-e", &chunk])
            .output()
            .expect("lua5.1 (Debian's package; tests/scripts/install-prereqs.sh)");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "a \"b\" \\ c\nd é|4|Stalled|2|nil|true"
        );
    }

    fn policy(generation: i64, status: Value) -> Value {
        json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": "p", "generation": generation}, "status": status})
    }

    fn condition(type_: &str, status: &str, reason: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": format!("{reason} now")})
    }

    /// The shipped check on the objects it must tell apart (the apiserver tier judges
    /// live policies; these are the cases a live one shows only for a moment).
    #[test]
    fn the_argo_cd_check_reads_each_state() {
        let cases = [
            (policy(1, json!({})), "Progressing"),
            (policy(2, json!({"observedGeneration": 0})), "Progressing"),
            (
                policy(
                    2,
                    json!({"observedGeneration": 1, "conditions": [condition("Ready", "True", "AllNodesReady")]}),
                ),
                "Progressing",
            ),
            (
                policy(
                    2,
                    json!({"observedGeneration": 2, "conditions": [condition("Ready", "True", "AllNodesReady")]}),
                ),
                "Healthy",
            ),
            (
                policy(
                    2,
                    json!({"observedGeneration": 2, "conditions": [condition("Ready", "False", "Paused")]}),
                ),
                "Suspended",
            ),
            (
                policy(
                    2,
                    json!({"observedGeneration": 2, "conditions": [condition("Ready", "False", "RolledBack"), condition("Stalled", "True", "RolledBack")]}),
                ),
                "Degraded",
            ),
        ];
        for (object, expected) in cases {
            let (status, message) = argocd_health(&object).unwrap();
            assert_eq!(status, expected, "{object}: {message}");
        }
        let (_, message) = argocd_health(&cases_last()).unwrap();
        assert_eq!(message, "RolledBack: RolledBack now");
    }

    fn cases_last() -> Value {
        policy(
            2,
            json!({"observedGeneration": 2, "conditions": [condition("Stalled", "True", "RolledBack")]}),
        )
    }
}
