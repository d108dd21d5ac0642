#!/usr/bin/env bash
# Builds promtool (github.com/prometheus/prometheus/cmd/promtool) from its module with
# the machine's Go, for `promtool check rules` and `promtool test rules` on the chart's
# alerts, into a cache outside the repository keyed by the version. Service-discovery
# plugins are left out (remove_all_sd: promtool's rule commands need none). A warm cache
# returns at once. Prints the binary's path on stdout (last line).
set -euo pipefail

PROMETHEUS_VERSION="${NODEMEM_PROMETHEUS_VERSION:-v0.316.0}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
JOBS="${NODEMEM_GO_JOBS:-2}"
out="$CACHE/bin/promtool-$PROMETHEUS_VERSION/promtool"
if [[ -x "$out" ]]; then
  echo "$out"
  exit 0
fi

source "$(dirname "$0")/go-modules.sh"
go_work promtool

echo ">> building promtool (github.com/prometheus/prometheus $PROMETHEUS_VERSION)" >&2
new_module promtool github.com/prometheus/prometheus/cmd/promtool
echo "require github.com/prometheus/prometheus $PROMETHEUS_VERSION" >>go.mod
mkdir -p "$(dirname "$out")"
build_to "$out.tmp" "" "remove_all_sd" github.com/prometheus/prometheus/cmd/promtool
mv "$out.tmp" "$out"
echo "$out"
