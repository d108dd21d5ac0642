//! The chart's values, its schema and its README agree (as the CRDs are checked against
//! the code): every value in values.yaml has a schema of its own and a README row with
//! its default, and neither names a value that does not exist. A value is a top-level
//! key that is not a group (an empty mapping, `commonLabels: {}`, is one), or a key of a
//! group (`agent.resources` is one value, its default an object). `global` is Helm's:
//! a parent chart sets whatever globals it has there, so its schema takes any key, and
//! the keys nodemem reads (`global.imageRegistry`) are values of their own.

use std::collections::BTreeMap;

use serde_json::Value;

use nodemem_tidy::repo_root as repo;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// values.yaml's values by key, with their defaults.
fn values() -> BTreeMap<String, Value> {
    let values: Value = serde_yaml::from_str(&read("charts/nodemem/values.yaml")).unwrap();
    let mut all = BTreeMap::new();
    for (key, value) in values.as_object().expect("a mapping") {
        match value.as_object().filter(|g| !g.is_empty()) {
            Some(group) => {
                for (k, v) in group {
                    all.insert(format!("{key}.{k}"), v.clone());
                }
            }
            None => {
                all.insert(key.clone(), value.clone());
            }
        }
    }
    all
}

/// Helm's values from a parent chart: any key.
const GLOBAL: &str = "global";

/// The schema's values, the same way.
fn schema_keys() -> Vec<String> {
    let schema: Value = serde_json::from_str(&read("charts/nodemem/values.schema.json")).unwrap();
    assert_eq!(
        schema["additionalProperties"], false,
        "unknown top-level keys refused"
    );
    let mut keys = Vec::new();
    for (key, s) in schema["properties"].as_object().unwrap() {
        let group = s["type"] == "object" && (s["additionalProperties"] == false || key == GLOBAL);
        match s["properties"]
            .as_object()
            .filter(|_| group && !is_kubernetes_type(s))
        {
            Some(props) => keys.extend(props.keys().map(|k| format!("{key}.{k}"))),
            None => keys.push(key.clone()),
        }
    }
    keys
}

/// A schema of one of Kubernetes' own objects (resources, affinity) rather than a group
/// of values: it describes itself.
fn is_kubernetes_type(s: &Value) -> bool {
    s.get("description").is_some()
}

/// The README's rows: key and default (JSON in backticks).
fn readme() -> BTreeMap<String, Value> {
    read("charts/nodemem/README.md")
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let key = cells[0]
                .trim_start_matches("| ")
                .trim_matches('`')
                .to_string();
            let default = cells[1].trim_matches('`');
            let default = serde_json::from_str(default)
                .unwrap_or_else(|e| panic!("README: {key}'s default {default}: {e}"));
            (key, default)
        })
        .collect()
}

#[test]
fn every_value_has_a_schema_and_a_readme_row_with_its_default() {
    let values = values();
    let mut schema = schema_keys();
    schema.sort();
    let keys: Vec<String> = values.keys().cloned().collect();
    assert_eq!(schema, keys, "values.schema.json against values.yaml");
    let readme = readme();
    let rows: Vec<String> = readme.keys().cloned().collect();
    assert_eq!(rows, keys, "charts/nodemem/README.md against values.yaml");
    for (key, default) in &values {
        assert_eq!(&readme[key], default, "README: {key}'s default");
    }
}

#[test]
fn every_group_and_object_refuses_unknown_keys() {
    let schema: Value = serde_json::from_str(&read("charts/nodemem/values.schema.json")).unwrap();
    // Objects whose keys are the user's: maps of labels, selectors, quantities.
    fn walk(s: &Value, at: &str, open: &mut Vec<String>) {
        if let Some(props) = s["properties"].as_object() {
            if s["additionalProperties"] != false && at != format!(".{GLOBAL}") {
                open.push(at.to_string());
            }
            for (k, v) in props {
                walk(v, &format!("{at}.{k}"), open);
            }
        }
        if let Some(items) = s.get("items") {
            walk(items, &format!("{at}[]"), open);
        }
    }
    let mut open = Vec::new();
    walk(&schema, "", &mut open);
    assert!(
        open.is_empty(),
        "objects with properties that take any key: {open:?}"
    );
}
