//! Domain errors → gRPC status, once, with `google.rpc.ErrorInfo`.

use cursor_runner_executions::{EngineError, ErrorKind};
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
