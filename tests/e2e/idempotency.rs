use cursor_runner_e2e::*;
use cursor_runner_executions::retention::{self, Retention};
use cursor_runner_store::{ClaimToken, IdempotencyClaim, IdempotencyKey};
use std::time::Duration;
use tonic::Code;

on_both_backends!(
    a_retried_create_execution_yields_one_execution_and_one_agent_process,
    a_request_id_reused_with_another_body_is_refused,
    a_request_id_sent_to_another_rpc_is_refused_as_reused_and_runs_nothing,
    a_mutating_call_without_a_request_id_is_refused,
    a_retried_start_turn_returns_the_same_turn_and_sends_one_prompt,
    a_start_turn_retried_after_its_turn_ended_returns_that_turn_and_starts_no_other,
    completed_keys_past_their_retention_are_pruned_and_keys_in_flight_never,
    past_its_retention_a_request_id_runs_again_as_a_new_call,
);

async fn a_retried_create_execution_yields_one_execution_and_one_agent_process(backend: Backend) {
    let service = TestService::start(backend, "slow_start.json").await;
    let mut first = service.client().await;
    let mut second = service.client().await;
    // The agent takes 300 ms to answer `initialize`, so the second call arrives while
    // the first is in flight.
    let (a, b) = tokio::join!(
        create_execution(&mut first, &service, "same-request"),
        create_execution(&mut second, &service, "same-request")
    );
    let c = create_execution(&mut first, &service, "same-request").await;
    assert_eq!(a.execution_id, b.execution_id);
    assert_eq!(a.execution_id, c.execution_id);
    let listed = first
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .executions;
    assert_eq!(listed.len(), 1);
    let initializes = service
        .agent_received()
        .into_iter()
        .filter(|m| m["method"] == "initialize")
        .count();
    assert_eq!(initializes, 1, "exactly one agent process was launched");
    service.shutdown().await;
}

async fn a_request_id_reused_with_another_body_is_refused(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    create_execution(&mut client, &service, "create-1").await;
    let other = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-1".into(),
            workspace: "/tmp".into(),
            ..Default::default()
        })
        .await;
    assert_refused(other, Code::Aborted, "REQUEST_ID_REUSED");
    service.shutdown().await;
}

/// A request id names one call of the tenant, whatever its RPC: sent to another RPC it is
/// another body, refused, and nothing runs (no turn starts on the agent).
async fn a_request_id_sent_to_another_rpc_is_refused_as_reused_and_runs_nothing(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "call-1").await;
    let reused = start_turn(&mut client, &execution.execution_id, "call-1").await;
    assert_refused(reused, Code::Aborted, "REQUEST_ID_REUSED");
    assert!(
        !service.agent_received().iter().any(|m| m["method"] == "session/prompt"),
        "no prompt was sent"
    );
    // The first call's retry still gets its own result.
    let retried = create_execution(&mut client, &service, "call-1").await;
    assert_eq!(retried.execution_id, execution.execution_id);
    service.shutdown().await;
}

async fn a_mutating_call_without_a_request_id_is_refused(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let result = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: String::new(),
            workspace: service.workspace.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_refused(result, Code::InvalidArgument, "REQUEST_ID_REQUIRED");
    assert!(service.agent_received().is_empty(), "no agent was launched");
    service.shutdown().await;
}

async fn a_retried_start_turn_returns_the_same_turn_and_sends_one_prompt(backend: Backend) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let first = start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    let retry = start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    assert_eq!(first.turn_id, retry.turn_id);
    assert_eq!(prompts_sent(&service), 1);
    service.shutdown().await;
}

/// A plain start claims its key in the commit that starts the turn: a retry arriving when
/// nothing stops a new turn finds the key taken there, starts nothing, and gets the first
/// call's turn.
async fn a_start_turn_retried_after_its_turn_ended_returns_that_turn_and_starts_no_other(backend: Backend) {
    // One turn that ends on its own, asking nothing.
    let service = TestService::start(backend, "extra_fields.json").await;
    let mut client = service.client().await;
    let (execution, first, mut events) = begin_turn(&mut client, &service).await;
    events.until_turn_settles().await;
    let retry = start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .expect("the retry gets the first call's turn");
    assert_eq!(retry.turn_id, first.turn_id);
    let turns = list_turns(&mut client, &execution.execution_id).await.turns;
    assert_eq!(turns.len(), 1, "no second turn was recorded");
    assert_eq!(prompts_sent(&service), 1);
    // The execution takes a new turn under a new request id.
    start_turn(&mut client, &execution.execution_id, "turn-2")
        .await
        .expect("a new request id starts a new turn");
    service.shutdown().await;
}

/// The `session/prompt` requests the agent got.
fn prompts_sent(service: &TestService) -> usize {
    service
        .agent_received()
        .into_iter()
        .filter(|m| m["method"] == "session/prompt")
        .count()
}

fn key(request_id: &str) -> IdempotencyKey {
    IdempotencyKey {
        tenant_id: TENANT.into(),
        operation: "CreateExecution".into(),
        request_id: request_id.into(),
    }
}

async fn completed_keys_past_their_retention_are_pruned_and_keys_in_flight_never(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let store = service.store.as_ref();
    assert_eq!(
        store
            .claim_idempotency(&key("running"), "d", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::Claimed
    );
    assert_eq!(
        store
            .claim_idempotency(&key("done"), "d", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::Claimed
    );
    store
        .complete_idempotency(&key("done"), &serde_json::json!({"executionId": "x"}))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        retention::sweep_idempotency(store, Duration::from_secs(3600)).await,
        0,
        "younger than the retention: kept"
    );
    assert_eq!(
        retention::sweep_idempotency(store, Duration::ZERO).await,
        1,
        "older: pruned"
    );
    assert_eq!(
        store
            .claim_idempotency(&key("done"), "another body", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::Claimed,
        "its request id is free again"
    );
    assert_eq!(
        store
            .claim_idempotency(&key("running"), "d", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::InFlightHere,
        "a key in flight is never pruned"
    );
    service.shutdown().await;
}

async fn past_its_retention_a_request_id_runs_again_as_a_new_call(backend: Backend) {
    let service = TestService::start_with(
        backend,
        "demo.json",
        Options {
            idempotency_retention: Some(Retention {
                keep: Duration::ZERO,
                sweep_every: Duration::from_millis(50),
            }),
            ..Default::default()
        },
    )
    .await;
    let mut client = service.client().await;
    let first = create_execution(&mut client, &service, "create-1").await;
    let mut again = first.clone();
    for _ in 0..200 {
        again = create_execution(&mut client, &service, "create-1").await;
        if again.execution_id != first.execution_id {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_ne!(
        again.execution_id, first.execution_id,
        "the key was pruned and the call ran anew"
    );
    service.shutdown().await;
}
