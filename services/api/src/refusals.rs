//! Counts every refused call by its `ErrorInfo` reason, at the one place every response
//! passes — authentication refusals, translation errors and the engine's alike — so
//! `cursor_runner_requests_refused_total{reason}` cannot miss a path. Reasons come from
//! the closed catalog; an unknown one is counted as `INTERNAL`. The transport's own
//! refusals (a message over `MAX_REQUEST_BYTES`, one that does not decode) get their
//! catalog reason here first (`transport_status`), so they are counted and
//! returned like every other refusal.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use cursor_runner_executions::{EngineError, ErrorKind, Metrics, Reason};
use tonic::Code;
use tonic_types::StatusExt;

use crate::bounds::MAX_REQUEST_BYTES;
use crate::status::to_status;

#[derive(Clone)]
pub struct RefusalLayer {
    metrics: Arc<Metrics>,
}

impl RefusalLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> tower::Layer<S> for RefusalLayer {
    type Service = RefusalService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RefusalService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RefusalService<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, R> tower::Service<http::Request<B>> for RefusalService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>> + Send,
    S::Future: Send + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let metrics = self.metrics.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let mut response = response.await?;
            // A refusal is a trailers-only response: its status is in the headers.
            if let Some(mut status) = tonic::Status::from_header_map(response.headers())
                && status.code() != tonic::Code::Ok
            {
                if let Some(typed) = transport_status(&status) {
                    let headers = response.headers_mut();
                    for name in ["grpc-status", "grpc-message", "grpc-status-details-bin"] {
                        headers.remove(name);
                    }
                    if typed.add_header(headers).is_ok() {
                        response.extensions_mut().insert(typed.clone());
                        status = typed;
                    }
                }
                let reason = status
                    .get_error_details()
                    .error_info()
                    .and_then(|info| Reason::parse(&info.reason))
                    .unwrap_or(Reason::Internal);
                metrics.request_refused(reason);
            }
            Ok(response)
        })
    }
}

/// A status the transport made (tonic, while decoding a request) carries no `ErrorInfo`;
/// this gives the two a client can cause one from the catalog. `None`: the status is
/// ours already, or not one of them.
pub fn transport_status(status: &tonic::Status) -> Option<tonic::Status> {
    if status.get_error_details().error_info().is_some() {
        return None;
    }
    let error = match status.code() {
        Code::OutOfRange if status.message().contains("message length too large") => EngineError::new(
            ErrorKind::ResourceExhausted,
            Reason::MessageTooLarge,
            format!(
                "the request message is over {} bytes: {}",
                MAX_REQUEST_BYTES,
                status.message()
            ),
        )
        .with("max_bytes", MAX_REQUEST_BYTES.to_string()),
        Code::Internal if status.message().contains("decode") => EngineError::invalid(
            Reason::MessageMalformed,
            format!("the request message could not be decoded: {}", status.message()),
        ),
        _ => return None,
    };
    Some(to_status(error))
}
