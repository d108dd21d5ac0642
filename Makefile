# nodemem developer entry points. `make test` is the one test command (README, CI).
# Build output and downloaded/built test dependencies live outside the repository
# (~/.cache/nodemem), keyed by version, so clean clones reuse a warm cache.
CARGO_TARGET_DIR ?= $(HOME)/.cache/nodemem/target
CARGO_BUILD_JOBS ?= 2
export CARGO_TARGET_DIR CARGO_BUILD_JOBS
# A failing test's panic message and place (file:line) are what tell; a backtrace of
# the async runtime's frames pushed the message out of the part of a CI log that is
# kept (its first and last lines). NODEMEM_BACKTRACE=1 brings the backtraces back.
export RUST_BACKTRACE := $(if $(NODEMEM_BACKTRACE),1,0)
CARGO ?= cargo
NODEMEM := $(CARGO_TARGET_DIR)/debug/nodemem

.PHONY: release test kubelet-float kubelet-oracle tidy nri lint fmt-check clippy crds-check unit apiserver vm node bench-node soak churn build simulate crds control-plane real-node image image-check sandbox prereqs

## test: every tier CI runs: formatting, lints, CRD drift, unit, control plane, image, real kernel, real node
## The first lane's tiers in order; BESIDE's run in a second lane beside the first from
## the start of its tier BESIDE_FROM on, at the lowest priority (tests/scripts/tiers.sh
## says how and why)
TIERS = prereqs nri unit crds-check kubelet-float apiserver image-check kubelet-oracle vm node
BESIDE_FROM = node
BESIDE = lint tidy
test:
	@MAKE="$(MAKE)" bash tests/scripts/tiers.sh $(TIERS) --beside $(BESIDE_FROM) $(BESIDE)

## prereqs: the Debian packages the tiers need, installed when missing (root or sudo)
prereqs:
	bash tests/scripts/install-prereqs.sh

lint: fmt-check clippy

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --all-features --locked -- -D warnings

build:
	$(CARGO) build --workspace --locked

## crds-check: fail if crds/ or its copies (the chart's, deploy/'s) drifted from the Rust types
crds-check: build
	$(NODEMEM) crds --check crds
	$(NODEMEM) crds --check charts/nodemem/crds
	$(NODEMEM) crds --check deploy/crds

## crds: regenerate crds/ from the Rust types
crds: build
	$(NODEMEM) crds --output-dir crds
	$(NODEMEM) crds --output-dir charts/nodemem/crds
	$(NODEMEM) crds --output-dir deploy/crds

## tidy: repository-wide checks (module graph, docs catalog, set-up scripts, function
## length, crates documented), the API docs without a broken link or a warning, and
## the Markdown through markdownlint (.markdownlint-cli2.jsonc)
tidy:
	$(CARGO) test -p nodemem-tidy --locked
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --locked
	"$$(bash tests/scripts/build-markdownlint.sh)"

## unit: pure rules, CLI, CRD generation, harness self-tests (no cluster, no VM)
unit:
	$(CARGO) test --workspace --exclude nodemem-tidy --locked

## kubelet-float: memory.high against the kubelet's float64 expressions compiled by Go,
## for amd64 and for arm64 (under qemu-user), over random quantities and factors
kubelet-float:
	NODEMEM_KUBELET_FLOAT="$$(bash tests/scripts/build-kubelet-float.sh)" && \
	  export NODEMEM_KUBELET_FLOAT && \
	  $(CARGO) test -p nodemem-e2e --features float-tests --test kubelet_float --locked -- --nocapture

## kubelet-oracle: each pod cgroup value nodemem plans against the kubelet's own code of
## every supported version (v1.35-v1.38), built from that version's modules, over
## generated pods (NODEMEM_ORACLE_CASES, 100,000 by default); first, what the newest
## version's real node and control plane still lack from the module proxy (a report)
kubelet-oracle:
	bash tests/scripts/k8s-modules-served.sh
	NODEMEM_KUBELET_ORACLE="$$(bash tests/scripts/build-kubelet-oracle.sh)" && \
	  export NODEMEM_KUBELET_ORACLE && \
	  $(CARGO) test -p nodemem-e2e --features oracle-tests --test kubelet_oracle --locked -- --nocapture

## nri: the NRI plugin protocol against NRI's own runtime side (containerd/nri adaptation),
## and the agent's plugin answering while its loop is busy
nri:
	NODEMEM_NRI_RUNTIME="$$(bash tests/scripts/build-nri-runtime.sh)" && \
	  export NODEMEM_NRI_RUNTIME && \
	  $(CARGO) test -p nodemem-nri --features runtime-peer-tests --test runtime_peer --locked && \
	  $(CARGO) test -p nodemem-agent --features runtime-peer-tests --lib --locked -- nri::link

## apiserver: tests against a real etcd + kube-apiserver + kube-controller-manager;
## four at once on two cores: most of their time is waiting on timers (rollouts, the
## outage, the soak), and 4 took 416 s where 2 took 530 s
APISERVER_TEST_THREADS ?= 4
apiserver:
	NODEMEM_CONTROL_PLANE_BIN="$$(bash tests/scripts/build-control-plane.sh)" && \
	  export NODEMEM_CONTROL_PLANE_BIN && \
	  bash tests/scripts/build-promtool.sh >/dev/null && \
	  $(CARGO) test -p nodemem-e2e --features apiserver-tests --test apiserver --locked \
	    -- --test-threads $(APISERVER_TEST_THREADS)

## soak: the churn soak on one node for 10 minutes (make test runs 1 minute)
soak:
	NODEMEM_CONTROL_PLANE_BIN="$$(bash tests/scripts/build-control-plane.sh)" && \
	  export NODEMEM_CONTROL_PLANE_BIN && \
	  NODEMEM_SOAK_SECONDS=600 $(CARGO) test -p nodemem-e2e --features apiserver-tests --test apiserver --locked \
	    -- --nocapture churn_soak

## churn: node churn at 500 (BENCHMARKS.md "Node churn"): a rollout over 600 nodes
## while 500 join within a minute, each with a pod at once, and 500 leave (make test
## runs 8 and 6 over 12)
churn:
	NODEMEM_CONTROL_PLANE_BIN="$$(bash tests/scripts/build-control-plane.sh)" && \
	  export NODEMEM_CONTROL_PLANE_BIN && \
	  NODEMEM_IMAGE_ARCHES=amd64 NODEMEM_IMAGE_OUT=$(CARGO_TARGET_DIR)/image/churn-oci bash image/build-oci.sh >/dev/null && \
	  export NODEMEM_E2E_BINARY=$(CARGO_TARGET_DIR)/x86_64-unknown-linux-gnu/release/nodemem && \
	  NODEMEM_CHURN_INITIAL=600 NODEMEM_CHURN_JOINING=500 NODEMEM_CHURN_LEAVING=500 \
	  NODEMEM_CHURN_MAX_UNAVAILABLE=100 NODEMEM_CHURN_SPREAD_SECONDS=60 \
	  $(CARGO) test -p nodemem-e2e --features apiserver-tests --test apiserver --locked \
	    -- --nocapture churn::nodes_joining

## image: the container image as an OCI layout (static binaries for amd64 and arm64, one
## multi-architecture index, no container engine)
image:
	bash image/build-oci.sh

## release: a release into OUT (docs/releasing.md): make release VERSION=x.y.z
## KEY=minisign.key [PUBLIC_KEY=minisign.pub] [DARWIN_BINARIES=dir] [OUT=dir]: the image
## as an OCI layout, the packaged chart pinned to its digest, the plugin's archives, the
## krew manifest, SBOMs, checksums and minisign signatures; image/verify-release.sh
## checks one
OUT ?= $(or $(CARGO_TARGET_DIR),$(HOME)/.cache/nodemem/target)/nodemem-release
release:
	@test -n "$(VERSION)" || { echo "make release VERSION=x.y.z KEY=minisign.key: VERSION is missing" >&2; exit 2; }
	@test -n "$(KEY)" || { echo "make release VERSION=x.y.z KEY=minisign.key: KEY (a minisign secret key) is missing" >&2; exit 2; }
	bash tests/scripts/install-prereqs.sh
	bash image/release.sh --version "$(VERSION)" --key "$(KEY)" --out "$(OUT)" \
	  $(if $(PUBLIC_KEY),--public-key "$(PUBLIC_KEY)") $(if $(DARWIN_BINARIES),--darwin-binaries "$(DARWIN_BINARIES)")

## image-check: a release made with a throwaway key (tests/scripts/release-for-tests.sh),
## then its image inspected (layout, digests, entrypoint, user; each architecture runs,
## arm64 under qemu-user, and computes what amd64 does) and the release verified as a
## team would (checksums, signatures, krew installs on Linux and Windows under Wine,
## SBOMs against what cargo compiles, the packaged chart installed on the test control
## plane with the image's own binary)
image-check:
	made="$$(bash tests/scripts/release-for-tests.sh)" && \
	  NODEMEM_RELEASE_DIR="$$(echo "$$made" | tail -2 | head -1)" && \
	  NODEMEM_RELEASE_PUBLIC_KEY="$$(echo "$$made" | tail -1)" && \
	  NODEMEM_IMAGE_LAYOUT="$$(ls -d "$$NODEMEM_RELEASE_DIR"/nodemem_v*_oci)" && \
	  NODEMEM_CONTROL_PLANE_BIN="$$(bash tests/scripts/build-control-plane.sh)" && \
	  export NODEMEM_RELEASE_DIR NODEMEM_RELEASE_PUBLIC_KEY NODEMEM_IMAGE_LAYOUT NODEMEM_CONTROL_PLANE_BIN && \
	  bash tests/scripts/build-krew.sh >/dev/null && \
	  $(CARGO) test -p nodemem-e2e --features image-tests --test image --test release --test dependencies --locked

## vm: tests inside a real Linux kernel (qemu, two NUMA nodes, cgroup v2)
vm:
	NODEMEM_KERNEL="$$(bash tests/scripts/fetch-kernel.sh)" && \
	  export NODEMEM_KERNEL && \
	  $(CARGO) test -p nodemem-e2e --features vm-tests --test vm_kernel --test vm_agent --locked

# What the real-node tests need: the control plane, the project's image, the kernel.
NODE_ENV = NODEMEM_CONTROL_PLANE_BIN="$$(bash tests/scripts/build-control-plane.sh)" && \
	  export NODEMEM_CONTROL_PLANE_BIN && \
	  NODEMEM_IMAGE_LAYOUT="$$(bash image/build-oci.sh)" && \
	  export NODEMEM_IMAGE_LAYOUT && \
	  NODEMEM_KERNEL="$$(bash tests/scripts/fetch-kernel.sh)" && \
	  export NODEMEM_KERNEL

## node: a real node (qemu: systemd, containerd, runc, the kubelet) joined to a control plane,
## nodemem installed on it from its image
node:
	$(NODE_ENV) && \
	  $(CARGO) test -p nodemem-e2e --features node-tests --test real_node --locked -- --nocapture

## bench-node: the reaction to 60 real container starts on the systemd-driver real node
## (BENCHMARKS.md); the rest of that node's test runs as in `make node`
bench-node:
	$(NODE_ENV) && \
	  NODEMEM_REACTION_PODS=60 $(CARGO) test -p nodemem-e2e --features node-tests --test real_node --locked \
	    -- --nocapture a_real_systemd_driver_node

## real-node: a control plane and one real node for manual use, until Ctrl-C
real-node:
	NODEMEM_CONTROL_PLANE_BIN="$$(bash tests/scripts/build-control-plane.sh)" && \
	  export NODEMEM_CONTROL_PLANE_BIN && \
	  $(CARGO) run -p nodemem-testkit --bin nodemem-real-node --locked

## control-plane: start the test control plane alone (CRDs installed) until Ctrl-C
control-plane:
	NODEMEM_CONTROL_PLANE_BIN="$$(bash tests/scripts/build-control-plane.sh)" && \
	  export NODEMEM_CONTROL_PLANE_BIN && \
	  $(CARGO) run -p nodemem-testkit --bin nodemem-control-plane --locked -- --crds crds

## sandbox: the main job: nodemem on a local control plane with simulated pools, live
## (builds only the nodemem binary it runs, not the whole workspace)
sandbox:
	bash tests/scripts/install-prereqs.sh sandbox
	$(CARGO) build -p nodemem --bin nodemem --locked
	$(NODEMEM) sandbox

## simulate: what nodemem would write on one node, without a cluster on the general-pool example
simulate: build
	$(NODEMEM) simulate --policy examples/general/policy.yaml --node examples/general/node.yaml --pods examples/general/pods.yaml
