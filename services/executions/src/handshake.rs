//! The half of the ACP handshake that opens a session on a leased process: `session/new`
//! or `session/load` — the moment the workspace enters the process, so the workspace
//! policy is checked again right before it. The process was brought to ready by the
//! pool (`cursor_runner_pool::handshake`).

use std::path::Path;
use std::time::Duration;

use cursor_runner_acp::methods;
use cursor_runner_acp::{AcpConnection, AcpError, Inbound, InboundStream, RpcError, schema};
use cursor_runner_pool::handshake::timed;
use cursor_runner_supervisor::workspace_policy::WorkspacePolicy;
use serde_json::{Value, json};

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::lease::{AgentReport, LeaseInfo};

/// What `session/new` answered.
pub(crate) struct NewSession {
    pub session_id: String,
    /// Cursor's session configuration with `parameterizedModelPicker` (else empty).
    pub config_options: Value,
    /// The flat `models` variant list (older surface).
    pub models: Value,
    /// ACP `modes` (`currentModeId`, `availableModes`).
    pub modes: Value,
}

/// Re-checks the workspace policy, then `session/new {cwd: workspace, mcpServers}` (the
/// runner-owned servers the execution named; `[]` by default, as ACP requires the key).
pub(crate) async fn new_session(
    connection: &AcpConnection,
    workspace: &str,
    mcp_servers: &Value,
    policy: &WorkspacePolicy,
    limit: Duration,
) -> Result<NewSession, EngineError> {
    policy
        .check(Path::new(workspace))
        .map_err(crate::policy::policy_refusal)?;
    let mut new_session = serde_json::to_value(schema::NewSessionRequest::new(workspace))
        .map_err(|e| EngineError::internal(e.to_string()))?;
    new_session["mcpServers"] = mcp_servers.clone();
    let mut result = timed(limit, connection.request(methods::SESSION_NEW, new_session)).await?;
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
        modes: result["modes"].take(),
    })
}

/// How a session enters the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionStart {
    New,
    /// `session/load` of a recorded session; `recovery` after the previous process died.
    Load {
        session_id: String,
        recovery: bool,
    },
}

/// Re-checks the workspace policy, then `session/load {sessionId, cwd, mcpServers}` with the
/// runner-owned servers the session was recorded with (the same list `session/new` got).
/// The agent replays the session's history as `session/update`s before it answers:
/// they are read off (the reader must never block on a full queue while the answer
/// waits behind them) and counted, not shown again. Returns the session and that count.
pub(crate) async fn load_session(
    connection: &AcpConnection,
    inbound: &mut InboundStream,
    session_id: &str,
    workspace: &str,
    mcp_servers: &Value,
    policy: &WorkspacePolicy,
    limit: Duration,
) -> Result<(NewSession, u64), EngineError> {
    policy
        .check(Path::new(workspace))
        .map_err(crate::policy::policy_refusal)?;
    let params = json!({"sessionId": session_id, "cwd": workspace, "mcpServers": mcp_servers});
    // In wire order: the answer comes after every replayed update, so none is left
    // behind for the session to stream.
    let exited = || EngineError::new(ErrorKind::Unavailable, Reason::AgentExited, "the agent exited");
    let id = connection
        .start_request(methods::SESSION_LOAD, params)
        .await
        .map_err(|_| exited())?;
    let deadline = tokio::time::Instant::now() + limit;
    let mut replayed = 0u64;
    let answered = loop {
        let message = match tokio::time::timeout_at(deadline, inbound.recv()).await {
            Err(_) => break Err(()),
            Ok(message) => message,
        };
        match message {
            Some(Inbound::Response { id: answered, result }) if answered == id => break Ok(result),
            Some(Inbound::Notification { method, .. }) if method == methods::SESSION_UPDATE => replayed += 1,
            Some(Inbound::TextChunk(_)) => replayed += 1,
            // Nothing may be asked while the session is being loaded.
            Some(Inbound::Request(request)) => {
                let refusal = RpcError::new(cursor_runner_acp::METHOD_NOT_FOUND, "the session is still loading");
                let _ = request.respond(Err(refusal)).await;
            }
            Some(Inbound::Closed { .. }) | None => return Err(exited()),
            Some(_) => {}
        }
    };
    let mut result = match answered.map(|result| result.map_err(AcpError::Rpc)) {
        Err(()) => {
            return Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::AgentUnresponsive,
                format!("the agent did not answer session/load within {limit:?}"),
            ));
        }
        Ok(Err(AcpError::Rpc(e))) if is_session_not_found(&e) => {
            return Err(EngineError::precondition(
                Reason::SessionNotFound,
                format!("the agent has no session `{session_id}`: {}", e.message),
            )
            .with("session_id", session_id));
        }
        Ok(answered) => timed(limit, std::future::ready(answered)).await?,
    };
    Ok((
        NewSession {
            session_id: session_id.to_owned(),
            config_options: result["configOptions"].take(),
            models: result["models"].take(),
            modes: result["modes"].take(),
        },
        replayed,
    ))
}

/// Cursor answers a load of an unknown session `-32602` with a "not found" message in
/// `data` (or `-32002` resource-not-found with `data.sessionId`): a documented
/// classification of the error object, never of assistant text.
fn is_session_not_found(error: &RpcError) -> bool {
    let data = error.data.as_ref();
    match error.code {
        cursor_runner_acp::RESOURCE_NOT_FOUND => true,
        cursor_runner_acp::INVALID_PARAMS => data
            .and_then(|d| d["message"].as_str())
            .is_some_and(|m| m.to_ascii_lowercase().contains("not found")),
        _ => false,
    }
}

/// What an execution records of a start that failed at `authenticate`: its slot and
/// profile, and the agent's own `initialize` report (what it offers, so an operator can
/// name a method).
pub(crate) fn lease_of_failed_handshake(failed: &cursor_runner_pool::FailedHandshake) -> LeaseInfo {
    LeaseInfo {
        slot_id: failed.slot_id.clone(),
        agent_profile: failed.agent_profile.clone(),
        agent: Some(AgentReport::new(
            &failed.initialized,
            None,
            failed.agent_profile.is_some(),
        )),
        ..LeaseInfo::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_documented_error_shapes_mean_the_session_is_unknown() {
        let error = |code: i64, data: Option<Value>| RpcError {
            code,
            message: "whatever the text says".into(),
            data,
        };
        let cases = [
            (error(cursor_runner_acp::RESOURCE_NOT_FOUND, None), true),
            (
                error(
                    cursor_runner_acp::INVALID_PARAMS,
                    Some(json!({"message": "Session \"s1\" not found"})),
                ),
                true,
            ),
            (
                error(
                    cursor_runner_acp::INVALID_PARAMS,
                    Some(json!({"message": "cwd must be absolute"})),
                ),
                false,
            ),
            (error(cursor_runner_acp::INVALID_PARAMS, None), false),
            (
                error(cursor_runner_acp::AUTH_REQUIRED, Some(json!({"message": "not found"}))),
                false,
            ),
            (
                RpcError {
                    code: cursor_runner_acp::INTERNAL_ERROR,
                    message: "session not found".into(),
                    data: None,
                },
                false,
            ),
        ];
        for (error, unknown) in cases {
            assert_eq!(is_session_not_found(&error), unknown, "{error:?}");
        }
    }
}
