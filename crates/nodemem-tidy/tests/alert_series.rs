//! The alerts' unit tests (crates/nodemem-e2e/tests/alerts/nodemem_test.yaml, run by
//! promtool) feed series shaped as nodemem exports them: every nodemem series there
//! has a name the binaries register and exactly the labels they give it, besides the
//! scrape target's `job` and `instance` and, on the agents' series, the `node` the
//! chart's ServiceMonitor relabels from the agent pod's node. An alert tested on series
//! that do not exist would pass its test and never fire.

use std::collections::{BTreeMap, BTreeSet};

use nodemem_tidy::repo_root as repo;

mod exposition;

/// Label names of each exposed series name (`name{a="x",b="y"} 1`).
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    exposition::one_of_each()
        .lines()
        .filter(|l| l.starts_with("nodemem_"))
        .map(|l| {
            let selector = l.rsplit_once(' ').map_or(l, |(s, _)| s);
            let (name, labels) = split(selector);
            (name, labels.into_keys().collect())
        })
        .collect()
}

/// A series selector's name and labels (values without quotes or commas, as here).
fn split(selector: &str) -> (String, BTreeMap<String, String>) {
    let (name, rest) = selector.split_once('{').unwrap_or((selector, "}"));
    let labels = rest
        .trim_end_matches('}')
        .split(',')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("label=value");
            (k.to_string(), v.trim_matches('"').to_string())
        })
        .collect();
    (name.to_string(), labels)
}

#[test]
fn the_alert_tests_feed_series_as_nodemem_exports_them() {
    let path = repo().join("crates/nodemem-e2e/tests/alerts/nodemem_test.yaml");
    let tests: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let exported = exported();
    let target: BTreeSet<String> = ["job", "instance"].map(String::from).into();
    let mut checked = 0;
    for test in tests["tests"].as_array().unwrap() {
        for input in test["input_series"].as_array().unwrap() {
            let (name, labels) = split(input["series"].as_str().unwrap());
            if !name.starts_with("nodemem_") {
                assert_eq!(name, "up", "only Prometheus's own up besides nodemem's");
                continue;
            }
            let given: BTreeSet<String> = labels.keys().cloned().collect();
            let Some(real) = exported.get(&name) else {
                panic!("{name} is not a series nodemem exports");
            };
            let mut target = target.clone();
            if name.starts_with("nodemem_agent_") {
                target.insert("node".to_string());
            }
            let own: BTreeSet<String> = given.difference(&target).cloned().collect();
            let real_own: BTreeSet<String> = real.difference(&target).cloned().collect();
            assert_eq!(own, real_own, "{name}'s labels");
            assert!(given.is_superset(&target), "{name} without {target:?}");
            checked += 1;
        }
    }
    assert!(checked >= 15, "{checked}");
}
