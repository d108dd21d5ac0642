#!/usr/bin/env bash
# `make test`: each tier (`make <tier>`) in order, stopping at the first that fails, and
# each tier's time printed at the end either way, so that a run's output (CI keeps its
# last lines) says where the time went.
set -uo pipefail
make_cmd="${MAKE:-make}"
lines=()
status=0
began=$(date +%s)
for tier in "$@"; do
  start=$(date +%s)
  "$make_cmd" --no-print-directory "$tier"
  status=$?
  took=$(($(date +%s) - start))
  if [ "$status" -ne 0 ]; then
    lines+=("$(printf '%-14s %5d s  FAILED (exit %d)' "$tier" "$took" "$status")")
    break
  fi
  lines+=("$(printf '%-14s %5d s' "$tier" "$took")")
done
echo "== make test: the tiers' times"
printf '   %s\n' "${lines[@]}"
printf '   %-14s %5d s\n' "in all" "$(($(date +%s) - began))"
exit "$status"
