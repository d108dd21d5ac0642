#!/usr/bin/env bash
# Builds nodemem's container image without a container engine, for amd64 and arm64: a
# statically linked release binary (glibc, static-pie) per architecture on an empty
# base, written as one OCI image layout
# (https://github.com/opencontainers/image-spec/blob/main/image-layout.md) whose
# index.json names a multi-architecture image index (one manifest per architecture),
# which `skopeo copy --all oci:DIR:TAG docker://REGISTRY/nodemem:TAG`, `crane push` or
# `ctr images import` take as is; a node pulls its own architecture's. Same contents as
# the Dockerfile: /nodemem, entrypoint /nodemem, user 65532:65532.
#
# arm64 is cross-compiled (rustup's aarch64-unknown-linux-gnu standard library, added
# here when missing; Debian's aarch64-linux-gnu-gcc as linker and C compiler, which
# tests/scripts/install-prereqs.sh installs). NODEMEM_IMAGE_ARCHES picks architectures
# (default: "amd64 arm64").
#
# Reproducible: fixed file times, owners and order, gzip without a name or time.
# Prints the layout directory on stdout (last line); progress goes to stderr.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$HOME/.cache/nodemem/target}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)"
out="${NODEMEM_IMAGE_OUT:-$target_dir/image/nodemem-$version-oci}"
arches="${NODEMEM_IMAGE_ARCHES:-amd64 arm64}"

triple_of() {
  case "$1" in
    amd64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    *) echo "error: no build for architecture $1 (amd64, arm64)" >&2; exit 1 ;;
  esac
}

# build_binary ARCH: the static nodemem for ARCH; prints its path.
build_binary() {
  local arch="$1" triple
  triple="$(triple_of "$arch")"
  local env=(RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols)
  if [[ "$arch" == arm64 ]]; then
    command -v aarch64-linux-gnu-gcc >/dev/null || {
      echo "error: aarch64-linux-gnu-gcc is missing (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross; tests/scripts/install-prereqs.sh installs them)" >&2
      exit 1
    }
    rustup target list --installed | grep -qx "$triple" || rustup target add "$triple" >&2
    env+=(CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
      CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
      AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar)
  fi
  echo ">> building the static nodemem binary for $arch (release, --no-default-features)" >&2
  # The sandbox (and its test harness) is not part of the image. A release builds the
  # plugin's binary in the same invocation: the same crates with the same features,
  # compiled once.
  local with_plugin=()
  [[ -z "${NODEMEM_IMAGE_WITH_PLUGIN:-}" ]] ||
    with_plugin=(-p nodemem-plugin --bin kubectl-nodemem --bin nodemem)
  env "${env[@]}" cargo build --release --locked -p nodemem --no-default-features \
    "${with_plugin[@]}" --target "$triple" --manifest-path "$repo/Cargo.toml" \
    -j "${CARGO_BUILD_JOBS:-2}" >&2
  echo "$target_dir/$triple/release/nodemem"
}

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/blobs"
entries=()
for arch in $arches; do
  bin="$(build_binary "$arch")"
  dir="$work/$arch"
  mkdir -p "$dir/rootfs"
  install -m 0755 "$bin" "$dir/rootfs/nodemem"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$dir/rootfs" -cf "$dir/layer.tar" nodemem
  gzip -n -9 -c "$dir/layer.tar" >"$dir/layer.tar.gz"
  diff_id="$(sha "$dir/layer.tar")"
  layer="$(sha "$dir/layer.tar.gz")"
  cat >"$dir/config.json" <<JSON
{"architecture":"$arch","os":"linux","config":{"User":"65532:65532","Entrypoint":["/nodemem"],"Labels":{"org.opencontainers.image.title":"nodemem","org.opencontainers.image.version":"$version","org.opencontainers.image.source":"https://github.com/nodemem/nodemem","org.opencontainers.image.licenses":"Apache-2.0"}},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},"history":[{"created_by":"image/build-oci.sh: static nodemem $version for $arch"}]}
JSON
  config="$(sha "$dir/config.json")"
  cat >"$dir/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config","size":$(size "$dir/config.json")},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$layer","size":$(size "$dir/layer.tar.gz")}]}
JSON
  manifest="$(sha "$dir/manifest.json")"
  cp "$dir/layer.tar.gz" "$work/blobs/$layer"
  cp "$dir/config.json" "$work/blobs/$config"
  cp "$dir/manifest.json" "$work/blobs/$manifest"
  entries+=("{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$manifest\",\"size\":$(size "$dir/manifest.json"),\"platform\":{\"architecture\":\"$arch\",\"os\":\"linux\"}}")
  echo ">> $arch: $(size "$dir/layer.tar.gz") bytes compressed" >&2
done
joined="$(IFS=,; echo "${entries[*]}")"
echo "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":[$joined]}" >"$work/image-index.json"
image_index="$(sha "$work/image-index.json")"
cp "$work/image-index.json" "$work/blobs/$image_index"

rm -rf "$out"
mkdir -p "$out/blobs/sha256"
cp "$work/blobs/"* "$out/blobs/sha256/"
echo '{"imageLayoutVersion":"1.0.0"}' >"$out/oci-layout"
cat >"$out/index.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:$image_index","size":$(size "$work/image-index.json"),"annotations":{"org.opencontainers.image.ref.name":"$version"}}]}
JSON
echo ">> image layout: $out (nodemem:$version for $arches)" >&2
echo "$out"
