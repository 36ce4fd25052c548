//! An agent that stops reading its stdin, or never answers a request, wedges nothing: the
//! turn's deadline, CancelTurn and CloseExecution still take effect, the agent is stopped
//! once a write to it stalls past its bound, and a catalog request is refused at its own.

use std::future::Future;
use std::time::{Duration, Instant};

use cursor_runner_acp::AGENT_WRITE_STALL_LIMIT;
use cursor_runner_e2e::*;
use cursor_runner_executions::limits::AGENT_CALL_LIMIT;
use tonic::Code;

on_both_backends!(
    a_turn_whose_agent_reads_nothing_of_a_large_prompt_still_ends_at_its_deadline,
    cancel_turn_and_close_execution_return_while_the_agent_reads_nothing_of_a_large_prompt,
    an_agent_that_reads_nothing_for_the_write_stall_limit_is_stopped_and_its_turn_fails_agent_unresponsive,
    list_models_to_an_agent_that_never_answers_is_refused_agent_unresponsive_at_its_own_bound,
    a_turn_deadline_fires_while_list_models_waits_on_an_agent_that_never_answers,
);

/// Longer than every bound these tests arm: only a wedged execution takes this long.
const WEDGED: Duration = Duration::from_secs(60);

/// Far beyond a handshake bound any test here could outlast, so only the call's own bound
/// can end a request the agent never answers.
const LONG_HANDSHAKE: Duration = Duration::from_secs(600);

async fn within<T>(what: &str, work: impl Future<Output = T>) -> T {
    tokio::time::timeout(WEDGED, work)
        .await
        .unwrap_or_else(|_| panic!("{what} took over {WEDGED:?}: the execution is wedged"))
}

fn options() -> Options {
    Options {
        cancel_grace: Duration::from_millis(300),
        stop_grace: Duration::from_millis(500),
        handshake_timeout: LONG_HANDSHAKE,
        ..Default::default()
    }
}

fn deadline(ms: u64) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        limits: Some(proto::ExecutionLimits {
            turn_deadline: Some(prost_types::Duration::try_from(Duration::from_millis(ms)).unwrap()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A prompt far over the pipe's 64 KiB buffer (and under the prompt bound).
fn large_prompt(execution_id: &str) -> proto::StartTurnRequest {
    proto::StartTurnRequest {
        request_id: "large-turn".into(),
        execution_id: execution_id.into(),
        prompt: vec![proto::PromptBlock {
            content: Some(proto::prompt_block::Content::Text("x".repeat(500_000))),
        }],
        ..Default::default()
    }
}

async fn create(
    client: &mut Client,
    service: &TestService,
    mut settings: proto::CreateExecutionRequest,
) -> proto::Execution {
    settings.request_id = "create-1".into();
    settings.workspace = service.workspace.display().to_string();
    client
        .create_execution(settings)
        .await
        .expect("CreateExecution")
        .into_inner()
        .execution
        .expect("execution")
}

/// The id of the execution's running turn, once its row is committed.
async fn active_turn(client: &mut Client, execution_id: &str) -> String {
    loop {
        let execution = get_execution(client, execution_id).await;
        if !execution.active_turn_id.is_empty() {
            return execution.active_turn_id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_turn_whose_agent_reads_nothing_of_a_large_prompt_still_ends_at_its_deadline(backend: Backend) {
    let service = TestService::start_with(backend, "stops_reading_stdin.json", options()).await;
    let mut client = service.client().await;
    let execution = create(&mut client, &service, deadline(500)).await;
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    within("StartTurn", client.start_turn(large_prompt(&execution.execution_id)))
        .await
        .expect("StartTurn");
    let last = within("the turn's settlement", events.until_turn_settles())
        .await
        .pop()
        .unwrap();
    assert_eq!(last.event_type, "turn.interrupted", "{:?}", payload(&last));
    assert_eq!(payload(&last)["failureReason"], "deadline_exceeded");
    service.shutdown().await;
}

async fn cancel_turn_and_close_execution_return_while_the_agent_reads_nothing_of_a_large_prompt(backend: Backend) {
    let service = TestService::start_with(backend, "stops_reading_stdin.json", options()).await;
    let mut client = service.client().await;
    let execution = create(&mut client, &service, Default::default()).await;
    let id = execution.execution_id.clone();
    // Whether StartTurn itself returns is the other tests' matter: here it may not.
    let start = tokio::spawn({
        let mut client = client.clone();
        let request = large_prompt(&id);
        async move { client.start_turn(request).await }
    });
    let turn_id = within("the turn's row", active_turn(&mut client, &id)).await;
    within("CancelTurn", cancel_turn(&mut client, &id, &turn_id)).await;
    let closed = within(
        "CloseExecution",
        client.close_execution(proto::CloseExecutionRequest {
            request_id: "close-1".into(),
            execution_id: id.clone(),
        }),
    )
    .await
    .expect("CloseExecution")
    .into_inner()
    .execution
    .unwrap();
    assert_eq!(closed.state, proto::ExecutionState::Closed as i32);
    start.abort();
    service.shutdown().await;
}

async fn an_agent_that_reads_nothing_for_the_write_stall_limit_is_stopped_and_its_turn_fails_agent_unresponsive(
    backend: Backend,
) {
    let service = TestService::start_with(backend, "stops_reading_stdin.json", options()).await;
    let mut client = service.client().await;
    let execution = create(&mut client, &service, Default::default()).await;
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let started = Instant::now();
    within("StartTurn", client.start_turn(large_prompt(&execution.execution_id)))
        .await
        .expect("StartTurn");
    let last = within("the turn's settlement", events.until_turn_settles())
        .await
        .pop()
        .unwrap();
    assert!(
        started.elapsed() >= AGENT_WRITE_STALL_LIMIT,
        "a stalled write is given its whole bound"
    );
    assert_eq!(last.event_type, "turn.failed", "{:?}", payload(&last));
    assert_eq!(payload(&last)["failureReason"], "agent_unresponsive");
    let lost = execution_in_state(&mut client, &execution.execution_id, proto::ExecutionState::Lost).await;
    assert_eq!(lost.failure_reason, "AGENT_UNRESPONSIVE");
    service.shutdown().await;
}

async fn list_models_to_an_agent_that_never_answers_is_refused_agent_unresponsive_at_its_own_bound(backend: Backend) {
    let service = TestService::start_with(backend, "never_lists_models.json", options()).await;
    let mut client = service.client().await;
    let execution = create(&mut client, &service, Default::default()).await;
    let asked = Instant::now();
    let listed = within(
        "ListModels",
        client.list_models(proto::ListModelsRequest {
            execution_id: execution.execution_id.clone(),
        }),
    )
    .await;
    assert!(
        asked.elapsed() >= AGENT_CALL_LIMIT,
        "the agent is given the whole bound"
    );
    assert_refused(listed, Code::Unavailable, "AGENT_UNRESPONSIVE");
    service.shutdown().await;
}

async fn a_turn_deadline_fires_while_list_models_waits_on_an_agent_that_never_answers(backend: Backend) {
    let service = TestService::start_with(backend, "never_lists_models.json", options()).await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, deadline(1000)).await;
    let listing = tokio::spawn({
        let mut client = client.clone();
        let execution_id = execution.execution_id.clone();
        async move { client.list_models(proto::ListModelsRequest { execution_id }).await }
    });
    let last = within("the turn's settlement", events.until_turn_settles())
        .await
        .pop()
        .unwrap();
    assert_eq!(last.event_type, "turn.interrupted", "{:?}", payload(&last));
    assert_eq!(payload(&last)["failureReason"], "deadline_exceeded");
    listing.abort();
    service.shutdown().await;
}
