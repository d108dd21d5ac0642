# nodemem's image: one statically linked binary on an empty base. The same image is
# built without a container engine by image/build-oci.sh (an OCI layout), which is what
# the test suite builds and inspects.
#
#   docker build -t nodemem:0.1.0 .
#
# The controller and the agent are the same binary: `nodemem controller`, `nodemem
# agent` (the chart and the DaemonSet the controller writes pass the subcommand).

FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Static glibc (static-pie): no libc in the final image. The sandbox and its test
# harness are not built into the image (--no-default-features).
RUN RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked -p nodemem --no-default-features \
      --target x86_64-unknown-linux-gnu \
 && install -m 0755 target/x86_64-unknown-linux-gnu/release/nodemem /nodemem

FROM scratch
COPY --from=build /nodemem /nodemem
# The controller runs as this user; the agent's pod runs as root (it writes root-owned
# cgroup files), which its DaemonSet sets.
USER 65532:65532
ENTRYPOINT ["/nodemem"]
