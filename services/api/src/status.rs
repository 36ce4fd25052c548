//! Domain errors → gRPC status, once, with `google.rpc.ErrorInfo`.

use cursor_runner_executions::{EngineError, ErrorKind, Reason};
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};

/// `ErrorInfo.domain` of every error this service returns.
pub const ERROR_DOMAIN: &str = "cursor-runner";

pub fn to_status(error: EngineError) -> tonic::Status {
    let code = match error.kind {
        ErrorKind::Unauthenticated => Code::Unauthenticated,
        ErrorKind::InvalidArgument => Code::InvalidArgument,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::FailedPrecondition => Code::FailedPrecondition,
        ErrorKind::Aborted => Code::Aborted,
        ErrorKind::OutOfRange => Code::OutOfRange,
        ErrorKind::ResourceExhausted => Code::ResourceExhausted,
        ErrorKind::PermissionDenied => Code::PermissionDenied,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Internal => Code::Internal,
    };
    let metadata: std::collections::HashMap<String, String> = error.metadata.into_iter().collect();
    let mut details = ErrorDetails::with_error_info(error.reason.as_str(), ERROR_DOMAIN, metadata);
    if let Some(delay) = error.retry_after {
        details.set_retry_info(Some(delay));
    }
    tonic::Status::with_error_details(code, error.message, details)
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
                crate::bounds::MAX_REQUEST_BYTES,
                status.message()
            ),
        )
        .with("max_bytes", crate::bounds::MAX_REQUEST_BYTES.to_string()),
        Code::Internal if status.message().contains("decode") => EngineError::invalid(
            Reason::MessageMalformed,
            format!("the request message could not be decoded: {}", status.message()),
        ),
        _ => return None,
    };
    Some(to_status(error))
}
