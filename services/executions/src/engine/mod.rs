//! The engine: admission, idempotency, routing commands to execution actors, and
//! event streams. Everything the gRPC layer calls.

mod admission;
mod calls;
mod data;
mod homes;
mod idempotency;
mod lifecycle;
mod open_claim;
mod routing;
mod sessions;
mod streams;
mod takeover;

pub use data::{AnswerCommand, AnswerTarget, CreateExecutionCommand, Engine, ExecutionView, RequestMeta, StreamItem};
pub use routing::{PLACEMENT_ATTEMPTS, Route, fleet_full, for_want_of_room};
pub use streams::MAX_STREAMS_PER_EXECUTION;
