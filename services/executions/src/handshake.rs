//! The ACP handshake, split where the pool splits it: `initialize` when a process is
//! started (warm or cold), `session/new` when it is leased to an execution — the
//! moment the workspace enters the process, so the workspace policy is checked again
//! right before it.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use cursor_runner_acp::{AcpConnection, AcpError, schema};
use cursor_runner_supervisor::workspace_policy::WorkspacePolicy;
use serde_json::{Value, json};

use crate::error::{EngineError, ErrorKind, Reason};

/// `initialize`, with Cursor's opt-ins in `clientCapabilities._meta` (its SDK strips
/// unknown top-level capability keys).
pub(crate) async fn initialize(connection: &AcpConnection, limit: Duration) -> Result<Value, EngineError> {
    let initialize = schema::InitializeRequest::new(cursor_runner_acp::ProtocolVersion::V1)
        .client_info(schema::Implementation::new("cursor-runner", env!("CARGO_PKG_VERSION")));
    let mut initialize = serde_json::to_value(initialize).map_err(|e| EngineError::internal(e.to_string()))?;
    // `subagents`: child agents' lifecycles and transcripts on the parent's stream.
    initialize["clientCapabilities"]["_meta"] = json!({"parameterizedModelPicker": true, "subagents": true});
    timed(limit, connection.request("initialize", initialize)).await
}

/// What `session/new` answered.
pub(crate) struct NewSession {
    pub session_id: String,
    /// Cursor's session configuration with `parameterizedModelPicker` (else empty).
    pub config_options: Value,
    /// The flat `models` variant list (older surface).
    pub models: Value,
}

/// Re-checks the workspace policy, then `session/new {cwd: workspace, mcpServers: []}`.
pub(crate) async fn new_session(
    connection: &AcpConnection,
    workspace: &str,
    policy: &WorkspacePolicy,
    limit: Duration,
) -> Result<NewSession, EngineError> {
    policy
        .check(Path::new(workspace))
        .map_err(crate::engine::policy_refusal)?;
    let new_session = schema::NewSessionRequest::new(workspace);
    let mut result = timed(limit, connection.request("session/new", new_session)).await?;
    let session_id = result["sessionId"].as_str().map(str::to_owned).ok_or_else(|| {
        EngineError::new(
            ErrorKind::Unavailable,
            Reason::ProtocolError,
            "session/new returned no sessionId",
        )
    })?;
    Ok(NewSession {
        session_id,
        config_options: result["configOptions"].take(),
        models: result["models"].take(),
    })
}

/// One handshake call under `limit`, its failure typed.
pub(crate) async fn timed(
    limit: Duration,
    call: impl Future<Output = Result<Value, AcpError>>,
) -> Result<Value, EngineError> {
    match tokio::time::timeout(limit, call).await {
        Err(_) => Err(EngineError::new(
            ErrorKind::Unavailable,
            Reason::AgentUnresponsive,
            format!("the agent did not answer within {limit:?}"),
        )),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(AcpError::Rpc(e))) if e.code == cursor_runner_acp::AUTH_REQUIRED => Err(EngineError::precondition(
            Reason::AuthRequired,
            "the agent requires authentication (-32000)",
        )),
        Ok(Err(AcpError::Rpc(e))) => Err(EngineError::new(
            ErrorKind::Unavailable,
            Reason::ProtocolError,
            e.to_string(),
        )),
        Ok(Err(_)) => Err(EngineError::new(
            ErrorKind::Unavailable,
            Reason::AgentExited,
            "the agent exited",
        )),
    }
}
