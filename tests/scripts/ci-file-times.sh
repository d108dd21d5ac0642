#!/usr/bin/env bash
# Lets a clean clone reuse the workspace crates the last green `.ci/run` built.
#
# Cargo judges a workspace crate fresh by its files' modification times: a file newer
# than the crate's last build makes it build again. Every file of a clean clone is new,
# so each of `make test`'s builds (the workspace, every tier's features, the release
# builds for amd64 and arm64) compiled every workspace crate again, minutes on two cores,
# though the cached target directory held them built from the same files.
#
#   ci-file-times.sh restore TARGET   before `make test`
#   ci-file-times.sh record TARGET    after a green `make test`
#
# `restore` gives every tracked file the time of the last commit that changed it, and
# leaves the checkout's time to the files that differ from the commit of the last green
# run (they are built again), when all of these hold; otherwise it changes nothing and
# every workspace crate is built again, as in any clean clone:
#   - TARGET holds the record of a green run (`record`), whose commit is an ancestor of
#     HEAD: that run built or checked every crate `make test` builds, from its files;
#   - no build wrote to TARGET since (no fingerprint newer than the record): a build of a
#     working tree with uncommitted edits would leave crates built from files no commit
#     holds, which old times would then take as current.
# A file's last commit is older than any build of it from a clone, so a crate built from
# the same files stays fresh and a crate whose files changed since the record is rebuilt.
# Not covered: a crate no `make test` build uses, last built from other files before the
# record, and used again later (its files unchanged since the record).
set -euo pipefail
cd "$(dirname "$0")/../.."

mode="${1:?restore or record}"
target="${2:?the cargo target directory}"
record="$target/nodemem-ci-green"

case "$mode" in
  record)
    mkdir -p "$target"
    git rev-parse HEAD >"$record"
    exit 0
    ;;
  restore) ;;
  *)
    echo "usage: $0 restore|record TARGET" >&2
    exit 2
    ;;
esac

skip() {
  echo ">> file times: the checkout's ($1): every workspace crate is built again" >&2
  exit 0
}

[[ -s "$record" ]] || skip "no green run recorded in $target"
green="$(cat "$record")"
git cat-file -e "$green^{commit}" 2>/dev/null || skip "the recorded commit $green is not in this clone"
git merge-base --is-ancestor "$green" HEAD || skip "the recorded commit $green is not an ancestor of HEAD"
# One find over every fingerprint directory, stopping at the first newer file. (Not
# `... | head -n1`: under pipefail the finds that head stopped reading from die of
# SIGPIPE, xargs exits 125 and `set -e` ended `.ci/run` before it ran anything.)
newer="$(find "$target" -maxdepth 3 -type d -name .fingerprint -print0 |
  xargs -0 -r sh -c 'find "$@" -newer "$0" -print -quit' "$record")"
newer="${newer%%$'\n'*}"
[[ -z "$newer" ]] || skip "a build wrote $newer after the green run"

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
  if [[ -n "${changed[$line]+x}" ]]; then
    kept=$((kept + 1))
    continue
  fi
  touch -m -d "@$ts" -- "$line"
  set_times=$((set_times + 1))
done < <(git log --no-renames --format='@%ct' --name-only HEAD)

echo ">> file times: $set_times files at their last commit's time, $kept changed since the green run $green kept new" >&2
