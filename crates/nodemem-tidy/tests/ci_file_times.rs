//! `.ci/run`'s file times (`tests/scripts/ci-file-times.sh`): a clean clone reuses what
//! the last green run built where its files did not change, and never takes a crate as
//! built when its files changed or when another build (a red run, a working tree)
//! compiled it since. Checked with real cargo and git on a repository of two crates,
//! each clone as CI makes it.

use std::path::{Path, PathBuf};
use std::process::Command;

use nodemem_tidy::repo_root as repo;

fn run(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?}: {text}");
    text
}

/// A repository holding two crates (`one`, `two`: neither uses the other) and the
/// script, as this one holds them.
struct Origin {
    dir: tempfile::TempDir,
    /// Where CI's clones go: one path, each clone replacing the one before.
    clones: tempfile::TempDir,
}

/// A clean clone: the directory that holds its checkout (`c`).
struct Clone(PathBuf);

impl Origin {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("tests/scripts")).unwrap();
        std::fs::copy(
            repo().join("tests/scripts/ci-file-times.sh"),
            root.join("tests/scripts/ci-file-times.sh"),
        )
        .unwrap();
        std::fs::write(
            root.join("Cargo.toml"),
            "[workspace]\nresolver = \"2\"\nmembers = [\"crates/one\", \"crates/two\"]\n",
        )
        .unwrap();
        for name in ["one", "two"] {
            let krate = root.join("crates").join(name);
            std::fs::create_dir_all(krate.join("src")).unwrap();
            std::fs::write(
                krate.join("Cargo.toml"),
                format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
            )
            .unwrap();
            std::fs::write(
                krate.join("src/lib.rs"),
                format!("pub fn {name}() -> u32 {{ 1 }}\n"),
            )
            .unwrap();
        }
        run(root, "git", &["init", "-q", "-b", "main"]);
        let origin = Origin {
            dir,
            clones: tempfile::tempdir().unwrap(),
        };
        origin.commit("first");
        origin
    }

    /// Writes `crates/NAME/src/lib.rs` returning `value`.
    fn set(&self, name: &str, value: u32) {
        write_crate(self.dir.path(), name, value);
    }

    fn commit(&self, message: &str) {
        run(self.dir.path(), "git", &["add", "-A"]);
        run(self.dir.path(), "git", &["commit", "-q", "-m", message]);
    }

    /// A commit whose time is `date` (a commit made on a machine whose clock is behind
    /// the one that builds, or one whose time a rebase kept).
    fn commit_dated(&self, message: &str, date: &str) {
        run(self.dir.path(), "git", &["add", "-A"]);
        let out = Command::new("git")
            .args(["commit", "-q", "-m", message])
            .current_dir(self.dir.path())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_DATE", date)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    /// A clean clone, as CI makes one (every file's time is now), at CI's one path.
    fn clone(&self) -> Clone {
        self.clone_into(self.clones.path(), &[])
    }

    /// A clean clone at a path of its own (another machine's, another job's).
    fn clone_elsewhere(&self) -> (tempfile::TempDir, Clone) {
        let dir = tempfile::tempdir().unwrap();
        let clone = self.clone_into(dir.path(), &[]);
        (dir, clone)
    }

    /// A clone of the last commit only (`--depth 1`; git honours it for a file:// URL).
    fn shallow_clone(&self) -> Clone {
        self.clone_into(self.clones.path(), &["--depth", "1"])
    }

    fn clone_into(&self, dir: &Path, options: &[&str]) -> Clone {
        let _ = std::fs::remove_dir_all(dir.join("c"));
        let from = format!("file://{}", self.dir.path().display());
        let mut args = vec!["clone", "-q"];
        args.extend(options);
        args.extend([from.as_str(), "c"]);
        run(dir, "git", &args);
        Clone(dir.to_path_buf())
    }
}

fn write_crate(root: &Path, name: &str, value: u32) {
    std::fs::write(
        root.join("crates").join(name).join("src/lib.rs"),
        format!("pub fn {name}() -> u32 {{ {value} }}\n"),
    )
    .unwrap();
}

fn checkout(clone: &Clone) -> PathBuf {
    clone.0.join("c")
}

fn script(clone: &Path, mode: &str, target: &Path) -> String {
    script_for(clone, mode, &[target])
}

/// The script with several target directories (`make test`'s two lanes').
fn script_for(clone: &Path, mode: &str, targets: &[&Path]) -> String {
    let mut args = vec!["tests/scripts/ci-file-times.sh", mode];
    args.extend(targets.iter().map(|t| t.to_str().unwrap()));
    run(clone, "bash", &args)
}

/// A clean clone with `restore` run in it, which said `says`.
fn restored(origin: &Origin, target: &Path, says: &str) -> Clone {
    let clone = origin.clone();
    let said = script(&checkout(&clone), "restore", target);
    assert!(said.contains(says), "{said}");
    clone
}

/// The crates cargo compiled (`Compiling NAME`) rather than took as built.
fn cargo_compiles(clone: &Path, target: &Path) -> Vec<String> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--offline"])
        .current_dir(clone)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    ["one", "two"]
        .into_iter()
        .filter(|name| text.contains(&format!("Compiling {name} ")))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_clean_clone_reuses_the_green_runs_build_only_where_nothing_changed() {
    let origin = Origin::new();
    let target_dir = tempfile::tempdir().unwrap();
    let target = target_dir.path();
    // A second and more between builds and commits: commit times are whole seconds.
    let tick = || std::thread::sleep(std::time::Duration::from_millis(1100));
    let both = vec!["one".to_string(), "two".to_string()];
    let only = |name: &str| vec![name.to_string()];

    // The first run: nothing recorded, the checkout's times, built; then recorded.
    let first = restored(&origin, target, "no green run recorded");
    assert_eq!(cargo_compiles(&checkout(&first), target), both);
    tick();
    script(&checkout(&first), "record", target);

    // A later clean clone of the same commit: both crates are taken as built.
    tick();
    let same = restored(&origin, target, "at their last commit's time");
    assert!(
        cargo_compiles(&checkout(&same), target).is_empty(),
        "nothing changed, yet it compiled"
    );

    // A commit changing `one`: its file keeps the clone's time and it alone is rebuilt.
    tick();
    origin.set("one", 2);
    origin.commit("second");
    let changed = restored(&origin, target, "1 changed since the green run");
    assert_eq!(
        cargo_compiles(&checkout(&changed), target),
        only("one"),
        "a changed file was taken as built, or an unchanged crate rebuilt"
    );
    // That run was red (no record). The next commit takes `one` back to the green
    // run's file, with a commit time from before that red build (another machine's
    // clock): no file differs from the recorded commit and none is newer than the
    // build, but the target holds the red run's `one`. It is built again, because a
    // build compiled it since the record; `two` is still taken as built.
    tick();
    origin.set("one", 1);
    origin.commit_dated("back", "2001-01-01T00:00:00Z");
    let after_red = restored(
        &origin,
        target,
        "built since the green run, so built again: one",
    );
    assert_eq!(
        cargo_compiles(&checkout(&after_red), target),
        only("one"),
        "the red run's build was reused, or the untouched crate rebuilt"
    );
    tick();
    script(&checkout(&after_red), "record", target);

    // A working tree's build (an edit of `two` no commit holds; the tree's other files
    // as old as their commits) written after the record: the next clone builds `two`
    // again, and only `two`.
    tick();
    let worktree = restored(&origin, target, "at their last commit's time");
    tick();
    write_crate(&checkout(&worktree), "two", 3);
    assert_eq!(cargo_compiles(&checkout(&worktree), target), only("two"));
    let next = restored(
        &origin,
        target,
        "built since the green run, so built again: two",
    );
    assert_eq!(
        cargo_compiles(&checkout(&next), target),
        only("two"),
        "the working tree's build was reused"
    );
    tick();
    script(&checkout(&next), "record", target);

    // A clone of the same commit at another path: its test binaries would hold the
    // green run's checkout path, so nothing is taken as built.
    tick();
    let (_elsewhere_dir, elsewhere) = origin.clone_elsewhere();
    let said = script(&checkout(&elsewhere), "restore", target);
    assert!(said.contains("built in another checkout"), "{said}");
    assert_eq!(cargo_compiles(&checkout(&elsewhere), target), both);
    tick();
    script(&checkout(&elsewhere), "record", target);
    // And back at CI's path, after a green run elsewhere: the same.
    tick();
    let back = restored(&origin, target, "built in another checkout");
    assert_eq!(cargo_compiles(&checkout(&back), target), both);
    tick();
    script(&checkout(&back), "record", target);

    // A shallow clone of a later commit does not hold the recorded one: not used (and
    // the script does not fail on a history it cannot walk).
    tick();
    std::fs::write(origin.dir.path().join("README"), "later\n").unwrap();
    origin.commit("later");
    let shallow = origin.shallow_clone();
    let said = script(&checkout(&shallow), "restore", target);
    assert!(said.contains("is not in this clone"), "{said}");
    assert_eq!(cargo_compiles(&checkout(&shallow), target), both);
    tick();
    script(&checkout(&shallow), "record", target);

    // A record of a commit that is not an ancestor of HEAD (another branch) is not used.
    tick();
    run(
        origin.dir.path(),
        "git",
        &["checkout", "-q", "-b", "other", "HEAD~1"],
    );
    origin.set("one", 4);
    origin.commit("elsewhere");
    let other = restored(&origin, target, "not an ancestor of HEAD");
    assert_eq!(cargo_compiles(&checkout(&other), target), both);
}

/// `make test` builds in two target directories (its second lane's, TARGET-beside): a
/// red run that built a crate in the second alone still makes the next clone build it
/// again there, though the first holds nothing newer than the record.
#[test]
fn a_build_in_the_second_lanes_target_counts_as_one_in_the_first() {
    let origin = Origin::new();
    let (first_dir, beside_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (first, beside) = (first_dir.path(), beside_dir.path());
    let both_targets = [first, beside];
    let tick = || std::thread::sleep(std::time::Duration::from_millis(1100));
    let both = vec!["one".to_string(), "two".to_string()];

    let green = origin.clone();
    let said = script_for(&checkout(&green), "restore", &both_targets);
    assert!(said.contains("no green run recorded"), "{said}");
    assert_eq!(cargo_compiles(&checkout(&green), first), both);
    assert_eq!(cargo_compiles(&checkout(&green), beside), both);
    tick();
    script_for(&checkout(&green), "record", &both_targets);
    assert!(
        beside.join("nodemem-ci-green").is_file(),
        "recorded in both"
    );

    // A red run of a commit changing `one`, built in the second lane's target only.
    tick();
    origin.set("one", 2);
    origin.commit("second");
    let red = origin.clone();
    script_for(&checkout(&red), "restore", &both_targets);
    assert_eq!(
        cargo_compiles(&checkout(&red), beside),
        vec!["one".to_string()]
    );

    // The next commit takes `one` back, dated before the red build: no file differs
    // from the recorded commit, yet the second target holds the red run's `one`.
    tick();
    origin.set("one", 1);
    origin.commit_dated("back", "2001-01-01T00:00:00Z");
    let next = origin.clone();
    let said = script_for(&checkout(&next), "restore", &both_targets);
    assert!(
        said.contains("built since the green run, so built again: one"),
        "{said}"
    );
    assert_eq!(
        cargo_compiles(&checkout(&next), beside),
        vec!["one".to_string()],
        "the red run's build in the second target was reused"
    );
    assert_eq!(
        cargo_compiles(&checkout(&next), first),
        vec!["one".to_string()]
    );
}
