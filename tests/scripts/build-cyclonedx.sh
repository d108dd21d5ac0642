#!/usr/bin/env bash
# Builds cargo-cyclonedx (the CycloneDX project's SBOM generator for Cargo) from
# crates.io at a pinned version with its own Cargo.lock (--locked), into a cache
# outside the repository keyed by the version. A warm cache returns at once. Prints
# the binary's path on stdout (last line). image/release.sh makes its SBOMs with it.
set -euo pipefail

VERSION="${NODEMEM_CYCLONEDX_VERSION:-0.5.9}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
root="$CACHE/bin/cargo-cyclonedx-$VERSION"
out="$root/bin/cargo-cyclonedx"
if [[ -x "$out" ]]; then
  echo "$out"
  exit 0
fi
echo ">> building cargo-cyclonedx $VERSION (crates.io)" >&2
# Its own target directory: never the one a test run of nodemem is building in.
CARGO_TARGET_DIR="$CACHE/tools-target" cargo install cargo-cyclonedx --version "=$VERSION" \
  --locked --root "$root.tmp" -j "${CARGO_BUILD_JOBS:-2}" >&2
rm -rf "$root"
mv "$root.tmp" "$root"
echo "$out"
