//! A damaged state record on a running in-cluster agent (issue 18): the real agent on
//! a simulated node, its state directory damaged while it runs and while it is down.
//! It never stops enforcing: a record torn under it is written again from memory; one
//! found unusable at start is set aside and re-derived, reported as `StateRecovered`
//! and an Event, and what nodemem set is still given back in full afterwards.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use kube::Client;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::cgroup_tree::CgroupTree;
use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::agent::{
    applied_on, configs, expected_on, set_config_on, simulated_node, spawn_agent, tree_mismatches,
};
use crate::common::{admin, cluster, condition, create_pod, eventually};

const NODE: &str = "state-record-1";
const NS: &str = "state-record";

type Values = BTreeMap<(String, String), String>;

fn snapshot(tree: &CgroupTree, files: &Values) -> Values {
    files
        .keys()
        .map(|(path, file)| {
            let v = tree.read(path, file).unwrap();
            ((path.clone(), file.clone()), v)
        })
        .collect()
}

/// The StateRecovered condition the agent reports, once it does.
async fn recovered(client: &Client, reason: &str) -> Option<Value> {
    let c = configs(client.clone()).get_status(NODE).await.ok()?;
    let s = c.data.get("status")?;
    condition(s, "StateRecovered")
        .filter(|c| c["reason"] == reason)
        .cloned()
}

fn set_aside(state: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(state)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".unusable-"))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_damaged_state_record_is_reported_and_rederived_and_never_stops_the_agent() {
    let cp = cluster();
    let client = admin().await;
    let (tree, _kubelet) = simulated_node(&client, NODE, NS, CgroupDriver::Systemd).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for (name, resources) in [
        (
            "guaranteed",
            json!({"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}),
        ),
        (
            "burstable",
            json!({"requests": {"memory": "128Mi"}, "limits": {"memory": "512Mi"}}),
        ),
    ] {
        create_pod(
            &pods,
            json!({"metadata": {"name": name},
                "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "x", "resources": resources}]}}),
        )
        .await;
    }
    let qos = json!({"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"});
    let predicted = expected_on(&client, NODE, CgroupDriver::Systemd, qos.clone()).await;
    let no_logs = || String::new();
    // What the node holds before nodemem (once the fake kubelet made every cgroup).
    let untouched = eventually(
        "the pods' cgroups",
        Duration::from_secs(60),
        &no_logs,
        async || {
            predicted
                .keys()
                .all(|(path, file)| tree.read(path, file).is_ok())
                .then(|| snapshot(&tree, &predicted))
        },
    )
    .await;
    assert_ne!(
        untouched, predicted,
        "nodemem's values differ from the node's own"
    );

    set_config_on(&client, NODE, "rev-1", qos.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE.into())).await.unwrap();
    let mut agent = spawn_agent(NODE, tree.root(), dir.path(), &kubeconfig, "agent.log");
    applied_on(&client, NODE, &agent, "rev-1").await;
    let logs = || agent_log(dir.path());
    eventually(
        "the predicted values",
        Duration::from_secs(30),
        &logs,
        async || tree_mismatches(&tree, &predicted).is_empty().then_some(()),
    )
    .await;
    let state = dir.path().join("state");
    let record = state.join("ownership.json");
    let intact = std::fs::read(&record).unwrap();

    // 1. Torn under the running agent: written again from memory at the next resync.
    std::fs::write(&record, &intact[..intact.len() / 2]).unwrap();
    let c = eventually(
        "StateRewritten",
        Duration::from_secs(30),
        &logs,
        async || recovered(&client, "StateRewritten").await,
    )
    .await;
    assert_eq!(c["status"], "True");
    let message = c["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{}: corrupt state record", record.display()))
            && message.ends_with("; written again from what the agent holds"),
        "{message}"
    );
    assert_eq!(
        std::fs::read(&record).unwrap(),
        intact,
        "the same record again"
    );
    assert!(agent.child_running(), "{}", logs());

    // 2. Unusable at start: the agent is stopped, its records damaged (an edited
    //    ownership record, a truncated last-known one) and a value drifted; the
    //    restarted agent sets them aside, re-derives, repairs and says so.
    drop(agent);
    let edited = String::from_utf8(intact.clone())
        .unwrap()
        .replacen("\"0\"", "\"1\"", 1);
    assert_ne!(edited.as_bytes(), intact.as_slice(), "an edit to make");
    std::fs::write(&record, edited).unwrap();
    let last_known = state.join("last-known.json");
    let known = std::fs::read(&last_known).unwrap();
    std::fs::write(&last_known, &known[..known.len() / 3]).unwrap();
    let (drifted, held) = predicted
        .iter()
        .find(|((_, file), v)| file == "memory.low" && v.as_str() != "0")
        .map(|((path, _), v)| (path.clone(), v.clone()))
        .expect("a memory.low nodemem sets");
    std::fs::write(tree.root().join(&drifted).join("memory.low"), "0").unwrap();
    let mut agent = spawn_agent(NODE, tree.root(), dir.path(), &kubeconfig, "agent-2.log");
    let logs = || agent_log(dir.path());
    let c = eventually(
        "StateRederived",
        Duration::from_secs(60),
        &logs,
        async || recovered(&client, "StateRederived").await,
    )
    .await;
    let message = c["message"].as_str().unwrap();
    let aside = set_aside(&state);
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(
        aside[0].starts_with("ownership.json.unusable-"),
        "{aside:?}"
    );
    assert!(
        message.contains(&format!(
            "{}: corrupt state record (checksum",
            record.display()
        )) && message.contains(&format!("set aside as {}", state.join(&aside[0]).display()))
            && message.contains("what nodemem owns is re-derived from the current settings")
            && message.contains(&format!(
                "{}: corrupt state record (not a state envelope",
                last_known.display()
            )),
        "{message}"
    );
    eventually(
        "the drift repaired",
        Duration::from_secs(30),
        &logs,
        async || (tree.read(&drifted, "memory.low").ok()? == held).then_some(()),
    )
    .await;
    assert!(tree_mismatches(&tree, &predicted).is_empty());
    let events: Api<Event> = Api::all(client.clone());
    let told = eventually(
        "the StateRederived Event",
        Duration::from_secs(30),
        &logs,
        async || {
            let list = events.list(&Default::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some("StateRederived")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NODE)
            })
        },
    )
    .await;
    assert_eq!(told.type_.as_deref(), Some("Warning"));
    assert!(agent.child_running(), "{}", logs());
    assert!(!logs().contains(" ERROR "), "{}", logs());

    // 3. The re-derived record still gives back everything: the config deleted as the
    //    controller deletes one on purpose (marked with its revision first, so that
    //    the agent gives back at once rather than after its grace), every file is
    //    what the node held before nodemem.
    let api = configs(client.clone());
    let revision = api.get(NODE).await.unwrap().data["spec"]["revision"]
        .as_str()
        .unwrap()
        .to_string();
    api.patch(
        NODE,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"metadata": {"annotations": {
            nodemem_api::GIVE_BACK_ANNOTATION: revision}}})),
    )
    .await
    .unwrap();
    api.delete(NODE, &Default::default()).await.unwrap();
    eventually(
        "every value given back",
        Duration::from_secs(30),
        &logs,
        async || tree_mismatches(&tree, &untouched).is_empty().then_some(()),
    )
    .await;
    assert!(agent.child_running(), "{}", logs());
}

fn agent_log(dir: &Path) -> String {
    ["agent.log", "agent-2.log"]
        .iter()
        .map(|n| {
            format!(
                "{n}:\n{}\n",
                std::fs::read_to_string(dir.join(n)).unwrap_or_default()
            )
        })
        .collect()
}
