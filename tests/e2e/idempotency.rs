use cursor_runner_e2e::*;
use tonic::Code;

on_both_backends!(
    a_retried_create_execution_yields_one_execution_and_one_agent_process,
    a_request_id_reused_with_another_body_is_refused,
    a_mutating_call_without_a_request_id_is_refused,
    a_retried_start_turn_returns_the_same_turn_and_sends_one_prompt,
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
    let prompts = service
        .agent_received()
        .into_iter()
        .filter(|m| m["method"] == "session/prompt")
        .count();
    assert_eq!(prompts, 1);
    service.shutdown().await;
}
