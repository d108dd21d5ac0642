# Sourced by the scripts that build test dependencies from Go modules
# (build-control-plane.sh, build-node-runtime.sh, build-kstatus.sh,
# build-kubelet-float.sh). The caller sets `work` (a scratch directory; `go_work` makes
# one) and `JOBS` (go build -p).

# go_work WHAT: the machine's Go, never a toolchain fetched at run time, and a scratch
# directory `work` under $CACHE, removed when the script exits. WHAT names the build
# when Go is missing.
go_work() {
  command -v go >/dev/null || {
    echo "error: go is not installed; it is needed to build $1 (tests/scripts/install-prereqs.sh installs Debian's golang-go)" >&2
    exit 1
  }
  export GOTOOLCHAIN=local
  mkdir -p "$CACHE"
  work="$(mktemp -d "$CACHE/build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
}

# new_module NAME PACKAGE...: a fresh module in $work/NAME importing the given main
# packages (so `go mod tidy` resolves them); the caller appends its require/replace
# lines to go.mod before building.
new_module() {
  local name="$1"
  shift
  mkdir -p "$work/$name"
  cd "$work/$name"
  go mod init "nodemem.local/$name" >/dev/null 2>&1
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for pkg in "$@"; do printf '\t_ "%s"\n' "$pkg"; done
    printf ')\n'
  } >tools.go
}

# build_to OUT LDFLAGS TAGS PACKAGE...: resolves the module graph and builds the
# packages to OUT (a file, or a directory ending in / for one binary per package,
# named after it). TAGS may be empty.
build_to() {
  local out="$1" ldflags="$2" tags="$3"
  shift 3
  GOFLAGS=-mod=mod go mod tidy -e >&2 2>&1 || true
  GOFLAGS=-mod=mod go build -p "$JOBS" -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$out" "$@"
}
