//! Generates the gRPC code from `proto/`. Uses the vendored `protoc` unless `PROTOC`
//! names another, so a fresh machine needs nothing but cargo.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = prost_build::Config::new();
    // Ordered maps encode deterministically, so a request's digest (idempotency) is stable.
    config.btree_map(["."]);
    if std::env::var_os("PROTOC").is_none() {
        config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
        config.protoc_arg(format!("-I{}", protoc_bin_vendored::include_path()?.display()));
    }
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("cursor_runner_descriptor.bin"))
        .compile_with_config(
            config,
            &[
                root.join("cursor_runner/v1/resources.proto"),
                root.join("cursor_runner/v1/runner_service.proto"),
                root.join("cursor_runner/v1/admin_service.proto"),
            ],
            &[root],
        )?;
    println!("cargo:rerun-if-changed=../../proto");
    println!("cargo:rerun-if-env-changed=PROTOC");
    Ok(())
}
