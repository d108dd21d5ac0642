#!/usr/bin/env bash
# Builds tests/kubelet-float (the kubelet's memory.high arithmetic, with
# k8s.io/apimachinery's quantities) with the machine's Go for amd64 and for arm64 (which
# tests run under qemu-user: Go fuses the multiply-add there), into a cache outside the
# repository keyed by the apimachinery version and the program's source. A warm cache
# returns at once. Prints the directory holding kubelet-float-amd64 and
# kubelet-float-arm64 on stdout (last line).
set -euo pipefail

APIMACHINERY_VERSION="${NODEMEM_APIMACHINERY_VERSION:-v0.37.2}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
JOBS="${NODEMEM_GO_JOBS:-2}"
src="$(cd "$(dirname "$0")/../kubelet-float" && pwd)/main.go"
key="$(sha256sum "$src" | cut -c1-12)"
out="$CACHE/bin/kubelet-float-$APIMACHINERY_VERSION-$key"
if [[ -x "$out/kubelet-float-amd64" && -x "$out/kubelet-float-arm64" ]]; then
  echo "$out"
  exit 0
fi

source "$(dirname "$0")/go-modules.sh"
go_work kubelet-float

echo ">> building kubelet-float (k8s.io/apimachinery $APIMACHINERY_VERSION) for amd64 and arm64" >&2
new_module kubelet-float
rm tools.go
cp "$src" main.go
echo "require k8s.io/apimachinery $APIMACHINERY_VERSION" >>go.mod
mkdir -p "$out"
# GOAMD64=v1 as Kubernetes' release builds (v3 would let Go fuse on amd64 too).
CGO_ENABLED=0 GOARCH=amd64 GOAMD64=v1 build_to "$out/kubelet-float-amd64.tmp" "" "" .
CGO_ENABLED=0 GOARCH=arm64 build_to "$out/kubelet-float-arm64.tmp" "" "" .
mv "$out/kubelet-float-amd64.tmp" "$out/kubelet-float-amd64"
mv "$out/kubelet-float-arm64.tmp" "$out/kubelet-float-arm64"
echo "$out"
