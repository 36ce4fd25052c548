//! The half of the ACP handshake that brings a started process to ready: `initialize`
//! (warm or cold) and the profile's `authenticate`. The other half, `session/new` or
//! `session/load` when the process is leased, is the execution's (`executions::handshake`).

use std::future::Future;
use std::time::Duration;

use cursor_runner_acp::methods;
use cursor_runner_acp::{AcpConnection, AcpError, schema};
use serde_json::{Value, json};

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};

/// `initialize`, with Cursor's opt-ins in `clientCapabilities._meta` (its SDK strips
/// unknown top-level capability keys).
pub async fn initialize(connection: &AcpConnection, limit: Duration) -> Result<Value, EngineError> {
    let initialize = schema::InitializeRequest::new(cursor_runner_acp::ProtocolVersion::V1)
        .client_info(schema::Implementation::new("cursor-runner", env!("CARGO_PKG_VERSION")));
    let mut initialize = serde_json::to_value(initialize).map_err(|e| EngineError::internal(e.to_string()))?;
    // `subagents`: child agents' lifecycles and transcripts on the parent's stream.
    initialize["clientCapabilities"]["_meta"] = json!({"parameterizedModelPicker": true, "subagents": true});
    timed(limit, connection.request(methods::INITIALIZE, initialize)).await
}

/// The ids of the `authMethods` an agent advertised in `initialize`.
fn auth_method_ids(initialized: &Value) -> Vec<String> {
    initialized["authMethods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect()
}

/// The `authenticate` method an execution names, if any: its agent profile's; else the
/// agent's own `env_var` method that reads the very variable the execution's credential
/// is bound to (the binding names the method through the agent's own declaration). With
/// neither, nothing is called, and an agent that needs it answers `-32000`.
pub fn named_method(
    initialized: &Value,
    profile_method: Option<&str>,
    credential_variable: Option<&str>,
) -> Option<String> {
    if let Some(method) = profile_method {
        return Some(method.to_owned());
    }
    let variable = credential_variable?;
    initialized["authMethods"]
        .as_array()?
        .iter()
        .filter(|m| m["type"] == "env_var")
        .find(|m| {
            m["vars"]
                .as_array()
                .is_some_and(|vars| vars.iter().any(|v| v["name"] == variable))
        })
        .and_then(|m| m["id"].as_str().map(str::to_owned))
}

/// ACP `authenticate {methodId}` for an agent profile that names a method, before any
/// session. An agent that advertises no methods needs none (nothing is sent); one that
/// advertises others, or refuses the call, is `AUTH_REQUIRED` listing what it offers.
pub async fn authenticate(
    connection: &AcpConnection,
    initialized: &Value,
    method_id: &str,
    limit: Duration,
) -> Result<(), EngineError> {
    let offered = auth_method_ids(initialized);
    if offered.is_empty() {
        return Ok(());
    }
    if !offered.iter().any(|m| m == method_id) {
        return Err(EngineError::precondition(
            Reason::AuthRequired,
            format!(
                "the agent does not offer the profile's authentication method `{method_id}` (it offers: {})",
                offered.join(", ")
            ),
        )
        .with("auth_methods", offered.join(",")));
    }
    let call = connection.request(methods::AUTHENTICATE, json!({"methodId": method_id}));
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(_)) => Ok(()),
        // Any error answer is a refusal, whatever its code: codex-acp answers -32603
        // ("CODEX_API_KEY is not set") or -32602, not -32000.
        Ok(Err(AcpError::Rpc(e))) => Err(with_auth_methods(refused_authenticate(method_id, &e), initialized)),
        answered => typed(limit, answered).map(drop),
    }
}

/// The agent's refusal of `authenticate {method_id}`, in its own words (`message`, and
/// `data` when it says more there).
fn refused_authenticate(method_id: &str, e: &cursor_runner_acp::RpcError) -> EngineError {
    let words = match &e.data {
        Some(Value::String(data)) => format!("{}: {data}", e.message),
        Some(data) if !data.is_null() => format!("{}: {data}", e.message),
        _ => e.message.clone(),
    };
    EngineError::precondition(
        Reason::AuthRequired,
        format!(
            "the agent refused `authenticate` with `{method_id}` ({}: {words})",
            e.code
        ),
    )
}

/// An `AUTH_REQUIRED` refusal carries the agent's own method ids, so an operator can
/// name one in the agent profile.
pub fn with_auth_methods(error: EngineError, initialized: &Value) -> EngineError {
    if error.reason != Reason::AuthRequired {
        return error;
    }
    let offered = auth_method_ids(initialized);
    let error = error.with("auth_methods", offered.join(","));
    if offered.is_empty() {
        error
    } else {
        let message = format!("{} (it offers: {})", error.message, offered.join(", "));
        EngineError { message, ..error }
    }
}

/// One handshake call under `limit`, its failure typed.
pub async fn timed(limit: Duration, call: impl Future<Output = Result<Value, AcpError>>) -> Result<Value, EngineError> {
    typed(limit, tokio::time::timeout(limit, call).await)
}

/// A handshake call's outcome under `limit`, its failure typed.
fn typed(
    limit: Duration,
    answered: Result<Result<Value, AcpError>, tokio::time::error::Elapsed>,
) -> Result<Value, EngineError> {
    match answered {
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
        Ok(Err(e)) => Err(unheard(&e)),
    }
}

/// A call the agent never got to answer: it stopped reading its stdin (unresponsive,
/// though alive), or the connection is gone (it exited).
pub fn unheard(error: &AcpError) -> EngineError {
    match error {
        AcpError::Stalled { .. } => {
            EngineError::new(ErrorKind::Unavailable, Reason::AgentUnresponsive, error.to_string())
        }
        _ => EngineError::new(ErrorKind::Unavailable, Reason::AgentExited, "the agent exited"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_whose_write_stalled_is_agent_unresponsive_and_one_on_a_closed_connection_agent_exited() {
        let limit = cursor_runner_acp::AGENT_WRITE_STALL_LIMIT;
        let stalled = typed(limit, Ok(Err(AcpError::Stalled { limit }))).unwrap_err();
        assert_eq!(
            (stalled.kind, stalled.reason),
            (ErrorKind::Unavailable, Reason::AgentUnresponsive)
        );
        let closed = typed(limit, Ok(Err(AcpError::Closed))).unwrap_err();
        assert_eq!(
            (closed.kind, closed.reason),
            (ErrorKind::Unavailable, Reason::AgentExited)
        );
    }

    #[test]
    fn the_profile_names_the_method_else_the_env_var_method_reading_the_bound_credential() {
        let initialized = json!({"authMethods": [
            {"id": "chatgpt", "name": "ChatGPT"},
            {"type": "env_var", "id": "codex-api-key", "name": "k", "vars": [{"name": "CODEX_API_KEY"}]},
            {"type": "env_var", "id": "openai-api-key", "name": "k", "vars": [{"name": "OPENAI_API_KEY"}]},
            {"type": "terminal", "id": "login", "name": "t", "vars": [{"name": "HOME_KEY"}]}]});
        let cases = [
            (Some("chatgpt"), Some("OPENAI_API_KEY"), Some("chatgpt")),
            (None, Some("OPENAI_API_KEY"), Some("openai-api-key")),
            (None, Some("CODEX_API_KEY"), Some("codex-api-key")),
            (None, Some("HOME_KEY"), None),
            (None, Some("CURSOR_API_KEY"), None),
            (None, None, None),
        ];
        for (profile, credential, expected) in cases {
            assert_eq!(
                named_method(&initialized, profile, credential).as_deref(),
                expected,
                "{profile:?} {credential:?}"
            );
        }
    }
}
