//! Durable interactions of every kind: questions, plans and permissions, the approval
//! policy, cancellation by kind, and hand-off (racing answers: `racing_answers`).

use std::time::Duration;

use cursor_runner_e2e::*;
use proto::answer_interaction_request::Answer;
use serde_json::{Value, json};
use tonic::Code;

on_both_backends!(
    a_plan_keeps_its_full_presentation_and_each_proposal_gets_its_own_answer,
    permissions_offer_only_the_policys_options_and_are_answered_under_the_agents_own_ids,
    allow_always_is_offered_only_when_the_policy_allows_session_scope,
    deny_all_rejects_a_permission_without_a_human_and_the_tool_does_not_run,
    cancelling_answers_a_pending_permission_and_question_once_and_records_each_by_its_kind,
    two_pending_questions_are_answered_independently_in_any_order,
    a_question_past_the_wait_limit_is_handed_off_durably_and_the_turn_settles,
    an_oversized_plan_is_refused_on_the_wire_never_truncated_and_the_turn_goes_on,
    a_question_still_pending_when_its_turn_ends_expires_and_the_agent_gets_cancelled_once,
    an_answer_the_agent_can_no_longer_read_expires_with_delivery_unknown_never_delivered,
    a_terminal_interaction_refuses_every_further_write,
    an_execution_row_is_written_only_by_a_writer_that_knows_its_state,
    text_the_database_cannot_hold_as_is_is_persisted_exposed_and_answered,
);

async fn an_oversized_plan_is_refused_on_the_wire_never_truncated_and_the_turn_goes_on(backend: Backend) {
    let service = TestService::start(backend, "oversize_plan.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn(&mut client, &service).await;
    let settled = events.until_turn_settles().await;
    assert_eq!(
        settled.last().unwrap().event_type,
        "turn.completed",
        "the framing survived the 300 KB line"
    );
    let notice = settled
        .iter()
        .find(|e| e.event_type == "provider.notice.recorded" && payload(e)["category"] == "interaction_refused")
        .expect("the control plane is told");
    assert!(
        payload(notice)["summary"]
            .as_str()
            .unwrap()
            .contains("cursor/create_plan")
    );
    assert!(
        !settled.iter().any(|e| e.event_type == "runtime_request.created"),
        "nothing half-recorded"
    );
    let listed = client
        .list_interactions(proto::ListInteractionsRequest {
            execution_id: execution.execution_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .interactions;
    assert!(listed.is_empty());
    assert_eq!(
        responses(&service),
        vec![(json!(0), json!({"outcome": {"outcome": "cancelled"}}))]
    );
    service.shutdown().await;
}

pub(crate) async fn send(
    client: &mut Client,
    request_id: &str,
    created: &Value,
    answer: Answer,
) -> Result<proto::Interaction, tonic::Status> {
    client
        .answer_interaction(proto::AnswerInteractionRequest {
            request_id: request_id.into(),
            interaction_id: created["interactionId"].as_str().unwrap().into(),
            etag: created["etag"].as_str().unwrap().into(),
            answer: Some(answer),
        })
        .await
        .map(|r| r.into_inner().interaction.unwrap())
}

fn option(option_id: &str) -> Answer {
    Answer::Permission(proto::PermissionAnswer {
        option_id: option_id.into(),
    })
}

fn accept(feedback: &str) -> Answer {
    Answer::Plan(proto::PlanAnswer {
        decision: Some(proto::plan_answer::Decision::Accept(proto::AcceptPlan {
            feedback: feedback.into(),
        })),
    })
}

fn reject(reason: &str) -> Answer {
    Answer::Plan(proto::PlanAnswer {
        decision: Some(proto::plan_answer::Decision::Reject(proto::RejectPlan {
            reason: reason.into(),
        })),
    })
}

fn decline() -> Answer {
    Answer::Decline(proto::DeclineAnswer::default())
}

/// The payloads of the next `n` `runtime_request.created` events.
pub(crate) async fn created(events: &mut Subscriber, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    while out.len() < n {
        let event = events.next_event().await;
        if event.event_type == "runtime_request.created" {
            out.push(payload(&event));
        }
    }
    out
}

/// Every response the agent received, by its request id.
pub(crate) fn responses(service: &TestService) -> Vec<(Value, Value)> {
    service
        .agent_received()
        .into_iter()
        .filter(|m| m.get("method").is_none())
        .map(|m| {
            (
                m["id"].clone(),
                m.get("result").cloned().unwrap_or_else(|| json!({"error": m["error"]})),
            )
        })
        .collect()
}

/// Waits until the agent read `n` answers, then checks it read no more: `Delivered` means
/// the answer is on the agent's pipe, and the agent records a line only once it reads it.
pub(crate) async fn the_agent_got(service: &TestService, n: usize, what: &str) {
    eventually(what, || responses(service).len() >= n).await;
    assert_eq!(responses(service).len(), n, "{what}");
}

fn policy(policy: proto::ApprovalPolicy) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        approval_policy: policy as i32,
        ..Default::default()
    }
}

async fn a_plan_keeps_its_full_presentation_and_each_proposal_gets_its_own_answer(backend: Backend) {
    let service = TestService::start(backend, "plan_decisions.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let plans = created(&mut events, 2).await;
    let (first, second) = (&plans[0], &plans[1]);
    assert_eq!(first["kind"], "plan");
    let request = &first["request"];
    assert_eq!(request["plan"], "# Plan\n1. Read 📖\n2. Split");
    assert_eq!(request["overview"], "Split the module ✂️");
    assert_eq!(request["todos"][1]["status"], "cancelled");
    assert_eq!(request["phases"][0]["name"], "Only");
    assert_eq!(request["isProject"], false);
    assert!(request.get("planUri").is_none());
    // The same revision again: the same digest, but its own interaction and answer.
    assert_eq!(request["questionId"], second["request"]["questionId"]);
    assert_ne!(first["interactionId"], second["interactionId"]);
    assert_eq!(first["toolCallKnown"], true);

    assert_refused(
        send(&mut client, "a0", first, accept("but also X")).await,
        Code::InvalidArgument,
        "ANSWER_INVALID",
    );
    assert_refused(
        send(&mut client, "a1", first, option("option-1")).await,
        Code::InvalidArgument,
        "ANSWER_INVALID",
    );
    send(&mut client, "a2", first, accept("")).await.unwrap();
    send(&mut client, "a3", second, reject("split step 1")).await.unwrap();
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let resolved: Vec<Value> = settled
        .iter()
        .filter(|e| e.event_type == "runtime_request.resolved")
        .map(payload)
        .collect();
    assert_eq!(resolved[0]["outcome"], json!({"outcome": {"outcome": "accepted"}}));
    assert_eq!(
        resolved[1]["outcome"],
        json!({"outcome": {"outcome": "rejected", "reason": "split step 1"}})
    );
    service.shutdown().await;
}

async fn permissions_offer_only_the_policys_options_and_are_answered_under_the_agents_own_ids(backend: Backend) {
    let service = TestService::start(backend, "permissions.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn_with(&mut client, &service, policy(proto::ApprovalPolicy::Ask)).await;
    let first = created(&mut events, 1).await.remove(0);
    assert_eq!(first["kind"], "permission");
    let offered: Vec<&str> = first["request"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered,
        ["allow_once", "reject_once"],
        "allow_always is withheld under `ask`"
    );
    assert_eq!(first["request"]["withheld"][0]["kind"], "allow_always");
    assert_refused(
        send(&mut client, "p0", &first, option("option-3")).await,
        Code::InvalidArgument,
        "ANSWER_INVALID",
    );
    send(&mut client, "p1", &first, option("option-1")).await.unwrap();

    let second = created(&mut events, 1).await.remove(0);
    assert_eq!(
        second["request"]["toolCall"]["content"][0]["type"], "diff",
        "the proposed change is kept"
    );
    send(&mut client, "p2", &second, decline()).await.unwrap();
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.completed"
    );
    assert_eq!(
        responses(&service),
        vec![
            (
                json!(0),
                json!({"outcome": {"outcome": "selected", "optionId": "allow-once"}})
            ),
            (
                json!("perm-2"),
                json!({"outcome": {"outcome": "selected", "optionId": "reject-once"}})
            ),
        ]
    );
    service.shutdown().await;
}

async fn allow_always_is_offered_only_when_the_policy_allows_session_scope(backend: Backend) {
    let service = TestService::start(backend, "permissions.json").await;
    let mut client = service.client().await;
    let settings = policy(proto::ApprovalPolicy::AllowSessionScope);
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, settings).await;
    assert_eq!(
        execution.approval_policy,
        proto::ApprovalPolicy::AllowSessionScope as i32
    );
    let first = created(&mut events, 1).await.remove(0);
    let kinds: Vec<&str> = first["request"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    service.shutdown().await;
}

async fn deny_all_rejects_a_permission_without_a_human_and_the_tool_does_not_run(backend: Backend) {
    let service = TestService::start(backend, "permission_denied.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn_with(&mut client, &service, policy(proto::ApprovalPolicy::DenyAll)).await;
    let settled = events.until_turn_settles().await;
    // The fake agent exits unless it got exactly the one-time rejection.
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let resolved = settled
        .iter()
        .find(|e| e.event_type == "runtime_request.resolved")
        .expect("recorded and exposed");
    assert_eq!(payload(resolved)["answeredBy"], "policy");
    let tool = settled
        .iter()
        .rfind(|e| e.event_type == "tool.execution.completed")
        .unwrap();
    assert_eq!(payload(tool)["status"], "failed");
    assert_eq!(payload(tool)["failureSource"], "rejected");
    let id = payload(resolved)["interactionId"].as_str().unwrap().to_owned();
    let row = service
        .store
        .get_interaction(TENANT, &id.as_str().into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (row.state.as_str(), row.reason.map(|r| r.as_str())),
        ("delivered", Some("approval_policy_deny_all"))
    );
    assert!(row.answer_request_id.is_none(), "no human answered");
    service.shutdown().await;
}

async fn cancelling_answers_a_pending_permission_and_question_once_and_records_each_by_its_kind(backend: Backend) {
    let service = TestService::start(backend, "cancel_with_pending.json").await;
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn(&mut client, &service).await;
    created(&mut events, 2).await;
    cancel_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.cancelled");
    let cancelled = settled
        .iter()
        .find(|e| e.event_type == "runtime_request.cancelled")
        .expect("permission");
    assert_eq!(payload(cancelled)["kind"], "permission");
    assert_eq!(payload(cancelled)["reason"], "turn_cancelled");
    let expired = settled
        .iter()
        .find(|e| e.event_type == "runtime_request.expired")
        .expect("question");
    assert_eq!(payload(expired)["kind"], "question");
    assert_eq!(payload(expired)["replayAllowed"], false);
    assert_eq!(payload(expired)["request"]["questions"][0]["nativeId"], "env");
    assert!(
        settled.iter().any(|e| e.event_type == "tool.execution.completed"),
        "updates after the cancel are still normalized"
    );
    let cancelled_result = json!({"outcome": {"outcome": "cancelled"}});
    assert_eq!(
        responses(&service),
        vec![(json!(0), cancelled_result.clone()), (json!(1), cancelled_result)],
        "each answered cancelled exactly once"
    );
    service.shutdown().await;
}

async fn two_pending_questions_are_answered_independently_in_any_order(backend: Backend) {
    let service = TestService::start(backend, "two_questions.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let questions = created(&mut events, 2).await;
    assert_eq!(questions[0]["toolCallKnown"], true);
    assert_eq!(
        questions[1]["toolCallKnown"], false,
        "an unknown tool call is flagged, not refused"
    );
    assert_eq!(questions[0]["turnId"], questions[1]["turnId"]);
    let select_second = Answer::Questions(proto::QuestionAnswer {
        selections: vec![proto::QuestionSelection {
            question_id: "question-1".into(),
            option_ids: vec!["option-2".into()],
        }],
    });
    send(&mut client, "q2", &questions[1], select_second).await.unwrap();
    send(&mut client, "q1", &questions[0], decline()).await.unwrap();
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.completed"
    );
    service.shutdown().await;
}

async fn a_question_past_the_wait_limit_is_handed_off_durably_and_the_turn_settles(backend: Backend) {
    let service = TestService::start(backend, "handoff.json").await;
    let mut client = service.client().await;
    let settings = proto::CreateExecutionRequest {
        interaction_wait_limit: Some(prost_types_duration(Duration::from_millis(300))),
        ..Default::default()
    };
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, settings).await;
    let settled = events.until_turn_settles().await;
    let expired = settled
        .iter()
        .find(|e| e.event_type == "runtime_request.expired")
        .expect("handed off");
    assert_eq!(payload(expired)["reason"], "durable_handoff");
    assert_eq!(payload(expired)["replayAllowed"], false);
    assert_eq!(payload(expired)["request"]["questions"][0]["prompt"], "Deploy now?");
    assert_eq!(settled.last().unwrap().event_type, "turn.cancelled");
    // The control plane asked the human durably; it goes on with a new turn.
    let turn = start_turn(&mut client, &execution.execution_id, "turn-2")
        .await
        .unwrap();
    let next = events.until_turn_settles().await;
    assert_eq!(next.last().unwrap().event_type, "turn.completed");
    assert_eq!(next.last().unwrap().turn_id, turn.turn_id);
    service.shutdown().await;
}

fn prost_types_duration(d: Duration) -> ::prost_types::Duration {
    ::prost_types::Duration::try_from(d).unwrap()
}

async fn a_question_still_pending_when_its_turn_ends_expires_and_the_agent_gets_cancelled_once(backend: Backend) {
    let service = TestService::start(backend, "question_left_pending.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn(&mut client, &service).await;
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let expired = payload(
        settled
            .iter()
            .find(|e| e.event_type == "runtime_request.expired")
            .expect("the pending question ends with its turn"),
    );
    assert_eq!(expired["reason"], "turn_settled");
    assert_eq!(expired["replayAllowed"], false);
    assert_eq!(expired["request"]["questions"][0]["prompt"], "Which database?");
    let record = get_interaction(&mut client, expired["interactionId"].as_str().unwrap()).await;
    assert_eq!(record.state, proto::InteractionState::Expired as i32);
    assert_eq!(
        responses(&service)
            .into_iter()
            .filter(|(id, _)| *id == json!(3))
            .collect::<Vec<_>>(),
        vec![(json!(3), json!({"outcome": {"outcome": "cancelled"}}))],
        "answered cancelled on the wire, exactly once"
    );
    // Never replayed: the next turn runs with nothing pending.
    start_turn(&mut client, &execution.execution_id, "turn-2")
        .await
        .unwrap();
    let next = events.until_turn_settles().await;
    assert!(!next.iter().any(|e| e.event_type.starts_with("runtime_request.")));
    service.shutdown().await;
}

async fn an_answer_the_agent_can_no_longer_read_expires_with_delivery_unknown_never_delivered(backend: Backend) {
    let service = TestService::start(backend, "stdin_closed.json").await;
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn(&mut client, &service).await;
    let question = created(&mut events, 1).await.remove(0);
    // The agent says when its stdin is gone; it is still alive, stdout open.
    while !payload(&events.next_event().await).to_string().contains("stdin closed") {}
    let answer = Answer::Questions(proto::QuestionAnswer {
        selections: vec![proto::QuestionSelection {
            question_id: "question-1".into(),
            option_ids: vec!["option-1".into()],
        }],
    });
    assert_refused(
        send(&mut client, "a1", &question, answer.clone()).await,
        Code::FailedPrecondition,
        "INTERACTION_NOT_PENDING",
    );
    let retry = send(&mut client, "a1", &question, answer)
        .await
        .expect_err("the retry is refused too");
    assert_eq!(reason(&retry), "INTERACTION_NOT_PENDING", "{retry:?}");
    assert_eq!(
        error_metadata(&retry, "delivery").as_deref(),
        Some("unknown"),
        "{retry:?}"
    );
    let expired = payload(&events.events_until("runtime_request.expired").await.pop().unwrap());
    assert_eq!(expired["delivery"], "unknown", "recorded, but the write failed");
    assert_eq!(expired["reason"], "provider_process_lost");
    assert_eq!(expired["replayAllowed"], false);
    let record = get_interaction(&mut client, question["interactionId"].as_str().unwrap()).await;
    assert_eq!(record.state, proto::InteractionState::Expired as i32);
    assert!(
        !responses(&service).iter().any(|(id, _)| *id == json!(0)),
        "the agent read no answer"
    );
    cancel_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    let resolved = events.until_turn_settles().await;
    assert!(!resolved.iter().any(|e| e.event_type == "runtime_request.resolved"));
    service.shutdown().await;
}

async fn a_terminal_interaction_refuses_every_further_write(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let question = created(&mut events, 1).await.remove(0);
    let id = question["interactionId"].as_str().unwrap().to_owned();
    client
        .answer_interaction(one_question_answer(&question, "a1", "option-1"))
        .await
        .unwrap();
    events.until_turn_settles().await;
    let delivered = service
        .store
        .get_interaction(TENANT, &id.as_str().into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(delivered.state.as_str(), "delivered");
    use cursor_runner_executions::state::InteractionState;
    for state in [
        InteractionState::Pending,
        InteractionState::Answered,
        InteractionState::Cancelled,
        InteractionState::Expired,
    ] {
        let mut rewrite = delivered.clone();
        rewrite.state = state;
        rewrite.reason = Some(cursor_runner_store::InteractionReason::TurnSettled);
        let from = InteractionState::Delivered;
        assert!(
            cursor_runner_executions::interaction_row::transition(service.store.as_ref(), from, &rewrite)
                .await
                .is_err(),
            "delivered → {state} is not a transition"
        );
        // Even a writer that skips the state machine is refused by the store's
        // compare-and-set: the row is no longer in the state it expects.
        for expected in [InteractionState::Pending, InteractionState::Answered] {
            assert!(!service.store.transition_interaction(expected, &rewrite).await.unwrap());
        }
    }
    assert_eq!(
        service
            .store
            .get_interaction(TENANT, &id.as_str().into())
            .await
            .unwrap()
            .unwrap(),
        delivered
    );
    service.shutdown().await;
}

async fn an_execution_row_is_written_only_by_a_writer_that_knows_its_state(backend: Backend) {
    use cursor_runner_executions::state::ExecutionState;
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    client
        .close_execution(proto::CloseExecutionRequest {
            request_id: "close-1".into(),
            execution_id: execution.execution_id.clone(),
        })
        .await
        .unwrap();
    let closed = service
        .store
        .get_execution(TENANT, &execution.execution_id.as_str().into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(closed.state.as_str(), "closed");
    let mut rewrite = closed.clone();
    rewrite.state = ExecutionState::Ready;
    rewrite.failure_message = Some("late".into());
    // A writer that believes the execution still ready (or closing) is refused: the row is
    // compared on its state as well as its generation.
    for expected in [ExecutionState::Starting, ExecutionState::Ready, ExecutionState::Closing] {
        assert!(
            !service.store.update_execution(expected, &rewrite).await.unwrap(),
            "{expected}"
        );
    }
    assert_eq!(
        service
            .store
            .get_execution(TENANT, &execution.execution_id.as_str().into())
            .await
            .unwrap()
            .unwrap(),
        closed
    );
    service.shutdown().await;
}

async fn text_the_database_cannot_hold_as_is_is_persisted_exposed_and_answered(backend: Backend) {
    let service = TestService::start(backend, "unstorable_text.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let question = created(&mut events, 1).await.remove(0);
    let prompt = question["request"]["questions"][0]["prompt"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        prompt, "nul:\u{0} lone:\\ud800 pair:😀 日本",
        "U+0000 and valid text survive exactly; the lone surrogate is kept as its literal escape"
    );
    let stored = get_interaction(&mut client, question["interactionId"].as_str().unwrap()).await;
    let stored_prompt =
        stored.request.as_ref().map(cursor_runner_api::struct_to_json).unwrap()["questions"][0]["prompt"].clone();
    assert_eq!(stored_prompt, prompt, "read back from the database unchanged");
    client
        .answer_interaction(one_question_answer(&question, "a1", "option-1"))
        .await
        .unwrap();
    // The agent checks it got its own ids back (else it exits 97 and the turn fails).
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.completed"
    );
    service.shutdown().await;
}
