# nodemem's image: one statically linked binary on an empty base. The same image is
# built without a container engine by image/build-oci.sh (an OCI layout), which is what
# the test suite builds and inspects.
#
#   docker build -t nodemem:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/nodemem:0.1.0 --push .
#
# The controller and the agent are the same binary: `nodemem controller`, `nodemem
# agent` (the chart and the DaemonSet the controller writes pass the subcommand).

FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Static glibc (static-pie): no libc in the final image. The sandbox and its test
# harness are not built into the image (--no-default-features). The build platform's
# own target (x86_64 or aarch64: buildx runs each platform's stage for it).
RUN triple="$(uname -m)-unknown-linux-gnu" \
 && RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked -p nodemem --no-default-features --target "$triple" \
 && install -m 0755 "target/$triple/release/nodemem" /nodemem

FROM scratch
COPY --from=build /nodemem /nodemem
# The controller runs as this user; the agent's pod runs as root (it writes root-owned
# cgroup files), which its DaemonSet sets.
USER 65532:65532
ENTRYPOINT ["/nodemem"]
