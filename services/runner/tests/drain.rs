//! SIGTERM drains the real binary: running turns may finish until the drain deadline,
//! are then cancelled with their interactions settled by the usual rules, every agent
//! is stopped, and the service exits 0. A second SIGTERM forces it.

use cursor_runner_e2e::*;
use nix::sys::signal::Signal;

fn service(database_url: &str, dirs: &ServiceDirs, scenario: &str, drain_deadline_secs: u32) -> ServiceProcess {
    service_with(database_url, dirs, scenario, drain_deadline_secs, Vec::new())
}

/// [`service`] with more of the service's environment.
fn service_with(
    database_url: &str,
    dirs: &ServiceDirs,
    scenario: &str,
    drain_deadline_secs: u32,
    env: Vec<(String, String)>,
) -> ServiceProcess {
    ServiceProcess::start(ServiceSettings {
        binary: std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url,
        state_dir: dirs.root.path(),
        scenario,
        record: &dirs.record,
        env,
        args: vec!["--drain-deadline-secs".into(), drain_deadline_secs.to_string()],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cancels_the_running_turn_at_the_drain_deadline_settles_its_question_and_exits_zero_leaving_the_execution_recoverable()
 {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let mut first = service(&database.url, &dirs, "question_cancel.json", 1);
    let mut client = first.client().await;
    let (execution, turn, mut events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    first.signal(Signal::SIGTERM);
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.interrupted");
    drop(events);
    let status = first.exit_status().await;
    assert!(status.success(), "a drain exits 0: {status:?}");

    // Everything was settled before the exit, not by the next start-up.
    let second = service(&database.url, &dirs, "question_cancel.json", 1);
    let mut client = second.client().await;
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(interaction.state, proto::InteractionState::Expired as i32);
    assert_eq!(interaction.reason, "service_draining");
    assert!(!interaction.replay_allowed);
    let record = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(
        (record.state, record.failure_reason.as_str()),
        (proto::ExecutionState::Lost as i32, "DRAINING")
    );
    assert!(!process_alive(record.pid.unwrap()), "no agent outlived the service");
    let mut replay = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let settled = replay.until_turn_settles().await;
    let last = settled.last().unwrap();
    assert_eq!(last.turn_id, turn.turn_id);
    assert_eq!(last.event_type, "turn.interrupted");
    assert_eq!(payload(last)["failureReason"], "service_draining");
    // The same execution goes on under the next process, from where its stream was.
    let recovered = client
        .recover_execution(proto::RecoverExecutionRequest {
            request_id: "recover-after-drain".into(),
            execution_id: execution.execution_id.clone(),
            ..Default::default()
        })
        .await
        .expect("a drained execution is recoverable")
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(recovered.state, proto::ExecutionState::Ready as i32);
    let after = replay.events_until("session.loaded").await;
    let sequences: Vec<i64> = after.iter().map(|e| e.sequence).collect();
    let expected: Vec<i64> = (last.sequence + 1..=last.sequence + after.len() as i64).collect();
    assert_eq!(sequences, expected, "one stream, no gap: {:?}", types(&after));
    second.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_forces_the_drain() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    // Long enough that only the second signal can end the drain within the test.
    let mut first = service(&database.url, &dirs, "question_cancel.json", 600);
    let mut client = first.client().await;
    let (execution, _turn, mut events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    events.events_until("runtime_request.created").await;
    first.signal(Signal::SIGTERM);
    first.wait_for_stderr("draining");
    first.signal(Signal::SIGTERM);
    let status = first.exit_status().await;
    assert!(status.success(), "{status:?}");
    let second = service(&database.url, &dirs, "question_cancel.json", 1);
    let mut client = second.client().await;
    let record = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(
        (record.state, record.failure_reason.as_str()),
        (proto::ExecutionState::Lost as i32, "DRAINING"),
        "ended as the drain would have ended it, at once"
    );
    assert!(!process_alive(record.pid.unwrap()));
    second.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_drain_that_outlasts_the_ownership_lease_still_ends_every_execution_itself() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    // The shortest lease, and an agent only SIGKILL ends (after the stop grace): closing
    // it outlasts the lease unless the replica goes on renewing while it closes.
    let lease = vec![("CURSOR_RUNNER_OWNERSHIP_LEASE_MS".to_owned(), "1000".to_owned())];
    let mut first = service_with(&database.url, &dirs, "stubborn.json", 600, lease);
    let mut client = first.client().await;
    let execution = create_execution_in(&mut client, &dirs.workspace, "create-stubborn").await;
    first.signal(Signal::SIGTERM);
    first.wait_for_stderr("draining");
    first.signal(Signal::SIGTERM);
    let status = first.exit_status().await;
    assert!(status.success(), "{status:?}");

    let second = service(&database.url, &dirs, "stubborn.json", 1);
    let mut client = second.client().await;
    let record = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(
        (record.state, record.failure_reason.as_str()),
        (proto::ExecutionState::Lost as i32, "DRAINING"),
        "ended by its own replica, not settled by the next start-up"
    );
    second.stop();
    database.drop_database().await;
}
