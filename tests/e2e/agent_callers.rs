//! An agent never reaches the service's own API: it runs shell commands in the service's
//! network namespace, and a call would let it answer its own permission requests or, without
//! tokens, act as any tenant. Each connection is traced to its owner at accept and an agent's
//! is closed unread — by its uid when agents run under uids of their own, by the launch
//! marker every agent process inherits when they do not.

use cursor_runner_e2e::*;
use serde_json::Value;

on_both_backends!(
    an_agent_under_its_own_uid_that_calls_the_services_api_is_closed_unread,
    an_agent_sharing_the_services_uid_is_recognized_by_its_launch_marker,
);

/// Runs the hostile caller's turn and returns what its probe of the API found.
async fn probe_from_an_agent(service: &TestService) -> String {
    std::fs::write(service.workspace.join("service-address"), service.address.to_string()).unwrap();
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn(&mut client, service).await;
    events.until_turn_settles().await;
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(service.workspace.join("api-probe.json")).unwrap()).unwrap();
    // Anyone else is still served, on a fresh connection.
    let mut other = service.client().await;
    let record = get_execution(&mut other, &execution.execution_id).await;
    assert_eq!(record.execution_id, execution.execution_id);
    report["service_api"].as_str().unwrap_or_default().to_owned()
}

async fn an_agent_under_its_own_uid_that_calls_the_services_api_is_closed_unread(backend: Backend) {
    let service = TestService::start(backend, "hostile_caller.json").await;
    let outcome = probe_from_an_agent(&service).await;
    assert!(outcome.starts_with("closed"), "the agent was {outcome}");
    service.shutdown().await;
}

async fn an_agent_sharing_the_services_uid_is_recognized_by_its_launch_marker(backend: Backend) {
    let options = Options {
        agent_uid_separation: false,
        ..Options::default()
    };
    let service = TestService::start_with(backend, "hostile_caller.json", options).await;
    let outcome = probe_from_an_agent(&service).await;
    assert!(outcome.starts_with("closed"), "the agent was {outcome}");
    service.shutdown().await;
}
