//! W3C trace context in: each call gets a span (`grpc.request`) whose parent is the
//! caller's `traceparent`, so a control-plane trace continues through the service — and,
//! through the turn's span and the prompt's `_meta.traceparent`, into the agent's turn.
//! Without an exporter installed the spans are only tracing spans (logs).

use std::future::Future;
use std::pin::Pin;

use opentelemetry::propagation::Extractor;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Reads propagation fields from HTTP headers.
struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The tower layer that opens each call's span.
#[derive(Clone, Copy, Default)]
pub struct TraceLayer;

impl<S> tower::Layer<S> for TraceLayer {
    type Service = TraceService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TraceService { inner }
    }
}

#[derive(Clone)]
pub struct TraceService<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for TraceService<S>
where
    S: tower::Service<http::Request<B>> + Send,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(request.headers())));
        let span = tracing::info_span!("grpc.request", rpc.method = %request.uri().path(), otel.kind = "server");
        // A malformed or absent traceparent leaves the span a root: never an error.
        let _ = span.set_parent(parent);
        Box::pin(self.inner.call(request).instrument(span))
    }
}
