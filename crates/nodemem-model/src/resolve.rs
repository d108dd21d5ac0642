//! Which policy governs a node: the highest `priority` among the policies whose
//! selector matches the node's labels. Equal top priorities are a conflict: the
//! alphabetically first name wins so every component agrees, and the conflict is
//! surfaced so users can fix it.

use std::collections::BTreeMap;

use crate::selector::LabelSelector;

/// What resolution needs to know about a policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyCandidate<'a> {
    pub name: &'a str,
    pub priority: i32,
    pub selector: &'a LabelSelector,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolution {
    /// The governing policy, if any matches.
    pub winner: Option<String>,
    /// Other matching policies with the winner's priority (empty when no conflict).
    pub conflicting: Vec<String>,
    /// Every matching policy, highest priority first.
    pub matching: Vec<String>,
}

pub fn resolve_policy(
    candidates: &[PolicyCandidate<'_>],
    node_labels: &BTreeMap<String, String>,
) -> Resolution {
    let mut matching: Vec<&PolicyCandidate<'_>> = candidates
        .iter()
        .filter(|c| c.selector.matches(node_labels))
        .collect();
    matching.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.name.cmp(b.name)));
    let Some(first) = matching.first() else {
        return Resolution::default();
    };
    Resolution {
        winner: Some(first.name.to_string()),
        conflicting: matching[1..]
            .iter()
            .filter(|c| c.priority == first.priority)
            .map(|c| c.name.to_string())
            .collect(),
        matching: matching.iter().map(|c| c.name.to_string()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::{Operator, Requirement};

    #[test]
    fn highest_priority_wins_and_ties_are_conflicts() {
        let all = LabelSelector::default();
        let db = LabelSelector {
            match_labels: [("pool".to_string(), "db".to_string())].into(),
            match_expressions: vec![],
        };
        let not_gpu = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![Requirement {
                key: "gpu".into(),
                operator: Operator::DoesNotExist,
                values: vec![],
            }],
        };
        let candidates = [
            PolicyCandidate {
                name: "default",
                priority: 0,
                selector: &all,
            },
            PolicyCandidate {
                name: "zz-db",
                priority: 10,
                selector: &db,
            },
            PolicyCandidate {
                name: "aa-db",
                priority: 10,
                selector: &db,
            },
            PolicyCandidate {
                name: "no-gpu",
                priority: 5,
                selector: &not_gpu,
            },
        ];
        let db_node: BTreeMap<_, _> = [("pool".to_string(), "db".to_string())].into();
        let r = resolve_policy(&candidates, &db_node);
        assert_eq!(r.winner.as_deref(), Some("aa-db"));
        assert_eq!(r.conflicting, vec!["zz-db"]);
        assert_eq!(r.matching, vec!["aa-db", "zz-db", "no-gpu", "default"]);

        let gpu_node: BTreeMap<_, _> = [("gpu".to_string(), "a100".to_string())].into();
        let r = resolve_policy(&candidates, &gpu_node);
        assert_eq!(r.winner.as_deref(), Some("default"));
        assert!(r.conflicting.is_empty());

        assert_eq!(
            resolve_policy(&candidates[1..2], &gpu_node),
            Resolution::default()
        );
    }
}
