#!/usr/bin/env bash
# Builds what a real node runs beside the kubelet, from Go modules with the machine's Go,
# into a cache outside the repository keyed by version (a warm cache returns at once):
#
#   containerd, containerd-shim-runc-v2, ctr   containerd's own table supports kubelet
#                                              v1.36 from 2.2.0; Debian's 1.6 is too old
#   runc                                       cgo (its nsenter is C) with seccomp
#                                              (libseccomp-dev): containerd gives pod
#                                              sandboxes a seccomp profile, and a runc
#                                              without it refuses every pod
#   cni/loopback, cni/bridge, cni/host-local   the CNI reference plugins: a node is Ready
#                                              only once its runtime reports a network
#   images/pause, images/workload              static programs for the node's two images
#                                              (tests/node/images), written as OCI archives
#                                              by tests/scripts/build-node-images.sh
#
# Same throwaway-module pattern as build-control-plane.sh. Prints the directory on stdout
# (last line); progress goes to stderr.
set -euo pipefail

CONTAINERD_VERSION="${NODEMEM_CONTAINERD_VERSION:-v2.2.9}"
RUNC_VERSION="${NODEMEM_RUNC_VERSION:-v1.5.2}"
CNI_VERSION="${NODEMEM_CNI_VERSION:-v1.9.1}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
# The image programs are part of the key: a change to them rebuilds them.
images_key="$(cat "$repo"/tests/node/images/*/*.go "$repo"/tests/node/images/go.mod | sha256sum | cut -c1-12)"
OUT="$CACHE/bin/node-containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION-seccomp-cni-$CNI_VERSION-images-$images_key"
JOBS="${NODEMEM_GO_JOBS:-2}"

WANT=(containerd containerd-shim-runc-v2 ctr runc cni/loopback cni/bridge cni/host-local images/pause images/workload)
have_all() {
  local f
  for f in "${WANT[@]}"; do [[ -x "$OUT/$f" ]] || return 1; done
}
if have_all; then
  echo "$OUT"
  exit 0
fi

command -v go >/dev/null || { echo "error: go is not installed; it is needed to build the node's runtime" >&2; exit 1; }
command -v gcc >/dev/null || { echo "error: gcc is needed to build runc (its nsenter is C): apt-get install gcc libc6-dev" >&2; exit 1; }
pkg-config --exists libseccomp 2>/dev/null || { echo "error: libseccomp-dev is needed to build runc with seccomp: apt-get install libseccomp-dev pkg-config" >&2; exit 1; }
mkdir -p "$OUT/cni" "$OUT/images"
work="$(mktemp -d "$CACHE/build-node.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# new_module and build_to (shared with the other Go-module builds).
source "$(dirname "$0")/go-modules.sh"

# containerd, runc and the CNI plugins do not depend on the image programs: a build of
# the same versions for other image programs is copied rather than built again.
for other in "$CACHE"/bin/node-containerd-"$CONTAINERD_VERSION"-runc-"$RUNC_VERSION"-seccomp-cni-"$CNI_VERSION"-images-*; do
  [[ "$other" != "$OUT" ]] || continue
  reusable=1
  for f in containerd containerd-shim-runc-v2 ctr runc cni/loopback cni/bridge cni/host-local; do
    [[ -x "$other/$f" ]] || reusable=0
  done
  if [[ $reusable == 1 ]]; then
    echo ">> reusing containerd, runc and the CNI plugins from $other" >&2
    for f in containerd containerd-shim-runc-v2 ctr runc cni/loopback cni/bridge cni/host-local; do
      [[ -x "$OUT/$f" ]] || cp -a "$other/$f" "$OUT/$f"
    done
    break
  fi
done

if [[ ! -x "$OUT/containerd" || ! -x "$OUT/containerd-shim-runc-v2" || ! -x "$OUT/ctr" ]]; then
  echo ">> building containerd $CONTAINERD_VERSION (containerd, containerd-shim-runc-v2, ctr)" >&2
  pkgs=(github.com/containerd/containerd/v2/cmd/containerd
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
    github.com/containerd/containerd/v2/cmd/ctr)
  new_module containerd "${pkgs[@]}"
  echo "require github.com/containerd/containerd/v2 $CONTAINERD_VERSION" >>go.mod
  # The btrfs snapshotter needs cgo; the node uses overlayfs.
  CGO_ENABLED=0 build_to "$OUT/" \
    "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    "no_btrfs no_devmapper no_zfs" "${pkgs[@]}"
fi

if [[ ! -x "$OUT/runc" ]]; then
  echo ">> building runc $RUNC_VERSION" >&2
  new_module runc github.com/opencontainers/runc
  echo "require github.com/opencontainers/runc $RUNC_VERSION" >>go.mod
  CGO_ENABLED=1 build_to "$OUT/runc" "-X main.version=${RUNC_VERSION#v}" "seccomp" github.com/opencontainers/runc
fi

if [[ ! -x "$OUT/cni/loopback" || ! -x "$OUT/cni/bridge" || ! -x "$OUT/cni/host-local" ]]; then
  echo ">> building the CNI plugins $CNI_VERSION (loopback, bridge, host-local)" >&2
  pkgs=(github.com/containernetworking/plugins/plugins/main/loopback
    github.com/containernetworking/plugins/plugins/main/bridge
    github.com/containernetworking/plugins/plugins/ipam/host-local)
  new_module cni "${pkgs[@]}"
  echo "require github.com/containernetworking/plugins $CNI_VERSION" >>go.mod
  CGO_ENABLED=0 build_to "$OUT/cni/" \
    "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_VERSION" \
    "" "${pkgs[@]}"
fi

if [[ ! -x "$OUT/images/pause" || ! -x "$OUT/images/workload" ]]; then
  echo ">> building the node images' programs (pause, workload)" >&2
  cd "$repo/tests/node/images"
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$OUT/images/" ./pause ./workload
fi

have_all || { echo "error: the node runtime build did not produce all of ${WANT[*]} in $OUT" >&2; exit 1; }
echo "$OUT"
