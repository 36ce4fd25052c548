//! Draining (`AdminService.Drain`; SIGTERM does the same, see
//! services/runner/tests/drain.rs): no new executions or turns, running turns may
//! finish until the deadline, then they are cancelled with their interactions settled
//! by the usual rules, and every agent is stopped.

use std::time::Duration;

use cursor_runner_e2e::*;
use tonic::Code;

on_both_backends!(
    a_drain_lets_the_running_turn_finish_then_ends_every_execution_lost_and_recoverable,
    at_the_drain_deadline_the_running_turn_is_cancelled_and_its_question_expires,
    a_replacement_while_draining_is_refused_at_once_and_leaves_the_running_turn_running,
    a_turn_the_drain_is_cancelling_is_not_relabelled_by_a_refused_replacement,
);

async fn drain(service: &TestService, deadline: Duration) -> proto::DrainResponse {
    service
        .admin(None)
        .await
        .drain(proto::DrainRequest {
            deadline: Some(prost_types::Duration::try_from(deadline).unwrap()),
        })
        .await
        .expect("Drain")
        .into_inner()
}

/// `StartTurn` "turn-2" with `replace_active`.
async fn replace_turn(
    client: &mut Client,
    execution_id: &str,
) -> Result<tonic::Response<proto::StartTurnResponse>, tonic::Status> {
    client
        .start_turn(proto::StartTurnRequest {
            request_id: "turn-2".into(),
            execution_id: execution_id.into(),
            prompt: vec![proto::PromptBlock {
                content: Some(proto::prompt_block::Content::Text("instead, do this".into())),
            }],
            replace_active: true,
        })
        .await
}

fn cancels_sent(service: &TestService) -> usize {
    service
        .agent_received()
        .iter()
        .filter(|m| m["method"] == "session/cancel")
        .count()
}

async fn until_drained(service: &TestService) {
    let mut drained = service.engine.drained();
    tokio::time::timeout(WAIT, drained.wait_for(|done| *done))
        .await
        .expect("the drain finished")
        .unwrap();
}

async fn a_drain_lets_the_running_turn_finish_then_ends_every_execution_lost_and_recoverable(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    let response = drain(&service, Duration::from_secs(20)).await;
    assert_eq!(response.deadline.unwrap().seconds, 20);
    // No new work while draining; nothing is left half-made.
    let refused = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-2".into(),
            workspace: service.workspace.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_refused(refused, Code::Unavailable, "DRAINING");
    // The running turn still gets its answer and finishes.
    let answered = client
        .answer_interaction(one_question_answer(&created, "answer-1", "option-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answered.interaction.unwrap().state,
        proto::InteractionState::Delivered as i32
    );
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let refused = start_turn(&mut client, &execution.execution_id, "turn-2").await;
    assert!(refused.is_err(), "no new turn while draining");
    until_drained(&service).await;
    let drained = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(
        (drained.state, drained.failure_reason.as_str()),
        (proto::ExecutionState::Lost as i32, "DRAINING"),
        "RecoverExecution continues it on any replica"
    );
    assert!(!process_alive(drained.pid.unwrap()), "nothing is left running");
    let status = service
        .admin(None)
        .await
        .get_pool_status(proto::GetPoolStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(status.draining);
    assert!(status.profiles.iter().all(|p| p.slots.is_empty()));
    service.shutdown().await;
}

async fn at_the_drain_deadline_the_running_turn_is_cancelled_and_its_question_expires(backend: Backend) {
    let service = TestService::start(backend, "question_cancel.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    drain(&service, Duration::from_millis(300)).await;
    let settled = events.until_turn_settles().await;
    let expired = settled
        .iter()
        .find(|e| e.event_type == "runtime_request.expired")
        .map(payload)
        .expect("the question expired");
    assert_eq!(expired["interactionId"], created["interactionId"]);
    assert_eq!(expired["reason"], "service_draining");
    assert_eq!(expired["replayAllowed"], false);
    let last = settled.last().unwrap();
    assert_eq!(last.event_type, "turn.interrupted");
    assert_eq!(payload(last)["failureReason"], "service_draining");
    until_drained(&service).await;
    let drained = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(
        (drained.state, drained.failure_reason.as_str()),
        (proto::ExecutionState::Lost as i32, "DRAINING")
    );
    assert!(!process_alive(drained.pid.unwrap()));
    assert_refused(
        client
            .answer_interaction(one_question_answer(&created, "answer-1", "option-1"))
            .await,
        Code::FailedPrecondition,
        "INTERACTION_NOT_PENDING",
    );
    service.shutdown().await;
}

async fn a_replacement_while_draining_is_refused_at_once_and_leaves_the_running_turn_running(backend: Backend) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("item.delta").await;
    drain(&service, Duration::from_secs(20)).await;
    assert_refused(
        replace_turn(&mut client, &execution.execution_id).await,
        Code::Unavailable,
        "DRAINING",
    );
    // A refused call has no side effects: the turn still runs and was never cancelled.
    let record = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(record.active_turn_id, turn.turn_id, "the turn still runs");
    assert_eq!(cancels_sent(&service), 0, "no session/cancel reached the agent");
    cancel_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.cancelled");
    until_drained(&service).await;
    service.shutdown().await;
}

async fn a_turn_the_drain_is_cancelling_is_not_relabelled_by_a_refused_replacement(backend: Backend) {
    let service = TestService::start(backend, "slow_to_settle.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("item.delta").await;
    drain(&service, Duration::from_millis(200)).await;
    eventually("the drain cancelled the turn", || cancels_sent(&service) == 1).await;
    assert_refused(
        replace_turn(&mut client, &execution.execution_id).await,
        Code::Unavailable,
        "DRAINING",
    );
    let settled = events.until_turn_settles().await;
    let last = settled.last().unwrap();
    assert_eq!(last.event_type, "turn.interrupted");
    assert_eq!(payload(last)["failureReason"], "service_draining");
    until_drained(&service).await;
    service.shutdown().await;
}
