#!/usr/bin/env bash
# Lets a clean clone reuse the workspace crates the last green `.ci/run` built.
#
# Cargo judges a workspace crate fresh by its files' modification times: a file newer
# than the crate's last build makes it build again. Every file of a clean clone is new,
# so each of `make test`'s builds (the workspace, every tier's features, the release
# builds for amd64 and arm64) compiled every workspace crate again, minutes on two cores,
# though the cached target directory held them built from the same files.
#
#   ci-file-times.sh restore TARGET [TARGET...]   before `make test`
#   ci-file-times.sh record TARGET [TARGET...]    after a green `make test`
#
# The first TARGET holds the record; every TARGET's builds count (`make test` builds in
# two: its second lane's tiers in TARGET-beside, tests/scripts/tiers.sh).
#
# `restore` gives every tracked file the time of the last commit that changed it, and
# leaves the checkout's time to the files that differ from the commit of the last green
# run (they are built again), when all of these hold; otherwise it changes nothing and
# every workspace crate is built again, as in any clean clone:
#   - TARGET holds the record of a green run (`record`), whose commit is an ancestor of
#     HEAD: that run built or checked every crate `make test` builds, from its files.
# A workspace crate that a build compiled after the record (a fingerprint of it newer
# than the record: a red run of another commit, a working tree with uncommitted edits)
# may hold files no commit since the record holds; its files keep the checkout's time
# too, so it is built again. (Until 2026-11-29 any such build made every crate build
# again: after a red CI run, the next one rebuilt the whole workspace, in debug for
# every tier and in release for both architectures.)
# A file's last commit is older than any build of it from a clone, so a crate built from
# the same files stays fresh and a crate whose files changed since the record is rebuilt.
#   - the green run was made in this same checkout directory: a test binary holds its
#     checkout's path (`env!("CARGO_MANIFEST_DIR")`, which cargo does not track), and
#     one taken as built from a clone at another path runs against files that may be
#     gone (seen 2026-11-30: a clone at a new path ran the CLI tests of a deleted one).
# Not covered: a crate no `make test` build uses, last built from other files before the
# record, and used again later (its files unchanged since the record).
set -euo pipefail
cd "$(dirname "$0")/../.."

mode="${1:?restore or record}"
target="${2:?the cargo target directory}"
targets=("${@:2}")
record="$target/nodemem-ci-green"

case "$mode" in
  record)
    for t in "${targets[@]}"; do
      mkdir -p "$t"
      printf '%s\n%s\n' "$(git rev-parse HEAD)" "$(pwd -P)" >"$t/nodemem-ci-green"
    done
    exit 0
    ;;
  restore) ;;
  *)
    echo "usage: $0 restore|record TARGET [TARGET...]" >&2
    exit 2
    ;;
esac

skip() {
  echo ">> file times: the checkout's ($1): every workspace crate is built again" >&2
  exit 0
}

[[ -s "$record" ]] || skip "no green run recorded in $target"
green="$(sed -n 1p "$record")"
built_in="$(sed -n 2p "$record")"
[[ "$built_in" == "$(pwd -P)" ]] || skip "the green run was built in another checkout (${built_in:-a record without one}), not $(pwd -P)"
git cat-file -e "$green^{commit}" 2>/dev/null || skip "the recorded commit $green is not in this clone"
git merge-base --is-ancestor "$green" HEAD || skip "the recorded commit $green is not an ancestor of HEAD"
# The workspace's packages by name: the directory of each tracked Cargo.toml with a
# [package] (its first `name = "..."` line).
declare -A package_dir=()
while IFS= read -r manifest; do
  name="$(awk -F'"' '/^\[package\]/ { p = 1 } p && /^name *=/ { print $2; exit }' "$manifest")"
  [[ -n "$name" ]] || continue
  dir="$(dirname "$manifest")"
  package_dir["$name"]="$dir"
done < <(git ls-files -- 'Cargo.toml' '*/Cargo.toml')

# Workspace packages a build compiled after the record: every fingerprint file newer
# than it names its unit's directory, `<package>-<hash>`.
declare -A rebuilt_dir=()
rebuilt_names=()
while IFS= read -r -d '' file; do
  unit="${file#*/.fingerprint/}"
  unit="${unit%%/*}"
  name="${unit%-*}"
  [[ -n "${package_dir[$name]+x}" && -z "${rebuilt_dir[${package_dir[$name]}]+x}" ]] || continue
  rebuilt_dir["${package_dir[$name]}"]=1
  rebuilt_names+=("$name")
done < <(find "${targets[@]}" -maxdepth 3 -type d -name .fingerprint -print0 2>/dev/null |
  xargs -0 -r sh -c 'find "$@" -type f -newer "$0" -print0' "$record")

# Whether PATH (relative) lies in a package a build compiled after the record (no
# process per call: the history walk below asks for every file).
in_rebuilt() {
  local dir="$1"
  while [[ "$dir" == */* ]]; do
    dir="${dir%/*}"
    [[ -z "${rebuilt_dir[$dir]+x}" ]] || return 0
  done
  [[ -n "${rebuilt_dir[.]+x}" ]]
}

declare -A changed=()
while IFS= read -r -d '' path; do
  changed["$path"]=1
done < <(git diff -z --name-only "$green" HEAD)

# One walk of the history: the first time a path shows is its last commit.
declare -A seen=()
kept=0
set_times=0
ts=""
while IFS= read -r line; do
  if [[ "$line" =~ ^@([0-9]+)$ ]]; then
    ts="${BASH_REMATCH[1]}"
    continue
  fi
  [[ -n "$line" && -z "${seen[$line]+x}" ]] || continue
  seen["$line"]=1
  [[ -f "$line" ]] || continue
  if [[ -n "${changed[$line]+x}" ]] || { [[ ${#rebuilt_dir[@]} -gt 0 ]] && in_rebuilt "$line"; }; then
    kept=$((kept + 1))
    continue
  fi
  touch -m -d "@$ts" -- "$line"
  set_times=$((set_times + 1))
done < <(git log --no-renames --format='@%ct' --name-only HEAD)

echo ">> file times: $set_times files at their last commit's time, $kept changed since the green run $green kept new" >&2
if [[ ${#rebuilt_names[@]} -gt 0 ]]; then
  echo ">> file times: built since the green run, so built again: ${rebuilt_names[*]}" >&2
fi
