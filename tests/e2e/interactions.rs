use cursor_runner_e2e::*;
use serde_json::{Value, json};
use tonic::Code;

on_both_backends!(
    invalid_answers_are_refused_with_a_precise_status_and_change_nothing,
    a_repeated_answer_returns_the_stored_result_and_a_different_one_conflicts,
    answering_a_delivered_interaction_is_refused_naming_its_state,
    cancelling_a_turn_answers_a_pending_question_cancelled_and_expires_it_without_replay,
    the_agent_exiting_expires_a_pending_question_as_provider_process_lost,
    interactions_are_listed_and_read_with_their_full_request,
    a_refused_answer_leaves_its_request_id_free_for_the_corrected_answer,
    a_plan_rejection_reason_of_the_promised_4000_characters_reaches_the_agent_whatever_its_script,
);

async fn a_refused_answer_leaves_its_request_id_free_for_the_corrected_answer(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (_, created, _events) = pending_question(&service, &mut client).await;
    assert_refused(
        answer_option(&mut client, "answer-1", &created, "option-9").await,
        Code::InvalidArgument,
        "ANSWER_INVALID",
    );
    let delivered = answer_option(&mut client, "answer-1", &created, "option-1")
        .await
        .unwrap();
    assert_eq!(delivered.state, proto::InteractionState::Delivered as i32);
    service.shutdown().await;
}

/// The contract promises a rejection reason of up to 4,000 characters; a script whose
/// characters take three UTF-8 bytes each must not be cut at a lower, byte-counted bound.
async fn a_plan_rejection_reason_of_the_promised_4000_characters_reaches_the_agent_whatever_its_script(
    backend: Backend,
) {
    let service = TestService::start(backend, "plan_rejected_at_the_reason_bound.json").await;
    let mut client = service.client().await;
    let (_, created, mut events) = pending_question(&service, &mut client).await;
    let reason = "確認".repeat(2000);
    let rejected = answer(
        &mut client,
        "reject-plan",
        created["interactionId"].as_str().unwrap(),
        created["etag"].as_str().unwrap(),
        Some(proto::answer_interaction_request::Answer::Plan(proto::PlanAnswer {
            decision: Some(proto::plan_answer::Decision::Reject(proto::RejectPlan { reason })),
        })),
    )
    .await
    .expect("a reason at the promised bound is taken");
    assert_eq!(rejected.state, proto::InteractionState::Delivered as i32);
    let settled = events.until_turn_settles().await;
    assert_eq!(
        settled.last().unwrap().event_type,
        "turn.completed",
        "the agent got the reason it expected"
    );
    service.shutdown().await;
}

fn select(pairs: &[(&str, &[&str])]) -> Option<proto::answer_interaction_request::Answer> {
    Some(proto::answer_interaction_request::Answer::Questions(
        proto::QuestionAnswer {
            selections: pairs
                .iter()
                .map(|(q, options)| proto::QuestionSelection {
                    question_id: (*q).into(),
                    option_ids: options.iter().map(|o| (*o).into()).collect(),
                })
                .collect(),
        },
    ))
}

async fn answer(
    client: &mut Client,
    request_id: &str,
    interaction_id: &str,
    etag: &str,
    answer: Option<proto::answer_interaction_request::Answer>,
) -> Result<proto::Interaction, tonic::Status> {
    client
        .answer_interaction(proto::AnswerInteractionRequest {
            request_id: request_id.into(),
            interaction_id: interaction_id.into(),
            etag: etag.into(),
            answer,
        })
        .await
        .map(|r| r.into_inner().interaction.unwrap())
}

/// Starts a turn and waits for its question; returns (execution, created payload, subscriber).
async fn pending_question(service: &TestService, client: &mut Client) -> (String, Value, Subscriber) {
    let (execution, _turn, mut events) = begin_turn(client, service).await;
    let created = events.events_until("runtime_request.created").await;
    (execution.execution_id, payload(created.last().unwrap()), events)
}

/// Answers the single question of the interaction `created` exposed with one option.
async fn answer_option(
    client: &mut Client,
    request_id: &str,
    created: &Value,
    option_id: &str,
) -> Result<proto::Interaction, tonic::Status> {
    let id = created["interactionId"].as_str().unwrap();
    let etag = created["etag"].as_str().unwrap();
    answer(client, request_id, id, etag, select(&[("question-1", &[option_id])])).await
}

/// An answer to an interaction that is no longer pending is refused, naming why.
async fn assert_a_late_answer_is_refused(client: &mut Client, created: &Value) {
    assert_refused(
        answer_option(client, "late", created, "option-1").await,
        Code::FailedPrecondition,
        "INTERACTION_NOT_PENDING",
    );
}

fn answers_sent_to_agent(service: &TestService) -> Vec<Value> {
    service
        .agent_received()
        .into_iter()
        .filter(|m| m.get("method").is_none() && (m.get("result").is_some() || m.get("error").is_some()))
        .collect()
}

async fn invalid_answers_are_refused_with_a_precise_status_and_change_nothing(backend: Backend) {
    let service = TestService::start(backend, "question_wait.json").await;
    let mut client = service.client().await;
    let (_, created, mut events) = pending_question(&service, &mut client).await;
    let id = created["interactionId"].as_str().unwrap();
    let etag = created["etag"].as_str().unwrap();
    let invalid: Vec<(&str, Option<proto::answer_interaction_request::Answer>)> = vec![
        (
            "an unknown option id",
            select(&[("question-1", &["option-9"]), ("question-2", &["option-1"])]),
        ),
        (
            "a native option id (forged)",
            select(&[("question-1", &["sqlite"]), ("question-2", &["option-1"])]),
        ),
        ("a missing question", select(&[("question-1", &["option-2"])])),
        (
            "two selections on a single-select",
            select(&[("question-1", &["option-1", "option-2"]), ("question-2", &["option-1"])]),
        ),
        (
            "a duplicate selection",
            select(&[("question-1", &["option-1"]), ("question-2", &["option-1", "option-1"])]),
        ),
        (
            "an unknown question",
            select(&[
                ("question-1", &["option-1"]),
                ("question-2", &["option-1"]),
                ("question-3", &["option-1"]),
            ]),
        ),
        ("no answer at all", None),
    ];
    for (n, (what, body)) in invalid.into_iter().enumerate() {
        let result = answer(&mut client, &format!("bad-{n}"), id, etag, body).await;
        assert_refused(result, Code::InvalidArgument, "ANSWER_INVALID");
        let _ = what;
    }
    assert_refused(
        answer(
            &mut client,
            "stale",
            id,
            "not-the-etag",
            select(&[("question-1", &["option-2"]), ("question-2", &["option-2", "option-1"])]),
        )
        .await,
        Code::FailedPrecondition,
        "STALE_ETAG",
    );
    assert_refused(
        answer(
            &mut client,
            "unknown",
            "no-such-interaction",
            etag,
            select(&[("question-1", &["option-1"])]),
        )
        .await,
        Code::NotFound,
        "INTERACTION_NOT_FOUND",
    );
    let row = service
        .store
        .get_interaction(TENANT, &id.into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state.as_str(), "pending", "nothing was recorded");
    assert!(row.outcome.is_none());
    assert!(answers_sent_to_agent(&service).is_empty(), "the agent received nothing");

    // The valid answer still goes through, exactly as the agent expects it.
    let delivered = answer(
        &mut client,
        "good",
        id,
        etag,
        select(&[("question-1", &["option-2"]), ("question-2", &["option-2", "option-1"])]),
    )
    .await
    .unwrap();
    assert_eq!(delivered.state, proto::InteractionState::Delivered as i32);
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    assert_eq!(answers_sent_to_agent(&service).len(), 1);
    service.shutdown().await;
}

async fn a_repeated_answer_returns_the_stored_result_and_a_different_one_conflicts(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (_, created, _events) = pending_question(&service, &mut client).await;
    let first = answer_option(&mut client, "answer-1", &created, "option-1")
        .await
        .unwrap();
    let retry = answer_option(&mut client, "answer-1", &created, "option-1")
        .await
        .unwrap();
    assert_eq!(first, retry);
    assert_refused(
        answer_option(&mut client, "answer-1", &created, "option-2").await,
        Code::Aborted,
        "ANSWER_CONFLICT",
    );
    assert_eq!(answers_sent_to_agent(&service).len(), 1, "one delivery");
    service.shutdown().await;
}

async fn answering_a_delivered_interaction_is_refused_naming_its_state(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (_, created, _events) = pending_question(&service, &mut client).await;
    answer_option(&mut client, "answer-1", &created, "option-1")
        .await
        .unwrap();
    let status = answer_option(&mut client, "answer-2", &created, "option-1")
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(reason(&status), "INTERACTION_NOT_PENDING");
    assert!(status.message().contains("delivered"), "{}", status.message());
    assert_eq!(answers_sent_to_agent(&service).len(), 1);
    service.shutdown().await;
}

async fn cancelling_a_turn_answers_a_pending_question_cancelled_and_expires_it_without_replay(backend: Backend) {
    let service = TestService::start(backend, "question_cancel.json").await;
    let mut client = service.client().await;
    let (execution_id, created, mut events) = pending_question(&service, &mut client).await;
    let turn_id = created["turnId"].as_str().unwrap().to_owned();
    client
        .cancel_turn(proto::CancelTurnRequest {
            request_id: "cancel-1".into(),
            execution_id,
            turn_id,
        })
        .await
        .unwrap();
    let settled = events.until_turn_settles().await;
    let expired = settled
        .iter()
        .find(|e| e.event_type == "runtime_request.expired")
        .expect("expired");
    let body = payload(expired);
    assert_eq!(body["reason"], "turn_cancelled");
    assert_eq!(body["replayAllowed"], false);
    assert_eq!(body["delivery"], "pipe_written");
    assert_eq!(
        body["request"]["questions"][0]["nativeId"], "db",
        "the full request is kept"
    );
    assert_eq!(settled.last().unwrap().event_type, "turn.cancelled");
    assert_eq!(
        answers_sent_to_agent(&service)
            .into_iter()
            .filter(|m| m["id"] == 0)
            .collect::<Vec<_>>(),
        vec![json!({"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"cancelled"}}})],
        "answered cancelled exactly once"
    );
    assert_a_late_answer_is_refused(&mut client, &created).await;
    service.shutdown().await;
}

async fn the_agent_exiting_expires_a_pending_question_as_provider_process_lost(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (execution_id, created, mut events) = pending_question(&service, &mut client).await;
    let record = get_execution(&mut client, &execution_id).await;
    let pid = record.pid.expect("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let settled = events.until_turn_settles().await;
    let expired = settled
        .iter()
        .find(|e| e.event_type == "runtime_request.expired")
        .expect("expired");
    assert_eq!(payload(expired)["reason"], "provider_process_lost");
    assert_eq!(payload(expired)["replayAllowed"], false);
    let exited = settled.iter().find(|e| e.event_type == "process.exited").unwrap();
    assert_eq!(payload(exited)["signal"], 9);
    assert_eq!(payload(settled.last().unwrap())["failureReason"], "agent_exited");
    assert_a_late_answer_is_refused(&mut client, &created).await;
    service.shutdown().await;
}

async fn interactions_are_listed_and_read_with_their_full_request(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (execution_id, created, _events) = pending_question(&service, &mut client).await;
    let listed = client
        .list_interactions(proto::ListInteractionsRequest {
            execution_id: execution_id.clone(),
            state: proto::InteractionState::Pending as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .interactions;
    assert_eq!(listed.len(), 1);
    let got = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(got, listed[0]);
    assert_eq!(got.kind, proto::InteractionKind::Question as i32);
    let request = cursor_runner_api::struct_to_json(got.request.as_ref().unwrap());
    assert_eq!(request, created["request"]);
    assert_eq!(request["questions"][0]["options"][1]["label"], "SQLite");
    let delivered = client
        .list_interactions(proto::ListInteractionsRequest {
            execution_id,
            state: proto::InteractionState::Delivered as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .interactions;
    assert!(delivered.is_empty());
    service.shutdown().await;
}
