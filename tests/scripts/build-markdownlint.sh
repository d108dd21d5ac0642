#!/usr/bin/env bash
# Installs markdownlint-cli2 (tests/markdownlint: its package.json and lock, so every run
# gets the same packages) from the npm registry into the versioned cache, keyed by the
# lock; prints the path of its command. `make tidy` lints the project's Markdown with it.
set -euo pipefail
CACHE="${NODEMEM_CACHE:-$HOME/.cache/nodemem}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
src="$repo/tests/markdownlint"
key="$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-12)"
OUT="$CACHE/bin/markdownlint-$key"
bin="$OUT/node_modules/.bin/markdownlint-cli2"
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi
command -v npm >/dev/null || { echo "error: npm is not installed; it is needed to install markdownlint (Debian: nodejs npm)" >&2; exit 1; }
echo ">> installing markdownlint-cli2 from the npm registry" >&2
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
cp "$src/package.json" "$src/package-lock.json" "$OUT.tmp/"
(cd "$OUT.tmp" && npm ci --no-audit --no-fund --loglevel=error >&2)
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$bin"
