//! Which policy governs a node: the highest `priority` among the policies whose
//! selector matches the node's labels. A tie never moves a node: among policies of the
//! same top priority, the node stays with the policy whose revision it runs (its
//! NodeMemoryConfig's `spec.policy`); a node that runs none of them goes to the oldest
//! (creation time, then name), so a policy created later governs only the nodes nobody
//! else claims. Only a strictly higher priority takes a node from its policy (and the
//! controller moves it through the winner's rollout). Ties are surfaced as conflicts so
//! users can resolve them.

use std::collections::BTreeMap;

use crate::cluster::selector::LabelSelector;

/// What resolution needs to know about a policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyCandidate<'a> {
    /// The policy's name.
    pub name: &'a str,
    /// Its priority: the highest selecting a node governs it.
    pub priority: i32,
    /// The nodes it selects.
    pub selector: &'a LabelSelector,
    /// Seconds since the epoch of its creation; None (a policy read from a file) counts
    /// as newer than any that has one.
    pub created: Option<i64>,
}

/// Why the winner governs the node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Won {
    /// No policy of the same priority selects the node.
    #[default]
    Alone,
    /// Tied: the node already runs the winner's revision and stays.
    KeptOnTie,
    /// Tied, and the node runs none of them: the oldest policy claims it.
    OldestOnTie,
}

/// Which policy governs a node, and the others that select it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolution {
    /// The governing policy, if any matches.
    pub winner: Option<String>,
    /// Why the winner won.
    pub won: Won,
    /// Other matching policies with the winner's priority (empty when no conflict).
    pub conflicting: Vec<String>,
    /// Every matching policy, highest priority first.
    pub matching: Vec<String>,
}

/// `current`: the policy whose revision the node runs now, if any.
pub fn resolve_policy(
    candidates: &[PolicyCandidate<'_>],
    node_labels: &BTreeMap<String, String>,
    current: Option<&str>,
) -> Resolution {
    let mut matching: Vec<&PolicyCandidate<'_>> = candidates
        .iter()
        .filter(|c| c.selector.matches(node_labels))
        .collect();
    // Highest priority first; among equals the oldest, then by name.
    matching.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| {
                a.created
                    .unwrap_or(i64::MAX)
                    .cmp(&b.created.unwrap_or(i64::MAX))
            })
            .then_with(|| a.name.cmp(b.name))
    });
    let Some(top) = matching.first().map(|c| c.priority) else {
        return Resolution::default();
    };
    let tied: Vec<&PolicyCandidate<'_>> = matching
        .iter()
        .copied()
        .take_while(|c| c.priority == top)
        .collect();
    let (winner, won) = match tied.iter().find(|c| Some(c.name) == current) {
        _ if tied.len() == 1 => (tied[0], Won::Alone),
        Some(kept) => (*kept, Won::KeptOnTie),
        None => (tied[0], Won::OldestOnTie),
    };
    Resolution {
        winner: Some(winner.name.to_string()),
        won,
        conflicting: tied
            .iter()
            .filter(|c| c.name != winner.name)
            .map(|c| c.name.to_string())
            .collect(),
        matching: matching.iter().map(|c| c.name.to_string()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::selector::{Operator, Requirement};

    fn pool(value: &str) -> LabelSelector {
        LabelSelector {
            match_labels: [("pool".to_string(), value.to_string())].into(),
            match_expressions: vec![],
        }
    }

    fn candidate<'a>(
        name: &'a str,
        priority: i32,
        selector: &'a LabelSelector,
        created: Option<i64>,
    ) -> PolicyCandidate<'a> {
        PolicyCandidate {
            name,
            priority,
            selector,
            created,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn highest_priority_wins_and_ties_are_conflicts() {
        let all = LabelSelector::default();
        let db = pool("db");
        let not_gpu = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![Requirement {
                key: "gpu".into(),
                operator: Operator::DoesNotExist,
                values: vec![],
            }],
        };
        let candidates = [
            candidate("default", 0, &all, Some(1)),
            candidate("zz-db", 10, &db, Some(2)),
            candidate("aa-db", 10, &db, Some(2)),
            candidate("no-gpu", 5, &not_gpu, Some(3)),
        ];
        let db_node = labels(&[("pool", "db")]);
        let r = resolve_policy(&candidates, &db_node, None);
        // Created in the same second: the first by name.
        assert_eq!(r.winner.as_deref(), Some("aa-db"));
        assert_eq!(r.won, Won::OldestOnTie);
        assert_eq!(r.conflicting, vec!["zz-db"]);
        assert_eq!(r.matching, vec!["aa-db", "zz-db", "no-gpu", "default"]);

        let gpu_node = labels(&[("gpu", "a100")]);
        let r = resolve_policy(&candidates, &gpu_node, Some("no-gpu"));
        assert_eq!(r.winner.as_deref(), Some("default"));
        assert_eq!(r.won, Won::Alone);
        assert!(r.conflicting.is_empty());

        assert_eq!(
            resolve_policy(&candidates[1..2], &gpu_node, None),
            Resolution::default()
        );
    }

    /// The sandbox surprise: `bad3`, created later with the same priority and a
    /// selector overlapping the `general` pool, took every general node because its
    /// name sorts first.
    #[test]
    fn a_tie_never_moves_a_node() {
        let general = pool("general");
        let everything = LabelSelector::default();
        let candidates = [
            candidate("general", 0, &general, Some(100)),
            candidate("bad3", 0, &everything, Some(200)),
        ];
        let node = labels(&[("pool", "general")]);
        // A node running general's revision stays on it.
        let r = resolve_policy(&candidates, &node, Some("general"));
        assert_eq!(
            (r.winner.as_deref(), r.won),
            (Some("general"), Won::KeptOnTie)
        );
        assert_eq!(r.conflicting, vec!["bad3"]);
        // A node that somehow runs bad3's stays there too: ties move nobody.
        let r = resolve_policy(&candidates, &node, Some("bad3"));
        assert_eq!((r.winner.as_deref(), r.won), (Some("bad3"), Won::KeptOnTie));
        assert_eq!(r.conflicting, vec!["general"]);
        // A new node (or one running a policy no longer in the tie) goes to the oldest:
        // bad3 governs only the nodes nobody else claims.
        for current in [None, Some("deleted-policy")] {
            let r = resolve_policy(&candidates, &node, current);
            assert_eq!(
                (r.winner.as_deref(), r.won),
                (Some("general"), Won::OldestOnTie)
            );
        }
        let other = labels(&[("pool", "batch")]);
        let r = resolve_policy(&candidates, &other, None);
        assert_eq!((r.winner.as_deref(), r.won), (Some("bad3"), Won::Alone));
        assert!(r.conflicting.is_empty());
    }

    #[test]
    fn only_a_strictly_higher_priority_takes_a_node() {
        let general = pool("general");
        let everything = LabelSelector::default();
        let mut candidates = [
            candidate("general", 0, &general, Some(100)),
            candidate("override", 1, &everything, Some(200)),
        ];
        let node = labels(&[("pool", "general")]);
        let r = resolve_policy(&candidates, &node, Some("general"));
        assert_eq!((r.winner.as_deref(), r.won), (Some("override"), Won::Alone));
        assert_eq!(r.matching, vec!["override", "general"]);
        // Equal again: the node stays where it is now.
        candidates[1].priority = 0;
        let r = resolve_policy(&candidates, &node, Some("override"));
        assert_eq!(
            (r.winner.as_deref(), r.won),
            (Some("override"), Won::KeptOnTie)
        );
        // Policies read from files (no creation time) count as newest, then by name.
        let files = [
            candidate("b", 0, &everything, None),
            candidate("a", 0, &everything, None),
            candidate("c", 0, &everything, Some(5)),
        ];
        let r = resolve_policy(&files, &node, None);
        assert_eq!(r.winner.as_deref(), Some("c"));
        assert_eq!(r.conflicting, vec!["a", "b"]);
    }

    /// Every combination of three policies' priorities, ages and the node's current
    /// policy: the winner always has the top priority; on a tie the node's current
    /// policy wins whenever it is tied; a winner that is not current is only ever the
    /// oldest of the tied ones or a strictly higher priority than the current one.
    #[test]
    fn the_rule_holds_for_every_combination() {
        let all = LabelSelector::default();
        let names = ["a", "b", "c"];
        let node = labels(&[]);
        for p in 0..27 {
            let priorities = [p % 3, (p / 3) % 3, p / 9];
            for ages in [[1, 2, 3], [3, 2, 1], [2, 2, 2]] {
                let candidates: Vec<PolicyCandidate<'_>> = (0..3)
                    .map(|i| candidate(names[i], priorities[i], &all, Some(ages[i])))
                    .collect();
                for current in [None, Some("a"), Some("b"), Some("c")] {
                    let r = resolve_policy(&candidates, &node, current);
                    let w = candidates
                        .iter()
                        .find(|c| Some(c.name) == r.winner.as_deref())
                        .unwrap();
                    let top = candidates.iter().map(|c| c.priority).max().unwrap();
                    assert_eq!(w.priority, top);
                    let cur = candidates.iter().find(|c| Some(c.name) == current);
                    if let Some(cur) = cur.filter(|c| c.priority == top) {
                        assert_eq!(w.name, cur.name, "{priorities:?} {ages:?} {current:?}");
                    }
                    let tied: Vec<_> = candidates.iter().filter(|c| c.priority == top).collect();
                    assert_eq!(r.conflicting.len(), tied.len() - 1);
                    if tied.len() > 1 && cur.is_none_or(|c| c.priority < top) {
                        let oldest = tied.iter().map(|c| (c.created, c.name)).min().unwrap();
                        assert_eq!((w.created, w.name), oldest);
                    }
                }
            }
        }
    }
}
