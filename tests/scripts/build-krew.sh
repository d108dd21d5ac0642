#!/usr/bin/env bash
# Builds krew (sigs.k8s.io/krew/cmd/krew, kubectl's plugin manager) from its module with
# the machine's Go, to install the plugin's release archives with the manifest a release
# publishes, into a cache outside the repository keyed by the version. A warm cache
# returns at once. Prints the binary's path on stdout (last line).
set -euo pipefail

KREW_VERSION="${NODEMEM_KREW_VERSION:-v0.4.3}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
JOBS="${NODEMEM_GO_JOBS:-2}"
out="$CACHE/bin/krew-$KREW_VERSION/krew"
if [[ -x "$out" ]]; then
  echo "$out"
  exit 0
fi

source "$(dirname "$0")/go-modules.sh"
go_work krew

echo ">> building krew (sigs.k8s.io/krew $KREW_VERSION)" >&2
new_module krew sigs.k8s.io/krew/cmd/krew
echo "require sigs.k8s.io/krew $KREW_VERSION" >>go.mod
mkdir -p "$(dirname "$out")"
build_to "$out.tmp" "-X sigs.k8s.io/krew/internal/version.gitTag=$KREW_VERSION" "" sigs.k8s.io/krew/cmd/krew
mv "$out.tmp" "$out"
echo "$out"
