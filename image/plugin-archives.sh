#!/usr/bin/env bash
# The kubectl plugin's release archives and krew manifest: for amd64 and arm64, the
# static nodemem of the image (NODEMEM_IMAGE_LAYOUT, else image/build-oci.sh's layout,
# built here if it is not: what ships in the image is what ships to kubectl), as
# kubectl-nodemem at the top of kubectl-nodemem_vVERSION_linux_ARCH.tar.gz
# (reproducible: fixed times and owners), and deploy/krew/nodemem.yaml with the version
# and each archive's sha256 filled in, all in OUT (default: the target directory's
# plugin/). Prints OUT on stdout (last line).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$HOME/.cache/nodemem/target}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)"
out="${1:-$target_dir/plugin}"

layout="${NODEMEM_IMAGE_LAYOUT:-$(bash "$repo/image/build-oci.sh")}"
blob() { echo "$layout/blobs/sha256/${1#sha256:}"; }
top="$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$layout/index.json" | head -1)"
mkdir -p "$out"
manifest="$(grep -v '^#' "$repo/deploy/krew/nodemem.yaml" | sed "s/VERSION/$version/g")"
for arch in amd64 arm64; do
  # The architecture's manifest in the image index, its one layer, /nodemem in it.
  image_manifest="$(grep -o "\"digest\":\"sha256:[0-9a-f]*\",\"size\":[0-9]*,\"platform\":{\"architecture\":\"$arch\"" "$(blob "$top")" |
    sed 's/"digest":"\(sha256:[0-9a-f]*\)".*/\1/')"
  layer="$(sed -n 's/.*"layers":\[{"mediaType":"[^"]*","digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$(blob "$image_manifest")")"
  [[ -n "$image_manifest" && -n "$layer" ]] || { echo "error: $layout has no $arch image" >&2; exit 1; }
  work="$(mktemp -d)"
  tar -xzf "$(blob "$layer")" -C "$work" nodemem
  mv "$work/nodemem" "$work/kubectl-nodemem"
  chmod 0755 "$work/kubectl-nodemem"
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
