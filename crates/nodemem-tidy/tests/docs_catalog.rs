//! docs/metrics.md is the catalog of what nodemem exposes: every metric the agent and
//! the controller register, every condition type and reason, every Event reason. This
//! keeps it exact: metrics are compared with the registries both ways; reasons with the
//! capitalized string literals of the code that writes conditions and Events.

use std::collections::BTreeSet;

mod exposition;

use nodemem_tidy::repo_root as repo;

fn doc() -> String {
    std::fs::read_to_string(repo().join("docs/metrics.md")).expect("docs/metrics.md")
}

/// `name` from `# TYPE name type` lines.
fn registered(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Backticked names in the doc's rows that start with `prefix`.
fn documented(doc: &str, prefix: &str) -> BTreeSet<String> {
    doc.lines()
        .filter(|l| l.starts_with('|'))
        .flat_map(|l| l.split('`').skip(1).step_by(2).map(str::to_string))
        .filter(|n| n.starts_with(prefix))
        .collect()
}

#[test]
fn every_registered_metric_is_documented_and_nothing_else() {
    let text = exposition::one_of_each();
    let names = registered(&text);
    assert!(names.len() > 20, "{names:?}");
    // Counters are exposed with `_total`, infos with `_info`; the doc names the
    // exposed series.
    let exposed: BTreeSet<String> = names
        .iter()
        .map(|n| {
            if text.contains(&format!("# TYPE {n} counter")) {
                format!("{n}_total")
            } else if text.contains(&format!("# TYPE {n} info")) {
                format!("{n}_info")
            } else {
                n.clone()
            }
        })
        .collect();
    let doc = doc();
    let listed = documented(&doc, "nodemem_");
    let missing: Vec<_> = exposed.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&exposed).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/metrics.md: missing {missing:?}, not registered {stale:?}"
    );
}

/// The files that write conditions and Events (a path ending in `/`: every file in
/// that directory).
const SOURCES: &[&str] = &[
    "crates/nodemem-agent/src/status.rs",
    "crates/nodemem-agent/src/health.rs",
    "crates/nodemem-apply/src/applier.rs",
    "crates/nodemem-apply/src/applier/",
    "crates/nodemem-apply/src/kubelet/conflict.rs",
    "crates/nodemem-agent/src/node_sync.rs",
    "crates/nodemem-agent/src/node_sync/",
    "crates/nodemem-agent/src/kubelet_mode.rs",
    "crates/nodemem-controller/src/decide.rs",
    "crates/nodemem-controller/src/decide/",
    "crates/nodemem-controller/src/agents/blocked.rs",
    "crates/nodemem-controller/src/run.rs",
    // Reasons the model names: kernel warnings (KernelSupported) and kubelet refusals.
    "crates/nodemem-model/src/warning.rs",
    "crates/nodemem-model/src/node/kubelet_dropin.rs",
];

fn source_files(source: &str) -> Vec<std::path::PathBuf> {
    let path = repo().join(source);
    if !source.ends_with('/') {
        return vec![path];
    }
    let mut files: Vec<_> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        // A module of tests of its own (`mod x_tests;` under `#[cfg(test)]`) is test code.
        .filter(|p| {
            !p.file_stem()
                .is_some_and(|s| s.to_string_lossy().ends_with("tests"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{source} holds no source file");
    files
}

/// Capitalized identifiers in string literals outside tests: condition types, reasons,
/// and a few other words the allow-list names.
fn literals() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for file in SOURCES.iter().flat_map(|s| source_files(s)) {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (i, part) in code.split('"').enumerate() {
            let word = i % 2 == 1
                && part.len() > 2
                && part.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && part.chars().all(|c| c.is_ascii_alphanumeric())
                && part.chars().any(|c| c.is_ascii_lowercase());
            if word {
                out.insert(part.to_string());
            }
        }
    }
    out
}

/// Capitalized literals in those files that are not condition types or reasons: kinds,
/// Event types and actions, condition statuses, pod phases, kubelet policy names.
const NOT_REASONS: &[&str] = &[
    "Normal",
    "Warning",
    "Node",
    "Pod",
    "NodeMemoryConfig",
    "NodeMemoryPolicy",
    "DaemonSet",
    "Lease",
    "Eviction",
    "True",
    "False",
    "Unknown",
    "Running",
    "Succeeded",
    // A pod condition type the controller reads (agents/blocked.rs), not one it writes.
    "PodScheduled",
    "Failed",
    "Apply",
    "Recover",
    "Relieve",
    "Pin",
    "Classify",
    "Repair",
    "Rollout",
    "Static",
    "None",
    "TieredReservation",
];

#[test]
fn every_condition_and_event_reason_is_documented_and_exists() {
    let doc = doc();
    let in_doc: BTreeSet<String> = doc
        .lines()
        .filter(|l| l.starts_with('|'))
        .flat_map(|l| l.split('`').skip(1).step_by(2).map(str::to_string))
        .filter(|w| {
            !w.starts_with("nodemem_") && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        })
        .collect();
    let code = literals();
    let undocumented: Vec<&String> = code
        .iter()
        .filter(|w| !NOT_REASONS.contains(&w.as_str()) && !in_doc.contains(*w))
        .collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/metrics.md: {undocumented:?}"
    );
    let all_code: String = [
        "crates/nodemem/src",
        "crates/nodemem-model/src",
        "crates/nodemem-api/src",
        "crates/nodemem-apply/src",
        "crates/nodemem-agent/src",
        "crates/nodemem-nri/src",
        "crates/nodemem-controller/src",
        "crates/nodemem-plugin/src",
    ]
    .iter()
    .map(|d| walk(&repo().join(d)))
    .collect();
    let gone: Vec<&String> = in_doc
        .iter()
        .filter(|w| {
            // A string literal, a match arm, or a variant of an API enum whose name
            // is its serialized value (status.recommendation.reason).
            !all_code.contains(&format!("\"{w}\""))
                && !all_code.contains(&format!("{w} =>"))
                && !all_code.lines().any(|l| l.trim() == format!("{w},"))
        })
        .collect();
    assert!(
        gone.is_empty(),
        "docs/metrics.md names what the code no longer has: {gone:?}"
    );
}

fn walk(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.push_str(&walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
    out
}

/// Relative links in the README and docs/ point at files that exist.
#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut pages = vec![repo().join("README.md"), repo().join("TESTING.md")];
    for e in std::fs::read_dir(repo().join("docs")).unwrap().flatten() {
        pages.push(e.path());
    }
    let mut checked = 0;
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for part in text.split("](").skip(1) {
            let target = part.split(')').next().unwrap();
            if target.starts_with("http") || target.starts_with('#') || target.contains(' ') {
                continue;
            }
            let path = target.split('#').next().unwrap();
            let resolved = page.parent().unwrap().join(path);
            assert!(
                resolved.exists(),
                "{}: link to {target} is broken",
                page.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 10, "{checked} links");
}

/// Every Markdown table in docs/ and the READMEs renders with the columns its header
/// names: a row with more cells loses the extra ones (a `|` inside a cell must be
/// escaped), a row with fewer is a row of another table run into this one.
#[test]
fn every_docs_table_row_has_its_headers_columns() {
    let mut files = vec![
        repo().join("README.md"),
        repo().join("charts/nodemem/README.md"),
    ];
    let mut docs: Vec<_> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut wrong = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        let mut header: Option<usize> = None;
        for (i, line) in text.lines().enumerate() {
            let Some(row) = line.trim().strip_prefix('|') else {
                header = None;
                continue;
            };
            let row = row.strip_suffix('|').unwrap_or(row);
            let cells = cells(row);
            match header {
                None => header = Some(cells),
                Some(n) if n != cells => wrong.push(format!(
                    "{}:{}: {cells} cells under a header of {n}",
                    file.strip_prefix(repo()).unwrap_or(&file).display(),
                    i + 1
                )),
                Some(_) => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Cells of a row without its outer pipes: `|` splits unless escaped (`\|`).
fn cells(row: &str) -> usize {
    let mut n = 1;
    let mut escaped = false;
    for c in row.chars() {
        match c {
            '\\' => escaped = !escaped,
            '|' if !escaped => n += 1,
            _ => escaped = false,
        }
        if c != '\\' {
            escaped = false;
        }
    }
    n
}
