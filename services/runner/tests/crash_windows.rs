//! The two crash windows of an answer, hit deliberately: the service is SIGKILLed
//! (a) after the answer is committed but before it is written to the agent, and
//! (b) after it is written but before `delivered` is committed. A restart on the same
//! PostgreSQL database must report the interaction `expired` with `delivery: unknown`
//! in both windows (the store cannot tell them apart and must not pretend to), say why,
//! and never hand the old answer to a new agent process. The same windows, held open
//! for a while instead, show that a retry arriving inside them waits for the first call.

use cursor_runner_e2e::*;
use serde_json::Value;

fn answer_request(created: &Value) -> proto::AnswerInteractionRequest {
    one_question_answer(created, "answer-1", "option-1")
}

fn service(database_url: &str, dirs: &ServiceDirs, failpoint: Option<&str>) -> ServiceProcess {
    let env = failpoint
        .map(|name| vec![("CURSOR_RUNNER_FAILPOINT".to_owned(), name.to_owned())])
        .unwrap_or_default();
    service_with_env(database_url, dirs, env)
}

/// A service that holds for `pause_ms` when it reaches `failpoint`, then goes on.
fn held_at(database_url: &str, dirs: &ServiceDirs, failpoint: &str, pause_ms: u64) -> ServiceProcess {
    let env = vec![
        ("CURSOR_RUNNER_FAILPOINT".to_owned(), failpoint.to_owned()),
        ("CURSOR_RUNNER_FAILPOINT_PAUSE_MS".to_owned(), pause_ms.to_string()),
    ];
    service_with_env(database_url, dirs, env)
}

fn service_with_env(database_url: &str, dirs: &ServiceDirs, env: Vec<(String, String)>) -> ServiceProcess {
    service_playing(database_url, dirs, "demo.json", env)
}

fn service_playing(
    database_url: &str,
    dirs: &ServiceDirs,
    scenario: &str,
    env: Vec<(String, String)>,
) -> ServiceProcess {
    ServiceProcess::serve_in(
        std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url,
        dirs,
        scenario,
        env,
    )
}

/// Lines the agents received after the `n`-th `initialize` (0-based), i.e. by the n-th process.
fn received_by_process(record: &std::path::Path, n: usize) -> Vec<Value> {
    let lines: Vec<Value> = std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, m)| m["method"] == "initialize")
        .map(|(i, _)| i)
        .collect();
    let from = starts[n];
    let to = starts.get(n + 1).copied().unwrap_or(lines.len());
    lines[from..to].to_vec()
}

async fn crash_in_window(failpoint: &str, agent_got_the_answer: bool) {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let (workspace, record) = (&dirs.workspace, &dirs.record);

    let first = service(&database.url, &dirs, Some(failpoint));
    let mut client = first.client().await;
    let (execution, _turn, mut events) = begin_turn_at(&mut client, workspace, Default::default()).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    let mut answering = client.clone();
    let request = answer_request(&created);
    // The answer never returns: the service stops inside it.
    let pending_answer = tokio::spawn(async move { answering.answer_interaction(request).await });
    first.wait_for_stderr(&format!("failpoint reached: {failpoint}"));
    let answer_lines = |n| {
        received_by_process(record, n)
            .into_iter()
            .filter(|m| m.get("method").is_none() && m["id"] == 0)
            .count()
    };
    if agent_got_the_answer {
        // The answer is flushed into the pipe, but the (live) agent may not have read it
        // yet; killing the service now would kill the agent with the line still unread.
        eventually("the agent to read the answer", || answer_lines(0) == 1).await;
    }
    first.kill();
    let _ = pending_answer.await;
    assert_eq!(
        answer_lines(0),
        usize::from(agent_got_the_answer),
        "the window was the intended one"
    );

    let second = service(&database.url, &dirs, None);
    let mut client = second.client().await;
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(interaction.state, proto::InteractionState::Expired as i32);
    assert_eq!(
        interaction.delivery, "unknown",
        "never claimed delivered, never claimed undelivered"
    );
    assert_eq!(interaction.reason, "service_restarted");
    assert!(!interaction.replay_allowed);
    // The control plane can read why from the stream too.
    let mut replay = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let expired = payload(replay.events_until("runtime_request.expired").await.last().unwrap());
    assert_eq!(expired["delivery"], "unknown");
    assert_eq!(expired["reason"], "service_restarted");
    let settled = replay.until_turn_settles().await;
    assert_eq!(payload(settled.last().unwrap())["failureReason"], "provider_lost");
    // A retry of the same answer is refused with what happened to it (an answer returns OK
    // only once it is delivered); a new answer is refused too.
    let retry = client
        .answer_interaction(answer_request(&created))
        .await
        .expect_err("an answer that was never delivered");
    assert_eq!(reason(&retry), "INTERACTION_NOT_PENDING", "{retry:?}");
    assert_eq!(error_metadata(&retry, "state").as_deref(), Some("expired"));
    assert_eq!(error_metadata(&retry, "delivery").as_deref(), Some("unknown"));
    let mut another = answer_request(&created);
    another.request_id = "answer-2".into();
    assert_refused(
        client.answer_interaction(another).await,
        tonic::Code::FailedPrecondition,
        "INTERACTION_NOT_PENDING",
    );

    // A new agent process for the tenant never receives the old answer.
    client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-2".into(),
            workspace: workspace.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(answer_lines(1), 0);
    second.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_answer_is_recorded_but_before_the_pipe_write_expires_it_with_delivery_unknown() {
    crash_in_window("answer_recorded_before_pipe_write", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_pipe_write_but_before_delivered_is_recorded_expires_it_with_delivery_unknown() {
    crash_in_window("answer_written_before_delivered", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_pending_when_the_service_dies_expires_on_restart_and_is_never_replayed() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let (workspace, record) = (&dirs.workspace, &dirs.record);

    let first = service(&database.url, &dirs, None);
    let mut client = first.client().await;
    let (execution, _turn, mut events) = begin_turn_at(&mut client, workspace, Default::default()).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    first.kill();

    let second = service(&database.url, &dirs, None);
    let mut client = second.client().await;
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(interaction.state, proto::InteractionState::Expired as i32);
    assert_eq!(
        (interaction.reason.as_str(), interaction.delivery.as_str()),
        ("service_restarted", "not_sent")
    );
    assert!(!interaction.replay_allowed);
    let execution = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(execution.state, proto::ExecutionState::Lost as i32);
    assert_eq!(execution.failure_reason, "service_restarted");
    let answers = received_by_process(record, 0)
        .into_iter()
        .filter(|m| m.get("method").is_none())
        .count();
    assert_eq!(answers, 0, "the question was never answered, by anyone");
    second.stop();
    database.drop_database().await;
}

/// The first answer is held for a while between the pipe write and `delivered`; a retry
/// under the same request id sent inside that window must wait for it and return what it
/// returns (`delivered`), never the half-done `answered`.
async fn a_retry_inside_the_window_waits_for_the_first_answer(backend: Backend, window: &str) {
    let database = TestDatabase::create(backend).await;
    let dirs = ServiceDirs::new();
    let held = held_at(&database.url, &dirs, window, 1500);
    let mut client = held.client().await;
    let (_execution, _turn, mut events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    let (mut first_client, request) = (client.clone(), answer_request(&created));
    let first = tokio::spawn(async move { first_client.answer_interaction(request).await });
    held.wait_for_stderr(&format!("failpoint reached: {window}"));
    let retry = client
        .answer_interaction(answer_request(&created))
        .await
        .expect("the retry gets the first call's result")
        .into_inner()
        .interaction
        .unwrap();
    let first = first
        .await
        .unwrap()
        .expect("the first call succeeds")
        .into_inner()
        .interaction
        .unwrap();
    assert_eq!(first.state, proto::InteractionState::Delivered as i32);
    assert_eq!(
        retry.state,
        proto::InteractionState::Delivered as i32,
        "the retry returned before the first call delivered"
    );
    assert_eq!(retry, first, "the retry returns exactly what the first call returns");
    let answers = received_by_process(&dirs.record, 0)
        .into_iter()
        .filter(|m| m.get("method").is_none() && m["id"] == 0)
        .count();
    assert_eq!(answers, 1, "the agent got one answer");
    held.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_answer_inside_the_pipe_write_window_waits_for_delivery_on_postgres() {
    a_retry_inside_the_window_waits_for_the_first_answer(Backend::Postgres, "answer_written_before_delivered").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_answer_inside_the_pipe_write_window_waits_for_delivery_on_sqlite() {
    a_retry_inside_the_window_waits_for_the_first_answer(Backend::Sqlite, "answer_written_before_delivered").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_answer_inside_the_recorded_window_waits_for_delivery() {
    a_retry_inside_the_window_waits_for_the_first_answer(Backend::Postgres, "answer_recorded_before_pipe_write").await;
}

/// The service dies inside a `CreateExecution` (its agent is still starting). After the
/// restart the request id is neither poisoned ("in flight elsewhere", for ever) nor run
/// twice: every retry gets the same final, typed outcome, and a new request id works.
async fn a_crash_inside_a_call_resolves_its_request_id_at_restart(backend: Backend) {
    let database = TestDatabase::create(backend).await;
    let dirs = ServiceDirs::new();
    let first = service_playing(&database.url, &dirs, "initialize_never.json", Vec::new());
    let client = first.client().await;
    let request = proto::CreateExecutionRequest {
        request_id: "create-1".into(),
        workspace: dirs.workspace.display().to_string(),
        ..Default::default()
    };
    let mut creating = client.clone();
    let call = request.clone();
    let pending = tokio::spawn(async move { creating.create_execution(call).await });
    // The call is inside the launch once the agent was asked to initialize.
    eventually("the agent to be asked to initialize", || {
        std::fs::read_to_string(&dirs.record).is_ok_and(|r| r.contains("\"initialize\""))
    })
    .await;
    first.kill();
    let _ = pending.await;

    let second = service_playing(&database.url, &dirs, "demo.json", Vec::new());
    let mut client = second.client().await;
    for _ in 0..2 {
        assert_refused(
            client.create_execution(request.clone()).await,
            tonic::Code::Aborted,
            "REQUEST_INTERRUPTED",
        );
    }
    let listed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .executions;
    assert_eq!(listed.len(), 1, "the interrupted call's execution is kept, settled");
    assert_ne!(
        listed[0].state,
        proto::ExecutionState::Starting as i32,
        "{:?}",
        listed[0]
    );
    let fresh = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-2".into(),
            ..request
        })
        .await
        .expect("a new request id runs")
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(fresh.state, proto::ExecutionState::Ready as i32);
    second.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_inside_a_call_resolves_its_request_id_at_restart_on_postgres() {
    a_crash_inside_a_call_resolves_its_request_id_at_restart(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_inside_a_call_resolves_its_request_id_at_restart_on_sqlite() {
    a_crash_inside_a_call_resolves_its_request_id_at_restart(Backend::Sqlite).await;
}

/// Persist before expose, able to fail: while the service is held just before it commits an
/// agent's question, no subscriber can see the question and no listing shows it; once the
/// row is committed, the event follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_invisible_to_subscribers_until_its_row_is_committed() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let held = held_at(&database.url, &dirs, "interaction_before_persist", 4000);
    let mut client = held.client().await;
    let (execution, _turn, mut events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    held.wait_for_stderr("failpoint reached: interaction_before_persist");
    let mut fresh = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    loop {
        match fresh.next_frame().await {
            proto::stream_events_response::Frame::Event(event) => {
                assert_ne!(
                    event.event_type, "runtime_request.created",
                    "exposed before it was persisted"
                );
            }
            proto::stream_events_response::Frame::CaughtUp(_) => break,
            _ => {}
        }
    }
    let listed = client
        .list_interactions(proto::ListInteractionsRequest {
            execution_id: execution.execution_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .interactions;
    assert!(listed.is_empty(), "no row yet: {listed:?}");
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(interaction.state, proto::InteractionState::Pending as i32);
    held.stop();
    database.drop_database().await;
}

/// The agent dies mid-turn and the service is SIGKILLed while it settles what the agent
/// left. A restart on the same database finds everything settled, each part once: the
/// turn failed (never `running` for ever under an execution that is no longer live), the
/// execution `lost`, one terminal event for the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_while_a_lost_agent_is_settled_leaves_no_turn_running() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let env = vec![(
        "CURSOR_RUNNER_FAILPOINT".to_owned(),
        "agent_lost_while_settling".to_owned(),
    )];
    let first = service_playing(&database.url, &dirs, "exit_mid_turn.json", env);
    let mut client = first.client().await;
    let (execution, turn, _events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    first.wait_for_stderr("failpoint reached: agent_lost_while_settling");
    first.kill();

    let second = service(&database.url, &dirs, None);
    let mut client = second.client().await;
    let turns = client
        .list_turns(proto::ListTurnsRequest {
            execution_id: execution.execution_id.clone(),
            ..Default::default()
        })
        .await
        .expect("ListTurns")
        .into_inner()
        .turns;
    let settled = turns.iter().find(|t| t.turn_id == turn.turn_id).expect("the turn");
    assert_eq!(
        settled.state,
        proto::TurnState::Failed as i32,
        "the turn was left {settled:?}"
    );
    let record = execution_in_state(&mut client, &execution.execution_id, proto::ExecutionState::Lost).await;
    assert_eq!(record.active_turn_id, "", "no turn is active on a lost execution");
    let mut replay = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let stored = replay.until_caught_up().await;
    let terminal = stored.iter().filter(|e| is_settlement(&e.event_type)).count();
    assert_eq!(terminal, 1, "the turn settled exactly once in the stream");
    second.stop();
    database.drop_database().await;
}

/// The agent dies after the answer is recorded and before it is written to the pipe. An
/// answer returns OK only once it is on the agent's pipe (`delivered`), so the call is
/// refused `INTERACTION_NOT_PENDING` naming the state (`expired`) and the delivery
/// (`unknown`) — and a retry under the same request id gets that same refusal, never an OK
/// that a client would read as "delivered".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_whose_agent_dies_before_the_pipe_write_is_refused_as_its_retry_is() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let held = held_at(&database.url, &dirs, "answer_recorded_before_pipe_write", 1500);
    let mut client = held.client().await;
    let (execution, _turn, mut events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    let (mut first_client, request) = (client.clone(), answer_request(&created));
    let first = tokio::spawn(async move { first_client.answer_interaction(request).await });
    held.wait_for_stderr("failpoint reached: answer_recorded_before_pipe_write");
    let pid = execution.pid.expect("the agent's pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let first = first.await.unwrap().expect_err("an answer that never reached the pipe");
    let retry = client
        .answer_interaction(answer_request(&created))
        .await
        .expect_err("the retry of an answer that never reached the pipe");
    for status in [&first, &retry] {
        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
        assert_eq!(reason(status), "INTERACTION_NOT_PENDING", "{status:?}");
        assert_eq!(
            error_metadata(status, "state").as_deref(),
            Some("expired"),
            "{status:?}"
        );
        assert_eq!(
            error_metadata(status, "delivery").as_deref(),
            Some("unknown"),
            "nobody can tell whether the agent read it: {status:?}"
        );
    }
    assert_eq!(first.message(), retry.message(), "one request id, one outcome");
    held.stop();
    database.drop_database().await;
}
