# nodemem developer entry points. `make test` is the one test command (README, CI).
# Build output lives outside the repository so clean clones reuse a warm cache.
CARGO_TARGET_DIR ?= $(HOME)/.cache/nodemem/target
CARGO_BUILD_JOBS ?= 2
export CARGO_TARGET_DIR CARGO_BUILD_JOBS
CARGO ?= cargo
NODEMEM := $(CARGO_TARGET_DIR)/debug/nodemem

.PHONY: test lint fmt-check clippy crds-check unit build simulate crds

## test: every check CI runs: formatting, lints, CRD drift, all tests
test: lint crds-check unit

lint: fmt-check clippy

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

build:
	$(CARGO) build --workspace --locked

## crds-check: fail if crds/ drifted from the Rust types
crds-check: build
	$(NODEMEM) crds --check crds

## crds: regenerate crds/ from the Rust types
crds: build
	$(NODEMEM) crds --output-dir crds

unit:
	$(CARGO) test --workspace --locked

## simulate: the main job on the general-pool example
simulate: build
	$(NODEMEM) simulate --policy examples/general/policy.yaml --node examples/general/node.yaml --pods examples/general/pods.yaml
