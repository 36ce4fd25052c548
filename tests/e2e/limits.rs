//! Access and accounting: every turn is an attempt attributed to the credential's name
//! and the configuration in effect, usage is kept as reported (unknown stays unknown),
//! and bounds before spend cancel or refuse turns with a typed reason.

use std::time::Duration;

use cursor_runner_e2e::*;
use cursor_runner_executions::limits::TenantLimits;
use tonic::Code;

on_both_backends!(
    a_turn_past_its_deadline_is_cancelled_and_settles_interrupted_with_deadline_exceeded,
    an_execution_out_of_turns_refuses_the_next_one_before_anything_is_sent,
    a_replacement_an_execution_has_no_turn_left_for_is_refused_and_leaves_the_running_turn_running,
    the_active_time_budget_cancels_the_running_turn_and_refuses_the_next,
    a_tenants_policy_caps_the_limits_an_execution_asks_for,
    each_turn_is_attributed_and_unknown_usage_stays_unknown_in_the_total,
    a_hung_agent_past_its_deadline_is_stopped_and_the_turn_names_the_deadline_not_the_cancel,
    an_execution_that_names_no_deadline_gets_the_default_one,
    an_agent_silent_past_the_idle_timeout_is_cancelled_and_the_turn_says_agent_idle,
    an_agent_that_keeps_talking_is_never_idle,
    a_question_waiting_on_a_human_past_the_idle_timeout_does_not_make_the_agent_idle,
);

fn limited(limits: proto::ExecutionLimits) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        limits: Some(limits),
        ..Default::default()
    }
}

fn millis(ms: u64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration::try_from(Duration::from_millis(ms)).unwrap())
}

fn prompts_sent(service: &TestService) -> usize {
    service
        .agent_received()
        .iter()
        .filter(|m| m["method"] == "session/prompt")
        .count()
}

async fn a_turn_past_its_deadline_is_cancelled_and_settles_interrupted_with_deadline_exceeded(backend: Backend) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let limits = proto::ExecutionLimits {
        turn_deadline: millis(300),
        ..Default::default()
    };
    let (_, _, mut events) = begin_turn_with(&mut client, &service, limited(limits)).await;
    let settled = events.until_turn_settles().await;
    let last = settled.last().unwrap();
    assert_eq!(last.event_type, "turn.interrupted");
    assert_eq!(payload(last)["failureReason"], "deadline_exceeded");
    assert!(
        service.agent_received().iter().any(|m| m["method"] == "session/cancel"),
        "cancelled through the normal path"
    );
    assert!(
        settled.iter().any(|e| payload(e).to_string().contains("stopped")),
        "the agent's own cancellation output is still streamed"
    );
    service.shutdown().await;
}

async fn an_execution_out_of_turns_refuses_the_next_one_before_anything_is_sent(backend: Backend) {
    let service = TestService::start(backend, "two_turns.json").await;
    let mut client = service.client().await;
    let limits = proto::ExecutionLimits {
        max_turns: Some(1),
        ..Default::default()
    };
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, limited(limits)).await;
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.completed"
    );
    let refused = start_turn(&mut client, &execution.execution_id, "turn-2").await;
    assert_refused(refused, Code::ResourceExhausted, "BUDGET_EXHAUSTED");
    assert_eq!(prompts_sent(&service), 1, "the agent never saw a second prompt");
    service.shutdown().await;
}

/// A `replace_active` start the execution's turns cannot allow (its one turn is the one
/// running) is refused `BUDGET_EXHAUSTED` at once: a refused call cancels nothing.
async fn a_replacement_an_execution_has_no_turn_left_for_is_refused_and_leaves_the_running_turn_running(
    backend: Backend,
) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let limits = proto::ExecutionLimits {
        max_turns: Some(1),
        ..Default::default()
    };
    let (execution, turn, _events) = begin_turn_with(&mut client, &service, limited(limits)).await;
    let refused = client
        .start_turn(proto::StartTurnRequest {
            request_id: "turn-2".into(),
            execution_id: execution.execution_id.clone(),
            prompt: vec![proto::PromptBlock {
                content: Some(proto::prompt_block::Content::Text("instead, do this".into())),
            }],
            replace_active: true,
        })
        .await;
    assert_refused(refused, Code::ResourceExhausted, "BUDGET_EXHAUSTED");
    let still = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(still.active_turn_id, turn.turn_id, "the turn still runs");
    let cancels = service
        .agent_received()
        .iter()
        .filter(|m| m["method"] == "session/cancel")
        .count();
    assert_eq!(cancels, 0, "nothing was cancelled");
    service.shutdown().await;
}

async fn the_active_time_budget_cancels_the_running_turn_and_refuses_the_next(backend: Backend) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let limits = proto::ExecutionLimits {
        turn_deadline: millis(60_000),
        max_active_time: millis(300),
        ..Default::default()
    };
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, limited(limits)).await;
    let last = events.until_turn_settles().await.pop().unwrap();
    assert_eq!(last.event_type, "turn.interrupted");
    assert_eq!(
        payload(&last)["failureReason"],
        "budget_exhausted",
        "the tighter bound names itself"
    );
    let record = get_execution(&mut client, &execution.execution_id).await;
    let active = Duration::try_from(record.active_time.unwrap()).unwrap();
    assert!(active >= Duration::from_millis(300), "{active:?}");
    let refused = start_turn(&mut client, &execution.execution_id, "turn-2").await;
    assert_refused(refused, Code::ResourceExhausted, "BUDGET_EXHAUSTED");
    service.shutdown().await;
}

async fn a_tenants_policy_caps_the_limits_an_execution_asks_for(backend: Backend) {
    let options = Options {
        tenant_limits: TenantLimits::parse(&format!(
            r#"{{"tenants": {{"{TENANT}": {{"turn_deadline_secs": 60, "max_turns": 10}}}}}}"#
        ))
        .unwrap(),
        ..Default::default()
    };
    let service = TestService::start_with(backend, "two_turns.json", options).await;
    let mut client = service.client().await;
    let mut request = limited(proto::ExecutionLimits {
        turn_deadline: millis(3_600_000),
        max_turns: Some(3),
        max_active_time: None,
    });
    request.request_id = "create-1".into();
    request.workspace = service.workspace.display().to_string();
    let execution = client
        .create_execution(request)
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let limits = execution.limits.unwrap();
    assert_eq!(limits.turn_deadline, millis(60_000), "capped by the policy");
    assert_eq!(limits.max_turns, Some(3), "lowered by the caller");
    assert_eq!(limits.max_active_time, None);
    let invalid = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-2".into(),
            workspace: service.workspace.display().to_string(),
            limits: Some(proto::ExecutionLimits {
                max_turns: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
    assert_refused(invalid, Code::InvalidArgument, "INVALID_ARGUMENT");
    service.shutdown().await;
}

async fn each_turn_is_attributed_and_unknown_usage_stays_unknown_in_the_total(backend: Backend) {
    let service = TestService::start(backend, "usage_then_none.json").await;
    let mut client = service.client().await;
    let request = proto::CreateExecutionRequest {
        control_session_id: "run-9".into(),
        credential: Some(proto::CredentialBinding {
            provider: "cursor".into(),
            session_id: "run-9".into(),
            credential_name: "CURSOR_API_KEY".into(),
            secret: "sk-attempt-canary".into(),
            expire_time: None,
        }),
        model: "gpt-x".into(),
        model_parameters: [("effort".to_owned(), "high".to_owned())].into(),
        mode: "plan".into(),
        ..Default::default()
    };
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, request).await;
    events.until_turn_settles().await;
    start_turn(&mut client, &execution.execution_id, "turn-2")
        .await
        .unwrap();
    events.until_turn_settles().await;

    let listed = client
        .list_turns(proto::ListTurnsRequest {
            execution_id: execution.execution_id.clone(),
            page_size: 1,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.turns.len(), 1);
    assert!(!listed.next_page_token.is_empty());
    let first = &listed.turns[0];
    assert_eq!(first.credential_name, "CURSOR_API_KEY");
    let config = first.session_config.as_ref().unwrap();
    assert_eq!((config.model.as_str(), config.mode.as_str()), ("gpt-x", "plan"));
    assert_eq!(config.model_parameters["effort"], "high", "what the agent echoed");
    let usage = first.usage.as_ref().expect("the agent reported usage");
    assert_eq!(usage.context_used_tokens, Some(5400));
    assert_eq!((usage.cost_amount, usage.cost_currency.as_str()), (Some(0.042), "USD"));
    assert!(first.start_time.is_some() && first.end_time.is_some());

    let total = listed.usage_total.unwrap();
    assert_eq!(
        (total.turns, total.turns_without_usage),
        (2, 1),
        "over all turns, not the page"
    );
    assert_eq!(
        total.cost_amount, None,
        "one unknown turn makes the sum unknown, never a partial sum"
    );
    let second = client
        .list_turns(proto::ListTurnsRequest {
            execution_id: execution.execution_id.clone(),
            page_size: 1,
            page_token: listed.next_page_token,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second.turns[0].turn_number, 2);
    assert!(second.turns[0].usage.is_none(), "no usage reported: absent, not zero");

    let foreign = service
        .client_for(Some("tenant-b"))
        .await
        .list_turns(proto::ListTurnsRequest {
            execution_id: execution.execution_id,
            ..Default::default()
        })
        .await;
    assert_refused(foreign, Code::NotFound, "EXECUTION_NOT_FOUND");
    service.shutdown().await;
}

async fn a_hung_agent_past_its_deadline_is_stopped_and_the_turn_names_the_deadline_not_the_cancel(backend: Backend) {
    let service = TestService::start_with(
        backend,
        "hangs_mid_turn.json",
        Options {
            cancel_grace: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .await;
    let mut client = service.client().await;
    let limits = proto::ExecutionLimits {
        turn_deadline: millis(300),
        ..Default::default()
    };
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, limited(limits)).await;
    let last = events.until_turn_settles().await.pop().unwrap();
    assert_eq!(last.event_type, "turn.interrupted");
    assert_eq!(
        payload(&last)["failureReason"],
        "deadline_exceeded",
        "the cause, not the ladder"
    );
    let message = payload(&last)["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("deadline") && message.contains("stopped"), "{message}");
    let lost = execution_in_state(&mut client, &execution.execution_id, proto::ExecutionState::Lost).await;
    assert_eq!(
        lost.failure_reason, "cancel_timeout",
        "the execution says why its agent is gone"
    );
    service.shutdown().await;
}

async fn an_execution_that_names_no_deadline_gets_the_default_one(backend: Backend) {
    let service = TestService::start_with(
        backend,
        "long_turn.json",
        Options {
            default_turn_deadline: Some(Duration::from_millis(300)),
            ..Default::default()
        },
    )
    .await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn(&mut client, &service).await;
    let shown = get_execution(&mut client, &execution.execution_id)
        .await
        .limits
        .unwrap();
    assert_eq!(shown.turn_deadline, millis(300), "the default is recorded and shown");
    let last = events.until_turn_settles().await.pop().unwrap();
    assert_eq!(last.event_type, "turn.interrupted");
    assert_eq!(payload(&last)["failureReason"], "deadline_exceeded");
    service.shutdown().await;
}

fn idle_after(ms: u64) -> Options {
    Options {
        turn_idle_timeout: Some(Duration::from_millis(ms)),
        cancel_grace: Duration::from_millis(300),
        ..Default::default()
    }
}

async fn an_agent_silent_past_the_idle_timeout_is_cancelled_and_the_turn_says_agent_idle(backend: Backend) {
    let service = TestService::start_with(backend, "hangs_mid_turn.json", idle_after(400)).await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let last = events.until_turn_settles().await.pop().unwrap();
    assert_eq!(last.event_type, "turn.interrupted");
    assert_eq!(
        payload(&last)["failureReason"],
        "agent_idle",
        "the cause, not the ladder"
    );
    let message = payload(&last)["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("idle"), "{message}");
    assert!(
        service.agent_received().iter().any(|m| m["method"] == "session/cancel"),
        "the agent was asked to cancel first"
    );
    service.shutdown().await;
}

async fn an_agent_that_keeps_talking_is_never_idle(backend: Backend) {
    // Chunks every 150 ms for 3 s: three timeouts in all, never silent for one.
    let service = TestService::start_with(backend, "steady_talker.json", idle_after(1000)).await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let last = events.until_turn_settles().await.pop().unwrap();
    assert_eq!(last.event_type, "turn.completed", "{:?}", payload(&last));
    service.shutdown().await;
}

async fn a_question_waiting_on_a_human_past_the_idle_timeout_does_not_make_the_agent_idle(backend: Backend) {
    let service = TestService::start_with(backend, "demo.json", idle_after(300)).await;
    let mut client = service.client().await;
    let (_, turn, mut events) = begin_turn(&mut client, &service).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let answered = client
        .answer_interaction(proto::AnswerInteractionRequest {
            request_id: "answer-1".into(),
            interaction_id: created["interactionId"].as_str().unwrap().into(),
            etag: created["etag"].as_str().unwrap().into(),
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
        .expect("the question is still pending after four idle timeouts")
        .into_inner()
        .interaction
        .unwrap();
    assert_eq!(answered.state, proto::InteractionState::Delivered as i32);
    let last = events.until_turn_settles().await.pop().unwrap();
    assert_eq!(
        (last.event_type.as_str(), last.turn_id.as_str()),
        ("turn.completed", turn.turn_id.as_str()),
        "{:?}",
        payload(&last)
    );
    service.shutdown().await;
}
