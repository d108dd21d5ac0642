#!/usr/bin/env bash
# Builds tests/kstatus (kstatus from sigs.k8s.io/cli-utils, and Flux's own health
# checking: its kstatus fork and its healthCheckExprs evaluator from
# github.com/fluxcd/pkg/runtime) from their modules with the machine's Go, into a cache
# outside the repository keyed by the versions and the program's source. A warm cache
# returns at once. Prints the binary's path on stdout (last line).
set -euo pipefail

CLI_UTILS_VERSION="${NODEMEM_CLI_UTILS_VERSION:-v0.37.2}"
# Flux's (kustomize-controller's health checks), the newest the machine's Go 1.26 takes.
FLUX_RUNTIME_VERSION="${NODEMEM_FLUX_RUNTIME_VERSION:-v0.117.0}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
JOBS="${NODEMEM_GO_JOBS:-2}"
src="$(cd "$(dirname "$0")/../kstatus" && pwd)/main.go"
key="$(sha256sum "$src" | cut -c1-12)"
out="$CACHE/bin/kstatus-$CLI_UTILS_VERSION-flux-$FLUX_RUNTIME_VERSION-$key/kstatus"
if [[ -x "$out" ]]; then
  echo "$out"
  exit 0
fi

source "$(dirname "$0")/go-modules.sh"
go_work kstatus

echo ">> building kstatus (sigs.k8s.io/cli-utils $CLI_UTILS_VERSION, github.com/fluxcd/pkg/runtime $FLUX_RUNTIME_VERSION)" >&2
new_module kstatus
rm tools.go
cp "$src" main.go
{
  echo "require sigs.k8s.io/cli-utils $CLI_UTILS_VERSION"
  echo "require github.com/fluxcd/pkg/runtime $FLUX_RUNTIME_VERSION"
} >>go.mod
mkdir -p "$(dirname "$out")"
build_to "$out.tmp" "" "" .
mv "$out.tmp" "$out"
echo "$out"
