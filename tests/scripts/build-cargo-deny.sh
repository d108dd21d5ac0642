#!/usr/bin/env bash
# Builds cargo-deny (Embark Studios' dependency checker: licences, bans, sources) from
# crates.io at a pinned version with its own Cargo.lock (--locked), into a cache
# outside the repository keyed by the version. A warm cache returns at once. Prints
# the binary's path on stdout (last line). make tidy checks the dependencies with it (deny.toml).
#
# It also fetches every crate Cargo.lock names, for every platform: cargo-deny reads
# the workspace's metadata offline (--frozen), which needs the source of each crate of
# each target, and a new machine holds only what its builds fetched (found by a cold
# run, 2026-12-01: `windows-sys`, which only the Windows plugin's build fetches, was
# missing when the release checked its dependencies before building anything).
# Quiet and quick when all are there.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
(cd "$repo" && cargo fetch --locked --quiet) >&2

VERSION="${NODEMEM_CARGO_DENY_VERSION:-0.20.2}"
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
root="$CACHE/bin/cargo-deny-$VERSION"
out="$root/bin/cargo-deny"
if [[ -x "$out" ]]; then
  echo "$out"
  exit 0
fi
echo ">> building cargo-deny $VERSION (crates.io)" >&2
# Its own target directory: never the one a test run of nodemem is building in.
CARGO_TARGET_DIR="$CACHE/tools-target" cargo install cargo-deny --version "=$VERSION" \
  --locked --root "$root.tmp" -j "${CARGO_BUILD_JOBS:-2}" >&2
rm -rf "$root"
mv "$root.tmp" "$root"
echo "$out"
