//! Every tier `make test` runs has its time budget in TESTING.md (issue 57), and
//! `tests/scripts/tiers.sh`, which reads that table, prints each tier's time against its
//! budget and warns when a tier overspends or has no budget: run here with a stand-in
//! for `make` that takes a known time per tier.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use nodemem_tidy::repo_root as repo;

/// TESTING.md's Budgets table: tier -> (cold seconds, warm seconds).
fn budgets(testing_md: &str) -> BTreeMap<String, (u64, u64)> {
    let mut inside = false;
    let mut out = BTreeMap::new();
    for line in testing_md.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            inside = title == "Budgets";
            continue;
        }
        if !inside || !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let seconds = |cell: &str| -> u64 {
            cell.chars()
                .filter(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .unwrap_or_else(|_| panic!("a number of seconds in {line:?}"))
        };
        out.insert(
            cells[1].trim_matches('`').to_string(),
            (seconds(cells[2]), seconds(cells[3])),
        );
    }
    out
}

/// The tiers of the Makefile's `NAME =` line (`TIERS`, the first lane; `BESIDE`, the
/// second), in order.
fn make_line(name: &str) -> Vec<String> {
    let makefile = std::fs::read_to_string(repo().join("Makefile")).unwrap();
    let line = makefile
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .unwrap_or_else(|| panic!("a {name} = line in the Makefile"));
    line.split_whitespace().map(str::to_string).collect()
}

/// Every tier `make test` runs, the first lane's then the second's.
fn make_test_tiers() -> Vec<String> {
    let mut tiers = make_line("TIERS");
    tiers.extend(make_line("BESIDE"));
    tiers
}

#[test]
fn every_tier_has_a_cold_and_a_warm_budget_that_add_up_to_the_runs_own() {
    let testing = std::fs::read_to_string(repo().join("TESTING.md")).unwrap();
    let table = budgets(&testing);
    let tiers = make_test_tiers();
    assert!(tiers.len() >= 10, "{tiers:?}");
    let missing: Vec<&String> = tiers.iter().filter(|t| !table.contains_key(*t)).collect();
    assert!(
        missing.is_empty(),
        "tiers without a row in TESTING.md's Budgets table: {missing:?}"
    );
    let stray: Vec<&String> = table
        .keys()
        .filter(|t| *t != "in-all" && !tiers.contains(t))
        .collect();
    assert!(stray.is_empty(), "budgets for no tier: {stray:?}");
    let (cold, warm) = table["in-all"];
    // The targets: 60 minutes cold (issues 58-64; issue 57's 45 is out of reach while a
    // cold run builds everything from source on two cores), 30 warm.
    assert!(cold <= 60 * 60 && warm <= 30 * 60, "{cold} {warm}");
    // Each lane within the run's budget: the first lane's tiers one after the other,
    // the second's beside them from the start of BESIDE_FROM on.
    let (first, beside) = (make_line("TIERS"), make_line("BESIDE"));
    let from = make_line("BESIDE_FROM").remove(0);
    let at = first
        .iter()
        .position(|t| *t == from)
        .unwrap_or_else(|| panic!("BESIDE_FROM {from} is not a tier of TIERS {first:?}"));
    let sum = |lane: &[String], pick: fn(&(u64, u64)) -> u64| -> u64 {
        lane.iter().map(|t| pick(&table[t])).sum()
    };
    let before = &first[..at];
    for (what, pick, whole) in [
        (
            "cold",
            (|b: &(u64, u64)| b.0) as fn(&(u64, u64)) -> u64,
            cold,
        ),
        ("warm", |b: &(u64, u64)| b.1, warm),
    ] {
        assert!(
            sum(&first, pick) <= whole,
            "the first lane's {what} budgets add up to {} s, over the run's {whole} s",
            sum(&first, pick)
        );
        assert!(
            sum(&beside, pick) + sum(before, pick) <= whole,
            "the second lane's {what} budgets add up to {} s, over the run's {whole} s after {before:?}",
            sum(&beside, pick),
        );
    }
    for t in &tiers {
        let (c, w) = table[t];
        assert!(w <= c, "{t}: a warm budget over its cold one ({w} > {c})");
    }
}

/// tiers.sh with a stand-in `make` that sleeps 2 s for each tier but `fast` (30 s for
/// `slow`; it fails the tier named `fail`), a budgets table and a cache that is empty or
/// not: the command, to be run.
fn tiers_command(dir: &Path, tiers: &[&str], warm: bool, fail: &str) -> Command {
    let make = dir.join("make");
    std::fs::write(
        &make,
        format!(
            "#!/bin/bash\n# $1 is --no-print-directory, $2 the tier\necho \"tier $2 ran at nice $(nice) in $CARGO_TARGET_DIR\"\ntouch \"$(dirname \"$0\")/started-$2\"\n\
             [ \"$2\" = fast ] || sleep 2\n[ \"$2\" = slow ] && sleep 30\n[ \"$2\" = {fail:?} ] && exit 3\n\
             [ \"$2\" = node ] && echo 'real-x: Ready 30 s after qemu started (reference 65 s): budgets x1.00; VM speed: 200k shell rounds in 0.40 s'\nexit 0\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&make, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let testing = dir.join("TESTING.md");
    std::fs::write(
        &testing,
        "# T\n\n## Budgets\n\n| tier | cold (s) | warm (s) | set from |\n| --- | --- | --- | --- |\n\
         | `fast` | 5 | 5 | x |\n| `node` | 1 | 1 | x |\n| `in-all` | 100 | 1 | x |\n\n## Other\n\n| `late` | 1 | 1 | x |\n",
    )
    .unwrap();
    let cache = dir.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(cache.join("bin")).unwrap();
    if warm {
        std::fs::write(cache.join("bin/etcd"), "").unwrap();
    }
    for t in tiers {
        let _ = std::fs::remove_file(dir.join(format!("started-{t}")));
    }
    let mut command = Command::new("bash");
    command
        .arg(repo().join("tests/scripts/tiers.sh"))
        .args(tiers)
        .env("MAKE", &make)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("NODEMEM_TESTING_MD", &testing)
        .env("NODEMEM_CACHE", &cache);
    command
}

/// This process's nice value, as `nice` prints it.
fn own_nice() -> String {
    let out = Command::new("nice").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// [`tiers_command`] run to its end: its exit code and output.
fn run_tiers(dir: &Path, tiers: &[&str], warm: bool, fail: &str) -> (i32, String) {
    let out = tiers_command(dir, tiers, warm, fail).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn tiers_sh_prints_each_tiers_time_against_its_budget_and_warns_when_over() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = run_tiers(dir.path(), &["fast", "node", "late"], false, "none");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("tier fast ran") && out.contains("tier late ran"),
        "{out}"
    );
    // The first lane at the run's own priority (`make test` beside a real node runs
    // this test at nice 19 itself).
    assert!(
        out.contains(&format!("tier fast ran at nice {}", own_nice())),
        "{out}"
    );
    assert!(out.contains("against their cold budgets"), "{out}");
    let row = |tier: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(tier) && l.contains(" s"))
            .unwrap_or_else(|| panic!("no row for {tier} in\n{out}"))
            .to_string()
    };
    assert!(
        row("fast").contains("of     5 s") && !row("fast").contains("OVER"),
        "{out}"
    );
    assert!(row("node").contains("of     1 s  OVER"), "{out}");
    // A row outside the Budgets section is not a budget.
    assert!(row("late").contains("(no budget)"), "{out}");
    assert!(row("in all").contains("of   100 s"), "{out}");
    // (2 s or more: beside a real node this test runs at nice 19.)
    assert!(
        out.lines()
            .any(|l| l.starts_with("WARNING: tier node took ")
                && l.ends_with(" s, over its cold budget of 1 s")),
        "{out}"
    );
    assert!(
        out.contains("WARNING: tier late has no row in TESTING.md's Budgets table"),
        "{out}"
    );
    assert!(!out.contains("WARNING: make test took"), "{out}");
    assert!(
        out.contains("real-x: Ready 30 s after qemu started")
            && out.contains("shell rounds in 0.40 s"),
        "the nodes' speed: {out}"
    );

    // Warm: the warm column, the run's own budget overspent, and a failing tier ends
    // the run with its exit status and its row.
    let (code, out) = run_tiers(dir.path(), &["fast", "node", "late"], true, "node");
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("against their warm budgets"), "{out}");
    assert!(!out.contains("tier late ran"), "{out}");
    assert!(out.contains("FAILED (exit 3)"), "{out}");
    assert!(
        out.contains("WARNING: make test took") && out.contains("over its warm budget of 1 s"),
        "{out}"
    );
}

/// CI ends a run at its limit with SIGTERM: the table still comes, with the tiers done
/// and the stopped one (before, the last lines of such a run said nothing of where its
/// time had gone).
#[test]
fn tiers_sh_stopped_by_a_signal_prints_the_table_so_far() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let child = tiers_command(dir.path(), &["fast", "slow", "late"], false, "none")
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Into `slow` (fast ends at once, slow sleeps 2 s and then 30): its start seen, not
    // guessed (a fixed wait missed it on a busy machine).
    let started = dir.path().join("started-slow");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !started.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(started.exists(), "slow never started");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let group = format!("-{}", child.id());
    let killed = Command::new("kill")
        .args(["-TERM", "--", &group])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(143), "{text}");
    assert!(text.contains("against their cold budgets"), "{text}");
    let slow = text
        .lines()
        .find(|l| l.trim_start().starts_with("slow"))
        .unwrap_or_else(|| panic!("no row for the stopped tier in\n{text}"));
    assert!(slow.contains("STOPPED by a signal"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("fast") && l.contains("of     5 s")),
        "{text}"
    );
    assert!(!text.contains("tier late ran"), "{text}");
    assert!(text.contains("in all"), "{text}");
}

/// The second lane (`--beside FROM`): its tiers run from the start of the first lane's
/// FROM on, at nice 19 in a target directory of their own, their rows under the first
/// lane's; one that fails fails the run with its last lines; a failure in the first lane
/// stops them.
#[test]
fn tiers_sh_runs_the_second_lane_beside_at_the_lowest_priority() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    // `fast` then `node`, and BESIDE beside `node`; the tier `fail` fails.
    let lanes = |beside: [&str; 2], fail: &str| {
        let mut tiers = vec!["fast", "node", "--beside", "node"];
        tiers.extend(beside);
        run_tiers(dir.path(), &tiers, false, fail)
    };
    let (code, out) = lanes(["late", "fast"], "none");
    assert_eq!(code, 0, "{out}");
    let beside = format!("{}-beside", target.display());
    let log = std::fs::read_to_string(format!("{beside}/make-test-beside.log")).expect(&out);
    assert!(
        log.contains(&format!("tier late ran at nice 19 in {beside}")),
        "{log}"
    );
    let summary = &out[out.find("against their cold budgets").expect(&out)..];
    let lane = summary.find("beside, at the lowest priority from the start of node on");
    let late = summary.find("late ");
    assert!(
        lane.is_some() && late > lane,
        "the second lane's rows: {out}"
    );
    assert!(out.contains("WARNING: tier late has no row"), "{out}");

    // A tier beside fails: the run does, its output's last lines shown.
    let (code, out) = lanes(["late", "fast"], "late");
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("FAILED (exit 3)"), "{out}");
    assert!(
        out.contains("the last lines of late, the failed tier beside"),
        "{out}"
    );
    assert!(out.contains("   | tier late ran at nice 19"), "{out}");

    // The first lane fails while `slow` runs beside: the second lane is stopped.
    let (code, out) = lanes(["slow", "late"], "node");
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("STOPPED: a tier before it failed"), "{out}");
    assert!(!out.contains("tier late ran"), "{out}");
}
