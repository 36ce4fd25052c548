//! Credentials: only one explicitly bound credential reaches the agent, bad bindings
//! are refused before launch, and the secret appears nowhere else.

use cursor_runner_e2e::*;
use serde_json::Value;
use tonic::Code;

on_both_backends!(
    a_bound_credential_reaches_the_agent_under_its_name_and_nowhere_else,
    each_bad_credential_binding_is_refused_before_launch_with_its_reason,
    a_credential_the_agent_says_back_is_redacted_from_every_event_with_a_marker,
    a_credential_the_agent_says_back_as_a_field_name_never_becomes_a_metric_label,
    a_credential_the_agent_prints_on_stderr_at_start_is_redacted_from_the_refusal_and_every_row,
    a_credential_the_agent_prints_on_stderr_mid_turn_is_redacted_from_the_failure_and_every_row,
    a_credential_quoted_in_a_question_is_redacted_from_its_row_and_the_answer_still_reaches_the_agent,
    a_credential_the_agent_gives_as_its_stop_reason_or_in_its_model_catalog_reaches_no_reply_and_no_row,
    a_credential_in_text_the_runner_derives_from_the_agent_s_words_reaches_no_reply_no_event_and_no_row,
    a_credential_padded_past_a_config_value_s_cut_leaves_no_part_of_itself_in_any_event_or_row,
    a_credential_said_across_two_commits_is_redacted_where_it_is_joined_and_no_text_is_lost,
    a_credential_a_chunk_s_cut_falls_inside_leaves_no_part_of_itself_in_any_event_or_row,
    an_agent_whose_session_id_is_the_credential_is_refused_and_the_id_is_stored_nowhere,
);

const MARKER: &str = "[redacted:CURSOR_API_KEY]";

const CANARY: &str = "sk-canary-4242-do-not-leak";

fn binding() -> proto::CredentialBinding {
    proto::CredentialBinding {
        provider: "cursor".into(),
        session_id: "run-7".into(),
        credential_name: "CURSOR_API_KEY".into(),
        secret: CANARY.into(),
        expire_time: None,
    }
}

fn with_binding(credential: proto::CredentialBinding) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        control_session_id: "run-7".into(),
        credential: Some(credential),
        ..Default::default()
    }
}

async fn a_bound_credential_reaches_the_agent_under_its_name_and_nowhere_else(backend: Backend) {
    let service = TestService::start(backend, "env_report.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, with_binding(binding())).await;
    let all = events.until_turn_settles().await;
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(service.workspace.join("env.json")).unwrap()).unwrap();
    let env = report["env"].as_object().unwrap();
    assert_eq!(env["CURSOR_API_KEY"], CANARY);
    let holding: Vec<&String> = env
        .iter()
        .filter(|(_, v)| v.as_str() == Some(CANARY))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(holding, ["CURSOR_API_KEY"], "the secret enters under its name only");
    assert!(!env.contains_key("CURSOR_AUTH_TOKEN"));
    assert!(
        !env.keys().any(|k| k.contains("BINDING")),
        "no binding marker reaches the agent"
    );

    let streamed: String = all.iter().map(|e| format!("{e:?}")).collect();
    assert!(!streamed.contains(CANARY), "not in the event stream");
    let record = format!("{:?}", get_execution(&mut client, &execution.execution_id).await);
    assert!(!record.contains(CANARY), "not in the execution record");
    let stored = service
        .store
        .read_events(&execution.execution_id.as_str().into(), 0, 10_000)
        .await
        .unwrap();
    assert!(!format!("{stored:?}").contains(CANARY), "not in the outbox");
    // A retry with the same request id (and secret) returns the same execution.
    let again = client.create_execution(proto::CreateExecutionRequest {
        request_id: "create-1".into(),
        workspace: service.workspace.display().to_string(),
        ..with_binding(binding())
    });
    assert_eq!(
        again.await.unwrap().into_inner().execution.unwrap().execution_id,
        execution.execution_id
    );
    service.shutdown().await;
}

async fn each_bad_credential_binding_is_refused_before_launch_with_its_reason(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    type Edit = fn(&mut proto::CredentialBinding);
    let cases: Vec<(Edit, Code, &str)> = vec![
        (
            |b| b.provider = "openai".into(),
            Code::InvalidArgument,
            "CREDENTIAL_WRONG_PROVIDER",
        ),
        (
            |b| b.session_id = "run-8".into(),
            Code::InvalidArgument,
            "CREDENTIAL_WRONG_SESSION",
        ),
        (
            |b| b.credential_name = "OPENAI_API_KEY".into(),
            Code::InvalidArgument,
            "CREDENTIAL_UNBOUND",
        ),
        (|b| b.secret.clear(), Code::InvalidArgument, "CREDENTIAL_MISSING"),
        (
            |b| b.secret = "sk-canary\0-4242".into(),
            Code::InvalidArgument,
            "CREDENTIAL_MALFORMED",
        ),
        (
            |b| b.secret = "Zq7xK2p".into(),
            Code::InvalidArgument,
            "CREDENTIAL_MALFORMED",
        ),
        (
            |b| {
                b.expire_time = Some(::prost_types::Timestamp {
                    seconds: 4_000_000_000,
                    nanos: -7,
                })
            },
            Code::InvalidArgument,
            "INVALID_ARGUMENT",
        ),
        (
            |b| b.expire_time = Some(::prost_types::Timestamp { seconds: 1, nanos: 0 }),
            Code::FailedPrecondition,
            "CREDENTIAL_STALE",
        ),
    ];
    for (n, (edit, code, expected)) in cases.into_iter().enumerate() {
        let mut credential = binding();
        edit(&mut credential);
        let result = client
            .create_execution(proto::CreateExecutionRequest {
                request_id: format!("bad-{n}"),
                workspace: service.workspace.display().to_string(),
                ..with_binding(credential)
            })
            .await;
        let status = result.unwrap_err();
        assert_eq!((status.code(), reason(&status).as_str()), (code, expected));
        assert!(
            !status.message().contains(CANARY),
            "the refusal never carries the secret"
        );
    }
    assert!(service.agent_received().is_empty(), "nothing was launched");
    service.shutdown().await;
}

async fn a_credential_the_agent_says_back_is_redacted_from_every_event_with_a_marker(backend: Backend) {
    let service = TestService::start(backend, "echo_credential.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, with_binding(binding())).await;
    let all = events.until_turn_settles().await;
    let text: Vec<String> = all.iter().map(|e| payload(e).to_string()).collect();
    assert!(
        text.iter().all(|t| !t.contains(CANARY)),
        "the credential never reaches the stream"
    );
    let marked: Vec<&proto::ActivityEvent> = all
        .iter()
        .filter(|e| payload(e).to_string().contains("[redacted:CURSOR_API_KEY]"))
        .collect();
    let types: Vec<&str> = marked.iter().map(|e| e.event_type.as_str()).collect();
    assert!(types.contains(&"item.delta"), "{types:?}");
    assert!(types.iter().any(|t| t.starts_with("tool.execution.")), "{types:?}");
    assert!(
        marked.iter().all(|e| payload(e)["redactions"].as_u64() >= Some(1)),
        "each says how many"
    );
    let stored = service
        .store
        .read_events(&execution.execution_id.as_str().into(), 0, 1000)
        .await
        .unwrap();
    assert!(stored.iter().all(|e| !e.payload.contains(CANARY)), "nor the outbox");
    service.shutdown().await;
}

/// The field audit counts fields nobody reads by name on the unauthenticated `/metrics`;
/// a name holding the secret is counted as `redacted`, never spelled.
async fn a_credential_the_agent_says_back_as_a_field_name_never_becomes_a_metric_label(backend: Backend) {
    let service = TestService::start(backend, "echo_credential.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn_with(&mut client, &service, with_binding(binding())).await;
    events.until_turn_settles().await;
    let metrics = service.metrics();
    let as_a_label: String = CANARY.chars().filter(char::is_ascii_alphanumeric).collect();
    assert!(
        !metrics.contains(CANARY) && !metrics.contains(&as_a_label),
        "the secret is no label: {}",
        metrics
            .lines()
            .filter(|l| l.contains("unconsumed"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        metrics
            .contains(r#"cursor_runner_unconsumed_fields_total{update_kind="agent_message_chunk",field="redacted"} 1"#),
        "the field is still counted"
    );
    service.shutdown().await;
}

async fn a_credential_the_agent_prints_on_stderr_at_start_is_redacted_from_the_refusal_and_every_row(backend: Backend) {
    let service = TestService::start(backend, "credential_on_stderr_at_start.json").await;
    let mut client = service.client().await;
    let request = proto::CreateExecutionRequest {
        request_id: "create-1".into(),
        workspace: service.workspace.display().to_string(),
        ..with_binding(binding())
    };
    let refusal = client.create_execution(request.clone()).await.unwrap_err();
    assert_eq!(reason(&refusal), "AGENT_EXITED");
    assert!(
        !format!("{refusal:?}").contains(CANARY),
        "not in the error: {refusal:?}"
    );
    assert!(
        refusal.message().contains(MARKER),
        "said, not hidden: {}",
        refusal.message()
    );
    // The stored result of the call (its idempotency row) is what a retry reads back.
    let retried = client.create_execution(request).await.unwrap_err();
    assert!(!format!("{retried:?}").contains(CANARY), "not in the retried error");
    let listed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.executions.len(), 1);
    assert!(
        listed.executions[0].failure_message.contains(MARKER),
        "{:?}",
        listed.executions[0]
    );
    assert!(!format!("{listed:?}").contains(CANARY), "not in the execution record");
    let dump = service.database().dump();
    assert!(
        dump.contains(&listed.executions[0].execution_id),
        "the dump holds the rows"
    );
    assert!(!dump.contains(CANARY), "not in any row");
    service.shutdown().await;
}

async fn a_credential_the_agent_prints_on_stderr_mid_turn_is_redacted_from_the_failure_and_every_row(backend: Backend) {
    let service = TestService::start(backend, "credential_on_stderr_mid_turn.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, with_binding(binding())).await;
    let all = events.until_turn_settles().await;
    let failed = all.last().unwrap();
    assert_eq!(failed.event_type, "turn.failed");
    assert!(
        payload(failed)["message"].as_str().unwrap().contains(MARKER),
        "{failed:?}"
    );
    assert!(!format!("{all:?}").contains(CANARY), "not in the stream");
    let lost = execution_in_state(&mut client, &execution.execution_id, proto::ExecutionState::Lost).await;
    assert!(lost.failure_message.contains(MARKER), "{lost:?}");
    assert!(!format!("{lost:?}").contains(CANARY), "not in the execution record");
    let turns = list_turns(&mut client, &execution.execution_id).await;
    assert!(!format!("{turns:?}").contains(CANARY), "not in the turn record");
    let dump = service.database().dump();
    assert!(dump.contains(&execution.execution_id), "the dump holds the rows");
    assert!(!dump.contains(CANARY), "not in any row");
    service.shutdown().await;
}

async fn a_credential_quoted_in_a_question_is_redacted_from_its_row_and_the_answer_still_reaches_the_agent(
    backend: Backend,
) {
    let service = TestService::start(backend, "credential_in_question.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, with_binding(binding())).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    assert!(!created.to_string().contains(CANARY), "not in the event: {created}");
    assert!(created.to_string().contains(MARKER), "said, not hidden: {created}");
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert!(
        !format!("{interaction:?}").contains(CANARY),
        "not in the interaction record"
    );
    let answered = client
        .answer_interaction(one_question_answer(&created, "answer-1", "option-1"))
        .await
        .unwrap()
        .into_inner()
        .interaction
        .unwrap();
    assert_eq!(answered.state, proto::InteractionState::Delivered as i32);
    assert!(
        !format!("{answered:?}").contains(CANARY),
        "not in the answer's reply: {answered:?}"
    );
    let settled = events.until_turn_settles().await;
    assert_eq!(
        settled.last().unwrap().event_type,
        "turn.completed",
        "the agent got its own option id back"
    );
    let read_back = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert!(
        !format!("{read_back:?}").contains(CANARY),
        "not in the delivered interaction: {read_back:?}"
    );
    assert!(
        format!("{read_back:?}").contains(MARKER),
        "its outcome says what was redacted"
    );
    let dump = service.database().dump();
    assert!(dump.contains(&execution.execution_id), "the dump holds the rows");
    assert!(!dump.contains(CANARY), "not in any row");
    service.shutdown().await;
}

/// Not every word of the agent's becomes an event: a turn's `stopReason` is also its row's,
/// and the model catalog is a reply of its own. Both pass the redactor.
async fn a_credential_the_agent_gives_as_its_stop_reason_or_in_its_model_catalog_reaches_no_reply_and_no_row(
    backend: Backend,
) {
    let service = TestService::start(backend, "credential_said_back_outside_events.json").await;
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn_with(&mut client, &service, with_binding(binding())).await;
    let settled = events.until_turn_settles().await;
    assert!(
        settled.iter().all(|e| !payload(e).to_string().contains(CANARY)),
        "not in the stream"
    );
    let turns = client
        .list_turns(proto::ListTurnsRequest {
            execution_id: execution.execution_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .turns;
    let listed = turns
        .iter()
        .find(|t| t.turn_id == turn.turn_id)
        .expect("the turn is listed");
    assert_eq!(listed.stop_reason, "[redacted:CURSOR_API_KEY]", "said, not hidden");
    let catalog = client
        .list_models(proto::ListModelsRequest {
            execution_id: execution.execution_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let leaky = catalog
        .models
        .iter()
        .find(|m| m.name.starts_with("Leaky"))
        .expect("the agent's extra model is listed");
    assert_eq!(leaky.name, "Leaky [redacted:CURSOR_API_KEY]");
    assert!(
        !format!("{catalog:?}").contains(CANARY),
        "nowhere in the catalog: {leaky:?}"
    );
    let dump = service.database().dump();
    assert!(
        dump.contains(execution.execution_id.as_str()),
        "the dump holds the rows"
    );
    assert!(!dump.contains(CANARY), "not in any row");
    service.shutdown().await;
}

/// What the runner derives from the agent's words before storing it — its starting mode,
/// the auth methods of its `initialize` answer, a usage report's currency, a tool call's id
/// (an event's item id), a title cut to its bound in the middle of the secret, an update
/// kind stripped to a tag — is redacted as the words come in, so no part of the secret
/// survives the cutting or the stripping.
async fn a_credential_in_text_the_runner_derives_from_the_agent_s_words_reaches_no_reply_no_event_and_no_row(
    backend: Backend,
) {
    let service = TestService::start(backend, "credential_in_derived_text.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, with_binding(binding())).await;
    let settled = events.until_turn_settles().await;
    let seen = everything_said(&mut client, &service, &execution.execution_id, &settled).await;
    assert!(
        !seen.contains(&CANARY[..16]),
        "no reply, event or row holds the secret or its head"
    );
    assert!(
        settled.iter().any(|e| e.item_id.contains("[redacted:CURSOR_API_KEY]")),
        "an item id says what was redacted"
    );
    service.shutdown().await;
}

/// The session's configuration options are projected into `session.config.updated` (here
/// after a mode change) with each value cut to its bound: a value the agent padded so that
/// the cut falls inside the secret is redacted before it is cut, so not even the secret's
/// head is left.
async fn a_credential_padded_past_a_config_value_s_cut_leaves_no_part_of_itself_in_any_event_or_row(backend: Backend) {
    let service = TestService::start(backend, "credential_padded_in_config.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, with_binding(binding())).await;
    events.until_turn_settles().await;
    client
        .set_mode(proto::SetModeRequest {
            request_id: "mode-1".into(),
            execution_id: execution.execution_id.clone(),
            mode: "ask".into(),
        })
        .await
        .unwrap();
    let all = Subscriber::open(&mut client, &execution.execution_id, 0)
        .await
        .unwrap()
        .until_caught_up()
        .await;
    let seen = everything_said(&mut client, &service, &execution.execution_id, &all).await;
    assert!(
        all.iter().any(|e| e.event_type == "session.config.updated"),
        "the options were projected: {:?}",
        all.iter().map(|e| &e.event_type).collect::<Vec<_>>()
    );
    assert!(
        !seen.contains(&CANARY[..16]),
        "no reply, event or row holds the secret or its head"
    );
    service.shutdown().await;
}

/// A credential split across two text chunks that land in separate commits: the text that
/// could begin the secret is held back until the next chunk shows whether it does, so the
/// secret is redacted where it is joined and neither half reaches an event; text held back
/// when the message ends is shown before the turn settles.
async fn a_credential_said_across_two_commits_is_redacted_where_it_is_joined_and_no_text_is_lost(backend: Backend) {
    let service = TestService::start(backend, "credential_split_across_chunks.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, with_binding(binding())).await;
    let all = events.until_turn_settles().await;
    let said: String = all
        .iter()
        .filter(|e| e.event_type == "item.delta")
        .map(|e| payload(e)["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(said, format!("The key is {MARKER}, keep it. Bye sk-can"));
    let seen = everything_said(&mut client, &service, &execution.execution_id, &all).await;
    assert!(
        !seen.contains("sk-canary-42") && !seen.contains("42-do-not-leak"),
        "neither half of the secret reaches a reply, an event or a row"
    );
    service.shutdown().await;
}

/// A chunk one character over the text bound, ending on all but the last character of the
/// credential (which the next chunk says): the cut keeps no part of the secret either.
async fn a_credential_a_chunk_s_cut_falls_inside_leaves_no_part_of_itself_in_any_event_or_row(backend: Backend) {
    let bound = cursor_runner_activity::MAX_ITEM_TEXT_CHARS;
    let head = &CANARY[..CANARY.len() - 1];
    let first = format!("{}{head}", "x".repeat(bound + 1 - head.len()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut_inside_the_credential.json");
    let chunk = |text: &str| {
        serde_json::json!({"update": {"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text}}})
    };
    let steps = [chunk(&first), serde_json::json!({"sleep_ms": 300}), chunk("k end")];
    std::fs::write(
        &path,
        serde_json::json!({"session_id": "sess-cut", "turns": [steps]}).to_string(),
    )
    .unwrap();
    let service = TestService::start_with(backend, path.to_str().unwrap(), Options::default()).await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, with_binding(binding())).await;
    let all = events.until_turn_settles().await;
    let seen = everything_said(&mut client, &service, &execution.execution_id, &all).await;
    assert!(
        all.iter().any(|e| payload(e)["truncated"] == true),
        "the first chunk was cut"
    );
    assert!(
        !seen.contains(&CANARY[..8]),
        "no reply, event or row holds the secret's head"
    );
    service.shutdown().await;
}

/// Every reply, event and row about `execution` a client or an operator can read.
async fn everything_said(
    client: &mut Client,
    service: &TestService,
    execution: &str,
    settled: &[proto::ActivityEvent],
) -> String {
    let mut seen = format!("{settled:?}");
    for e in settled {
        seen.push_str(&payload(e).to_string());
    }
    seen.push_str(&format!(
        "{:?}{:?}{:?}{:?}",
        client
            .get_execution(proto::GetExecutionRequest {
                execution_id: execution.to_owned()
            })
            .await,
        client.list_executions(proto::ListExecutionsRequest::default()).await,
        client
            .list_turns(proto::ListTurnsRequest {
                execution_id: execution.to_owned(),
                ..Default::default()
            })
            .await,
        client.list_sessions(proto::ListSessionsRequest::default()).await,
    ));
    seen.push_str(&service.database().dump());
    seen
}

/// A session id is kept as the agent spelled it (a load names it), so one that holds the
/// secret cannot be redacted: the session is refused, typed, and stored nowhere.
async fn an_agent_whose_session_id_is_the_credential_is_refused_and_the_id_is_stored_nowhere(backend: Backend) {
    let service = TestService::start(backend, "credential_as_session_id.json").await;
    let mut client = service.client().await;
    let refused = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-1".into(),
            workspace: service.workspace.display().to_string(),
            ..with_binding(binding())
        })
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code(), reason(&refused).as_str()),
        (Code::Unavailable, "PROTOCOL_ERROR")
    );
    let listed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.executions.len(), 1, "the refused launch is recorded");
    let seen = format!("{refused:?}{listed:?}{}", service.database().dump());
    assert!(!seen.contains(CANARY), "the id is stored nowhere");
    service.shutdown().await;
}
