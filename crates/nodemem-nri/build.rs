//! Generates NRI's messages from the vendored api.proto (protox parses it, prost-build
//! writes the Rust types); the services are dispatched by hand in `service.rs`.

const PROTO_DIR: &str = "proto/nri/v0.11.0";

fn main() {
    let proto = format!("{PROTO_DIR}/api.proto");
    println!("cargo:rerun-if-changed={proto}");
    let files = protox::compile([proto.as_str()], [PROTO_DIR]).expect("api.proto compiles");
    prost_build::Config::new()
        .compile_fds(files)
        .expect("prost generates NRI's messages");
}
