use cursor_runner_e2e::*;
use serde_json::json;
use tonic::Code;

on_both_backends!(
    a_full_turn_streams_text_a_tool_and_a_question_answered_through_the_api,
    start_turn_while_a_turn_is_active_is_refused_with_failed_precondition,
    the_agent_exiting_mid_turn_fails_the_turn_with_a_typed_reason_and_records_the_exit_status,
    two_turns_run_one_after_the_other_on_one_session,
    replace_active_interrupts_the_running_turn_then_starts_the_new_one,
    a_turn_that_cannot_settle_after_a_cancel_is_interrupted_and_its_agent_killed,
    a_tool_still_running_when_its_turn_is_cancelled_settles_cancelled,
    a_tool_still_running_when_its_turn_is_replaced_settles_interrupted,
    a_cancel_naming_a_turn_the_execution_does_not_have_is_turn_not_found_and_cancels_nothing,
    a_turn_cut_short_by_closing_its_execution_is_interrupted_with_the_reason_execution_closed,
);

async fn a_turn_cut_short_by_closing_its_execution_is_interrupted_with_the_reason_execution_closed(backend: Backend) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let (execution, mut events) = turn_started(&mut client, &service.workspace, "closed").await;
    client
        .close_execution(proto::CloseExecutionRequest {
            request_id: "close-closed".into(),
            execution_id: execution.execution_id.clone(),
        })
        .await
        .expect("CloseExecution");
    let settled = events.until_turn_settles().await;
    let ended = settled.last().unwrap();
    assert_eq!(ended.event_type, "turn.interrupted");
    assert_eq!(payload(ended)["failureReason"], "execution_closed");
    let turns = list_turns(&mut client, &execution.execution_id).await.turns;
    assert_eq!(turns[0].failure_reason, "execution_closed");
    service.shutdown().await;
}

/// `CancelTurn` of `turn_id` on `execution_id`, under its own request id.
async fn cancel_named(client: &mut Client, execution_id: &str, turn_id: &str) -> Result<proto::Turn, tonic::Status> {
    client
        .cancel_turn(proto::CancelTurnRequest {
            request_id: format!("cancel-{turn_id}"),
            execution_id: execution_id.into(),
            turn_id: turn_id.into(),
        })
        .await
        .map(|r| r.into_inner().turn.expect("turn"))
}

async fn a_cancel_naming_a_turn_the_execution_does_not_have_is_turn_not_found_and_cancels_nothing(backend: Backend) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let (running, _events) = turn_started(&mut client, &service.workspace, "running").await;
    let running_turn = get_execution(&mut client, &running.execution_id).await.active_turn_id;
    let (other, _other_events) = turn_started(&mut client, &service.workspace, "other").await;
    let others_turn = get_execution(&mut client, &other.execution_id).await.active_turn_id;
    for (turn_id, what) in [
        ("01a24c40-0000-7000-8000-000000000000", "an id no turn has"),
        (others_turn.as_str(), "another execution's running turn"),
    ] {
        let refused = cancel_named(&mut client, &running.execution_id, turn_id)
            .await
            .expect_err(what);
        assert_eq!(
            (refused.code(), reason(&refused).as_str()),
            (Code::NotFound, "TURN_NOT_FOUND"),
            "{what}: {refused:?}"
        );
    }
    for (execution, turn) in [(&running, &running_turn), (&other, &others_turn)] {
        assert_eq!(
            &get_execution(&mut client, &execution.execution_id).await.active_turn_id,
            turn
        );
        cancel_named(&mut client, &execution.execution_id, turn)
            .await
            .expect("the running turn is cancelled by its own id");
    }
    service.shutdown().await;
}

/// `StartTurn` "turn-2" with `replace_active`: the running turn is interrupted for it.
async fn replace_turn(client: &mut Client, execution_id: &str) -> proto::Turn {
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
        .expect("StartTurn replacing the active turn")
        .into_inner()
        .turn
        .expect("the new turn")
}

/// Where the one terminal event of a tool the agent never reported an end for is, and
/// the status it settled with.
fn open_tool_settled(settled: &[proto::ActivityEvent], tool_call_id: &str) -> (usize, String) {
    let ended: Vec<(usize, serde_json::Value)> = settled
        .iter()
        .enumerate()
        .filter(|(_, e)| e.event_type == "tool.execution.completed")
        .map(|(at, e)| (at, payload(e)))
        .filter(|(_, p)| p["toolCallId"] == tool_call_id)
        .collect();
    assert_eq!(ended.len(), 1, "exactly one terminal event for {tool_call_id}");
    let (at, tool) = &ended[0];
    (*at, tool["status"].as_str().unwrap().to_owned())
}

async fn a_tool_still_running_when_its_turn_is_cancelled_settles_cancelled(backend: Backend) {
    let service = TestService::start(backend, "tool_left_running.json").await;
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("tool.execution.progressed").await;
    cancel_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    let settled = events.until_turn_settles().await;
    let (at, status) = open_tool_settled(&settled, "tool-test");
    assert_eq!(status, "cancelled");
    assert_eq!(settled.last().unwrap().event_type, "turn.cancelled");
    assert!(at < settled.len() - 1, "the tool ends before its turn");
    service.shutdown().await;
}

async fn a_tool_still_running_when_its_turn_is_replaced_settles_interrupted(backend: Backend) {
    let service = TestService::start(backend, "tool_left_running.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("tool.execution.progressed").await;
    replace_turn(&mut client, &execution.execution_id).await;
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.interrupted");
    assert_eq!(open_tool_settled(&settled, "tool-test").1, "interrupted");
    service.shutdown().await;
}

async fn a_turn_that_cannot_settle_after_a_cancel_is_interrupted_and_its_agent_killed(backend: Backend) {
    let options = Options {
        cancel_grace: std::time::Duration::from_millis(300),
        stop_grace: std::time::Duration::from_millis(300),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "ignores_cancel.json", options).await;
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn(&mut client, &service).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    client
        .answer_interaction(proto::AnswerInteractionRequest {
            request_id: "decline".into(),
            interaction_id: created["interactionId"].as_str().unwrap().into(),
            etag: created["etag"].as_str().unwrap().into(),
            answer: Some(proto::answer_interaction_request::Answer::Decline(Default::default())),
        })
        .await
        .unwrap();
    // The agent reuses request id 0: refused on the wire, never a second identity.
    let reused = events.events_until("provider.notice.recorded").await;
    assert_eq!(payload(reused.last().unwrap())["category"], "duplicate_request_id");
    events.events_until("item.delta").await;
    cancel_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    let settled = events.until_turn_settles().await;
    let exited = settled
        .iter()
        .find(|e| e.event_type == "process.exited")
        .expect("stopped");
    assert_eq!(payload(exited)["signal"], 9, "SIGTERM was ignored, SIGKILL was not");
    assert_eq!(payload(exited)["initiatedBy"], "runner");
    let last = settled.last().unwrap();
    assert_eq!(last.event_type, "turn.interrupted");
    assert_eq!(payload(last)["failureReason"], "cancel_timeout");
    assert!(!process_alive(execution.pid.unwrap()));
    // The actor settles the turn, then marks the execution lost: poll past that gap.
    execution_in_state(&mut client, &execution.execution_id, proto::ExecutionState::Lost).await;
    service.shutdown().await;
}

async fn a_full_turn_streams_text_a_tool_and_a_question_answered_through_the_api(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    assert_eq!(execution.state, proto::ExecutionState::Ready as i32);
    assert_eq!(execution.session_id, "sess-demo");
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let turn = start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();

    let before = events.events_until("runtime_request.created").await;
    let created = before.last().unwrap();
    let request = payload(created);
    assert_eq!(request["kind"], "question");
    assert_eq!(created.turn_id, turn.turn_id);
    let answered = client
        .answer_interaction(proto::AnswerInteractionRequest {
            request_id: "answer-1".into(),
            interaction_id: request["interactionId"].as_str().unwrap().into(),
            etag: request["etag"].as_str().unwrap().into(),
            answer: Some(proto::answer_interaction_request::Answer::Questions(
                proto::QuestionAnswer {
                    selections: vec![proto::QuestionSelection {
                        question_id: "question-1".into(),
                        option_ids: vec!["option-1".into()],
                    }],
                },
            )),
        })
        .await
        .unwrap()
        .into_inner()
        .interaction
        .unwrap();
    assert_eq!(answered.state, proto::InteractionState::Delivered as i32);
    assert_eq!(answered.delivery, "pipe_written");

    let after = events.until_turn_settles().await;
    let all: Vec<_> = before.iter().chain(after.iter()).cloned().collect();
    let kinds = types(&all);
    for expected in [
        "process.spawned",
        "turn.started",
        "item.started",
        "item.delta",
        "tool.execution.started",
        "tool.execution.completed",
        "runtime_request.created",
        "runtime_request.resolved",
        "item.completed",
        "turn.completed",
    ] {
        assert!(kinds.contains(&expected), "missing {expected} in {kinds:?}");
    }
    let text: String = all
        .iter()
        .filter(|e| e.event_type == "item.delta")
        .map(|e| payload(e)["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        text.contains("Running them now.") && text.contains("Great, using PostgreSQL."),
        "{text}"
    );
    let tool = all.iter().find(|e| e.event_type == "tool.execution.completed").unwrap();
    assert_eq!(payload(tool)["exitCode"], 0);
    assert_eq!(payload(tool)["status"], "completed");

    // The agent received exactly the expected answer, under its own request id 0.
    let answers: Vec<_> = service
        .agent_received()
        .into_iter()
        .filter(|m| m.get("method").is_none() && m["id"] == 0 && m.get("result").is_some())
        .collect();
    assert_eq!(
        answers,
        vec![
            json!({"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"answered","answers":[{"questionId":"db","selectedOptionIds":["pg"]}]}}})
        ]
    );
    service.shutdown().await;
}

async fn start_turn_while_a_turn_is_active_is_refused_with_failed_precondition(backend: Backend) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let turn = start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    assert_refused(
        start_turn(&mut client, &execution.execution_id, "turn-2").await,
        Code::FailedPrecondition,
        "TURN_ACTIVE",
    );
    let prompts = service
        .agent_received()
        .into_iter()
        .filter(|m| m["method"] == "session/prompt")
        .count();
    assert_eq!(prompts, 1, "the refused turn never reaches the agent");

    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    cancel_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    let settled = events.until_turn_settles().await;
    let last = settled.last().unwrap();
    assert_eq!(last.event_type, "turn.cancelled");
    assert_eq!(payload(last)["stopReason"], "cancelled");
    // Updates sent after the cancel are still normalized.
    assert!(settled.iter().any(|e| payload(e)["text"] == "stopped"));
    service.shutdown().await;
}

async fn the_agent_exiting_mid_turn_fails_the_turn_with_a_typed_reason_and_records_the_exit_status(backend: Backend) {
    let service = TestService::start(backend, "exit_mid_turn.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    let settled = events.until_turn_settles().await;
    let exited = settled
        .iter()
        .find(|e| e.event_type == "process.exited")
        .expect("process.exited");
    assert_eq!(payload(exited)["exitCode"], 3);
    assert_eq!(payload(exited)["initiatedBy"], "agent");
    let failed = settled.last().unwrap();
    assert_eq!(failed.event_type, "turn.failed");
    assert_eq!(payload(failed)["failureReason"], "agent_exited");
    assert!(payload(failed)["message"].as_str().unwrap().contains("fatal: boom"));

    // The actor settles the turn, then marks the execution lost: poll past that gap.
    let record = execution_in_state(&mut client, &execution.execution_id, proto::ExecutionState::Lost).await;
    assert_eq!(record.exit_status.unwrap().exit_code, Some(3));
    assert_refused(
        start_turn(&mut client, &execution.execution_id, "turn-2").await,
        Code::FailedPrecondition,
        "EXECUTION_NOT_READY",
    );
    service.shutdown().await;
}

async fn two_turns_run_one_after_the_other_on_one_session(backend: Backend) {
    let service = TestService::start(backend, "two_turns.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    for n in 1..=2 {
        let turn = start_turn(&mut client, &execution.execution_id, &format!("turn-{n}"))
            .await
            .unwrap();
        assert_eq!(turn.turn_number, n);
        let settled = events.until_turn_settles().await;
        assert_eq!(settled.last().unwrap().event_type, "turn.completed");
        assert!(settled.iter().filter(|e| e.turn_id == turn.turn_id).count() >= 3);
    }
    service.shutdown().await;
}

async fn replace_active_interrupts_the_running_turn_then_starts_the_new_one(backend: Backend) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let (execution, first, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("item.delta").await;
    let second = replace_turn(&mut client, &execution.execution_id).await;
    assert_eq!(second.turn_number, 2);
    let replaced = events.until_turn_settles().await;
    let last = replaced.last().unwrap();
    assert_eq!(
        (last.event_type.as_str(), last.turn_id.as_str()),
        ("turn.interrupted", first.turn_id.as_str())
    );
    assert_eq!(
        payload(last)["failureReason"],
        "replaced_by_new_turn",
        "reported as a replacement, never as steering"
    );
    let next = events.until_turn_settles().await;
    assert!(
        next.iter()
            .any(|e| e.event_type == "turn.started" && e.turn_id == second.turn_id)
    );
    assert_eq!(next.last().unwrap().event_type, "turn.completed");
    let prompts = service
        .agent_received()
        .into_iter()
        .filter(|m| m["method"] == "session/prompt")
        .count();
    assert_eq!(prompts, 2, "the new prompt was sent only after the first settled");
    service.shutdown().await;
}
