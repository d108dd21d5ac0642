//! `.ci/run`'s file times (`tests/scripts/ci-file-times.sh`): a clean clone reuses what
//! the last green run built where its files did not change, and never takes a crate as
//! built when its files changed or when another build wrote to the target directory.
//! Checked with real cargo and git on a one-crate repository, each clone as CI makes it.

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

/// A repository holding one crate and the script, as this one holds them.
struct Origin {
    dir: tempfile::TempDir,
}

impl Origin {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("tests/scripts")).unwrap();
        std::fs::copy(
            repo().join("tests/scripts/ci-file-times.sh"),
            root.join("tests/scripts/ci-file-times.sh"),
        )
        .unwrap();
        std::fs::write(
            root.join("Cargo.toml"),
            "[package]\nname = \"one\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n",
        )
        .unwrap();
        std::fs::write(root.join("src/lib.rs"), "pub fn one() -> u32 { 1 }\n").unwrap();
        run(root, "git", &["init", "-q", "-b", "main"]);
        let origin = Origin { dir };
        origin.commit("first");
        origin
    }

    fn commit(&self, message: &str) {
        run(self.dir.path(), "git", &["add", "-A"]);
        run(self.dir.path(), "git", &["commit", "-q", "-m", message]);
    }

    /// A clean clone, as CI makes one (every file's time is now).
    fn clone(&self) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let from = self.dir.path().display().to_string();
        run(dir.path(), "git", &["clone", "-q", &from, "c"]);
        dir
    }

    /// A clone of the last commit only (`--depth 1`; git honours it for a file:// URL).
    fn shallow_clone(&self) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let from = format!("file://{}", self.dir.path().display());
        run(
            dir.path(),
            "git",
            &["clone", "-q", "--depth", "1", &from, "c"],
        );
        dir
    }
}

fn checkout(clone: &tempfile::TempDir) -> PathBuf {
    clone.path().join("c")
}

fn script(clone: &Path, mode: &str, target: &Path) -> String {
    run(
        clone,
        "bash",
        &[
            "tests/scripts/ci-file-times.sh",
            mode,
            target.to_str().unwrap(),
        ],
    )
}

/// A clean clone with `restore` run in it, which said `says`.
fn restored(origin: &Origin, target: &Path, says: &str) -> tempfile::TempDir {
    let clone = origin.clone();
    let said = script(&checkout(&clone), "restore", target);
    assert!(said.contains(says), "{said}");
    clone
}

/// Whether cargo compiled the crate (`Compiling one`) or took it as built.
fn cargo_compiles(clone: &Path, target: &Path) -> bool {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--offline"])
        .current_dir(clone)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    text.contains("Compiling one")
}

#[test]
fn a_clean_clone_reuses_the_green_runs_build_only_where_nothing_changed() {
    let origin = Origin::new();
    let target_dir = tempfile::tempdir().unwrap();
    let target = target_dir.path();
    // A second and more between builds and commits: commit times are whole seconds.
    let tick = || std::thread::sleep(std::time::Duration::from_millis(1100));

    // The first run: nothing recorded, the checkout's times, built; then recorded.
    let first = restored(&origin, target, "no green run recorded");
    assert!(cargo_compiles(&checkout(&first), target));
    tick();
    script(&checkout(&first), "record", target);

    // A later clean clone of the same commit: the crate is taken as built.
    tick();
    let same = restored(&origin, target, "at their last commit's time");
    assert!(
        !cargo_compiles(&checkout(&same), target),
        "nothing changed, yet it compiled"
    );

    // A commit changing the crate: its file keeps the clone's time and it is rebuilt.
    tick();
    std::fs::write(
        origin.dir.path().join("src/lib.rs"),
        "pub fn one() -> u32 { 2 }\n",
    )
    .unwrap();
    origin.commit("second");
    let changed = restored(&origin, target, "1 changed since the green run");
    assert!(
        cargo_compiles(&checkout(&changed), target),
        "a changed file was taken as built"
    );
    // That run was not green (no record): its build is newer than the record, and the
    // next clone is built again rather than trusted.
    let after_red = restored(&origin, target, "a build wrote");
    tick();
    script(&checkout(&after_red), "record", target);

    // A working tree's build (an edit no commit holds) written after the record: the
    // next clone does not trust the target directory.
    tick();
    let worktree = origin.clone();
    std::fs::write(
        checkout(&worktree).join("src/lib.rs"),
        "pub fn one() -> u32 { 3 }\n",
    )
    .unwrap();
    assert!(cargo_compiles(&checkout(&worktree), target));
    let next = restored(&origin, target, "a build wrote");
    assert!(
        cargo_compiles(&checkout(&next), target),
        "the working tree's build was reused"
    );
    tick();
    script(&checkout(&next), "record", target);

    // A shallow clone of a later commit does not hold the recorded one: not used (and
    // the script does not fail on a history it cannot walk).
    tick();
    std::fs::write(origin.dir.path().join("README"), "later\n").unwrap();
    origin.commit("later");
    let shallow = origin.shallow_clone();
    let said = script(&checkout(&shallow), "restore", target);
    assert!(said.contains("is not in this clone"), "{said}");
    assert!(cargo_compiles(&checkout(&shallow), target));
    tick();
    script(&checkout(&shallow), "record", target);

    // A record of a commit that is not an ancestor of HEAD (another branch) is not used.
    tick();
    run(
        origin.dir.path(),
        "git",
        &["checkout", "-q", "-b", "other", "HEAD~1"],
    );
    std::fs::write(
        origin.dir.path().join("src/lib.rs"),
        "pub fn one() -> u32 { 4 }\n",
    )
    .unwrap();
    origin.commit("elsewhere");
    let other = restored(&origin, target, "not an ancestor of HEAD");
    assert!(cargo_compiles(&checkout(&other), target));
}
