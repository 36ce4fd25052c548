//! Portable sessions (`docs/scale-out.md` §6, stage 6): real `serve` replicas on one
//! PostgreSQL, each with its own state directory. A session's agent-side state is
//! checkpointed into the store when its execution is created, between turns and at close,
//! so a replica that never ran the session loads or recovers it from the checkpoint once
//! the replica that ran it is gone, with its disk (each test removes that replica's homes).
//! The fake agent answers `session/load` only for a session in its `$CURSOR_DATA_DIR`.

use std::net::SocketAddr;

use cursor_runner_e2e::*;
use proto as pb;
use sqlx::Connection;

/// Long enough that nothing waits one out but the test that kills an owner.
const LONG_LEASE_MS: u64 = 60_000;
/// For the test whose owner dies: a survivor takes its executions over within seconds.
const SHORT_LEASE_MS: u64 = 2_000;

/// `serve` as replica `name`, its agents playing `recoverable.json` (a session they can
/// load again); its `/metrics` on the returned address.
fn replica(database_url: &str, dirs: &ServiceDirs, name: &str, lease_ms: u64) -> (ServiceProcess, SocketAddr) {
    let mut env = replica_env(name, lease_ms);
    env.push(("CURSOR_RUNNER_METRICS_LISTEN".to_owned(), ANY_PORT.to_owned()));
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner"));
    let process = ServiceProcess::serve_in(binary, database_url, dirs, "recoverable.json", env);
    let metrics = process.metrics_address();
    (process, metrics)
}

/// The replica's disk is gone with it: every private home it kept.
fn lose_homes_of(dirs: &ServiceDirs) {
    let homes = dirs.root.path().join("homes");
    std::fs::remove_dir_all(&homes).expect("the replica kept homes");
}

/// Checkpoints whose outcome was `outcome`, from a replica's `/metrics`.
fn checkpoints(metrics: SocketAddr, outcome: &str) -> u64 {
    let series = format!("cursor_runner_session_checkpoints_total{{outcome=\"{outcome}\"}} ");
    scrape_metrics(metrics)
        .lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .map_or(0, |value| value.trim().parse().expect("a count"))
}

fn load(workspace: &std::path::Path, request_id: &str, session_id: &str) -> pb::CreateExecutionRequest {
    pb::CreateExecutionRequest {
        request_id: request_id.into(),
        workspace: workspace.display().to_string(),
        load_session_id: session_id.into(),
        ..Default::default()
    }
}

async fn close(client: &mut Client, execution_id: &str) {
    client
        .close_execution(pb::CloseExecutionRequest {
            request_id: format!("close-{execution_id}"),
            execution_id: execution_id.to_owned(),
        })
        .await
        .expect("CloseExecution");
}

/// The `session.loaded` event of the execution's stream.
async fn session_loaded(client: &mut Client, execution_id: &str) -> serde_json::Value {
    let mut events = Subscriber::open(client, execution_id, 0).await.expect("StreamEvents");
    payload(events.events_until("session.loaded").await.last().unwrap())
}

/// A session created and closed on `replica-a`, which is then gone with its disk: the
/// session is only in the store. A's directories (their workspace is the session's) and
/// the execution that created it.
async fn session_of_a_gone_replica(database: &TestDatabase) -> (ServiceDirs, pb::Execution) {
    let dirs_a = ServiceDirs::new();
    let (a, a_metrics) = replica(&database.url, &dirs_a, "replica-a", LONG_LEASE_MS);
    let mut a_client = a.client().await;
    let first = create_execution_in(&mut a_client, &dirs_a.workspace, "create-on-a").await;
    close(&mut a_client, &first.execution_id).await;
    assert_eq!(checkpoints(a_metrics, "stored"), 2, "taken at creation and at close");
    a.stop();
    lose_homes_of(&dirs_a);
    (dirs_a, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_created_on_replica_a_is_loaded_on_replica_b_after_a_is_gone() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let (dirs_a, first) = session_of_a_gone_replica(&database).await;
    let dirs_b = ServiceDirs::new();
    let (b, _) = replica(&database.url, &dirs_b, "replica-b", LONG_LEASE_MS);
    let mut b_client = b.client().await;
    let loaded = b_client
        .create_execution(load(&dirs_a.workspace, "load-on-b", &first.session_id))
        .await
        .expect("the session loads from its checkpoint")
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(loaded.session_id, first.session_id);
    let seen = get_execution(&mut b_client, &loaded.execution_id).await;
    assert_eq!(seen.owner_replica, "replica-b");
    assert_eq!(loaded.state, pb::ExecutionState::Ready as i32);
    let shown = session_loaded(&mut b_client, &loaded.execution_id).await;
    assert_eq!(shown["sessionId"], first.session_id.as_str());
    close(&mut b_client, &loaded.execution_id).await;
    b.stop();
    database.drop_database().await;
}

/// Rounds of two replicas loading one session at the same instant.
const RACING_LOADS: usize = 3;

/// One live execution per session across the fleet: two replicas that never ran a session
/// load it at the same instant (its replica gone), and exactly one of them opens it; the
/// other is refused `SESSION_IN_USE`, whether it lost the race for the open or came after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_loading_one_session_at_once_open_it_once() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let (dirs_a, first) = session_of_a_gone_replica(&database).await;
    let (dirs_b, dirs_c) = (ServiceDirs::new(), ServiceDirs::new());
    let (b, _) = replica(&database.url, &dirs_b, "replica-b", LONG_LEASE_MS);
    let (c, _) = replica(&database.url, &dirs_c, "replica-c", LONG_LEASE_MS);
    let (mut b_client, mut c_client) = (b.client().await, c.client().await);

    // Rounds whose loser was refused by the other's claim of the open, not by a live
    // execution it found: the loads did race.
    let mut raced = 0;
    for round in 0..RACING_LOADS {
        let (on_b, on_c) = tokio::join!(
            b_client.create_execution(load(
                &dirs_a.workspace,
                &format!("load-{round}-on-b"),
                &first.session_id
            )),
            c_client.create_execution(load(
                &dirs_a.workspace,
                &format!("load-{round}-on-c"),
                &first.session_id
            )),
        );
        let (opened, (winner, refused)) = match (on_b, on_c) {
            (Ok(opened), Err(refused)) => (opened, (&mut b_client, refused)),
            (Err(refused), Ok(opened)) => (opened, (&mut c_client, refused)),
            (Ok(_), Ok(_)) => panic!("round {round}: the session was opened twice at once"),
            (Err(b), Err(c)) => panic!("round {round}: neither opened it: {b:?} / {c:?}"),
        };
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
        assert_eq!(reason(&refused), "SESSION_IN_USE", "{refused:?}");
        raced += usize::from(error_metadata(&refused, "execution_id").is_none());
        let opened = opened.into_inner().execution.unwrap();
        assert_eq!(opened.state, pb::ExecutionState::Ready as i32);
        close(winner, &opened.execution_id).await;
    }
    assert!(raced > 0, "no round's loads overlapped");
    b.stop();
    c.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_execution_on_any_replica_restarts_the_session_there() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let (dirs_a, dirs_b) = (ServiceDirs::new(), ServiceDirs::new());
    let (a, _) = replica(&database.url, &dirs_a, "replica-a", SHORT_LEASE_MS);
    let mut a_client = a.client().await;
    let execution = create_execution_in(&mut a_client, &dirs_a.workspace, "create-on-a").await;
    let (b, _) = replica(&database.url, &dirs_b, "replica-b", SHORT_LEASE_MS);
    let mut b_client = b.client().await;
    a.kill();
    lose_homes_of(&dirs_a);
    let lost = execution_in_state(&mut b_client, &execution.execution_id, pb::ExecutionState::Lost).await;
    assert_eq!(lost.failure_reason, "OWNER_LOST");

    let recovered = b_client
        .recover_execution(pb::RecoverExecutionRequest {
            request_id: "recover-on-b".into(),
            execution_id: execution.execution_id.clone(),
            ..Default::default()
        })
        .await
        .expect("the session is recovered from its checkpoint")
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(recovered.state, pb::ExecutionState::Ready as i32);
    let seen = get_execution(&mut b_client, &execution.execution_id).await;
    assert_eq!(seen.owner_replica, "replica-b");
    assert_eq!(recovered.generation, execution.generation + 1);
    let shown = session_loaded(&mut b_client, &execution.execution_id).await;
    assert_eq!(shown["recovery"], true);
    close(&mut b_client, &execution.execution_id).await;
    b.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_that_fails_its_digest_is_never_unpacked_and_the_load_is_session_not_found() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let (dirs_a, first) = session_of_a_gone_replica(&database).await;
    let dirs_b = ServiceDirs::new();
    let mut db = sqlx::PgConnection::connect(&database.url).await.unwrap();
    sqlx::query("UPDATE session_checkpoints SET body = body || '\\x00'::bytea")
        .execute(&mut db)
        .await
        .unwrap();
    db.close().await.unwrap();

    let (b, _) = replica(&database.url, &dirs_b, "replica-b", LONG_LEASE_MS);
    let mut b_client = b.client().await;
    let refused = b_client
        .create_execution(load(&dirs_a.workspace, "load-on-b", &first.session_id))
        .await
        .expect_err("a torn checkpoint is not restored");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert_eq!(reason(&refused), "SESSION_NOT_FOUND", "{refused:?}");
    assert_eq!(
        error_metadata(&refused, "checkpoint").as_deref(),
        Some("digest_mismatch")
    );
    let homes: Vec<_> = std::fs::read_dir(dirs_b.root.path().join("homes"))
        .map(|dir| dir.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        homes
            .iter()
            .all(|name| !name.to_string_lossy().starts_with("restored-")),
        "nothing was restored: {homes:?}"
    );
    b.stop();
    database.drop_database().await;
}

/// The private homes a replica keeps in its state directory.
fn homes_kept(dirs: &ServiceDirs) -> Vec<String> {
    std::fs::read_dir(dirs.root.path().join("homes"))
        .expect("the replica keeps its homes there")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_that_cuts_a_turn_short_keeps_the_last_good_checkpoint_and_the_home() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let (a, _) = replica(&database.url, &dirs, "replica-a", LONG_LEASE_MS);
    let mut client = a.client().await;
    // The turn waits on its question when the close comes: the home may be mid-write.
    let (execution, _, _) = question_asked(&mut client, &dirs.workspace, "cut").await;
    close(&mut client, &execution.execution_id).await;
    a.stop();
    let mut db = sqlx::PgConnection::connect(&database.url).await.unwrap();
    let (turns,): (i64,) = sqlx::query_as("SELECT turn_count FROM session_checkpoints WHERE session_id = $1")
        .bind(&execution.session_id)
        .fetch_one(&mut db)
        .await
        .unwrap();
    db.close().await.unwrap();
    assert_eq!(turns, 0, "the checkpoint taken at creation stays");
    let slot = execution.lease.expect("a lease").slot_id;
    assert!(homes_kept(&dirs).contains(&slot), "{:?}", homes_kept(&dirs));
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn homes_are_removed_once_their_sessions_are_checkpointed_at_close_and_their_processes_end() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let (a, _) = replica(&database.url, &dirs, "replica-a", LONG_LEASE_MS);
    let mut client = a.client().await;
    let first = create_execution_in(&mut client, &dirs.workspace, "create-1").await;
    close(&mut client, &first.execution_id).await;
    let loaded = client
        .create_execution(load(&dirs.workspace, "load-1", &first.session_id))
        .await
        .expect("a closed session loads again on its own replica")
        .into_inner()
        .execution
        .unwrap();
    close(&mut client, &loaded.execution_id).await;
    a.stop();
    assert_eq!(homes_kept(&dirs), Vec::<String>::new(), "every session is in the store");
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_of_an_execution_whose_agent_died_is_kept_for_its_recovery() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let (a, _) = replica(&database.url, &dirs, "replica-a", LONG_LEASE_MS);
    let mut client = a.client().await;
    let execution = create_execution_in(&mut client, &dirs.workspace, "create-1").await;
    let agent = nix::unistd::Pid::from_raw(execution.pid.expect("a pid") as i32);
    nix::sys::signal::kill(agent, nix::sys::signal::Signal::SIGKILL).unwrap();
    execution_in_state(&mut client, &execution.execution_id, pb::ExecutionState::Lost).await;
    a.stop();
    let slot = execution.lease.expect("a lease").slot_id;
    assert!(homes_kept(&dirs).contains(&slot), "{:?}", homes_kept(&dirs));
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_sweeps_the_homes_no_session_needs_and_keeps_those_of_unstored_sessions() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let (a, _) = replica(&database.url, &dirs, "replica-a", LONG_LEASE_MS);
    let mut client = a.client().await;
    // Cut mid-turn by the crash below: its home holds more than its checkpoint.
    let (cut, _, _) = question_asked(&mut client, &dirs.workspace, "cut").await;
    // Closed and checkpointed; its idle process (and home) then dies with the service.
    let closed = create_execution_in(&mut client, &dirs.workspace, "create-closed").await;
    close(&mut client, &closed.execution_id).await;
    let leftover = dirs.root.path().join("homes/restored-left-behind");
    std::fs::create_dir_all(leftover.join(".cursor-data")).unwrap();
    a.kill();

    let (a, _) = replica(&database.url, &dirs, "replica-a", LONG_LEASE_MS);
    a.client().await;
    let kept = homes_kept(&dirs);
    let (cut_slot, closed_slot) = (cut.lease.unwrap().slot_id, closed.lease.unwrap().slot_id);
    assert!(kept.contains(&cut_slot), "the cut session's only copy stays: {kept:?}");
    assert!(!kept.contains(&closed_slot), "a stored session's home goes: {kept:?}");
    assert!(!leftover.exists(), "an unreferenced home goes");
    a.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_whose_checkpoint_is_refused_keeps_the_home_holding_the_sessions_only_copy() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let (a, a_metrics) = replica(&database.url, &dirs, "replica-a", LONG_LEASE_MS);
    let mut client = a.client().await;
    // A settled turn, whose checkpoint is stored: the last good one.
    let (execution, mut events, created) = question_asked(&mut client, &dirs.workspace, "turn").await;
    client
        .answer_interaction(one_question_answer(&created, "answer-1", "option-1"))
        .await
        .expect("answered");
    events.until_turn_settles().await;
    // The settlement is streamed before its checkpoint is packed: wait for it to be stored.
    let deadline = std::time::Instant::now() + WAIT;
    while checkpoints(a_metrics, "stored") < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the turn's checkpoint was never stored"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let slot = execution.lease.clone().expect("a lease").slot_id;
    // The session then grows past a checkpoint's bound (a directory too deep) before its close.
    let deep: std::path::PathBuf = (1..=cursor_runner_supervisor::checkpoint::MAX_SESSION_CHECKPOINT_DEPTH)
        .map(|i| format!("d{i}"))
        .collect();
    std::fs::create_dir_all(
        dirs.root
            .path()
            .join("homes")
            .join(&slot)
            .join(".cursor-data")
            .join(deep),
    )
    .unwrap();
    close(&mut client, &execution.execution_id).await;
    assert_eq!(checkpoints(a_metrics, "refused"), 1);
    a.stop();
    assert!(homes_kept(&dirs).contains(&slot), "{:?}", homes_kept(&dirs));
    database.drop_database().await;
}
