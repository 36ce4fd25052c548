//! `/metrics` over plain HTTP on its own port (OpenMetrics text), off unless
//! `serve --metrics-listen` is given.

use std::sync::Arc;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use cursor_runner_executions::Metrics;
use tokio::net::TcpListener;

pub const CONTENT_TYPE_OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `GET /metrics` on `listener` until `shutdown` resolves.
pub async fn serve(
    metrics: Arc<Metrics>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move { ([(CONTENT_TYPE, CONTENT_TYPE_OPENMETRICS)], metrics.encode()).into_response() }
        }),
    );
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}
