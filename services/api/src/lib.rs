//! The gRPC edge: generated code, request translation, and the one place where domain
//! errors become `tonic::Status`. It translates; the engine decides.

mod convert;
mod service;
mod status;

pub mod pb {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("cursor_runner.v1");

    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("cursor_runner_descriptor");
}

pub use convert::struct_to_json;
pub use service::{RunnerApi, TENANT_METADATA};
pub use status::{ERROR_DOMAIN, to_status};

use std::net::SocketAddr;
use std::sync::Arc;

use cursor_runner_executions::Engine;
use tokio::net::TcpListener;

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
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection)
        .add_service(pb::runner_service_server::RunnerServiceServer::new(
            RunnerApi::new(engine),
        ))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            shutdown,
        )
        .await
}

/// Binds a listener; `127.0.0.1:0` picks a free port.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
