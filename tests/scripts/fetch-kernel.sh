#!/usr/bin/env bash
# Fetches Debian's kernel image package (the one linux-image-amd64 depends on, or
# NODEMEM_KERNEL_PACKAGE) with apt-get download and unpacks its vmlinuz into a cache
# outside the repository keyed by package and version. Nothing is installed on the host.
# Prints the path of the vmlinuz file on stdout.
set -euo pipefail

CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
pkg="${NODEMEM_KERNEL_PACKAGE:-}"
kernel_package() {
  apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6/{print $2; exit}'
}
if [[ -z "$pkg" ]]; then
  pkg="$(kernel_package)"
  if [[ -z "$pkg" && $(id -u) -eq 0 ]]; then
    # A machine with empty package lists: refresh them once.
    apt-get update -qq >&2 || true
    pkg="$(kernel_package)"
  fi
fi
[[ -n "$pkg" ]] || { echo "error: cannot find Debian's linux-image-6.1 package (is apt's package list up to date? run apt-get update)" >&2; exit 1; }
version="$(apt-cache policy "$pkg" | awk '/Candidate:/{print $2}')"
[[ -n "$version" && "$version" != "(none)" ]] || { echo "error: no candidate version for $pkg" >&2; exit 1; }

dir="$CACHE/kernel/$pkg-$version"
if ! compgen -G "$dir/boot/vmlinuz-*" >/dev/null; then
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/kernel.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo ">> downloading $pkg $version" >&2
  (cd "$tmp" && apt-get download "$pkg=$version" >&2)
  mkdir -p "$tmp/x"
  dpkg-deb -x "$tmp"/*.deb "$tmp/x"
  mkdir -p "$dir/boot"
  cp "$tmp"/x/boot/vmlinuz-* "$dir/boot/"
  # Modules are not needed: cgroup v2, NUMA, the serial console and initramfs support
  # are built into Debian's kernel.
fi
# The package and version, for scripts that need more of the package (the real node's
# root file system takes its modules).
echo "$pkg=$version" >"$dir/package"
ls "$dir"/boot/vmlinuz-* | head -1
