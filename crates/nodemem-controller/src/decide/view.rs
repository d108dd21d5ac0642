//! A policy as the decision sees it (its selector, what is wrong with its spec, its
//! revision, the revision it holds while invalid) and the pool it governs.

use std::collections::{BTreeMap, BTreeSet};

use nodemem_api::convert::{last_accepted, node_settings, takes_nodes, to_selector};
use nodemem_api::policy::RevisionRecord;
use nodemem_api::revision::revision;
use nodemem_model::cluster::selector::LabelSelector;

use crate::decide::handoff::Leaving;
use crate::world::{PolicyEntry, World};

pub(super) struct PolicyView<'a> {
    pub(super) name: &'a str,
    pub(super) entry: &'a PolicyEntry,
    pub(super) selector: LabelSelector,
    pub(super) problems: Vec<String>,
    /// The revision of the spec's settings.
    pub(super) revision: String,
    /// While the spec is invalid: the last revision the policy accepted, which its
    /// nodes keep (None: it never accepted one, and governs no node).
    pub(super) held: Option<RevisionRecord>,
}

impl PolicyView<'_> {
    /// Whether resolution gives it nodes: a deleted policy hands its nodes on, and a
    /// policy that never had a valid spec takes none.
    pub(super) fn governs(&self) -> bool {
        takes_nodes(
            self.entry.deleting,
            self.problems.is_empty(),
            &self.entry.status,
        )
    }

    /// The spec's own revision and settings, as the status records them.
    pub(super) fn spec_record(&self) -> RevisionRecord {
        RevisionRecord {
            revision: self.revision.clone(),
            settings: self.entry.spec.settings.clone(),
        }
    }
}

pub(super) fn policy_views(world: &World) -> Vec<PolicyView<'_>> {
    world
        .policies
        .iter()
        .map(|(name, entry)| {
            let mut problems: Vec<String> = node_settings(&entry.spec.settings)
                .err()
                .map(|ps| ps.iter().map(ToString::to_string).collect())
                .unwrap_or_default();
            problems.extend(
                world
                    .installed_modes
                    .refusal(entry.spec.settings.enforcement),
            );
            let held = if problems.is_empty() {
                None
            } else {
                last_accepted(&entry.status).cloned()
            };
            PolicyView {
                name,
                entry,
                selector: to_selector(&entry.spec.node_selector),
                problems,
                revision: revision(&entry.spec.settings),
                held,
            }
        })
        .collect()
}

/// The nodes a policy governs, and what else the decision found about it.
pub(super) struct Pool<'a> {
    pub(super) nodes: &'a BTreeSet<String>,
    pub(super) conflicts: Option<&'a BTreeSet<String>>,
    /// Never accepted: the nodes it would take once valid.
    pub(super) would_take: Option<&'a BTreeSet<String>>,
    pub(super) leaving: &'a Leaving<'a>,
    /// The nodes it would govern where the agent cannot run, with why.
    pub(super) excluded: Option<&'a BTreeMap<String, String>>,
}
