//! `CRDOutdated`: the installed CRDs lack fields this controller uses, so the apiserver
//! prunes them from the policy (`crate::crd_check`). On every policy, since which of
//! them lost a field cannot be told once it is pruned.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::world::World;
use nodemem_api::conditions::condition;

/// The condition once the CRDs have been read (unknown before: no condition).
pub(super) fn crd_outdated(world: &World, g: Option<i64>, now_time: &Time) -> Option<Condition> {
    let gaps = world.crd_gaps.as_ref()?;
    let lacking: Vec<String> = gaps
        .iter()
        .filter(|(_, missing)| !missing.is_empty())
        .map(|(crd, missing)| format!("{crd} lacks {}", missing.join(", ")))
        .collect();
    Some(if lacking.is_empty() {
        condition(
            "CRDOutdated",
            false,
            "AsExpected",
            "the installed CRDs have every field this controller uses".to_string(),
            g,
            now_time,
        )
    } else {
        condition(
            "CRDOutdated",
            true,
            "FieldsMissing",
            format!(
                "the installed CRDs are older than the controller ({}): {}; the apiserver prunes these fields from every object it stores: apply this release's CRDs (kubectl apply --server-side --force-conflicts -f crds/; Helm never upgrades them)",
                env!("CARGO_PKG_VERSION"),
                lacking.join("; ")
            ),
            g,
            now_time,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_says_nothing_and_a_gap_names_its_fields() {
        let now = Time(Default::default());
        let mut world = World::default();
        assert_eq!(crd_outdated(&world, None, &now), None);
        world.crd_gaps = Some(
            [
                (
                    "nodememorypolicies.nodemem.io".to_string(),
                    vec!["spec.a".to_string()],
                ),
                ("nodememoryconfigs.nodemem.io".to_string(), Vec::new()),
            ]
            .into(),
        );
        let c = crd_outdated(&world, None, &now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "FieldsMissing")
        );
        assert!(
            c.message
                .contains("nodememorypolicies.nodemem.io lacks spec.a"),
            "{}",
            c.message
        );
        world.crd_gaps = Some(Default::default());
        let c = crd_outdated(&world, None, &now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "AsExpected")
        );
    }
}
