//! `kubectl nodemem recommend POLICY`: the throttling factor the pool's workloads
//! tolerate, as the controller put it in `status.recommendation`, with the
//! distribution behind it; `-o yaml|json` prints the policy with that factor instead,
//! ready for `kubectl nodemem diff -f` and a Git commit.

use nodemem_api::policy::{RecommendationReason, RecommendationStatus};
use nodemem_api::NodeMemoryPolicy;
use nodemem_plumbing::CliError;
use serde_json::{json, Value};

use crate::render::{table, text};

/// What the table shows.
#[derive(Clone, Debug, PartialEq)]
pub struct RecommendReport {
    pub policy: String,
    pub recommendation: RecommendationStatus,
}

/// The policy's recommendation; an error names why there is none.
pub fn build(policy: &NodeMemoryPolicy) -> Result<RecommendReport, CliError> {
    let name = policy.metadata.name.clone().unwrap_or_default();
    let status = policy.status.clone().unwrap_or_default();
    let Some(recommendation) = status.recommendation else {
        let why = if policy.spec.settings.enforcement == nodemem_api::policy::Enforcement::Kubelet {
            "enforcement: Kubelet is not observed (use Observe or Agent)".to_string()
        } else {
            "the controller has not published one yet (nodes report their observation on their agents' resyncs)".to_string()
        };
        return Err(CliError::one(format!(
            "nodememorypolicy {name}: no recommendation: {why}"
        )));
    };
    Ok(RecommendReport {
        policy: name,
        recommendation,
    })
}

/// The policy with the recommended factor, as a manifest to commit (no status, no
/// server-set metadata); an error when there is no factor to recommend. Each workload
/// class with a factor of its own and a recommendation gets its recommended factor
/// too (a class without memory.high keeps none).
pub fn manifest(policy: &NodeMemoryPolicy, report: &RecommendReport) -> Result<Value, CliError> {
    let r = &report.recommendation;
    let Some(factor) = r.throttling_factor else {
        return Err(CliError::one(format!(
            "nodememorypolicy {}: no factor to write ({:?}): {}",
            report.policy, r.reason, r.message
        )));
    };
    let mut spec = serde_json::to_value(&policy.spec)
        .map_err(|e| CliError::one(format!("nodememorypolicy {}: {e}", report.policy)))?;
    spec["memoryQoS"]["throttlingFactor"] = json!(factor);
    for c in &r.classes {
        let (Some(factor), Some(_)) = (c.throttling_factor, c.current_factor) else {
            continue;
        };
        let classes = spec["classes"].as_array_mut().into_iter().flatten();
        for class in classes.filter(|k| k["name"] == c.name.as_str()) {
            class["throttlingFactor"] = json!(factor);
        }
    }
    let mut metadata = json!({"name": report.policy});
    if let Some(labels) = policy.metadata.labels.as_ref().filter(|l| !l.is_empty()) {
        metadata["labels"] = json!(labels);
    }
    // Annotations a server or a tool set are not the user's to commit.
    let annotations: std::collections::BTreeMap<&String, &String> = policy
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| {
            k.as_str() != "kubectl.kubernetes.io/last-applied-configuration"
                && k.as_str() != nodemem_api::ROLLBACK_ANNOTATION
        })
        .collect();
    if !annotations.is_empty() {
        metadata["annotations"] = json!(annotations);
    }
    Ok(json!({
        "apiVersion": "nodemem.io/v1alpha1",
        "kind": "NodeMemoryPolicy",
        "metadata": metadata,
        "spec": spec,
    }))
}

fn pct(p: Option<f64>) -> String {
    p.map_or("-".to_string(), |p| format!("{p}%"))
}

fn duration(seconds: i64) -> String {
    match seconds {
        s if s >= 2 * 86400 => format!("{}d", s / 86400),
        s if s >= 2 * 3600 => format!("{}h", s / 3600),
        s if s >= 2 * 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

pub fn render_table(report: &RecommendReport) -> String {
    let r = &report.recommendation;
    let mut head = table(&[
        "POLICY",
        "REASON",
        "RECOMMENDED",
        "CURRENT",
        "TARGET",
        "UNDER HIGH",
        "THROTTLED NOW",
        "CONTAINERS",
        "NODES",
        "OBSERVED",
    ]);
    head.add_row(vec![
        report.policy.clone(),
        format!("{:?}", r.reason),
        r.throttling_factor
            .map_or("-".to_string(), |f| f.to_string()),
        r.current_factor.to_string(),
        format!("{}%", r.target_percent),
        pct(r.fitting_percent),
        pct(r.current_throttled_percent),
        r.containers.to_string(),
        r.nodes.to_string(),
        duration(r.observed_seconds),
    ]);
    let mut out = format!("{}\n{}\n", text(&head), r.message);
    if r.reason != RecommendationReason::TooLittleEvidence && !r.distribution.is_empty() {
        let mut dist = table(&["FACTOR", "UNDER MEMORY.HIGH", ""]);
        for step in &r.distribution {
            let mut marks = Vec::new();
            if r.throttling_factor
                .is_some_and(|f| (f - step.factor).abs() < 1e-9)
            {
                marks.push("recommended");
            }
            if (step.factor - r.current_factor).abs() < 1e-9 {
                marks.push("current");
            }
            dist.add_row(vec![
                format!("{:.2}", step.factor),
                format!("{}%", step.fitting_percent),
                marks.join(", "),
            ]);
        }
        out.push('\n');
        out.push_str(&text(&dist));
        out.push('\n');
    }
    if !r.classes.is_empty() {
        // Classes with a memory.high of their own: their containers are not in the
        // figures above.
        let mut classes = table(&["CLASS", "REASON", "RECOMMENDED", "CURRENT", "CONTAINERS"]);
        let factor = |f: Option<f64>, none: &str| f.map_or(none.to_string(), |f| f.to_string());
        for c in &r.classes {
            classes.add_row(vec![
                c.name.clone(),
                format!("{:?}", c.reason),
                factor(c.throttling_factor, "-"),
                factor(c.current_factor, "no memory.high"),
                c.containers.to_string(),
            ]);
        }
        out.push('\n');
        out.push_str(&text(&classes));
        out.push('\n');
        for c in &r.classes {
            out.push_str(&format!("class {}: {}\n", c.name, c.message));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_api::policy::FactorShare;

    fn policy(recommendation: Option<RecommendationStatus>) -> NodeMemoryPolicy {
        let mut p: NodeMemoryPolicy = serde_json::from_value(json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": "web", "labels": {"team": "a"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "owner": "platform"},
                "resourceVersion": "42", "uid": "u"},
            "spec": {"nodeSelector": {"matchLabels": {"pool": "web"}},
                "memoryQoS": {"throttlingFactor": 0.8}, "enforcement": "Observe"},
        }))
        .unwrap();
        p.status = Some(nodemem_api::NodeMemoryPolicyStatus {
            recommendation,
            ..Default::default()
        });
        p
    }

    fn recommended() -> RecommendationStatus {
        RecommendationStatus {
            reason: RecommendationReason::Recommended,
            message: "throttlingFactor 0.45 keeps ...".into(),
            throttling_factor: Some(0.45),
            target_percent: 99,
            fitting_percent: Some(99.2),
            current_factor: 0.8,
            current_throttled_percent: Some(0.3),
            containers: 340,
            nodes: 12,
            observed_seconds: 3 * 86400,
            distribution: (1..=20)
                .map(|k| FactorShare {
                    factor: f64::from(k) / 20.0,
                    fitting_percent: if k >= 9 { 99.2 } else { 50.0 },
                })
                .collect(),
            classes: Vec::new(),
        }
    }

    #[test]
    fn the_manifest_is_the_policy_with_the_recommended_factor_and_nothing_server_set() {
        let p = policy(Some(recommended()));
        let report = build(&p).unwrap();
        let m = manifest(&p, &report).unwrap();
        assert_eq!(m["spec"]["memoryQoS"]["throttlingFactor"], json!(0.45));
        assert_eq!(m["spec"]["enforcement"], "Observe");
        assert_eq!(m["spec"]["nodeSelector"]["matchLabels"]["pool"], "web");
        assert_eq!(m["metadata"]["labels"]["team"], "a");
        assert_eq!(m["metadata"]["annotations"], json!({"owner": "platform"}));
        assert!(m["metadata"].get("resourceVersion").is_none());
        assert!(m.get("status").is_none());
        // It reads back as a policy.
        let back: NodeMemoryPolicy = serde_json::from_value(m).unwrap();
        assert_eq!(back.spec.settings.memory_qos.throttling_factor, 0.45);
    }

    #[test]
    fn no_recommendation_or_no_factor_is_a_clear_error() {
        let e = build(&policy(None)).unwrap_err();
        assert!(
            e.problems[0].contains("no recommendation: the controller has not published one"),
            "{:?}",
            e.problems
        );
        let too_little = RecommendationStatus {
            reason: RecommendationReason::TooLittleEvidence,
            message: "a recommendation needs at least 20 container(s)".into(),
            throttling_factor: None,
            ..recommended()
        };
        let p = policy(Some(too_little));
        let report = build(&p).unwrap();
        let e = manifest(&p, &report).unwrap_err();
        assert!(
            e.problems[0].contains(
                "no factor to write (TooLittleEvidence): a recommendation needs at least 20"
            ),
            "{:?}",
            e.problems
        );
        assert!(
            !render_table(&report).contains("FACTOR"),
            "no distribution without evidence"
        );
    }

    /// Workload classes: each class with a factor of its own gets its recommended
    /// factor in the manifest and a row in the table; a class without memory.high
    /// keeps none, and one without a recommendation keeps its factor.
    #[test]
    fn classes_get_their_own_recommended_factors() {
        use nodemem_api::policy::ClassRecommendation;
        let mut p = policy(None);
        p.spec.settings.classes = serde_json::from_value(json!([
            {"name": "batch", "throttlingFactor": 0.5},
            {"name": "jobs", "throttlingFactor": 0.6},
            {"name": "service", "memoryHigh": "None"}]))
        .unwrap();
        let class = |name: &str, factor: Option<f64>, current: Option<f64>| ClassRecommendation {
            name: name.into(),
            reason: if factor.is_some() {
                RecommendationReason::Recommended
            } else {
                RecommendationReason::TooLittleEvidence
            },
            message: format!("{name} says"),
            throttling_factor: factor,
            fitting_percent: None,
            current_factor: current,
            containers: 7,
        };
        let mut r = recommended();
        r.classes = vec![
            class("batch", Some(0.7), Some(0.5)),
            class("jobs", None, Some(0.6)),
            class("service", Some(0.95), None),
        ];
        p.status = Some(nodemem_api::NodeMemoryPolicyStatus {
            recommendation: Some(r),
            ..Default::default()
        });
        let report = build(&p).unwrap();
        let m = manifest(&p, &report).unwrap();
        assert_eq!(
            m["spec"]["classes"],
            json!([
                {"name": "batch", "throttlingFactor": 0.7},
                {"name": "jobs", "throttlingFactor": 0.6},
                {"name": "service", "memoryHigh": "None"}])
        );
        let back: NodeMemoryPolicy = serde_json::from_value(m).unwrap();
        assert!(nodemem_api::convert::node_settings(&back.spec.settings).is_ok());
        let out = render_table(&report);
        assert!(out.contains("batch    Recommended        0.7"), "{out}");
        assert!(out.contains("no memory.high"), "{out}");
        assert!(out.contains("class jobs: jobs says"), "{out}");
    }

    #[test]
    fn the_table_marks_the_recommended_and_the_current_factor() {
        let report = build(&policy(Some(recommended()))).unwrap();
        let out = render_table(&report);
        assert!(out.contains("web     Recommended  0.45"), "{out}");
        assert!(out.contains("3d"), "{out}");
        let line = |f: &str| {
            out.lines()
                .find(|l| l.trim_start().starts_with(f))
                .unwrap_or_else(|| panic!("no {f} in {out}"))
                .to_string()
        };
        assert!(line("0.45").ends_with("recommended"), "{out}");
        assert!(line("0.80").ends_with("current"), "{out}");
        assert!(!line("0.50").contains("current"), "{out}");
    }
}
