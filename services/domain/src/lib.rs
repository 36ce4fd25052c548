//! The execution domain, without I/O: no tokio, no SQL, no gRPC, no processes, no clock.
//! The ids of executions, turns and interactions and the generation that fences writes (`ids`).
//! What an execution, turn and interaction may become (`state`), the error catalog each
//! refusal names its gRPC kind in once (`error`), the interaction kinds and the validation
//! of answers against what was persisted (`interaction`), an execution's bounds before spend
//! (`limits`), prompts, session configuration,
//! the runner-owned MCP allowlist, what an execution records of its agent process's lease
//! (`lease`), the warm keys placement prefers (`placement`), and how
//! everything live settles when an execution's agent is gone (`settlement`). The runtime
//! (`cursor-runner-executions`) executes what these decide; the store persists it.

pub mod error;
pub mod ids;
pub mod interaction;
pub mod lease;
pub mod limits;
pub mod mcp;
pub mod placement;
pub mod prompt;
pub mod session_config;
pub mod settlement;
pub mod state;

pub use error::{EngineError, ErrorKind, Reason};
pub use ids::{ExecutionId, Generation, InteractionId, TurnId};
