#!/usr/bin/env bash
# Verifies a nodemem release directory as a team would before installing it
# (docs/releasing.md):
#
#   image/verify-release.sh DIR PUBLIC_KEY
#
# the checksums' signature (minisign), every file against checksums.txt, the image
# index's signature, and that the image index is the blob its digest names (so the
# layout's every manifest, config and layer, each pinned by digest, is the signed
# image). Exit 0 and "verified" on the last line; otherwise the first thing that
# failed, exit 1.
set -euo pipefail
dir="${1:?image/verify-release.sh DIR PUBLIC_KEY}"
pub="${2:?image/verify-release.sh DIR PUBLIC_KEY}"
fail() { echo "error: $*" >&2; exit 1; }
command -v minisign >/dev/null || fail "minisign is missing (Debian: minisign)"
cd "$dir"
minisign -Vq -p "$pub" -m checksums.txt || fail "checksums.txt: its signature does not verify with $pub"
sha256sum --quiet --strict -c checksums.txt || fail "a file differs from checksums.txt"
layouts=(nodemem_v*_oci)
[[ -f "${layouts[0]}/index.json" ]] || fail "no image layout (nodemem_v*_oci/index.json)"
layout="${layouts[0]}"
digest="$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$layout/index.json" | head -1)"
blob="$layout/blobs/sha256/${digest#sha256:}"
[[ "$(sha256sum "$blob" | cut -d' ' -f1)" == "${digest#sha256:}" ]] ||
  fail "the image index is not the blob its digest $digest names"
# Every blob is what its name says (what a registry checks on push and a node on pull).
for b in "$layout"/blobs/sha256/*; do
  [[ "$(sha256sum "$b" | cut -d' ' -f1)" == "$(basename "$b")" ]] || fail "$b is not the blob its name says"
done
signature="${layout%_oci}_image.minisig"
minisign -Vq -p "$pub" -m "$blob" -x "$signature" || fail "the image $digest: its signature does not verify with $pub"
grep -q "image $digest" "$signature" || fail "the image signature's trusted comment names another image"
echo "verified: $(wc -l <checksums.txt) files and the image $digest"
