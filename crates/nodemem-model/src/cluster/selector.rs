//! Label selectors (`metav1.LabelSelector`) matched against node labels.
//! An empty selector selects every node, as for Kubernetes workloads.

use std::collections::BTreeMap;

use crate::problem::Problem;

/// How a requirement compares a label's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// The label is set to one of the values.
    In,
    /// The label is not set, or set to none of the values.
    NotIn,
    /// The label is set, to anything.
    Exists,
    /// The label is not set.
    DoesNotExist,
}

/// One of a selector's `matchExpressions`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// The label's key.
    pub key: String,
    /// How its value is compared.
    pub operator: Operator,
    /// The values compared with (empty for Exists and DoesNotExist).
    pub values: Vec<String>,
}

/// A `metav1.LabelSelector`: every label and every expression must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    /// Labels that must hold these values.
    pub match_labels: BTreeMap<String, String>,
    /// Requirements that must all hold.
    pub match_expressions: Vec<Requirement>,
}

impl LabelSelector {
    /// Whether it selects every node (no label and no expression).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// True when every term matches (terms are ANDed).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }

    /// Problems the apiserver's LabelSelector validation would report.
    pub fn validate(&self, path: &str) -> Vec<Problem> {
        let mut problems = Vec::new();
        for key in self.match_labels.keys() {
            if let Err(e) = label_key(key) {
                problems.push(Problem::new(format!("{path}.matchLabels"), e));
            }
        }
        for (i, r) in self.match_expressions.iter().enumerate() {
            let p = format!("{path}.matchExpressions[{i}]");
            if let Err(e) = label_key(&r.key) {
                problems.push(Problem::new(format!("{p}.key"), e));
            }
            match r.operator {
                Operator::In | Operator::NotIn if r.values.is_empty() => {
                    problems.push(Problem::new(
                        format!("{p}.values"),
                        "must be specified when operator is In or NotIn",
                    ))
                }
                Operator::Exists | Operator::DoesNotExist if !r.values.is_empty() => {
                    problems.push(Problem::new(
                        format!("{p}.values"),
                        "may not be specified when operator is Exists or DoesNotExist",
                    ))
                }
                _ => {}
            }
        }
        problems
    }
}

/// A label key as Kubernetes takes it (`validation.IsQualifiedName`): a name of at most
/// 63 characters (alphanumerics, '-', '_' and '.', starting and ending with an
/// alphanumeric), optionally after a DNS subdomain prefix of at most 253 characters and
/// '/'. No node carries any other key, and a node affinity naming one is refused, which
/// would stop the agents' DaemonSet for every pool.
pub fn label_key(key: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{key:?} is not a label key: {why}"));
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if name.is_empty() || name.len() > 63 {
        return bad("its name must be 1 to 63 characters");
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if !name.starts_with(alnum)
        || !name.ends_with(alnum)
        || !name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
    {
        return bad("its name must be alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric");
    }
    if let Some(prefix) = prefix {
        let label = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        if prefix.len() > 253 || !prefix.split('.').all(label) {
            return bad("its prefix must be a DNS subdomain (lowercase alphanumerics, '-' and '.', at most 253 characters)");
        }
    }
    Ok(())
}

impl Requirement {
    /// Whether `labels` meet the requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(LabelSelector::default().matches(&labels(&[])));
        assert!(LabelSelector::default().matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn operators_follow_kubernetes_semantics() {
        let node = labels(&[("pool", "db"), ("zone", "a")]);
        let cases = [
            (req("pool", Operator::In, &["db", "web"]), true),
            (req("pool", Operator::In, &["web"]), false),
            (req("pool", Operator::NotIn, &["web"]), true),
            (req("pool", Operator::NotIn, &["db"]), false),
            (req("missing", Operator::NotIn, &["x"]), true),
            (req("zone", Operator::Exists, &[]), true),
            (req("missing", Operator::Exists, &[]), false),
            (req("missing", Operator::DoesNotExist, &[]), true),
            (req("zone", Operator::DoesNotExist, &[]), false),
        ];
        for (r, want) in cases {
            assert_eq!(r.matches(&node), want, "{r:?}");
        }
        let selector = LabelSelector {
            match_labels: labels(&[("pool", "db")]),
            match_expressions: vec![req("zone", Operator::In, &["b"])],
        };
        assert!(!selector.matches(&node), "terms are ANDed");
    }

    #[test]
    fn validation_reports_each_bad_requirement() {
        let selector = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![
                req("a", Operator::In, &[]),
                req("b", Operator::Exists, &["x"]),
                req("", Operator::DoesNotExist, &[]),
            ],
        };
        let problems = selector.validate("spec.nodeSelector");
        assert_eq!(problems.len(), 3);
        assert_eq!(
            problems[0].path,
            "spec.nodeSelector.matchExpressions[0].values"
        );
        assert_eq!(
            problems[2].path,
            "spec.nodeSelector.matchExpressions[2].key"
        );
    }

    /// As Kubernetes' IsQualifiedName: the keys nodes carry pass, the rest are refused.
    #[test]
    fn label_keys_are_qualified_names() {
        for good in [
            "pool",
            "nodemem.io/pool",
            "kubernetes.io/os",
            "node.kubernetes.io/instance-type",
            "a",
            "A_b-c.d",
            &"x".repeat(63),
            &format!("{0}.{0}.{0}.{1}/x", "a".repeat(63), "a".repeat(61)),
        ] {
            assert_eq!(label_key(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "bad key!",
            "-pool",
            "pool-",
            "/pool",
            "nodemem.io/",
            "Nodemem.io/pool",
            "a/b/c",
            "nodemem..io/pool",
            &"x".repeat(64),
            &format!("{0}.{0}.{0}.{1}/x", "a".repeat(63), "a".repeat(62)),
            &format!("{}.io/x", "a".repeat(64)),
        ] {
            assert!(label_key(bad).is_err(), "{bad:?} accepted");
        }
        let selector = LabelSelector {
            match_labels: BTreeMap::from([("bad key!".to_string(), "x".to_string())]),
            match_expressions: vec![Requirement {
                key: "bad key!".into(),
                operator: Operator::DoesNotExist,
                values: vec![],
            }],
        };
        let problems = selector.validate("spec.nodeSelector");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[1]
            .to_string()
            .contains("spec.nodeSelector.matchExpressions[0].key"));
    }
}
