//! The chart's alerts with the real promtool (built from its module by
//! tests/scripts/build-promtool.sh): the PrometheusRule helm renders passes `promtool
//! check rules`, and its unit tests (tests/alerts/nodemem_test.yaml) pass `promtool test
//! rules`; a threshold moved makes them fail (they test the rules, not themselves).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::repo;

fn promtool() -> PathBuf {
    let script = repo().join("tests/scripts/build-promtool.sh");
    let out = Command::new("bash").arg(&script).output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().unwrap().trim())
}

/// The chart's PrometheusRule objects rendered with these `--set`s and API versions.
fn rules(sets: &[&str], api_versions: &[&str]) -> Vec<Value> {
    let chart = repo().join("charts/nodemem");
    let mut args = vec![
        "template",
        "nodemem",
        chart.to_str().unwrap(),
        "--namespace",
        "nodemem-system",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    for api in api_versions {
        args.extend(["--api-versions", api]);
    }
    crate::chart::documents(&crate::chart::helm(&args))
        .into_iter()
        .filter(|d| d["kind"] == "PrometheusRule")
        .collect()
}

const MONITORING: &str = "monitoring.coreos.com/v1/PrometheusRule";

/// promtool's verdict (success, what it said) on the unit tests against `rule`.
fn run(promtool: &Path, dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The rule's groups as a Prometheus rule file, and the unit tests beside it.
fn rule_files(dir: &Path, rule: &Value) {
    let file = serde_json::json!({"groups": rule["spec"]["groups"]});
    std::fs::write(
        dir.join("nodemem-rules.yaml"),
        serde_yaml::to_string(&file).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        repo().join("crates/nodemem-e2e/tests/alerts/nodemem_test.yaml"),
        dir.join("nodemem_test.yaml"),
    )
    .unwrap();
}

/// The PrometheusRule passes `promtool check rules` and its unit tests
/// (`tests/alerts/nodemem_test.yaml`: each of the nine alerts firing and silent, the
/// controller gone and no replica leading among them; the agents' series carry their
/// `node`, and alerts join them to their pool on it; a moved threshold fails them),
/// with promtool built from its module (`tests/scripts/build-promtool.sh`); every alert
/// has a severity, a summary, a description and a `runbook_url` whose section of
/// docs/runbooks.md exists (and one per reason a rollout stalls);
/// `prometheusRule.disabled` leaves alerts out by name and `prometheusRule.ruleLabels`
/// labels every one; the agents' ServiceMonitor relabels the pod's node to `node`.
#[test]
fn the_charts_alerts_pass_promtool_and_their_unit_tests() {
    // Off by default; on, only where the monitoring API is served.
    assert!(rules(&[], &[MONITORING]).is_empty());
    assert!(rules(&["prometheusRule.enabled=true"], &[]).is_empty());
    let rendered = rules(&["prometheusRule.enabled=true"], &[MONITORING]);
    assert_eq!(rendered.len(), 1);
    let alerts: Vec<&str> = rendered[0]["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert_eq!(alerts.len(), 9, "{alerts:?}");
    // Each alert says how bad, what and why, and where its runbook is: a section of
    // docs/runbooks.md that exists.
    let runbooks = std::fs::read_to_string(repo().join("docs/runbooks.md")).unwrap();
    let anchors: Vec<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## ").or_else(|| l.strip_prefix("### ")))
        .map(|h| h.to_lowercase().replace(' ', "-"))
        .collect();
    for rule in rendered[0]["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
    {
        let alert = rule["alert"].as_str().unwrap();
        assert!(rule["labels"]["severity"].is_string(), "{alert}");
        for key in ["summary", "description", "runbook_url"] {
            assert!(rule["annotations"][key].is_string(), "{alert}: {key}");
        }
        let url = rule["annotations"]["runbook_url"].as_str().unwrap();
        let anchor = url.rsplit_once('#').map(|(_, a)| a).unwrap_or("");
        // The stuck rollout's anchor is its reason's section (templated by Prometheus).
        if !anchor.contains("{{") {
            assert!(
                anchors.iter().any(|a| a == anchor),
                "{alert}: no section #{anchor}"
            );
        }
    }
    for reason in [
        "MaxFailures",
        "OneNodeFailed",
        "AgentsBlocked",
        "EqualPriority",
        "InvalidSpec",
    ] {
        assert!(
            anchors.contains(&reason.to_lowercase()),
            "no runbook section for {reason}"
        );
    }

    let promtool = promtool();
    let dir = tempfile::tempdir().unwrap();
    rule_files(dir.path(), &rendered[0]);
    let (ok, said) = run(
        &promtool,
        dir.path(),
        &["check", "rules", "nodemem-rules.yaml"],
    );
    assert!(ok && said.contains("SUCCESS: 9 rules found"), "{said}");
    let (ok, said) = run(
        &promtool,
        dir.path(),
        &["test", "rules", "nodemem_test.yaml"],
    );
    assert!(ok, "promtool test rules:\n{said}");

    // Every alert is tested firing and not firing.
    let tests: Value = serde_yaml::from_str(
        &std::fs::read_to_string(dir.path().join("nodemem_test.yaml")).unwrap(),
    )
    .unwrap();
    let cases: Vec<(&str, bool)> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
        .map(|c| {
            let fires = !c["exp_alerts"].as_array().unwrap().is_empty();
            (c["alertname"].as_str().unwrap(), fires)
        })
        .collect();
    for alert in &alerts {
        for fires in [true, false] {
            assert!(
                cases.contains(&(alert, fires)),
                "{alert} has no case where it {}",
                if fires { "fires" } else { "stays silent" }
            );
        }
    }

    // The agents' series name their node: the ServiceMonitor relabels it from the pod.
    let chart = repo().join("charts/nodemem");
    let monitors: Vec<Value> = crate::chart::documents(&crate::chart::helm(&[
        "template",
        "nodemem",
        chart.to_str().unwrap(),
        "--set",
        "serviceMonitor.enabled=true",
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
    ]))
    .into_iter()
    .filter(|d| d["kind"] == "ServiceMonitor")
    .collect();
    let agent = monitors
        .iter()
        .find(|m| m["metadata"]["name"] == "nodemem-agent")
        .expect("the agents' ServiceMonitor");
    assert_eq!(
        agent["spec"]["endpoints"][0]["relabelings"],
        serde_json::json!([{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}])
    );

    // An alert disabled by name is not rendered; rule labels go on every alert.
    let tuned = rules(
        &[
            "prometheusRule.enabled=true",
            "prometheusRule.disabled={NodememOOMKillBurst,NodememNoLeader}",
            "prometheusRule.ruleLabels.team=platform",
        ],
        &[MONITORING],
    );
    let tuned_rules = tuned[0]["spec"]["groups"][0]["rules"].as_array().unwrap();
    let names: Vec<&str> = tuned_rules
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 7, "{names:?}");
    assert!(!names.contains(&"NodememOOMKillBurst") && !names.contains(&"NodememNoLeader"));
    assert!(tuned_rules
        .iter()
        .all(|r| r["labels"]["team"] == "platform" && r["labels"]["severity"].is_string()));

    // A threshold the tests do not expect: they fail, naming the alert.
    let moved = rules(
        &[
            "prometheusRule.enabled=true",
            "prometheusRule.oomKillsPerPool=20",
        ],
        &[MONITORING],
    );
    rule_files(dir.path(), &moved[0]);
    let (ok, said) = run(
        &promtool,
        dir.path(),
        &["test", "rules", "nodemem_test.yaml"],
    );
    assert!(!ok && said.contains("NodememOOMKillBurst"), "{said}");
}
