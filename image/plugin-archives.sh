#!/usr/bin/env bash
# The kubectl plugin's release archives and krew manifest: for amd64 and arm64, the
# static nodemem that image/build-oci.sh builds (built here if it is not), as
# kubectl-nodemem at the top of kubectl-nodemem_vVERSION_linux_ARCH.tar.gz
# (reproducible: fixed times and owners), and deploy/krew/nodemem.yaml with the version
# and each archive's sha256 filled in, all in OUT (default: the target directory's
# plugin/). Prints OUT on stdout (last line).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$HOME/.cache/nodemem/target}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)"
out="${1:-$target_dir/plugin}"

bash "$repo/image/build-oci.sh" >/dev/null
mkdir -p "$out"
manifest="$(grep -v '^#' "$repo/deploy/krew/nodemem.yaml" | sed "s/VERSION/$version/g")"
for arch in amd64 arm64; do
  case "$arch" in
    amd64) triple=x86_64-unknown-linux-gnu ;;
    arm64) triple=aarch64-unknown-linux-gnu ;;
  esac
  work="$(mktemp -d)"
  install -m 0755 "$target_dir/$triple/release/nodemem" "$work/kubectl-nodemem"
  archive="$out/kubectl-nodemem_v${version}_linux_$arch.tar.gz"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work" -cf - kubectl-nodemem |
    gzip -n -9 >"$archive"
  rm -rf "$work"
  sum="$(sha256sum "$archive" | cut -d' ' -f1)"
  upper="$(echo "$arch" | tr a-z A-Z)"
  manifest="$(echo "$manifest" | sed "s/SHA256_LINUX_$upper/$sum/")"
  echo ">> $archive" >&2
done
echo "$manifest" >"$out/nodemem.yaml"
echo "$out"
