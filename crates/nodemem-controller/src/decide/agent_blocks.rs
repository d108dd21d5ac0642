//! `AgentsBlocked`: the pool's nodes whose agent cannot start, and why, in the words of
//! the agents' pods and the DaemonSet's Events (`crate::agents::blocked`), so that an install
//! that cannot work says so within a minute rather than at the progress deadline.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::world::World;
use nodemem_api::conditions::condition;

/// Nodes named in the message at most.
const NAMED: usize = 10;

/// The condition, when the controller deploys the agents and its watches of their pods
/// and Events have listed (otherwise nothing is known of them, and no condition claims
/// anything).
pub(super) fn agents_blocked(
    world: &World,
    pool: &BTreeSet<String>,
    now: i64,
    g: Option<i64>,
    now_time: &Time,
) -> Option<Condition> {
    let agents = world.agents.as_ref().filter(|a| a.listed())?;
    let blocked = agents.blocked_in(pool, now);
    let Some(((reason, _), _)) = blocked.iter().max_by_key(|(_, nodes)| nodes.len()) else {
        return Some(condition(
            "AgentsBlocked",
            false,
            "AsExpected",
            "nothing keeps an agent of the pool from starting".to_string(),
            g,
            now_time,
        ));
    };
    let reason = reason.clone();
    let count: usize = blocked.values().map(BTreeSet::len).sum();
    let causes: Vec<String> = blocked
        .iter()
        .map(|((why, message), nodes)| {
            let names: Vec<&str> = nodes.iter().map(String::as_str).take(NAMED).collect();
            let more = nodes.len().saturating_sub(NAMED);
            format!(
                "{why} on {}{}: {message}",
                names.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            )
        })
        .collect();
    Some(condition(
        "AgentsBlocked",
        true,
        &reason,
        format!(
            "the agent cannot start on {count} node(s) of the pool: {}",
            causes.join("; ")
        ),
        g,
        now_time,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_claimed_until_the_agents_watches_have_listed() {
        let pool: BTreeSet<String> = ["n1".to_string()].into();
        let now = Time(Default::default());
        let mut world = World::default();
        assert_eq!(
            agents_blocked(&world, &pool, 0, None, &now),
            None,
            "not deployed"
        );
        world.agents = Some(Default::default());
        assert_eq!(
            agents_blocked(&world, &pool, 0, None, &now),
            None,
            "not listed"
        );
        world.agents.as_mut().unwrap().set_listed(true);
        let c = agents_blocked(&world, &pool, 0, None, &now).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "AsExpected")
        );
    }
}
