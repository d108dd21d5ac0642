#!/usr/bin/env bash
# Installs the Debian packages nodemem's commands need, if missing. `make sandbox` calls
# it with `sandbox` (Go, to build the control plane); `make test` and .ci/run without an
# argument (everything the test tiers need: qemu for the VM tiers and qemu-user for arm64, tmux for the sandbox
# test, busybox-static for the VMs' first userland, mmdebstrap and gcc for the real
# node's root file system and runc, Lua 5.1 for the Argo CD health check). Rust is expected on the machine. Installing needs
# root or passwordless sudo; without them it names the packages and stops.
set -euo pipefail

what="${1:-test}"
need=()
command -v go >/dev/null || need+=(golang-go)
if [[ "$what" != sandbox ]]; then
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 || need+=(busybox-static)
  command -v tmux >/dev/null || need+=(tmux)   # drives the sandbox's live view in a test
  command -v mmdebstrap >/dev/null || need+=(mmdebstrap)   # the real node's root file system
  command -v gcc >/dev/null || need+=(gcc libc6-dev)   # runc (cgo) for the real node
  pkg-config --exists libseccomp 2>/dev/null || need+=(libseccomp-dev pkg-config)   # runc with seccomp
  command -v lua5.1 >/dev/null || need+=(lua5.1)   # runs the Argo CD health check as Argo CD does (Lua 5.1)
  command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)   # runs the kubelet's arithmetic as Go compiles it for arm64, and nodemem's arm64 build
  command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)   # links the arm64 image's static nodemem
  command -v faketime >/dev/null || need+=(faketime)   # a controller replica with its clock an hour ahead (leader election)
  command -v npm >/dev/null || need+=(nodejs npm)   # markdownlint (make tidy), from the npm registry
  # A release (image/release.sh, checked in the image-check tier): signatures, the
  # plugin for Windows and Wine to run it.
  command -v minisign >/dev/null || need+=(minisign)
  command -v x86_64-w64-mingw32-gcc >/dev/null || need+=(gcc-mingw-w64-x86-64)
  command -v wine >/dev/null || need+=(wine wine64)
fi
# cargo-zigbuild and Zig (the plugin compiled for macOS), from PyPI, pinned.
if [[ "$what" != sandbox ]] && ! command -v cargo-zigbuild >/dev/null; then
  echo ">> installing cargo-zigbuild and ziglang (PyPI)" >&2
  python3 -m pip install -q cargo-zigbuild==0.24.1 ziglang==0.17.1 >&2
fi
((${#need[@]})) || exit 0

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo="sudo"
  else
    echo "error: missing Debian packages: ${need[*]}; install them as root: apt-get install ${need[*]}" >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null; then
  echo "error: missing: ${need[*]} (Debian package names); this machine has no apt-get: install their equivalents" >&2
  exit 1
fi
echo ">> installing ${need[*]}" >&2
$sudo apt-get install -y --no-install-recommends "${need[@]}" >&2 || {
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y --no-install-recommends "${need[@]}" >&2
}
