#!/usr/bin/env bash
# Reports, for a Kubernetes version (default: the newest the oracle is built for,
# v1.38.0-beta.0), which modules its kubelet and control plane need that the module
# proxy does not serve: the day this prints none, the real node and the control plane
# take that version by changing one variable (K8S_VERSION, NODEMEM_OLDER_KUBELETS in
# tests/scripts/build-control-plane.sh). Never fails a run: it says what it found, or
# that it could not look. Resolves the packages' imports only (`go list -deps`),
# builds nothing.
set -uo pipefail

VERSION="${1:-${NODEMEM_NEWEST_K8S:-v1.38.0-beta.0}}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
minor="$(echo "$VERSION" | cut -d. -f2)"
toolchain=local
[[ "$minor" -lt 38 ]] || toolchain="${NODEMEM_GO_FOR_1_38:-go1.27.3}"

command -v go >/dev/null || { echo "modules served for Kubernetes $VERSION: not looked at (no Go)"; exit 0; }
mkdir -p "$CACHE"
work="$(mktemp -d "$CACHE/modules.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init nodemem.local/modules-served >/dev/null 2>&1
printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kubelet"\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n)\n' >tools.go
if ! GOTOOLCHAIN=$toolchain go mod download -json "k8s.io/kubernetes@$VERSION" >/dev/null 2>&1; then
  echo "modules served for Kubernetes $VERSION: k8s.io/kubernetes@$VERSION itself is not served (or Go $toolchain is not)"
  exit 0
fi
upstream_mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$VERSION.mod"
staging="$(awk '/^\tk8s.io\/[A-Za-z0-9._-]+ v0\.0\.0$/{print $1}' "$upstream_mod")"
{
  echo "require k8s.io/kubernetes $VERSION"
  echo "replace ("
  for m in $staging; do echo "  $m => $m v0.${VERSION#v1.}"; done
  echo ")"
} >>go.mod
# The packages the two commands build (not their tests), and every module version the
# proxy refuses among their dependencies.
log="$(GOTOOLCHAIN=$toolchain GOFLAGS=-mod=mod go list -e -deps -tags tools -f '{{with .Error}}{{.Err}}{{end}}' . 2>&1)"
missing="$(echo "$log" | grep -oE "[A-Za-z0-9._/-]+@v[0-9][0-9A-Za-z.+-]*: (reading [^ ]+ [0-9]{3}|invalid version|unknown revision)" | sed -E 's/: .*//' | sort -u)"
unprovided="$(echo "$log" | grep -oE "(no required module provides|cannot find module providing) package [^ ;:]+" | sed -E 's/.* package //' | sort -u)"
if [[ -z "$missing$unprovided" ]]; then
  echo "modules served for Kubernetes $VERSION: all that its kubelet and kube-apiserver need: the real node and control plane can take it"
else
  echo "modules served for Kubernetes $VERSION: not yet; its kubelet and kube-apiserver need, and the proxy does not serve:"
  [[ -z "$missing" ]] || echo "$missing" | sed 's/^/  /'
  [[ -z "$unprovided" ]] || echo "$unprovided" | sed 's/^/  a module providing /'
fi
exit 0
