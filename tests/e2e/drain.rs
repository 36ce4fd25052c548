//! Draining (`AdminService.Drain`; SIGTERM does the same, see
//! services/runner/tests/drain.rs): no new executions or turns, running turns may
//! finish until the deadline, then they are cancelled with their interactions settled
//! by the usual rules, and every agent is stopped.

use std::time::Duration;

use cursor_runner_e2e::*;
use tonic::Code;

on_both_backends!(
    a_drain_lets_the_running_turn_finish_then_closes_every_execution,
    at_the_drain_deadline_the_running_turn_is_cancelled_and_its_question_expires,
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

async fn until_drained(service: &TestService) {
    let mut drained = service.engine.drained();
    tokio::time::timeout(WAIT, drained.wait_for(|done| *done))
        .await
        .expect("the drain finished")
        .unwrap();
}

async fn a_drain_lets_the_running_turn_finish_then_closes_every_execution(backend: Backend) {
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
    let closed = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(closed.state, proto::ExecutionState::Closed as i32);
    assert!(!process_alive(closed.pid.unwrap()), "nothing is left running");
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
    let closed = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(closed.state, proto::ExecutionState::Closed as i32);
    assert!(!process_alive(closed.pid.unwrap()));
    assert_refused(
        client
            .answer_interaction(one_question_answer(&created, "answer-1", "option-1"))
            .await,
        Code::FailedPrecondition,
        "INTERACTION_NOT_PENDING",
    );
    service.shutdown().await;
}
