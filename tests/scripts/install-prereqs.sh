#!/usr/bin/env bash
# Installs the Debian packages the test tiers need, if missing: qemu (the VM tier), tmux (the
# sandbox test),
# busybox-static (the VM's userland). Go (control-plane build) and Rust are expected on
# the machine. Needs root or passwordless sudo; prints what it does.
set -euo pipefail

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 || need+=(busybox-static)
command -v go >/dev/null || need+=(golang-go)
command -v tmux >/dev/null || need+=(tmux)   # drives the sandbox's live view in a test
if ((${#need[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo ">> installing ${need[*]}" >&2
  $sudo apt-get install -y --no-install-recommends "${need[@]}" >&2 || {
    $sudo apt-get update -qq >&2
    $sudo apt-get install -y --no-install-recommends "${need[@]}" >&2
  }
fi
