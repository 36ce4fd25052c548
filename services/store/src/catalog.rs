//! How a store failure reads in the domain's error catalog: the one place a
//! [`StoreError`] becomes an [`EngineError`] (every `?` on a store call uses it).

use cursor_runner_domain::error::{REPLICA_FENCED_RETRY_AFTER, STORE_RETRY_AFTER};
use cursor_runner_domain::{EngineError, ErrorKind, Reason};

use crate::contract::StoreError;

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Fenced => Self::precondition(Reason::ExecutionFenced, e.to_string()),
            // The replica is going away, not the execution: retry later, wherever it is served.
            StoreError::LeaseEnded => Self::new(
                ErrorKind::Unavailable,
                Reason::ReplicaFenced,
                "this replica lost its ownership lease: it writes nothing more and is exiting; its restart, \
                 or another replica, settles the executions it owned",
            )
            .retry_after(REPLICA_FENCED_RETRY_AFTER),
            // A call's first commit found its request id claimed: the call ran nothing.
            StoreError::KeyTaken => Self::new(
                ErrorKind::Aborted,
                Reason::RequestInFlight,
                "a call with this request_id is in flight or done; retry later",
            ),
            StoreError::AnotherService => Self::precondition(Reason::AnotherService, e.to_string()),
            StoreError::ReplicaNameInUse(_) => Self::precondition(Reason::ReplicaNameInUse, e.to_string()),
            StoreError::Unavailable(_) | StoreError::SessionLost(_) => {
                Self::new(ErrorKind::Unavailable, Reason::StoreUnavailable, e.to_string())
                    .retry_after(STORE_RETRY_AFTER)
            }
            _ => Self::new(ErrorKind::Unavailable, Reason::StoreUnavailable, e.to_string()),
        }
    }
}
