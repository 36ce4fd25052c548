//! The gRPC edge: generated code, request translation, and the one place where domain
//! errors become `tonic::Status`. It translates; the engine decides.

mod convert;
mod service;
mod status;

pub mod pb {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("cursor_runner.v1");

    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("cursor_runner_descriptor");
}

pub use convert::struct_to_json;
pub use service::{RunnerApi, TENANT_METADATA};
pub use status::{ERROR_DOMAIN, to_status};

use std::net::SocketAddr;
use std::sync::Arc;

use cursor_runner_executions::Engine;
use tokio::net::TcpListener;

/// How long open calls may take to finish once shutdown begins.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves the runner, health and reflection services on `listener` until `shutdown`
/// resolves.
pub async fn serve(
    engine: Arc<Engine>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<pb::runner_service_server::RunnerServiceServer<RunnerApi>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("the embedded descriptor sets are valid");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection)
        .add_service(pb::runner_service_server::RunnerServiceServer::new(RunnerApi::new(
            engine.clone(),
        )))
        .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), async {
            let _ = stop_rx.await;
        });
    // Graceful shutdown waits for open calls: event tails are ended first, and a
    // client that stopped reading cannot hold the service past the grace period.
    let bounded_drain = async {
        shutdown.await;
        engine.end_streams();
        let _ = stop_tx.send(());
        tokio::time::sleep(SHUTDOWN_GRACE).await;
        tracing::warn!("calls still open after the shutdown grace period; dropping them");
    };
    tokio::select! {
        result = server => result,
        () = bounded_drain => Ok(()),
    }
}

/// Binds a listener; `127.0.0.1:0` picks a free port.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    /// Every value of every enum in the proto has a row in docs/prp-mapping.md.
    #[test]
    fn docs_map_every_proto_enum_value() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let doc = std::fs::read_to_string(format!("{root}/docs/prp-mapping.md")).expect("mapping doc");
        let mut checked = 0;
        for file in ["resources.proto", "runner_service.proto"] {
            let proto = std::fs::read_to_string(format!("{root}/proto/cursor_runner/v1/{file}")).expect("proto");
            let mut in_enum = false;
            for line in proto.lines().map(str::trim) {
                if line.starts_with("enum ") {
                    in_enum = true;
                } else if line == "}" {
                    in_enum = false;
                } else if in_enum && let Some((name, _)) = line.split_once(" = ") {
                    assert!(
                        doc.contains(&format!("| `{name}` |")),
                        "{name} is missing from docs/prp-mapping.md"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 20, "the proto enums were found ({checked})");
    }
}
