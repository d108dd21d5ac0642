#!/usr/bin/env bash
# `make test`: each tier (`make <tier>`) in order, stopping at the first that fails, and
# each tier's time printed at the end either way, beside its budget, so that a run's
# output (CI keeps its last lines) says where the time went and which tier overspent.
#
# The budgets are TESTING.md's "Budgets" table (one source: this script reads it), a
# cold and a warm figure per tier. The run is cold when the cache of built test
# dependencies (NODEMEM_CACHE/bin: the control plane, the kubelets, the Go tools) was
# empty when it began, warm otherwise. A tier over its budget gets a WARNING line; a
# tier without a row in the table gets one too. Budgets warn, they never fail a run:
# the machine's speed varies (each run prints its VMs' speed below the table).
#
# Stopped by a signal (CI ends a run at its time limit with SIGTERM), it prints the
# same table first, the stopped tier's row saying so: the last lines of a run CI
# ended say where its time went, as a run that ended by itself does.
set -uo pipefail
make_cmd="${MAKE:-make}"
here="$(cd "$(dirname "$0")" && pwd)"
testing_md="${NODEMEM_TESTING_MD:-$here/../../TESTING.md}"
cache="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"

if [ -n "$(ls -A "$cache/bin" 2>/dev/null)" ]; then
  kind=warm
  why="$cache/bin held builds at the start"
else
  kind=cold
  why="nothing in $cache/bin at the start"
fi

# budget TIER: the tier's budget in seconds for this run's kind, empty when it has no row.
budget() {
  awk -v tier="$1" -v col="$([ "$kind" = cold ] && echo 3 || echo 4)" '
    /^## / { inside = ($0 == "## Budgets") ; next }
    inside && /^\| `/ {
      n = split($0, f, "|")
      name = f[2]; gsub(/[ `]/, "", name)
      if (name == tier) { v = f[col]; gsub(/[^0-9]/, "", v); print v; exit }
    }' "$testing_md"
}

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
lines=()
warnings=()
status=0
spent=0
began=$(date +%s)
tier=
start=$began

# The table of the tiers run so far, the run's own time and the nodes' speed.
summary() {
  total=$(($(date +%s) - began))
  all="$(budget "in-all")"
  echo "== make test: the tiers' times against their $kind budgets ($why)"
  printf '   %s\n' "${lines[@]}"
  printf '   %-14s %5d s  of %5d s\n' "in all" "$total" "${all:-$spent}"
  if [ -n "$all" ] && [ "$total" -gt "$all" ]; then
    warnings+=("WARNING: make test took $total s, over its $kind budget of $all s")
  fi
  speeds="$(grep -o '[^ ]*: Ready [0-9]* s after qemu started.*' "$log" 2>/dev/null)"
  if [ -n "$speeds" ]; then
    echo "== the real nodes' pace and speed in this run"
    printf '   %s\n' "$speeds"
  fi
  for w in "${warnings[@]+"${warnings[@]}"}"; do echo "$w"; done
}

stopped() {
  if [ -n "$tier" ]; then
    lines+=("$(printf '%-14s %5d s  STOPPED by a signal' "$tier" $(($(date +%s) - start)))")
  fi
  summary
  exit 143
}
trap stopped TERM INT HUP

for tier in "$@"; do
  start=$(date +%s)
  # The tier's output goes on as it comes; a copy is kept for the VMs' speed lines.
  # (A signal to the process group ends this pipeline at once, then the trap runs.)
  "$make_cmd" --no-print-directory "$tier" 2>&1 | tee -a "$log"
  status=${PIPESTATUS[0]}
  took=$(($(date +%s) - start))
  want="$(budget "$tier")"
  spent=$((spent + ${want:-0}))
  if [ -z "$want" ]; then
    shown="$(printf '%-14s %5d s  (no budget)' "$tier" "$took")"
    warnings+=("WARNING: tier $tier has no row in TESTING.md's Budgets table")
  else
    shown="$(printf '%-14s %5d s  of %5d s' "$tier" "$took" "$want")"
    if [ "$took" -gt "$want" ]; then
      shown+="  OVER"
      warnings+=("WARNING: tier $tier took $took s, over its $kind budget of $want s")
    fi
  fi
  if [ "$status" -ne 0 ]; then
    lines+=("$shown  FAILED (exit $status)")
    break
  fi
  lines+=("$shown")
done
tier=
summary
exit "$status"
