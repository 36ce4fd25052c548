//! The execution domain: the execution, turn and interaction state machines, their
//! fences, and the per-execution actor that drives one agent process. The gRPC layer
//! calls [`Engine`]; it never decides anything itself.

mod actor;
mod answerable;
pub mod attempts;
mod call_key;
pub mod capabilities;
mod config;
pub mod credential;
mod engine;
mod events;
mod execution_row;
mod handshake;
mod heads;
pub mod interaction_row;
pub mod limits;
mod machine;
pub mod metrics;
mod model_catalog;
pub mod ownership;
mod policy;
pub mod retention;
mod settlement;
mod tracing_context;
mod turn_row;

pub use config::{EngineConfig, ViolationAction};
pub use cursor_runner_domain::{
    EngineError, ErrorKind, Reason, error, interaction, lease, mcp, placement, prompt, session_config, state,
};
pub use cursor_runner_store::{EventRecord, ExecutionRecord, InteractionRecord, TurnRecord};
pub use engine::{
    AnswerCommand, AnswerTarget, CreateExecutionCommand, Engine, ExecutionView, MAX_STREAMS_PER_EXECUTION,
    PLACEMENT_ATTEMPTS, RequestMeta, Route, StreamItem, fleet_full, for_want_of_room,
};
pub use interaction::{ApprovalPolicy, InteractionAnswer};
pub use lease::LeaseInfo;
pub use metrics::Metrics;
pub use model_catalog::{ModelCatalog, ModelEntry};
pub use session_config::{ConfigRequest, SessionConfig};
