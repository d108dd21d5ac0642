#!/usr/bin/env bash
# A release for the image-check tier: image/release.sh with a throwaway minisign key
# made for this run (no password), into the target directory's release-test/. Prints
# the release directory, then the public key, on stdout (the last two lines).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$HOME/.cache/nodemem/target}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)"
keys="$target_dir/release-test-key"
rm -rf "$keys"
mkdir -p "$keys"
minisign -G -W -p "$keys/nodemem.pub" -s "$keys/nodemem.key" >/dev/null
out="$(bash "$repo/image/release.sh" --version "$version" --key "$keys/nodemem.key" \
  --public-key "$keys/nodemem.pub" --out "$target_dir/release-test" | tail -1)"
echo "$out"
echo "$keys/nodemem.pub"
