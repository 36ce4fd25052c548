//! Continuity: a recorded session loaded into a new execution (identity fenced), and
//! recovery after the agent died — a new process under a new generation loads the
//! session; what was pending stays expired; replayed history is not streamed again.

use cursor_runner_e2e::*;
use serde_json::Value;
use tonic::Code;

on_both_backends!(
    recovery_after_the_agent_dies_loads_the_session_under_a_new_generation_and_replays_nothing,
    only_a_lost_execution_with_a_session_can_be_recovered,
    a_recorded_session_loads_into_a_new_execution_with_its_identity,
    loading_refuses_another_identity_an_unknown_session_and_one_still_open,
    a_session_whose_history_the_agent_lacks_is_session_not_found,
    list_sessions_shows_only_the_tenants_own_sessions,
    a_recovery_applies_the_recorded_model_again_and_checks_its_echo,
    config_planted_in_a_kept_home_refuses_loading_its_session,
    hooks_planted_in_a_kept_home_refuse_recovering_its_execution,
    recovering_an_execution_whose_session_another_live_execution_loaded_is_refused_in_use,
    of_concurrent_loads_of_one_session_exactly_one_opens_it,
    a_session_recovered_in_an_older_execution_is_in_use_though_a_newer_one_that_loaded_it_closed,
);

/// The execution that has a session open need not be its newest: A lost, B loaded its
/// session and closed, A was recovered. Loading the session again is `SESSION_IN_USE`.
async fn a_session_recovered_in_an_older_execution_is_in_use_though_a_newer_one_that_loaded_it_closed(
    backend: Backend,
) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let (first, second) = lost_then_loaded(&mut client, &service).await;
    close(&mut client, &second.execution_id, "close-2").await;
    recover(&mut client, &first.execution_id, "recover-1")
        .await
        .expect("the session is open nowhere: the lost execution recovers it");
    assert_refused(
        client
            .create_execution(load_request(&service, "create-3", &first.session_id))
            .await,
        Code::FailedPrecondition,
        "SESSION_IN_USE",
    );
    service.shutdown().await;
}

/// A process serves one session at a time: once another execution loaded a lost
/// execution's session, recovering the lost one is `SESSION_IN_USE` and launches nothing.
async fn recovering_an_execution_whose_session_another_live_execution_loaded_is_refused_in_use(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let (first, loaded) = lost_then_loaded(&mut client, &service).await;
    let launched = launches(&service);
    assert_refused(
        recover(&mut client, &first.execution_id, "recover-1").await,
        Code::FailedPrecondition,
        "SESSION_IN_USE",
    );
    assert_eq!(launches(&service), launched, "nothing was launched");
    let still = get_execution(&mut client, &first.execution_id).await;
    assert_eq!(still.state, proto::ExecutionState::Lost as i32);
    assert_eq!(
        get_execution(&mut client, &loaded.execution_id).await.state,
        proto::ExecutionState::Ready as i32
    );
    service.shutdown().await;
}

/// Loads of one recorded session racing each other: exactly one opens it, every other
/// one is `SESSION_IN_USE`.
async fn of_concurrent_loads_of_one_session_exactly_one_opens_it(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let recorded = create_execution(&mut client, &service, "create-1").await;
    close(&mut client, &recorded.execution_id, "close-1").await;
    let mut loads = Vec::new();
    for n in 0..4 {
        let mut client = service.client().await;
        let request = load_request(&service, &format!("load-{n}"), &recorded.session_id);
        loads.push(tokio::spawn(async move { client.create_execution(request).await }));
    }
    let mut opened = 0;
    for load in loads {
        match load.await.unwrap() {
            Ok(_) => opened += 1,
            Err(refused) => assert_eq!(reason(&refused), "SESSION_IN_USE", "{refused:?}"),
        }
    }
    assert_eq!(opened, 1, "one live execution per session");
    service.shutdown().await;
}

/// The private home an execution's agent ran in (kept: it holds the session).
/// An execution whose agent was killed (so it is `lost`), and a new execution that loaded
/// its session.
async fn lost_then_loaded(client: &mut Client, service: &TestService) -> (proto::Execution, proto::Execution) {
    let first = create_execution(client, service, "create-1").await;
    kill_agent_of(&first);
    execution_in_state(client, &first.execution_id, proto::ExecutionState::Lost).await;
    let loaded = client
        .create_execution(load_request(service, "create-2", &first.session_id))
        .await
        .expect("the lost execution's session loads into a new one")
        .into_inner()
        .execution
        .unwrap();
    (first, loaded)
}

fn kill_agent_of(execution: &proto::Execution) {
    let pid = nix::unistd::Pid::from_raw(execution.pid.unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
}

fn home_of(service: &TestService, execution: &proto::Execution) -> std::path::PathBuf {
    service
        .state_dir()
        .join("homes")
        .join(&execution.lease.as_ref().expect("a lease").slot_id)
}

fn launches(service: &TestService) -> usize {
    methods_received(service, "initialize").len()
}

async fn config_planted_in_a_kept_home_refuses_loading_its_session(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let recorded = create_execution(&mut client, &service, "create-1").await;
    close(&mut client, &recorded.execution_id, "close-1").await;
    // What the previous agent could have left in its own home.
    let planted = home_of(&service, &recorded).join(".cursor/mcp.json");
    std::fs::create_dir_all(planted.parent().unwrap()).unwrap();
    std::fs::write(&planted, r#"{"mcpServers": {"x": {"command": "/bin/sh"}}}"#).unwrap();
    let before = launches(&service);
    let refusal = client
        .create_execution(load_request(&service, "create-2", &recorded.session_id))
        .await
        .unwrap_err();
    assert_eq!(
        (refusal.code(), reason(&refusal).as_str()),
        (Code::FailedPrecondition, "WORKSPACE_POLICY")
    );
    assert!(refusal.message().contains(".cursor/mcp.json"), "{}", refusal.message());
    assert_eq!(launches(&service), before, "no agent was started in that home");
    service.shutdown().await;
}

async fn hooks_planted_in_a_kept_home_refuse_recovering_its_execution(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("runtime_request.created").await;
    let planted = home_of(&service, &execution).join(".claude/settings.json");
    std::fs::create_dir_all(planted.parent().unwrap()).unwrap();
    std::fs::write(&planted, r#"{"hooks": {"PreToolUse": []}}"#).unwrap();
    kill_agent_of(&execution);
    events.until_turn_settles().await;
    execution_in_state(&mut client, &execution.execution_id, proto::ExecutionState::Lost).await;
    let before = launches(&service);
    let refusal = recover(&mut client, &execution.execution_id, "recover-1")
        .await
        .unwrap_err();
    assert_eq!(reason(&refusal), "WORKSPACE_POLICY");
    assert!(
        refusal.message().contains(".claude/settings.json"),
        "{}",
        refusal.message()
    );
    assert_eq!(launches(&service), before, "no agent was started in that home");
    service.shutdown().await;
}

const REPLAYED_TEXT: &str = "Replayed history: never streamed again.";

fn methods_received(service: &TestService, method: &str) -> Vec<Value> {
    service
        .agent_received()
        .into_iter()
        .filter(|m| m["method"] == method)
        .collect()
}

async fn recover(client: &mut Client, execution_id: &str, request_id: &str) -> Result<proto::Execution, tonic::Status> {
    client
        .recover_execution(proto::RecoverExecutionRequest {
            request_id: request_id.into(),
            execution_id: execution_id.into(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().execution.unwrap())
}

fn load_request(service: &TestService, request_id: &str, session_id: &str) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        request_id: request_id.into(),
        workspace: service.workspace.display().to_string(),
        load_session_id: session_id.into(),
        ..Default::default()
    }
}

async fn recovery_after_the_agent_dies_loads_the_session_under_a_new_generation_and_replays_nothing(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    kill_agent_of(&execution);
    events.until_turn_settles().await;
    let lost = execution_in_state(&mut client, &execution.execution_id, proto::ExecutionState::Lost).await;
    assert_eq!(lost.generation, 1);

    let recovered = recover(&mut client, &execution.execution_id, "recover-1")
        .await
        .unwrap();
    assert_eq!(recovered.state, proto::ExecutionState::Ready as i32);
    assert_eq!(recovered.generation, 2, "a new lease, a new generation");
    assert_eq!(recovered.session_id, execution.session_id);
    assert_ne!(recovered.pid, execution.pid);
    let loads = methods_received(&service, "session/load");
    assert_eq!(loads.len(), 1);
    assert_eq!(loads[0]["params"]["sessionId"], execution.session_id.as_str());
    let loaded = payload(events.events_until("session.loaded").await.last().unwrap());
    assert_eq!(loaded["recovery"], true);
    assert_eq!(loaded["generation"], 2);
    assert_eq!(loaded["replayedUpdatesSuppressed"], 2);

    // What was pending when the agent died stays expired; its answer is never sent.
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(interaction.state, proto::InteractionState::Expired as i32);
    assert_refused(
        client
            .answer_interaction(one_question_answer(&created, "late", "option-1"))
            .await,
        Code::FailedPrecondition,
        "INTERACTION_NOT_PENDING",
    );
    // The recovered session takes a new turn; its question is a new interaction.
    start_turn(&mut client, &execution.execution_id, "turn-2")
        .await
        .unwrap();
    let asked = payload(events.events_until("runtime_request.created").await.last().unwrap());
    assert_ne!(asked["interactionId"], created["interactionId"]);
    client
        .answer_interaction(one_question_answer(&asked, "answer-2", "option-1"))
        .await
        .unwrap();
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let mut replay = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let all = replay.until_turn_settles().await;
    assert!(
        all.iter().all(|e| !payload(e).to_string().contains(REPLAYED_TEXT)),
        "replayed history is never streamed again"
    );
    let answers: Vec<Value> = service
        .agent_received()
        .into_iter()
        .filter(|m| m.get("method").is_none() && m["id"] == 0)
        .collect();
    assert_eq!(answers.len(), 1, "only the new question was answered: {answers:?}");
    service.shutdown().await;
}

async fn only_a_lost_execution_with_a_session_can_be_recovered(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    assert_refused(
        recover(&mut client, &execution.execution_id, "recover-1").await,
        Code::FailedPrecondition,
        "EXECUTION_NOT_RECOVERABLE",
    );
    assert_refused(
        recover(&mut client, "no-such-execution", "recover-2").await,
        Code::NotFound,
        "EXECUTION_NOT_FOUND",
    );
    service.shutdown().await;
}

async fn close(client: &mut Client, execution_id: &str, request_id: &str) {
    client
        .close_execution(proto::CloseExecutionRequest {
            request_id: request_id.into(),
            execution_id: execution_id.into(),
        })
        .await
        .unwrap();
}

async fn a_recorded_session_loads_into_a_new_execution_with_its_identity(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let mut first = proto::CreateExecutionRequest {
        request_id: "create-1".into(),
        workspace: service.workspace.display().to_string(),
        model: "gpt-x".into(),
        model_parameters: [("effort".to_owned(), "high".to_owned())].into(),
        ..Default::default()
    };
    let recorded = client
        .create_execution(first.clone())
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    close(&mut client, &recorded.execution_id, "close-1").await;
    let loaded = client
        .create_execution(load_request(&service, "create-2", &recorded.session_id))
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    assert_ne!(loaded.execution_id, recorded.execution_id);
    assert_eq!(loaded.session_id, recorded.session_id);
    let config = loaded.session_config.as_ref().unwrap();
    assert_eq!(config.model, "gpt-x", "the recorded model is adopted");
    assert_eq!(config.model_parameters["effort"], "high");
    assert_eq!(
        loaded.lease.as_ref().map(|l| l.warm),
        Some(false),
        "a load starts a process in the session's own home"
    );
    let mut events = Subscriber::open(&mut client, &loaded.execution_id, 0).await.unwrap();
    let announced = payload(events.events_until("session.loaded").await.last().unwrap());
    assert_eq!(announced["recovery"], false);
    assert_eq!(announced["replayedUpdatesSuppressed"], 2);
    // The same identity asked for explicitly is fine too.
    close(&mut client, &loaded.execution_id, "close-2").await;
    first.request_id = "create-3".into();
    first.load_session_id = recorded.session_id.clone();
    client.create_execution(first).await.unwrap();
    service.shutdown().await;
}

async fn loading_refuses_another_identity_an_unknown_session_and_one_still_open(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let recorded = create_execution(&mut client, &service, "create-1").await;
    assert_refused(
        client
            .create_execution(load_request(&service, "create-2", &recorded.session_id))
            .await,
        Code::FailedPrecondition,
        "SESSION_IN_USE",
    );
    close(&mut client, &recorded.execution_id, "close-1").await;
    let other_workspace = service.workspace.join("elsewhere");
    std::fs::create_dir_all(&other_workspace).unwrap();
    let mut moved = load_request(&service, "create-3", &recorded.session_id);
    moved.workspace = other_workspace.display().to_string();
    let refused = client.create_execution(moved).await.unwrap_err();
    assert_eq!(reason(&refused), "SESSION_IDENTITY_MISMATCH");
    let details = tonic_types::StatusExt::get_error_details(&refused);
    assert_eq!(details.error_info().unwrap().metadata["field"], "workspace");
    let mut remodelled = load_request(&service, "create-4", &recorded.session_id);
    remodelled.model = "claude-y".into();
    let refused = client.create_execution(remodelled).await.unwrap_err();
    assert_eq!(reason(&refused), "SESSION_IDENTITY_MISMATCH");
    assert_refused(
        client
            .create_execution(load_request(&service, "create-5", "no-such-session"))
            .await,
        Code::NotFound,
        "SESSION_NOT_FOUND",
    );
    let mut tenant_b = service.client_for(Some("tenant-b")).await;
    assert_refused(
        tenant_b
            .create_execution(load_request(&service, "create-6", &recorded.session_id))
            .await,
        Code::NotFound,
        "SESSION_NOT_FOUND",
    );
    assert!(
        methods_received(&service, "session/load").is_empty(),
        "nothing was loaded"
    );
    service.shutdown().await;
}

async fn a_session_whose_history_the_agent_lacks_is_session_not_found(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let recorded = create_execution(&mut client, &service, "create-1").await;
    // Cursor's own record of the session is gone before its close checkpoints the home.
    std::fs::remove_file(
        home_of(&service, &recorded)
            .join(".cursor-data/sessions")
            .join(format!("{}.json", recorded.session_id)),
    )
    .unwrap();
    close(&mut client, &recorded.execution_id, "close-1").await;
    let refused = client
        .create_execution(load_request(&service, "create-2", &recorded.session_id))
        .await;
    assert_refused(refused, Code::FailedPrecondition, "SESSION_NOT_FOUND");
    assert_eq!(
        methods_received(&service, "session/load").len(),
        1,
        "the agent was asked"
    );
    service.shutdown().await;
}

async fn list_sessions_shows_only_the_tenants_own_sessions(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let recorded = create_execution(&mut client, &service, "create-1").await;
    let listed = client
        .list_sessions(proto::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].session_id, recorded.session_id);
    assert_eq!(listed[0].execution_id, recorded.execution_id);
    assert_eq!(listed[0].execution_state, proto::ExecutionState::Ready as i32);
    let mut tenant_b = service.client_for(Some("tenant-b")).await;
    let theirs = tenant_b
        .list_sessions(proto::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert!(theirs.is_empty(), "another tenant sees none of them");
    service.shutdown().await;
}

async fn a_recovery_applies_the_recorded_model_again_and_checks_its_echo(backend: Backend) {
    let service = TestService::start(backend, "recoverable.json").await;
    let mut client = service.client().await;
    let execution = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-1".into(),
            workspace: service.workspace.display().to_string(),
            model: "gpt-x".into(),
            model_parameters: [("effort".to_owned(), "high".to_owned())].into(),
            mode: "plan".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let applied_before = methods_received(&service, "session/set_config_option").len();
    kill_agent_of(&execution);
    execution_in_state(&mut client, &execution.execution_id, proto::ExecutionState::Lost).await;
    let recovered = recover(&mut client, &execution.execution_id, "recover-1")
        .await
        .unwrap();
    let config = recovered.session_config.unwrap();
    assert_eq!(
        (
            config.model.as_str(),
            config.mode.as_str(),
            config.model_parameters["effort"].as_str()
        ),
        ("gpt-x", "plan", "high")
    );
    assert!(config.verified, "echo-checked again on the new process");
    let applied: Vec<Value> = methods_received(&service, "session/set_config_option")
        .into_iter()
        .skip(applied_before)
        .collect();
    let ids: Vec<&str> = applied
        .iter()
        .map(|m| m["params"]["configId"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"model") && ids.contains(&"effort") && ids.contains(&"mode"),
        "the recorded configuration was applied to the new process: {ids:?}"
    );
    service.shutdown().await;
}
