#!/usr/bin/env bash
# `make test`: each tier (`make <tier>`) in order, stopping at the first that fails, and
# each tier's time printed at the end either way, beside its budget, so that a run's
# output (CI keeps its last lines) says where the time went and which tier overspent.
#
#   tiers.sh TIER... [--beside FROM TIER...]
#
# The tiers after `--beside FROM` run in a second lane, one after another, beside the
# first lane from the start of its tier FROM on (`node`: a real node keeps about 1.5 of
# the two cores busy for half an hour; not the control-plane tests, whose storm test
# timed its catch-up against its own first step and missed it beside the builds), at
# the lowest CPU priority (nice 19; I/O: the lowest of best effort), so that they take
# only what the first lane leaves, and with a cargo target directory of their own
# (TARGET-beside, no incremental caches): cargo locks a target directory for a whole
# build, and a low-priority build holding the first lane's lock would hold its tier
# back. Their output goes to TARGET-beside/make-test-beside.log, the last lines of a
# tier that fails printed at the end. The run waits for both lanes; it fails if either
# does (a failure in the first lane stops the second).
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

first=()
beside=()
beside_from=
while [ $# -gt 0 ]; do
  if [ "$1" = --beside ]; then
    beside_from="${2:?--beside FROM: the tier of the first lane the second starts with}"
    shift 2
    beside=("$@")
    break
  fi
  first+=("$1")
  shift
done

beside_target="${NODEMEM_BESIDE_TARGET_DIR:-${CARGO_TARGET_DIR:-$HOME/.cache/nodemem/target}-beside}"
work="$(mktemp -d)"
log="$work/first.log"
# Kept after the run (the first lane's output is the run's own).
mkdir -p "$beside_target"
beside_log="$beside_target/make-test-beside.log"
beside_rows="$work/beside.rows"
: >"$log"
: >"$beside_log"
: >"$beside_rows"
beside_pid=
# The second lane's processes, the lane's own shell last.
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null
}
stop_beside() {
  if [ -n "$beside_pid" ]; then
    kill_tree "$beside_pid"
    wait "$beside_pid" 2>/dev/null
    beside_pid=
  fi
}
trap 'stop_beside; rm -rf "$work"' EXIT
lines=()
warnings=()
status=0
spent=0
began=$(date +%s)
tier=
start=$began

# row TIER SECONDS: sets `shown` to the tier's row against its budget (warnings noted);
# adds its budget to `spent` when SPEND is set. (Not in a subshell: it keeps both.)
row() {
  local want
  want="$(budget "$1")"
  [ -z "${SPEND:-}" ] || spent=$((spent + ${want:-0}))
  if [ -z "$want" ]; then
    shown="$(printf '%-14s %5d s  (no budget)' "$1" "$2")"
    warnings+=("WARNING: tier $1 has no row in TESTING.md's Budgets table")
  else
    shown="$(printf '%-14s %5d s  of %5d s' "$1" "$2" "$want")"
    if [ "$2" -gt "$want" ]; then
      shown+="  OVER"
      warnings+=("WARNING: tier $1 took $2 s, over its $kind budget of $want s")
    fi
  fi
}

# The second lane: its tiers in order at the lowest priority, each one's row (tier,
# seconds, exit status) appended to beside_rows as it ends; stops at the first failure.
run_beside() {
  local t s code
  local low=(nice -n 19)
  # Not the idle class: under the control-plane tests' steady writes it got no disk at
  # all (a lint of 500 s that had not ended in ten minutes, 2026-11-30).
  command -v ionice >/dev/null && low+=(ionice -c 2 -n 7)
  for t in "${beside[@]}"; do
    s=$(date +%s)
    echo "== beside: make $t" >>"$beside_log"
    CARGO_TARGET_DIR="$beside_target" CARGO_INCREMENTAL=0 \
      "${low[@]}" "$make_cmd" --no-print-directory "$t" >>"$beside_log" 2>&1
    code=$?
    echo "$t $(($(date +%s) - s)) $code" >>"$beside_rows"
    [ "$code" -eq 0 ] || return "$code"
  done
}

# The second lane's rows so far; the tier running in it when `$1` (a word) is given.
beside_summary() {
  local t took code failed=
  [ ${#beside[@]} -gt 0 ] || return 0
  echo "   beside, at the lowest priority from the start of $beside_from on ($beside_target):"
  while read -r t took code; do
    row "$t" "$took"
    if [ "$code" -ne 0 ]; then
      shown+="  FAILED (exit $code)"
      failed="$t"
    fi
    printf '     %s\n' "$shown"
  done <"$beside_rows"
  if [ -n "${1:-}" ] && [ -n "$beside_running" ]; then
    printf '     %-14s %s\n' "$beside_running" "$1"
  fi
  if [ -n "$failed" ]; then
    echo "== the last lines of $failed, the failed tier beside:"
    sed -n "/^== beside: make $failed\$/,\$p" "$beside_log" | tail -n 80 | sed 's/^/   | /'
  fi
}

# The tier the second lane is in, if any (the first of its tiers without a row; none
# once one failed).
beside_in() {
  local t done_tiers
  done_tiers="$(awk '{print $1}' "$beside_rows")"
  beside_running=
  awk '$3 != 0 { bad = 1 } END { exit bad }' "$beside_rows" || return 0
  for t in "${beside[@]+"${beside[@]}"}"; do
    if ! grep -qx "$t" <<<"$done_tiers"; then
      beside_running="$t"
      return
    fi
  done
}

# The table of the tiers run so far, the run's own time and the nodes' speed.
summary() {
  total=$(($(date +%s) - began))
  all="$(budget "in-all")"
  echo "== make test: the tiers' times against their $kind budgets ($why)"
  printf '   %s\n' "${lines[@]+"${lines[@]}"}"
  beside_in
  beside_summary "${1:-}"
  printf '   %-14s %5d s  of %5d s\n' "in all" "$total" "${all:-$spent}"
  if [ -n "$all" ] && [ "$total" -gt "$all" ]; then
    warnings+=("WARNING: make test took $total s, over its $kind budget of $all s")
  fi
  # The first lane's output only: the second's holds tiers.sh's own tests, whose
  # stand-in node prints such a line.
  speeds="$(grep -o '[^ ]*: Ready [0-9]* s after qemu started.*' "$log" 2>/dev/null)"
  if [ -n "$speeds" ]; then
    echo "== the real nodes' pace and speed in this run"
    while IFS= read -r line; do printf '   %s\n' "$line"; done <<<"$speeds"
  fi
  for w in "${warnings[@]+"${warnings[@]}"}"; do echo "$w"; done
}

stopped() {
  if [ -n "$tier" ]; then
    lines+=("$(printf '%-14s %5d s  STOPPED by a signal' "$tier" $(($(date +%s) - start)))")
  fi
  stop_beside
  summary "STOPPED by a signal"
  exit 143
}
trap stopped TERM INT HUP

for tier in "${first[@]}"; do
  start=$(date +%s)
  if [ "$tier" = "$beside_from" ] && [ ${#beside[@]} -gt 0 ]; then
    echo "== make test: ${beside[*]} beside $tier, at the lowest priority (their output: $beside_log)"
    run_beside &
    beside_pid=$!
  fi
  # The tier's output goes on as it comes; a copy is kept for the VMs' speed lines.
  # (A signal to the process group ends this pipeline at once, then the trap runs.)
  "$make_cmd" --no-print-directory "$tier" 2>&1 | tee -a "$log"
  status=${PIPESTATUS[0]}
  SPEND=1 row "$tier" $(($(date +%s) - start))
  if [ "$status" -ne 0 ]; then
    lines+=("$shown  FAILED (exit $status)")
    break
  fi
  lines+=("$shown")
done
tier=
if [ "$status" -ne 0 ]; then
  stop_beside
  summary "STOPPED: a tier before it failed"
  exit "$status"
fi
if [ -n "$beside_pid" ]; then
  beside_in
  [ -z "$beside_running" ] || echo "== make test: waiting for the tiers beside (now $beside_running)"
  wait "$beside_pid"
  status=$?
  beside_pid=
fi
summary
exit "$status"
