#!/usr/bin/env bash
# Writes the real node's images as OCI archives for `ctr -n k8s.io images import` (the
# node has no registry; pods use imagePullPolicy: Never):
#
#   pause.tar      registry.k8s.io/pause:3.10 (containerd's pinned sandbox image name)
#                  from tests/node/images/pause
#   workload.tar   nodemem.local/workload:1, tests/node/images/workload: allocates and
#                  touches a given amount of memory, then sleeps
#   nodemem.tar    nodemem.local/nodemem:<version>, the project's image from
#                  image/build-oci.sh (the layout `make image` writes), if given
#
# Each archive is an OCI image layout in a tar whose index names the image with the
# `io.containerd.image.name` annotation, which is how ctr names what it imports.
#
# Usage: build-node-images.sh RUNTIME_DIR OUT_DIR [NODEMEM_LAYOUT]. Prints OUT_DIR.
set -euo pipefail

runtime="${1:?usage: build-node-images.sh RUNTIME_DIR OUT_DIR [NODEMEM_LAYOUT]}"
out="${2:?usage: build-node-images.sh RUNTIME_DIR OUT_DIR [NODEMEM_LAYOUT]}"
nodemem_layout="${3:-}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
tar_flags=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)

# single_binary_image NAME PROGRAM ENTRYPOINT_JSON OUT.tar: one layer holding PROGRAM at
# /PROGRAM's name, as the given image name.
single_binary_image() {
  local name="$1" program="$2" entrypoint="$3" archive="$4"
  local dir="$work/$(basename "$archive" .tar)"
  rm -rf "$dir"
  mkdir -p "$dir/rootfs" "$dir/layout/blobs/sha256"
  install -m 0755 "$program" "$dir/rootfs/$(basename "$program")"
  tar "${tar_flags[@]}" -C "$dir/rootfs" -cf "$dir/layer.tar" .
  gzip -n -9 -c "$dir/layer.tar" >"$dir/layer.tar.gz"
  local diff_id layer config manifest
  diff_id="$(sha "$dir/layer.tar")"
  layer="$(sha "$dir/layer.tar.gz")"
  cat >"$dir/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"Entrypoint":$entrypoint},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]}}
JSON
  config="$(sha "$dir/config.json")"
  cat >"$dir/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config","size":$(size "$dir/config.json")},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$layer","size":$(size "$dir/layer.tar.gz")}]}
JSON
  manifest="$(sha "$dir/manifest.json")"
  cp "$dir/layer.tar.gz" "$dir/layout/blobs/sha256/$layer"
  cp "$dir/config.json" "$dir/layout/blobs/sha256/$config"
  cp "$dir/manifest.json" "$dir/layout/blobs/sha256/$manifest"
  index "$dir/layout" "$name" "sha256:$manifest" "$(size "$dir/manifest.json")"
  tar "${tar_flags[@]}" -C "$dir/layout" -cf "$archive" .
}

# index LAYOUT NAME DIGEST SIZE [MEDIATYPE]: the layout's index.json naming one image
# NAME: an amd64 manifest, or (MEDIATYPE an image index) a multi-architecture image,
# from which containerd unpacks its node's architecture.
index() {
  local layout="$1" name="$2" digest="$3" bytes="$4"
  local media="${5:-application/vnd.oci.image.manifest.v1+json}" platform=""
  [[ "$media" == *manifest* ]] && platform=',"platform":{"architecture":"amd64","os":"linux"}'
  echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  cat >"$layout/index.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"$media","digest":"$digest","size":$bytes$platform,"annotations":{"io.containerd.image.name":"$name","org.opencontainers.image.ref.name":"${name##*:}"}}]}
JSON
}

single_binary_image registry.k8s.io/pause:3.10 "$runtime/images/pause" '["/pause"]' "$out/pause.tar"
single_binary_image nodemem.local/workload:1 "$runtime/images/workload" '["/workload"]' "$out/workload.tar"

if [[ -n "$nodemem_layout" ]]; then
  # The project's layout as built, renamed for the node: same blobs, the same
  # (multi-architecture) image.
  version="$(sed -n 's/.*"org.opencontainers.image.ref.name":"\([^"]*\)".*/\1/p' "$nodemem_layout/index.json")"
  digest="$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$nodemem_layout/index.json" | head -1)"
  bytes="$(sed -n 's/.*"size":\([0-9]*\).*/\1/p' "$nodemem_layout/index.json" | head -1)"
  media="$(sed -n 's/.*"manifests":\[{"mediaType":"\([^"]*\)".*/\1/p' "$nodemem_layout/index.json")"
  [[ -n "$version" && -n "$digest" && -n "$bytes" ]] || { echo "error: $nodemem_layout/index.json: no manifest with a ref.name" >&2; exit 1; }
  rm -rf "$work/nodemem"
  cp -a "$nodemem_layout" "$work/nodemem"
  index "$work/nodemem" "nodemem.local/nodemem:$version" "$digest" "$bytes" "$media"
  tar "${tar_flags[@]}" -C "$work/nodemem" -cf "$out/nodemem.tar" .
fi
echo "$out"
