#!/usr/bin/env bash
# Builds nodemem's container image without a container engine: a statically linked
# release binary (glibc, static-pie) on an empty base, written as an OCI image layout
# (https://github.com/opencontainers/image-spec/blob/main/image-layout.md) that
# `skopeo copy oci:DIR:TAG docker://REGISTRY/nodemem:TAG`, `podman load` or
# `crane push` take as is. Same contents as the Dockerfile: /nodemem, entrypoint
# /nodemem, user 65532:65532.
#
# Reproducible: fixed file times, owners and order, gzip without a name or time.
# Prints the layout directory on stdout (last line); progress goes to stderr.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$HOME/.cache/nodemem/target}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)"
out="${NODEMEM_IMAGE_OUT:-$target_dir/image/nodemem-$version-oci}"
triple=x86_64-unknown-linux-gnu

echo ">> building the static nodemem binary (release, --no-default-features)" >&2
# The sandbox (and its test harness) is not part of the image.
RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release --locked -p nodemem --no-default-features --target "$triple" \
  --manifest-path "$repo/Cargo.toml" -j "${CARGO_BUILD_JOBS:-2}" >&2
bin="$target_dir/$triple/release/nodemem"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs"
install -m 0755 "$bin" "$work/rootfs/nodemem"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$work/rootfs" -cf "$work/layer.tar" nodemem
gzip -n -9 -c "$work/layer.tar" >"$work/layer.tar.gz"

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
diff_id="$(sha "$work/layer.tar")"
layer="$(sha "$work/layer.tar.gz")"

cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"User":"65532:65532","Entrypoint":["/nodemem"],"Labels":{"org.opencontainers.image.title":"nodemem","org.opencontainers.image.version":"$version","org.opencontainers.image.source":"https://github.com/nodemem/nodemem","org.opencontainers.image.licenses":"Apache-2.0"}},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},"history":[{"created_by":"image/build-oci.sh: static nodemem $version"}]}
JSON
config="$(sha "$work/config.json")"

cat >"$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config","size":$(size "$work/config.json")},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$layer","size":$(size "$work/layer.tar.gz")}]}
JSON
manifest="$(sha "$work/manifest.json")"

rm -rf "$out"
mkdir -p "$out/blobs/sha256"
cp "$work/layer.tar.gz" "$out/blobs/sha256/$layer"
cp "$work/config.json" "$out/blobs/sha256/$config"
cp "$work/manifest.json" "$out/blobs/sha256/$manifest"
echo '{"imageLayoutVersion":"1.0.0"}' >"$out/oci-layout"
cat >"$out/index.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest","size":$(size "$work/manifest.json"),"platform":{"architecture":"amd64","os":"linux"},"annotations":{"org.opencontainers.image.ref.name":"$version"}}]}
JSON
echo ">> image layout: $out (nodemem:$version, $(size "$work/layer.tar.gz") bytes compressed)" >&2
echo "$out"
