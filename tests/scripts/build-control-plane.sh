#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler (binds pods on the real
# node), kubelet (its configuration validation checks the drop-ins nodemem renders and the
# real node runs it), kubectl, helm and etcd from their Go modules with the
# machine's Go, into a cache outside the repository keyed by version. A warm cache returns at once.
# The kubelets of the other supported versions (NODEMEM_OLDER_KUBELETS) are built too, each
# from its own k8s.io/kubernetes module, into the cache keyed by its version, and linked as
# $BIN/kubelets/VERSION (the control plane's own kubelet is $BIN/kubelets/K8S_VERSION too).
#
# Why a throwaway module: k8s.io/kubernetes requires its staging modules at v0.0.0 and maps them
# to ./staging with `replace`, which only applies inside that repository. A consumer module must
# map each k8s.io/<staging> module to the published v0.<minor>.<patch> itself; the list of staging
# modules is read from the pinned go.mod, so a version bump needs no edit here.
#
# Prints the bin directory on stdout (last line); progress goes to stderr.
set -euo pipefail

K8S_VERSION="${NODEMEM_K8S_VERSION:-v1.37.2}"
HELM_VERSION="${NODEMEM_HELM_VERSION:-v4.3.1}"
ETCD_VERSION="${NODEMEM_ETCD_VERSION:-v3.7.0}"   # the etcd client version k8s v1.37.2 pins
# The real node runs each of these kubelets too (supported skew: up to three minors older).
OLDER_KUBELETS="${NODEMEM_OLDER_KUBELETS:-v1.36.3 v1.35.4}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
BIN="$CACHE/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-helm-$HELM_VERSION"
JOBS="${NODEMEM_GO_JOBS:-2}"

K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

have_all() {
  local c v
  for c in "${K8S_COMMANDS[@]}" etcd helm; do [[ -x "$BIN/$c" ]] || return 1; done
  for v in $K8S_VERSION $OLDER_KUBELETS; do [[ -x "$BIN/kubelets/$v" ]] || return 1; done
}
if have_all; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "error: go is not installed; it is needed to build the control plane (tests/scripts/install-prereqs.sh installs Debian's golang-go, which may be older than the control plane's modules need)" >&2; exit 1; }
# The machine's Go, never a toolchain fetched at run time (GOTOOLCHAIN=auto would
# download a newer one when a module asks for it).
export GOTOOLCHAIN=local
mkdir -p "$BIN"
work="$(mktemp -d "$CACHE/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT


# new_module and build_to (shared with the other Go-module builds).
source "$(dirname "$0")/go-modules.sh"

# A Go older than the one Kubernetes' go.mod names fails deep in a build with errors
# about language features; say so before building anything.
check_go() {
  go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
  local upstream_mod needed have
  upstream_mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod"
  [[ -f "$upstream_mod" ]] || { echo "error: cannot download k8s.io/kubernetes@$K8S_VERSION's go.mod" >&2; exit 1; }
  needed="$(awk '/^go [0-9]/{print $2; exit}' "$upstream_mod")"
  have="$(go env GOVERSION)"
  have="${have#go}"
  if [[ -n "$needed" && "$(printf '%s\n%s\n' "$needed" "$have" | sort -V | head -n1)" != "$needed" ]]; then
    echo "error: Go $have is too old: k8s.io/kubernetes $K8S_VERSION needs Go $needed or newer (the go line of its go.mod). Install a newer Go (Debian: golang-1.$(echo "$needed" | cut -d. -f2)-go or newer from backports; or the release from go.dev) and put its bin directory first in PATH." >&2
    exit 1
  fi
}

# build_k8s VERSION OUT PACKAGE...: Kubernetes commands of VERSION (one module: they
# share the build cache) into OUT (a directory ending in /, or a file for one command).
build_k8s() {
  local version="$1" out="$2"
  shift 2
  local staging_version="v0.${version#v1.}"
  echo ">> building ${*##*/} $version (staging $staging_version)" >&2
  new_module "k8s-$version" "$@"
  # The staging modules are the k8s.io/<name> requirements at v0.0.0 in the upstream go.mod.
  go mod download -json "k8s.io/kubernetes@$version" >/dev/null
  local upstream_mod
  upstream_mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$version.mod"
  [[ -f "$upstream_mod" ]] || { echo "error: cannot download k8s.io/kubernetes@$version's go.mod" >&2; exit 1; }
  local staging
  staging="$(awk '/^\tk8s.io\/[A-Za-z0-9._-]+ v0\.0\.0$/{print $1}' "$upstream_mod")"
  [[ -n "$staging" ]] || { echo "error: found no staging modules in $upstream_mod" >&2; exit 1; }
  {
    echo "require k8s.io/kubernetes $version"
    echo "replace ("
    for m in $staging; do echo "  $m => $m $staging_version"; done
    echo ")"
  } >>go.mod
  build_to "$out" "-X k8s.io/component-base/version.gitVersion=$version" "" "$@"
}

# The control plane's commands not in $BIN yet.
build_control_plane() {
  local c packages=()
  for c in "${K8S_COMMANDS[@]}"; do
    [[ -x "$BIN/$c" ]] || packages+=("k8s.io/kubernetes/cmd/$c")
  done
  [[ ${#packages[@]} -eq 0 ]] || build_k8s "$K8S_VERSION" "$BIN/" "${packages[@]}"
}

# $BIN/kubelets/VERSION for the control plane's version and every older one: an older
# kubelet is built once into the cache keyed by its version (or taken from a control
# plane of that version already in the cache).
link_kubelets() {
  local v file cached
  mkdir -p "$BIN/kubelets"
  ln -sfn ../kubelet "$BIN/kubelets/$K8S_VERSION"
  for v in $OLDER_KUBELETS; do
    file="$CACHE/bin/kubelet-$v/kubelet"
    if [[ ! -x "$file" ]]; then
      cached="$(ls -d "$CACHE"/bin/k8s-"$v"-*/kubelet 2>/dev/null | head -n1 || true)"
      mkdir -p "$CACHE/bin/kubelet-$v"
      if [[ -n "$cached" && -x "$cached" ]]; then
        cp "$cached" "$file"
      else
        build_k8s "$v" "$file" k8s.io/kubernetes/cmd/kubelet
      fi
    fi
    ln -sfn "$file" "$BIN/kubelets/$v"
  done
}

build_etcd() {
  echo ">> building etcd $ETCD_VERSION" >&2
  new_module etcd go.etcd.io/etcd/server/v3
  echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION" >>go.mod
  # The server's main package is named after its directory (v3): name the file.
  build_to "$BIN/etcd" "" "" go.etcd.io/etcd/server/v3
}

build_helm() {
  echo ">> building helm $HELM_VERSION" >&2
  new_module helm helm.sh/helm/v4/cmd/helm
  echo "require helm.sh/helm/v4 $HELM_VERSION" >>go.mod
  build_to "$BIN/helm" "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" "" helm.sh/helm/v4/cmd/helm
}

# A cache of an earlier layout (without helm) is reused for what it has.
old="$CACHE/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
if [[ -d "$old" && ! -e "$BIN" ]]; then
  mkdir -p "$BIN"
  for c in "${K8S_COMMANDS[@]}" etcd; do [[ -x "$old/$c" ]] && cp "$old/$c" "$BIN/$c"; done
fi

check_go
[[ -x "$BIN/etcd" ]] || build_etcd
[[ -x "$BIN/helm" ]] || build_helm
build_control_plane
link_kubelets
have_all || { echo "error: control plane build did not produce all binaries in $BIN" >&2; exit 1; }
echo "$BIN"
