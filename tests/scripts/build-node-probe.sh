#!/usr/bin/env bash
# Builds the real node's measuring tools (tests/node/probe: reaction-probe,
# value-monitor from its monitor/ directory, kubelet-configz from configz/; stdlib Go
# only, static) into the versioned cache, keyed by their source; prints the directory.
# The tests copy them into the node's share (/mnt/nodemem/tools on the node).
set -euo pipefail
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
key="$(cat "$repo"/tests/node/probe/*.go "$repo"/tests/node/probe/monitor/*.go "$repo"/tests/node/probe/configz/*.go "$repo"/tests/node/probe/go.mod | sha256sum | cut -c1-12)"
OUT="$CACHE/bin/node-probe-$key"
if [[ -x "$OUT/reaction-probe" && -x "$OUT/value-monitor" && -x "$OUT/kubelet-configz" ]]; then
  echo "$OUT"
  exit 0
fi
command -v go >/dev/null || { echo "error: go is not installed; it is needed to build the node's probe" >&2; exit 1; }
echo ">> building the node's reaction probe, value monitor and configz reader" >&2
mkdir -p "$OUT"
cd "$repo/tests/node/probe"
CGO_ENABLED=0 GOFLAGS=-mod=mod GOPROXY=off go build -trimpath -ldflags "-s -w" -o "$OUT/reaction-probe.tmp" .
CGO_ENABLED=0 GOFLAGS=-mod=mod GOPROXY=off go build -trimpath -ldflags "-s -w" -o "$OUT/value-monitor.tmp" ./monitor
CGO_ENABLED=0 GOFLAGS=-mod=mod GOPROXY=off go build -trimpath -ldflags "-s -w" -o "$OUT/kubelet-configz.tmp" ./configz
mv "$OUT/reaction-probe.tmp" "$OUT/reaction-probe"
mv "$OUT/kubelet-configz.tmp" "$OUT/kubelet-configz"
mv "$OUT/value-monitor.tmp" "$OUT/value-monitor"
echo "$OUT"
