//! The gRPC edge: generated code, request translation, and the one place where domain
//! errors become `tonic::Status`. It translates; the engine decides.

mod admin;
pub mod auth;
pub mod bounds;
mod convert;
pub mod forward;
mod refusals;
mod service;
mod status;
pub mod tls;
mod trace;

pub mod pb {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("cursor_runner.v1");

    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("cursor_runner_descriptor");
}

pub use admin::AdminApi;
pub use auth::FleetToken;
pub use auth::{AuthLayer, TokenAuth};
pub use convert::struct_to_json;
pub use forward::{ForwardTls, Forwarder};
pub use service::{RunnerApi, TENANT_METADATA};
pub use status::{ERROR_DOMAIN, to_status};
pub use tls::{TlsReloader, TlsSettings};

use std::net::SocketAddr;
use std::sync::Arc;

use cursor_runner_executions::Engine;
use tokio::net::TcpListener;

/// How long open calls may take to finish once shutdown begins.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// How often health pings the store.
pub const STORE_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// A store ping slower than this counts as unreachable.
pub const STORE_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Readiness follows the store within this: a ping starts at most one interval after the
/// store stops (or starts) answering and ends within its timeout.
pub const READINESS_BOUND: std::time::Duration = std::time::Duration::from_secs(2);
const _: () =
    assert!(STORE_PROBE_INTERVAL.as_millis() + STORE_PROBE_TIMEOUT.as_millis() <= READINESS_BOUND.as_millis());

/// How often the slower readiness checks run (a pinned distribution's files, the pool).
pub const HEALTH_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// The name `grpc.health.v1` reports the runner service under.
pub const RUNNER_SERVICE_NAME: &str = "cursor_runner.v1.RunnerService";

/// The name `grpc.health.v1` reports agent isolation under: SERVING only when every
/// layer (`supervisor::isolation`) is in force. It is not readiness — a development run
/// as an ordinary user serves, unisolated — so an operator who requires isolation probes
/// it by name (`healthcheck --service cursor_runner.v1.AgentIsolation`); set once at
/// start-up, as isolation does not change while the service runs.
pub const AGENT_ISOLATION_HEALTH_NAME: &str = "cursor_runner.v1.AgentIsolation";

type RunnerServer = pb::runner_service_server::RunnerServiceServer<RunnerApi>;

/// Keeps the runner service's health (and the server's overall `""` status) truthful:
/// NOT_SERVING once draining has begun or while the store does not answer a ping.
/// Health as probes read it. `cursor_runner.v1.RunnerService` is readiness: SERVING
/// while the store answers, a pinned distribution still verifies, not every pool
/// profile is quarantined, and the service is not draining. `""` (the server as a
/// whole) is liveness: NOT_SERVING only once draining or shutdown began, so a store
/// outage takes the service out of rotation without getting it restarted — a restart
/// would kill every running agent and fix nothing.
async fn report_health(engine: Arc<Engine>, reporter: tonic_health::server::HealthReporter) {
    let mut draining = engine.draining();
    let (mut alive, mut ready) = (true, true);
    let mut probe = tokio::time::interval(STORE_PROBE_INTERVAL);
    let mut slow_checks_due = tokio::time::Instant::now();
    let mut slow_problem = None;
    loop {
        if tokio::time::Instant::now() >= slow_checks_due {
            slow_problem = engine.readiness_problem().await;
            slow_checks_due = tokio::time::Instant::now() + HEALTH_PROBE_INTERVAL;
        }
        let problem = engine
            .store_problem(STORE_PROBE_TIMEOUT)
            .await
            .or_else(|| slow_problem.clone());
        let now_alive = !*draining.borrow_and_update();
        let now_ready = now_alive && problem.is_none() && !*draining.borrow();
        if now_alive != alive {
            alive = now_alive;
            set_liveness(&reporter, alive).await;
        }
        if now_ready != ready {
            ready = now_ready;
            set_readiness(&reporter, ready).await;
            if ready {
                tracing::info!("health: SERVING");
            } else {
                tracing::warn!(
                    draining = *draining.borrow(),
                    problem = problem.as_deref().unwrap_or(""),
                    "health: NOT_SERVING"
                );
            }
        }
        tokio::select! {
            _ = probe.tick() => {}
            changed = draining.changed() => if changed.is_err() { return },
        }
    }
}

fn serving_status(serving: bool) -> tonic_health::ServingStatus {
    if serving {
        tonic_health::ServingStatus::Serving
    } else {
        tonic_health::ServingStatus::NotServing
    }
}

async fn set_liveness(reporter: &tonic_health::server::HealthReporter, alive: bool) {
    reporter.set_service_status("", serving_status(alive)).await;
}

async fn set_readiness(reporter: &tonic_health::server::HealthReporter, ready: bool) {
    if ready {
        reporter.set_serving::<RunnerServer>().await;
    } else {
        reporter.set_not_serving::<RunnerServer>().await;
    }
}

async fn set_health(reporter: &tonic_health::server::HealthReporter, serving: bool) {
    set_liveness(reporter, serving).await;
    set_readiness(reporter, serving).await;
}

/// How the listener authenticates and encrypts.
#[derive(Clone, Default)]
pub struct ServeOptions {
    /// Token (and client certificate) authentication; `None`: every call passes and runner
    /// calls name their tenant in `x-tenant-id` (development, loopback only).
    pub auth: Option<Arc<TokenAuth>>,
    /// TLS on the listener; `None`: plaintext (the binary refuses that off loopback).
    pub tls: Option<Arc<TlsReloader>>,
    /// Forwards calls for executions other replicas own to them; `None`: they are
    /// refused here, naming the owner.
    pub forwarder: Option<Arc<Forwarder>>,
}

/// Serves the runner, admin, health and reflection services on `listener` until
/// `shutdown` resolves, with no authentication and no TLS.
pub async fn serve(
    engine: Arc<Engine>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    serve_with(engine, listener, shutdown, ServeOptions::default()).await
}

/// [`serve`] with authentication and TLS as `options` say. gRPC and gRPC-Web (HTTP/1.1)
/// are served on the same port.
pub async fn serve_with(
    engine: Arc<Engine>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
    options: ServeOptions,
) -> Result<(), tonic::transport::Error> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    set_health(&health_reporter, true).await;
    health_reporter
        .set_service_status(
            AGENT_ISOLATION_HEALTH_NAME,
            serving_status(engine.agent_isolation().is_complete()),
        )
        .await;
    let health = tokio::spawn(report_health(engine.clone(), health_reporter.clone()));
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("the embedded descriptor sets are valid");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // gRPC-Web (HTTP/1.1, for HTTP proxies such as Daytona's preview ingress) is
    // translated first, so authentication and the services see plain gRPC.
    let server = tonic::transport::Server::builder()
        .accept_http1(true)
        .layer(trace::TraceLayer)
        .layer(tonic_web::GrpcWebLayer::new())
        .layer(refusals::RefusalLayer::new(engine.metrics().clone()))
        .layer(AuthLayer::new(options.auth))
        .add_service(health_service)
        .add_service(reflection)
        .add_service(
            pb::runner_service_server::RunnerServiceServer::new(RunnerApi::new(engine.clone(), options.forwarder))
                .max_decoding_message_size(bounds::MAX_REQUEST_BYTES),
        )
        .add_service(
            pb::admin_service_server::AdminServiceServer::new(AdminApi::new(engine.clone()))
                .max_decoding_message_size(bounds::MAX_REQUEST_BYTES),
        )
        .serve_with_incoming_shutdown(tls::incoming(listener, options.tls, engine.clone()), async {
            let _ = stop_rx.await;
        });
    // Graceful shutdown waits for open calls: event tails are ended first, and a
    // client that stopped reading cannot hold the service past the grace period.
    let bounded_drain = async {
        shutdown.await;
        engine.end_streams();
        set_health(&health_reporter, false).await;
        let _ = stop_tx.send(());
        tokio::time::sleep(SHUTDOWN_GRACE).await;
        tracing::warn!("calls still open after the shutdown grace period; dropping them");
    };
    let result = tokio::select! {
        result = server => result,
        () = bounded_drain => Ok(()),
    };
    health.abort();
    result
}

/// Serves the runner service to the fleet on `listener` (`--internal-listen`) until
/// `shutdown` resolves: calls other replicas forward for executions this one owns, each
/// with the fleet token and the tenant it is for. They are answered here, never forwarded
/// again, by the same handlers as the public listener's. With `tls`, over TLS with the
/// public listener's certificate; agents on this host are turned away as there.
pub async fn serve_internal(
    engine: Arc<Engine>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
    token: Arc<FleetToken>,
    tls: Option<Arc<TlsReloader>>,
) -> Result<(), tonic::transport::Error> {
    let incoming = tls::incoming(listener, tls, engine.clone());
    tonic::transport::Server::builder()
        .layer(trace::TraceLayer)
        .layer(AuthLayer::fleet(token, engine.replica_name()))
        .add_service(
            pb::runner_service_server::RunnerServiceServer::new(RunnerApi::new(engine, None))
                .max_decoding_message_size(bounds::MAX_REQUEST_BYTES),
        )
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

/// Binds a listener; `127.0.0.1:0` picks a free port.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn health_names_the_runner_service_by_its_grpc_name() {
        assert_eq!(
            <super::RunnerServer as tonic::server::NamedService>::NAME,
            super::RUNNER_SERVICE_NAME
        );
    }

    /// Every value of every enum in the proto has a row in docs/prp-mapping.md.
    #[test]
    fn docs_map_every_proto_enum_value() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let doc = std::fs::read_to_string(format!("{root}/docs/prp-mapping.md")).expect("mapping doc");
        let mut checked = 0;
        for file in ["resources.proto", "runner_service.proto", "admin_service.proto"] {
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
