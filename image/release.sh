#!/usr/bin/env bash
# A nodemem release, made by one command into one directory (docs/releasing.md):
#
#   image/release.sh --version X.Y.Z --key minisign.key --out DIR
#                    [--public-key minisign.pub] [--darwin-binaries DIR]
#
# DIR then holds:
#   nodemem_vX.Y.Z_oci/                    the image, amd64 and arm64, as an OCI layout
#                                          (image/build-oci.sh); skopeo/crane/oras push it
#   nodemem_vX.Y.Z_image.txt               the image's reference with its digest
#   nodemem-X.Y.Z.tgz                      the chart (helm package), image.digest pinned to
#                                          the layout's, Artifact Hub annotations
#   kubectl-nodemem_vX.Y.Z_OS_ARCH.tar.gz  the plugin for linux/amd64, linux/arm64 (and
#   kubectl-nodemem_vX.Y.Z_windows_amd64.zip  darwin/amd64, darwin/arm64: below), each
#                                          with the LICENSE
#   nodemem.yaml                           the krew manifest, each archive's sha256 in it
#   *.cdx.json                             CycloneDX SBOMs (cargo-cyclonedx): the image
#                                          and each binary per platform, every crate
#                                          of Cargo.lock linked into it
#   checksums.txt                          sha256 of every file above (the layout by its
#                                          index.json, which pins every blob by digest)
#   checksums.txt.minisig                  minisign signatures with KEY: over the checksums,
#   nodemem_vX.Y.Z_image.minisig           and over the image index (the image's digest)
#   nodemem.pub                            the public key, when given
#
# Before anything is built, cargo-deny checks the dependencies against deny.toml
# (licences, banned crates, sources): a release refuses what it does not allow.
#
# macOS: linking for darwin needs Apple's SDK (the Security and CoreFoundation
# frameworks), which is not redistributable: on Linux the plugin is compiled for both
# darwin targets (cargo-zigbuild check: every crate, no link) and the darwin archives
# are made from binaries built on a Mac (--darwin-binaries DIR holding
# kubectl-nodemem_darwin_amd64 and kubectl-nodemem_darwin_arm64; the GitHub workflow's
# macOS job builds them). Without them the release says so and the krew manifest has
# no darwin platform.
#
# The key is a minisign secret key (`minisign -G`); a password-protected one makes
# minisign ask for its password. VERSION must be the workspace's (Cargo.toml) and
# have its section in CHANGELOG.md. Progress goes to stderr; DIR is the last line
# of stdout.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$HOME/.cache/nodemem/target}"
image_repository="${NODEMEM_IMAGE_REPOSITORY:-ghcr.io/nodemem/nodemem}"
jobs="${CARGO_BUILD_JOBS:-2}"

die() { echo "error: $*" >&2; exit 1; }
say() { echo ">> $*" >&2; }

version= key= out= public_key= darwin=
while (($#)); do
  case "$1" in
    --version) version="${2:?--version X.Y.Z}"; shift 2 ;;
    --key) key="${2:?--key: a minisign secret key}"; shift 2 ;;
    --out) out="${2:?--out DIR}"; shift 2 ;;
    --public-key) public_key="${2:?--public-key: the minisign public key}"; shift 2 ;;
    --darwin-binaries) darwin="${2:?--darwin-binaries DIR}"; shift 2 ;;
    *) die "unknown argument $1 (image/release.sh --version X.Y.Z --key KEY --out DIR [--public-key PUB] [--darwin-binaries DIR])" ;;
  esac
done
[[ -n "$version" && -n "$key" && -n "$out" ]] ||
  die "image/release.sh needs --version X.Y.Z, --key (a minisign secret key) and --out DIR"
workspace_version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)"
[[ "$version" == "$workspace_version" ]] ||
  die "version $version is not the workspace's ($workspace_version in Cargo.toml): bump Cargo.toml and CHANGELOG.md first"
grep -q "^## \[$version\]" "$repo/CHANGELOG.md" ||
  die "CHANGELOG.md has no section '## [$version]': a release says what changed"
[[ -r "$key" ]] || die "the signing key $key cannot be read"
for tool in minisign cargo-zigbuild x86_64-w64-mingw32-gcc python3; do
  command -v "$tool" >/dev/null ||
    die "$tool is missing (tests/scripts/install-prereqs.sh installs it)"
done
# helm: the one on PATH, else the one the test bed builds from its module.
helm="$(command -v helm || echo "$(bash "$repo/tests/scripts/build-control-plane.sh")/helm")"
cyclonedx="$(bash "$repo/tests/scripts/build-cyclonedx.sh")"
cargo_deny="$(bash "$repo/tests/scripts/build-cargo-deny.sh")"

# 0. What the binaries link, as deny.toml allows: licences, no banned crate, crates.io
#    only (advisories: the workflow's own step, their database being on GitHub).
say "checking the dependencies' licences, bans and sources (cargo-deny, deny.toml)"
(cd "$repo" && "$cargo_deny" --frozen --workspace --config deny.toml \
  check licenses bans sources) >&2 ||
  die "cargo deny check refused the dependencies (above): a release ships only what deny.toml allows"

# A release replaces an earlier release in DIR, never anything else.
if [[ -d "$out" && -n "$(ls -A "$out")" && ! -f "$out/checksums.txt" ]]; then
  die "$out holds files and no release: give a new or empty directory"
fi
rm -rf "$out"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sha() { sha256sum "$1" | cut -d' ' -f1; }

# 1. The image, with the plugin built beside it (one cargo invocation per
#    architecture: the same crates, the same static glibc).
layout_name="nodemem_v${version}_oci"
NODEMEM_IMAGE_OUT="$out/$layout_name" NODEMEM_IMAGE_WITH_PLUGIN=1 \
  bash "$repo/image/build-oci.sh" >/dev/null
index_digest="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$out/$layout_name/index.json")"
echo "$image_repository:$version@$index_digest" >"$out/nodemem_v${version}_image.txt"
say "image $image_repository:$version@$index_digest"

# 2. The plugin's binaries: linux from the image's build, windows with mingw-w64.
declare -A binary
binary[linux_amd64]="$target_dir/x86_64-unknown-linux-gnu/release/kubectl-nodemem"
binary[linux_arm64]="$target_dir/aarch64-unknown-linux-gnu/release/kubectl-nodemem"
say "building kubectl-nodemem for windows/amd64 (mingw-w64)"
rustup target list --installed | grep -qx x86_64-pc-windows-gnu || rustup target add x86_64-pc-windows-gnu >&2
CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc \
  CC_x86_64_pc_windows_gnu=x86_64-w64-mingw32-gcc CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo build --release --locked -p nodemem-plugin --bin kubectl-nodemem \
  --target x86_64-pc-windows-gnu --manifest-path "$repo/Cargo.toml" -j "$jobs" >&2
binary[windows_amd64]="$target_dir/x86_64-pc-windows-gnu/release/kubectl-nodemem.exe"
for arch in amd64 arm64; do
  if [[ -n "$darwin" ]]; then
    binary[darwin_$arch]="$darwin/kubectl-nodemem_darwin_$arch"
    [[ -f "${binary[darwin_$arch]}" ]] || die "--darwin-binaries $darwin has no kubectl-nodemem_darwin_$arch"
  fi
done
if [[ -z "$darwin" ]]; then
  for triple in x86_64-apple-darwin aarch64-apple-darwin; do
    say "compiling kubectl-nodemem for $triple (cargo-zigbuild check: no macOS SDK to link with here)"
    rustup target list --installed | grep -qx "$triple" || rustup target add "$triple" >&2
    cargo-zigbuild check --release --locked -p nodemem-plugin --bin kubectl-nodemem \
      --target "$triple" --manifest-path "$repo/Cargo.toml" -j "$jobs" >&2
  done
  say "NOTE: no darwin archives (linking for macOS needs Apple's SDK: build them on a Mac and pass --darwin-binaries)"
fi

# 3. The archives, reproducible (fixed times, owners and order), the LICENSE in each.
platforms=(linux_amd64 linux_arm64 darwin_amd64 darwin_arm64 windows_amd64)
declare -A archive
for p in "${platforms[@]}"; do
  [[ -n "${binary[$p]:-}" ]] || continue
  dir="$work/$p"
  mkdir -p "$dir"
  cp "$repo/LICENSE" "$dir/LICENSE"
  if [[ "$p" == windows_* ]]; then
    install -m 0755 "${binary[$p]}" "$dir/kubectl-nodemem.exe"
    archive[$p]="kubectl-nodemem_v${version}_$p.zip"
    python3 - "$dir" "$out/${archive[$p]}" <<'PY'
import os, sys, zipfile
src, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
    for name in sorted(os.listdir(src)):
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o100755 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        with open(os.path.join(src, name), "rb") as f:
            z.writestr(info, f.read())
PY
  else
    install -m 0755 "${binary[$p]}" "$dir/kubectl-nodemem"
    archive[$p]="kubectl-nodemem_v${version}_$p.tar.gz"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$dir" \
      -cf - LICENSE kubectl-nodemem | gzip -n -9 >"$out/${archive[$p]}"
  fi
  say "${archive[$p]}"
done

# 4. The krew manifest: the template's platforms that have an archive, each with its
#    sha256.
python3 - "$repo/deploy/krew/nodemem.yaml" "$out/nodemem.yaml" "$version" "$out" <<'PY'
import os, re, sys, hashlib
template, dest, version, out = sys.argv[1:]
text = "".join(l for l in open(template) if not l.startswith("#")).replace("VERSION", version)
head, rest = text.split("  platforms:\n", 1)
blocks = ["  - selector:" + b for b in rest.split("  - selector:")[1:]]
kept = []
for b in blocks:
    uri = re.search(r"uri: \S+/(\S+)", b).group(1)
    path = os.path.join(out, uri)
    if not os.path.exists(path):
        continue
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    kept.append(re.sub(r"sha256: SHA256_\w+", "sha256: " + digest, b))
open(dest, "w").write(head + "  platforms:\n" + "".join(kept))
PY

# 5. The chart, packaged with the image's digest as its default and Artifact Hub's
#    annotations for this release (its images and changes).
cp -r "$repo/charts/nodemem" "$work/chart"
python3 - "$work/chart" "$version" "$index_digest" "$image_repository" "$repo/CHANGELOG.md" <<'PY'
import re, sys
chart, version, digest, repository, changelog = sys.argv[1:]
values = open(chart + "/values.yaml").read()
values, n = re.subn(r'(?m)^(image:\n(?:  .*\n|\s*#.*\n)*?  digest: )""', r'\g<1>"' + digest + '"', values, count=1)
assert n == 1, "values.yaml: no image.digest to pin"
open(chart + "/values.yaml", "w").write(values)
section = changelog_text = open(changelog).read()
m = re.search(r"(?ms)^## \[" + re.escape(version) + r"\][^\n]*\n(.*?)(?=^## \[|\Z)", changelog_text)
changes = []
kind = "added"
for line in m.group(1).splitlines():
    if line.startswith("### "):
        kind = {"Added": "added", "Changed": "changed", "Fixed": "fixed", "Removed": "removed",
                "Deprecated": "deprecated", "Security": "security"}.get(line[4:].strip(), "changed")
    elif line.startswith("- "):
        changes.append([kind, line[2:].strip()])
    elif line.startswith("  ") and changes:
        changes[-1][1] += " " + line.strip()
def q(s):
    return "'" + s.replace("'", "''") + "'"
chart_yaml = open(chart + "/Chart.yaml").read()
extra = "  artifacthub.io/images: |\n    - name: nodemem\n      image: " + repository + ":" + version + "@" + digest + "\n      platforms:\n        - linux/amd64\n        - linux/arm64\n"
extra += "  artifacthub.io/changes: |\n" + "".join(
    "    - kind: " + k + "\n      description: " + q(d) + "\n" for k, d in changes)
assert "annotations:\n" in chart_yaml, "Chart.yaml: no annotations"
chart_yaml = chart_yaml.replace("annotations:\n", "annotations:\n" + extra, 1)
open(chart + "/Chart.yaml", "w").write(chart_yaml)
PY
"$helm" package "$work/chart" --version "$version" --app-version "$version" -d "$out" >&2

# 6. SBOMs: cargo-cyclonedx per binary and platform (the crates cargo links into it,
#    from Cargo.lock), and the image's: its amd64 binary's, with the image as subject.
say "SBOMs (cargo-cyclonedx)"
# cargo-cyclonedx writes one SBOM per binary beside each package's Cargo.toml: it runs
# on a copy of the tracked sources at a path of the version's (the SBOMs name it).
src="$work/nodemem-$version"
mkdir -p "$src"
(cd "$repo" && git ls-files -z | xargs -0 cp --parents -t "$src")
sboms() { # TRIPLE: the SBOMs of both binaries for TRIPLE, in $src/crates/*/
  find "$src/crates" -maxdepth 2 -name '*.cdx.json' -delete
  (cd "$src" && "$cyclonedx" cyclonedx --manifest-path "$src/Cargo.toml" --format json \
    --spec-version 1.5 --describe binaries --target "$1" --no-default-features -q >&2)
}
keep() { # FROM NAME: an SBOM into the release, the copy's path made the version's
  [[ -f "$1" ]] || die "cargo-cyclonedx wrote no $1"
  sed "s#$work/##g" "$1" >"$out/$2"
}
declare -A triple_of=([linux_amd64]=x86_64-unknown-linux-gnu [linux_arm64]=aarch64-unknown-linux-gnu
  [darwin_amd64]=x86_64-apple-darwin [darwin_arm64]=aarch64-apple-darwin
  [windows_amd64]=x86_64-pc-windows-gnu)
for p in "${platforms[@]}"; do
  [[ -n "${archive[$p]:-}" ]] || continue
  sboms "${triple_of[$p]}"
  keep "$src/crates/nodemem-plugin/kubectl-nodemem_bin.cdx.json" "kubectl-nodemem_v${version}_$p.cdx.json"
  [[ "$p" != linux_* ]] || keep "$src/crates/nodemem/nodemem_bin.cdx.json" "nodemem_v${version}_$p.cdx.json"
done
python3 - "$out/nodemem_v${version}_linux_amd64.cdx.json" "$out/nodemem_v${version}_image.cdx.json" \
  "$image_repository" "$version" "$index_digest" <<'PY'
import json, sys
src, dest, repository, version, digest = sys.argv[1:]
bom = json.load(open(src))
binary = bom["metadata"]["component"]
image = {"type": "container", "bom-ref": "image:" + digest, "name": repository,
         "version": version, "purl": "pkg:oci/nodemem@" + digest.replace(":", "%3A")
         + "?repository_url=" + repository.replace("/", "%2F") + "&tag=" + version,
         "hashes": [{"alg": "SHA-256", "content": digest.split(":", 1)[1]}]}
bom["metadata"]["component"] = image
bom["components"] = [binary] + bom.get("components", [])
bom.setdefault("dependencies", []).append({"ref": image["bom-ref"], "dependsOn": [binary["bom-ref"]]})
json.dump(bom, open(dest, "w"), indent=2)
PY

# 7. Checksums, then the signatures over them and over the image index.
(cd "$out" && find . -maxdepth 1 -type f ! -name 'checksums.txt*' -printf '%P\n' | sort |
  xargs sha256sum >checksums.txt && sha256sum "$layout_name/index.json" >>checksums.txt)
minisign -S -s "$key" -m "$out/checksums.txt" -t "nodemem $version checksums" >&2
minisign -S -s "$key" -m "$out/$layout_name/blobs/sha256/${index_digest#sha256:}" \
  -x "$out/nodemem_v${version}_image.minisig" -t "nodemem $version image $index_digest" >&2
[[ -z "$public_key" ]] || cp "$public_key" "$out/nodemem.pub"
say "release $version in $out"
echo "$out"
