#!/usr/bin/env bash
# Installs the Debian packages the test tiers need, if missing: qemu (the VM tiers), tmux (the
# sandbox test), busybox-static (the VMs' first userland), mmdebstrap and gcc (the real
# node's root file system and runc). Go (control-plane build) and Rust are expected on
# the machine. Needs root or passwordless sudo; prints what it does.
set -euo pipefail

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 || need+=(busybox-static)
command -v go >/dev/null || need+=(golang-go)
command -v tmux >/dev/null || need+=(tmux)   # drives the sandbox's live view in a test
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)   # the real node's root file system
command -v gcc >/dev/null || need+=(gcc libc6-dev)   # runc (cgo) for the real node
pkg-config --exists libseccomp 2>/dev/null || need+=(libseccomp-dev pkg-config)   # runc with seccomp
if ((${#need[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo ">> installing ${need[*]}" >&2
  $sudo apt-get install -y --no-install-recommends "${need[@]}" >&2 || {
    $sudo apt-get update -qq >&2
    $sudo apt-get install -y --no-install-recommends "${need[@]}" >&2
  }
fi
