#!/usr/bin/env bash
# Builds tests/nri/runtime (NRI's runtime side, github.com/containerd/nri's adaptation
# package at the version containerd v2.2.9 requires) into the versioned cache, keyed by
# its source and go.sum; prints the binary's path. The NRI plugin's protocol tests run
# against it.
set -euo pipefail
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
src="$repo/tests/nri/runtime"
key="$(cat "$src"/*.go "$src"/go.mod "$src"/go.sum | sha256sum | cut -c1-12)"
OUT="$CACHE/bin/nri-runtime-$key"
if [[ -x "$OUT/nri-runtime" ]]; then
  echo "$OUT/nri-runtime"
  exit 0
fi
command -v go >/dev/null || { echo "error: go is not installed; it is needed to build the NRI test runtime" >&2; exit 1; }
echo ">> building the NRI test runtime (containerd/nri adaptation)" >&2
mkdir -p "$OUT"
cd "$src"
CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$OUT/nri-runtime.tmp" .
mv "$OUT/nri-runtime.tmp" "$OUT/nri-runtime"
echo "$OUT/nri-runtime"
