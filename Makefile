# nodemem developer entry points. `make test` is the one test command (README, CI).
# Build output and downloaded/built test dependencies live outside the repository
# (~/.cache/nodemem), keyed by version, so clean clones reuse a warm cache.
CARGO_TARGET_DIR ?= $(HOME)/.cache/nodemem/target
CARGO_BUILD_JOBS ?= 2
export CARGO_TARGET_DIR CARGO_BUILD_JOBS
CARGO ?= cargo
NODEMEM := $(CARGO_TARGET_DIR)/debug/nodemem

.PHONY: test lint fmt-check clippy crds-check unit apiserver vm build simulate crds control-plane

## test: every tier CI runs: formatting, lints, CRD drift, unit, control plane, real kernel
test: lint crds-check unit apiserver vm

lint: fmt-check clippy

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --all-features --locked -- -D warnings

build:
	$(CARGO) build --workspace --locked

## crds-check: fail if crds/ or the chart's copy drifted from the Rust types
crds-check: build
	$(NODEMEM) crds --check crds
	$(NODEMEM) crds --check charts/nodemem/crds

## crds: regenerate crds/ from the Rust types
crds: build
	$(NODEMEM) crds --output-dir crds
	$(NODEMEM) crds --output-dir charts/nodemem/crds

## unit: pure rules, CLI, CRD generation, harness self-tests (no cluster, no VM)
unit:
	$(CARGO) test --workspace --locked

## apiserver: tests against a real etcd + kube-apiserver + kube-controller-manager
apiserver:
	NODEMEM_CONTROL_PLANE_BIN="$$(bash tests/scripts/build-control-plane.sh)" && \
	  export NODEMEM_CONTROL_PLANE_BIN && \
	  $(CARGO) test -p nodemem --features apiserver-tests --test apiserver --locked

## vm: tests inside a real Linux kernel (qemu, two NUMA nodes, cgroup v2)
vm:
	NODEMEM_KERNEL="$$(bash tests/scripts/fetch-kernel.sh)" && \
	  export NODEMEM_KERNEL && \
	  $(CARGO) test -p nodemem --features vm-tests --test vm_kernel --test vm_agent --locked

## control-plane: start the test control plane alone (CRDs installed) until Ctrl-C
control-plane:
	NODEMEM_CONTROL_PLANE_BIN="$$(bash tests/scripts/build-control-plane.sh)" && \
	  export NODEMEM_CONTROL_PLANE_BIN && \
	  $(CARGO) run -p nodemem-testkit --bin nodemem-control-plane --locked -- --crds crds

## simulate: the main job on the general-pool example
simulate: build
	$(NODEMEM) simulate --policy examples/general/policy.yaml --node examples/general/node.yaml --pods examples/general/pods.yaml
