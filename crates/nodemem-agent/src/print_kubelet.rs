//! `nodemem agent --print-kubelet`: what the agent reads of the host's kubelet, and
//! nothing else: the process it takes for the kubelet (and those it ignores), the
//! files and flags it read, and each field nodemem uses in the kubelet's own names
//! with the defaults of the kubelet's version (`KubeletSettings::as_run`), as the
//! kubelet's `/configz` prints them. For an on-call engineer who asks why nodemem
//! computed what it did, and for the real node's check of it against `/configz`.
//! Reads the same files the agent reads, with its arguments; writes nothing.

use nodemem_apply::kubelet::{KubeletSettings, OwnDropIn};
use nodemem_model::kubelet::version::{KubeletVersion, NEWEST_TESTED};
use nodemem_plumbing::{CliError, Outcome};
use serde_json::{json, Value};

use crate::args::{AgentArgs, OnceFormat};

pub fn run(args: &AgentArgs) -> Result<Outcome, CliError> {
    let version = match &args.kubelet_version {
        Some(text) => KubeletVersion::parse(text)
            .map_err(|e| CliError::one(format!("--kubelet-version {text}: {e}")))?,
        None => NEWEST_TESTED,
    };
    let files = crate::once::kubelet_files(args);
    // As the kubelet runs now: nodemem's own drop-in counts when it is on disk.
    let settings = files
        .read(OwnDropIn::OnDisk)
        .map_err(|e| CliError::one(format!("{}: {e}", e.reason())))?;
    let view = view(&settings, version);
    Ok(Outcome::ok(match args.output {
        OnceFormat::Json => format!("{}\n", serde_json::to_string_pretty(&view).expect("JSON")),
        OnceFormat::Table => table(&view),
    }))
}

/// Where the kubelet's configuration was read, then what it runs.
fn view(settings: &KubeletSettings, version: KubeletVersion) -> Value {
    let origin = &settings.origin;
    json!({
        "kubelet": origin.who(),
        "version": version.to_string(),
        "config": origin.config,
        "dropIns": origin.drop_ins,
        "flags": origin.flags,
        "ignored": origin.ignored.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
        "configuration": settings.as_run(version),
    })
}

/// One line per fact, the configuration's fields as `name: JSON value`.
fn table(view: &Value) -> String {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "(none)".to_string(),
        other => other.to_string(),
    };
    let mut out = String::new();
    for key in ["kubelet", "version", "config"] {
        out.push_str(&format!("{key}: {}\n", text(&view[key])));
    }
    for key in ["dropIns", "flags", "ignored"] {
        let items = view[key].as_array().cloned().unwrap_or_default();
        let items: Vec<String> = items.iter().map(text).collect();
        let items = if items.is_empty() {
            "(none)".to_string()
        } else {
            items.join(", ")
        };
        out.push_str(&format!("{key}: {items}\n"));
    }
    out.push_str(&format!(
        "what it runs (its defaults for {} where nothing names a field):\n",
        text(&view["version"])
    ));
    if let Some(fields) = view["configuration"].as_object() {
        for (name, value) in fields {
            out.push_str(&format!("  {name}: {value}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_where_it_read_and_what_the_kubelet_runs() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            "cgroupDriver: systemd\nevictionHard: {memory.available: 200Mi}\n",
        )
        .unwrap();
        let files = nodemem_apply::kubelet::KubeletFiles::given(config.clone(), None);
        let settings = files.read(OwnDropIn::OnDisk).unwrap();
        let shown = table(&view(&settings, KubeletVersion::v1(36)));
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(
            lines[0],
            "kubelet: the kubelet (its files given to the agent)"
        );
        assert_eq!(lines[1], "version: v1.36.0");
        assert_eq!(lines[2], format!("config: {}", config.display()));
        assert_eq!(
            &lines[3..6],
            ["dropIns: (none)", "flags: (none)", "ignored: (none)"]
        );
        assert!(shown.contains("  cgroupDriver: \"systemd\"\n"), "{shown}");
        assert!(
            shown.contains("  evictionHard: {\"memory.available\":\"209715200\"}\n"),
            "{shown}"
        );
        assert!(shown.contains("  memoryThrottlingFactor: 0.9\n"), "{shown}");
    }
}
