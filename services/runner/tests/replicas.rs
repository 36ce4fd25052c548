//! Replicas on one PostgreSQL database (`docs/scale-out.md` stage 1): real `serve`
//! processes, each under its replica name. A replica starting beside another settles none
//! of its executions; a name is one live process's; a restart under a name settles its
//! predecessor's executions at once; a pre-scale-out service and replicas exclude each
//! other; the embedded SQLite store serves one process and refuses multi-replica mode.

use std::time::Duration;

use cursor_runner_e2e::*;
use cursor_runner_executions::ownership::REPLICA_NAME_WAIT;
use proto as pb;
use serde_json::Value;
use sqlx::Connection;

/// The pre-scale-out sole-service lock's key (`store/src/sql/replica.rs`).
const SOLE_SERVICE_LOCK_KEY: i64 = 0x6375_7273_6f72_2d72;
/// Long enough that nothing in these tests waits one out.
const LONG_LEASE_MS: u64 = 60_000;
/// `replica-b`'s stream heartbeat: longer than any test here.
const B_HEARTBEAT_SECS: u64 = 600;
/// Long enough for a stream that polls the outbox every second to have done so twice.
const IDLE: Duration = Duration::from_secs(3);

/// `serve` as replica `name` (given as Kubernetes gives it, in the environment), or under
/// the default name (the host's) when `None`.
fn replica(database_url: &str, dirs: &ServiceDirs, name: Option<&str>) -> ServiceProcess {
    replica_with(database_url, dirs, name, Vec::new())
}

/// [`replica`] with more of the service's environment.
fn replica_with(
    database_url: &str,
    dirs: &ServiceDirs,
    name: Option<&str>,
    more_env: Vec<(String, String)>,
) -> ServiceProcess {
    let mut env = vec![("CURSOR_RUNNER_OWNERSHIP_LEASE_MS".to_owned(), LONG_LEASE_MS.to_string())];
    env.extend(more_env);
    if let Some(name) = name {
        env.push(("CURSOR_RUNNER_REPLICA_NAME".to_owned(), name.to_owned()));
    }
    ServiceProcess::serve_in(
        std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url,
        dirs,
        "demo.json",
        env,
    )
}

/// The question is still pending, is answered through its own replica, and its turn
/// completes: nobody settled it.
async fn answered_and_completed(client: &mut Client, events: &mut Subscriber, created: &Value, tag: &str) {
    let interaction = get_interaction(client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(
        interaction.state,
        pb::InteractionState::Pending as i32,
        "the question was not expired by another replica"
    );
    let answered = client
        .answer_interaction(one_question_answer(created, &format!("answer-{tag}"), "option-1"))
        .await
        .expect("its replica still answers")
        .into_inner()
        .interaction
        .unwrap();
    assert_eq!(answered.state, pb::InteractionState::Delivered as i32);
    let settled = events.until_turn_settles().await;
    assert_eq!(
        settled.last().unwrap().event_type,
        "turn.completed",
        "{:?}",
        types(&settled)
    );
}

/// Replica `replica-a` with a question pending, then replica `replica-b` serving on the
/// same database (serving means its start-up, and its recovery, is over). `replica-b`
/// serves `/metrics`, and its streams' heartbeats are [`B_HEARTBEAT_SECS`] apart, so
/// nothing but an announced commit wakes a stream there within a test.
struct TwoReplicas {
    database: TestDatabase,
    a: ServiceProcess,
    /// Kept for the replica's life: its state directory and workspace.
    _a_dirs: ServiceDirs,
    a_client: Client,
    b: ServiceProcess,
    b_dirs: ServiceDirs,
    b_client: Client,
    b_metrics: std::net::SocketAddr,
    execution: pb::Execution,
    events: Subscriber,
    created: Value,
}

impl TwoReplicas {
    async fn with_a_question_on_a() -> Self {
        let database = TestDatabase::create(Backend::Postgres).await;
        let (a_dirs, b_dirs) = (ServiceDirs::new(), ServiceDirs::new());
        let a = replica(&database.url, &a_dirs, Some("replica-a"));
        let mut a_client = a.client().await;
        let (execution, events, created) = question_asked(&mut a_client, &a_dirs.workspace, "a").await;
        let b = replica_with(
            &database.url,
            &b_dirs,
            Some("replica-b"),
            vec![
                ("CURSOR_RUNNER_METRICS_LISTEN".to_owned(), ANY_PORT.to_owned()),
                ("CURSOR_RUNNER_HEARTBEAT_SECS".to_owned(), B_HEARTBEAT_SECS.to_string()),
            ],
        );
        let b_client = b.client().await;
        let b_metrics = b.metrics_address();
        Self {
            database,
            a,
            _a_dirs: a_dirs,
            a_client,
            b,
            b_dirs,
            b_client,
            b_metrics,
            execution,
            events,
            created,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_replica_starting_on_the_same_database_settles_none_of_the_first_ones_executions() {
    let TwoReplicas {
        database,
        a,
        _a_dirs,
        mut a_client,
        b,
        b_dirs,
        mut b_client,
        b_metrics: _,
        execution,
        mut events,
        created,
    } = TwoReplicas::with_a_question_on_a().await;
    let seen_from_b = get_execution(&mut b_client, &execution.execution_id).await;
    assert_eq!(seen_from_b.state, pb::ExecutionState::Ready as i32);
    assert_eq!(seen_from_b.owner_replica, "replica-a", "GetExecution names the owner");
    assert!(!seen_from_b.owner_incarnation.is_empty());
    // The second replica serves executions of its own.
    let (_, mut b_events, b_created) = question_asked(&mut b_client, &b_dirs.workspace, "b").await;

    answered_and_completed(&mut a_client, &mut events, &created, "a").await;
    answered_and_completed(&mut b_client, &mut b_events, &b_created, "b").await;
    a.stop();
    b.stop();
    database.drop_database().await;
}

/// Until calls are routed between replicas, a call through a replica that does not own the
/// execution is refused naming the replica that does, so a client (or an operator) knows
/// where to send it; the owner's execution is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_through_a_replica_that_does_not_own_the_execution_is_refused_naming_its_owner() {
    let TwoReplicas {
        database,
        a,
        mut a_client,
        b,
        mut b_client,
        execution,
        mut events,
        created,
        _a_dirs,
        b_dirs: _b_dirs,
        b_metrics: _,
    } = TwoReplicas::with_a_question_on_a().await;
    let refused = b_client
        .cancel_turn(pb::CancelTurnRequest {
            request_id: "cancel-through-b".into(),
            execution_id: execution.execution_id.clone(),
            turn_id: created["turnId"].as_str().unwrap().into(),
        })
        .await
        .expect_err("replica-b does not own it");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert_eq!(reason(&refused), "EXECUTION_NOT_READY", "{refused:?}");
    assert_eq!(error_metadata(&refused, "owner_replica").as_deref(), Some("replica-a"));
    assert!(refused.message().contains("replica-a"), "{}", refused.message());
    let refused = b_client
        .answer_interaction(one_question_answer(&created, "answer-through-b", "option-1"))
        .await
        .expect_err("replica-b does not own it");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert_eq!(
        reason(&refused),
        "EXECUTION_NOT_READY",
        "the question is still pending on its owner: {refused:?}"
    );
    assert_eq!(error_metadata(&refused, "owner_replica").as_deref(), Some("replica-a"));
    answered_and_completed(&mut a_client, &mut events, &created, "a").await;
    a.stop();
    b.stop();
    database.drop_database().await;
}

/// Reads of the outbox a service made so far (`read_events` store operations).
fn outbox_reads(metrics: std::net::SocketAddr) -> u64 {
    let text = scrape_metrics(metrics);
    text.lines()
        .find(|line| {
            line.starts_with("cursor_runner_store_operation_duration_seconds_count{operation=\"read_events\"}")
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// What a stream shows of each event: enough to tell two streams apart.
fn shown(events: &[pb::ActivityEvent]) -> Vec<(i64, String, String)> {
    events
        .iter()
        .map(|e| (e.sequence, e.event_id.clone(), e.event_type.clone()))
        .collect()
}

impl TwoReplicas {
    /// A stream of the execution through `replica-b`, from the start, replayed up to the
    /// pending question; and what it showed.
    async fn stream_through_b(&mut self) -> (Subscriber, Vec<pb::ActivityEvent>) {
        let mut through_b = Subscriber::open(&mut self.b_client, &self.execution.execution_id, 0)
            .await
            .expect("StreamEvents through replica-b");
        let seen = through_b.events_until("runtime_request.created").await;
        (through_b, seen)
    }

    /// The question is answered through its owner, `replica-a`, and the turn completes;
    /// the stream through `replica-b` then shows every event the owner's stream shows, in
    /// order, once each. Ends both replicas and the database.
    async fn answered_on_a_and_shown_alike_through_b(
        mut self,
        mut through_b: Subscriber,
        mut seen_on_b: Vec<pb::ActivityEvent>,
    ) {
        answered_and_completed(&mut self.a_client, &mut self.events, &self.created, "a").await;
        seen_on_b.extend(through_b.until_turn_settles().await);
        let mut through_a = Subscriber::open(&mut self.a_client, &self.execution.execution_id, 0)
            .await
            .expect("StreamEvents through replica-a");
        let seen_on_a = through_a.until_turn_settles().await;
        assert_eq!(
            shown(&seen_on_b),
            shown(&seen_on_a),
            "both replicas show the same events"
        );
        self.a.stop();
        self.b.stop();
        self.database.drop_database().await;
    }
}

/// A stream through a replica that does not own the execution shows the owner's events as
/// each commit lands, woken by the database's announcement of it: its heartbeat is ten
/// minutes away, and while nothing is committed it does not read the outbox at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_through_a_replica_that_does_not_own_the_execution_is_woken_by_each_commit_and_never_polls() {
    let mut two = TwoReplicas::with_a_question_on_a().await;
    let (through_b, seen_on_b) = two.stream_through_b().await;
    let reads_when_idle = outbox_reads(two.b_metrics);
    tokio::time::sleep(IDLE).await;
    assert_eq!(
        outbox_reads(two.b_metrics),
        reads_when_idle,
        "an idle stream on a replica that does not own the execution reads nothing"
    );
    two.answered_on_a_and_shown_alike_through_b(through_b, seen_on_b).await;
}

/// When the database drops the connections that listen for commits, a stream through a
/// replica that does not own the execution misses no event: it reads the outbox until it
/// hears again, and shows every event once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_replica_lost_its_listener_shows_every_later_commit_without_a_gap() {
    let mut two = TwoReplicas::with_a_question_on_a().await;
    let (through_b, seen_on_b) = two.stream_through_b().await;
    let mut admin = sqlx::PgConnection::connect(&two.database.url).await.unwrap();
    let terminated: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(!terminated.is_empty(), "the replicas listen for commits");
    admin.close().await.unwrap();
    two.answered_on_a_and_shown_alike_through_b(through_b, seen_on_b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_taking_a_replica_name_in_use_is_refused_and_the_first_goes_on() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let (first_dirs, second_dirs) = (ServiceDirs::new(), ServiceDirs::new());
    let first = replica(&database.url, &first_dirs, Some("replica-a"));
    let mut client = first.client().await;
    let (_, mut events, created) = question_asked(&mut client, &first_dirs.workspace, "a").await;

    let started = tokio::time::Instant::now();
    let mut second = replica(&database.url, &second_dirs, Some("replica-a"));
    second.wait_for_stderr("REPLICA_NAME_IN_USE");
    assert_eq!(second.exit_status().await.code(), Some(1), "refused to start");
    assert!(
        started.elapsed() >= REPLICA_NAME_WAIT,
        "refused only after waiting REPLICA_NAME_WAIT for the name"
    );

    answered_and_completed(&mut client, &mut events, &created, "a").await;
    first.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_replica_on_the_same_state_directory_is_refused_and_the_first_ones_agents_live_on() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let first = replica(&database.url, &dirs, Some("replica-a"));
    let mut client = first.client().await;
    let (_, mut events, created) = question_asked(&mut client, &dirs.workspace, "a").await;

    // Another name, the same directory: its start-up sweep would kill replica-a's agents.
    let mut second = replica(&database.url, &dirs, Some("replica-b"));
    second.wait_for_stderr("STATE_DIR_IN_USE");
    assert_eq!(second.exit_status().await.code(), Some(1), "refused to start");

    answered_and_completed(&mut client, &mut events, &created, "a").await;
    first.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_whose_name_is_let_go_within_the_wait_starts_and_settles_its_predecessors_executions() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let first = replica(&database.url, &dirs, Some("replica-a"));
    let mut client = first.client().await;
    let (_, _, created) = question_asked(&mut client, &dirs.workspace, "a").await;

    // A pod restarted in place: the new process starts while the old one still stops.
    let started = tokio::time::Instant::now();
    let second = replica(&database.url, &dirs, Some("replica-a"));
    tokio::time::sleep(REPLICA_NAME_WAIT / 5).await;
    first.kill();
    let mut client = second.client().await;
    assert!(started.elapsed() < REPLICA_NAME_WAIT + Duration::from_secs(2));
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(interaction.state, pb::InteractionState::Expired as i32);
    assert_eq!(interaction.reason, "service_restarted");
    second.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_replica_with_its_name_settles_its_predecessors_executions_before_the_lease_ends() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let (a_dirs, b_dirs) = (ServiceDirs::new(), ServiceDirs::new());
    let b = replica(&database.url, &b_dirs, Some("replica-b"));
    let mut b_client = b.client().await;
    let (_, mut b_events, b_created) = question_asked(&mut b_client, &b_dirs.workspace, "b").await;
    let a = replica(&database.url, &a_dirs, Some("replica-a"));
    let mut a_client = a.client().await;
    let (execution, _, created) = question_asked(&mut a_client, &a_dirs.workspace, "a").await;
    let before = get_execution(&mut a_client, &execution.execution_id).await;

    a.kill();
    let killed = tokio::time::Instant::now();
    let restarted = replica(&database.url, &a_dirs, Some("replica-a"));
    let mut client = restarted.client().await;
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(interaction.state, pb::InteractionState::Expired as i32);
    assert_eq!(interaction.reason, "service_restarted");
    assert!(!interaction.replay_allowed);
    assert!(
        killed.elapsed() < Duration::from_millis(LONG_LEASE_MS),
        "settled at start-up, not after the predecessor's lease"
    );
    let after = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(after.state, pb::ExecutionState::Lost as i32);
    assert_eq!(after.owner_replica, "replica-a");
    assert_ne!(
        after.owner_incarnation, before.owner_incarnation,
        "the successor claims what it settles: the owner fence lets only the owner write"
    );
    let mut replay = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let settled = replay.until_turn_settles().await;
    assert_eq!(payload(settled.last().unwrap())["failureReason"], "provider_lost");

    // The other replica's execution was none of the restart's business.
    answered_and_completed(&mut b_client, &mut b_events, &b_created, "b").await;
    restarted.stop();
    b.stop();
    database.drop_database().await;
}

async fn try_sole_service_lock(connection: &mut sqlx::PgConnection) -> bool {
    let (locked,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
        .bind(SOLE_SERVICE_LOCK_KEY)
        .fetch_one(connection)
        .await
        .unwrap();
    locked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_refuses_to_start_beside_a_pre_scale_out_service() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    // A pre-scale-out service holds the sole-service lock exclusively.
    let mut old_service = sqlx::PgConnection::connect(&database.url).await.unwrap();
    assert!(try_sole_service_lock(&mut old_service).await);
    let mut refused = replica(&database.url, &dirs, Some("replica-a"));
    refused.wait_for_stderr("ANOTHER_SERVICE");
    assert_eq!(refused.exit_status().await.code(), Some(1), "refused to start");

    sqlx::query("SELECT pg_advisory_unlock_all()")
        .execute(&mut old_service)
        .await
        .unwrap();
    let serving = replica(&database.url, &dirs, Some("replica-a"));
    serving.client().await;
    assert!(
        !try_sole_service_lock(&mut old_service).await,
        "a pre-scale-out service starting now is refused: it would settle every replica's work"
    );
    old_service.close().await.unwrap();
    serving.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_sqlite_with_a_replica_name_refuses_multi_replica_mode() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let mut refused = replica(&database.url, &dirs, Some("replica-a"));
    refused.wait_for_stderr("MULTI_REPLICA_UNSUPPORTED: the embedded SQLite store serves a single replica");
    assert_eq!(refused.exit_status().await.code(), Some(1));
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_service_on_the_same_sqlite_file_is_refused_and_the_first_goes_on() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let (first_dirs, second_dirs) = (ServiceDirs::new(), ServiceDirs::new());
    let first = replica(&database.url, &first_dirs, None);
    let mut client = first.client().await;
    let (_, mut events, created) = question_asked(&mut client, &first_dirs.workspace, "a").await;

    let mut second = replica(&database.url, &second_dirs, None);
    second.wait_for_stderr("another cursor-runner serves this database");
    assert_eq!(second.exit_status().await.code(), Some(1), "refused to start");

    answered_and_completed(&mut client, &mut events, &created, "a").await;
    first.stop();
    database.drop_database().await;
}
