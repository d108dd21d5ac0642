//! Label selectors (`metav1.LabelSelector`) matched against node labels.
//! An empty selector selects every node, as for Kubernetes workloads.

use std::collections::BTreeMap;

use crate::problem::Problem;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Requirement>,
}

impl LabelSelector {
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
        for (i, r) in self.match_expressions.iter().enumerate() {
            let p = format!("{path}.matchExpressions[{i}]");
            if r.key.is_empty() {
                problems.push(Problem::new(format!("{p}.key"), "must not be empty"));
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

impl Requirement {
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
}
