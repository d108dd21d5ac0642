#!/usr/bin/env bash
# Builds tests/kubelet-oracle (the kubelet's pod cgroup computation, its own code as a
# library) for each Kubernetes version in NODEMEM_ORACLE_VERSIONS, from that version's
# modules, into a cache outside the repository keyed by the version and the program's
# source: a warm cache returns at once. A version whose go.mod asks for a newer Go than
# the machine's is built with GOTOOLCHAIN=goX.Y.Z for that build only (the toolchain is
# a module the proxy serves, like any other). A module the proxy does not serve at the
# version the kubernetes module requires is replaced by the nearest served one named in
# ORACLE_REPLACE (each such line is printed). Prints the directory holding
# kubelet-oracle-<version> for every version on stdout (last line).
set -euo pipefail

VERSIONS="${NODEMEM_ORACLE_VERSIONS:-v1.35.4 v1.36.3 v1.37.2 v1.38.0-beta.0}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
JOBS="${NODEMEM_GO_JOBS:-2}"
# Toolchains for versions whose go.mod needs a newer Go than Debian's.
GO_FOR_1_38="${NODEMEM_GO_FOR_1_38:-go1.27.3}"
# Modules required at versions the proxy does not serve (checked 2026-11-30).
ORACLE_REPLACE_1_38="sigs.k8s.io/structured-merge-diff/v7 => sigs.k8s.io/structured-merge-diff/v7 v7.0.0"
src="$(cd "$(dirname "$0")/../kubelet-oracle" && pwd)"
key="$(cat "$src"/*.go "$src"/*.s "$0" | sha256sum | cut -c1-12)"
out="$CACHE/bin/kubelet-oracle-$key"

missing=()
for v in $VERSIONS; do
  [[ -x "$out/kubelet-oracle-$v" ]] || missing+=("$v")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$out"
  exit 0
fi

source "$(dirname "$0")/go-modules.sh"
go_work kubelet-oracle
mkdir -p "$out"

# The build tag of a version: its own signatures (oracle_v1XX.go).
tag_of() {
  case "$1" in
    v1.35.*) echo oracle_v135 ;;
    v1.36.*) echo oracle_v136 ;;
    v1.37.*) echo oracle_v137 ;;
    *) echo oracle_v138 ;;
  esac
}

for v in "${missing[@]}"; do
  minor="$(echo "$v" | cut -d. -f2)"
  toolchain=local
  replace=""
  if [[ "$minor" -ge 38 ]]; then
    toolchain="$GO_FOR_1_38"
    replace="$ORACLE_REPLACE_1_38"
  fi
  staging_version="v0.${v#v1.}"
  echo ">> building kubelet-oracle for Kubernetes $v (staging $staging_version, Go $toolchain)" >&2
  new_module "oracle-$v" k8s.io/kubernetes/pkg/kubelet/cm
  rm tools.go
  # The common files and this version's own: go mod tidy reads every file whatever its
  # build tag, and another version's imports would pull modules this one never asked
  # for (a newer cadvisor, and with it a newer runc cgroups library).
  tag="$(tag_of "$v")"
  for f in "$src"/*.go "$src"/*.s; do
    case "$(basename "$f")" in
      oracle_v1*.go) [[ "$(basename "$f")" == "$tag.go" ]] && cp "$f" . ;;
      *) cp "$f" . ;;
    esac
  done
  GOTOOLCHAIN=$toolchain go mod download -json "k8s.io/kubernetes@$v" >/dev/null
  upstream_mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$v.mod"
  [[ -f "$upstream_mod" ]] || { echo "error: cannot download k8s.io/kubernetes@$v's go.mod" >&2; exit 1; }
  staging="$(awk '/^\tk8s.io\/[A-Za-z0-9._-]+ v0\.0\.0$/{print $1}' "$upstream_mod")"
  {
    echo "require k8s.io/kubernetes $v"
    echo "replace ("
    for m in $staging; do echo "  $m => $m $staging_version"; done
    [[ -z "$replace" ]] || echo "  $replace"
    echo ")"
  } >>go.mod
  [[ -z "$replace" ]] || echo ">> $v: replaced (not served): $replace" >&2
  GOTOOLCHAIN=$toolchain GOFLAGS=-mod=mod go mod tidy -e >&2 2>&1 || true
  CGO_ENABLED=0 GOTOOLCHAIN=$toolchain GOFLAGS=-mod=mod \
    go build -p "$JOBS" -trimpath -tags "$tag" -ldflags "-s -w" -o "$out/kubelet-oracle-$v.tmp" .
  mv "$out/kubelet-oracle-$v.tmp" "$out/kubelet-oracle-$v"
  cd "$work"
done
echo "$out"
