//! Self-fencing (`docs/scale-out.md` stage 2): a replica that cannot renew its ownership
//! lease writes nothing once it has ended, stops its agents and exits
//! `LEASE_LOST_EXIT`; its successor under the same name settles what it left, once.

use std::time::Duration;

use cursor_runner_e2e::private_postgres::PrivatePostgres;
use cursor_runner_e2e::*;
use nix::sys::signal::Signal;
use proto as pb;
use serde_json::Value;
use sqlx::Connection;

/// Short, so the test waits one out; four renewals still fit in it.
const LEASE_MS: i64 = 2_000;
/// How long past the lease's end (on the database's clock) the service stays stopped:
/// ample time for any write it had in flight to have landed, were it going to.
const PAST_THE_LEASE_MS: i64 = 1_000;
/// `serve`'s exit status when its lease is lost (`runner::replica::LEASE_LOST_EXIT`).
const LEASE_LOST_EXIT: i32 = 75;

fn replica(database_url: &str, dirs: &ServiceDirs) -> ServiceProcess {
    replica_with(database_url, dirs, Vec::new())
}

/// [`replica`] with more of the service's environment.
fn replica_with(database_url: &str, dirs: &ServiceDirs, more_env: Vec<(String, String)>) -> ServiceProcess {
    let mut env = replica_env("replica-a", LEASE_MS as u64);
    env.extend(more_env);
    ServiceProcess::serve_in(
        std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url,
        dirs,
        "question_then_talks_on.json",
        env,
    )
}

/// What the database holds of an execution: its event head, its turn's and its
/// question's states.
#[derive(Debug, PartialEq, Eq)]
struct Written {
    head: i64,
    turn: String,
    question: String,
}

async fn written(database: &mut sqlx::PgConnection, execution_id: &str) -> Written {
    let (head, turn, question): (Option<i64>, String, String) = sqlx::query_as(
        "SELECT (SELECT MAX(sequence) FROM events WHERE execution_id = $1), \
                (SELECT string_agg(state, ',') FROM turns WHERE execution_id = $1), \
                (SELECT string_agg(state, ',') FROM interactions WHERE execution_id = $1)",
    )
    .bind(execution_id)
    .fetch_one(database)
    .await
    .unwrap();
    Written {
        head: head.unwrap_or(0),
        turn,
        question,
    }
}

/// Waits until the database's clock is `PAST_THE_LEASE_MS` past the end of replica-a's
/// lease (it was stopped before that, so no renewal moves the end meanwhile).
async fn until_past_the_lease(database: &mut sqlx::PgConnection) {
    loop {
        let (left,): (i64,) = sqlx::query_as(
            "SELECT lease_until_ms + $1 - (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT \
             FROM replicas WHERE name = 'replica-a' AND state <> 'ended'",
        )
        .bind(PAST_THE_LEASE_MS)
        .fetch_one(&mut *database)
        .await
        .unwrap();
        if left < 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(left.unsigned_abs() + 10)).await;
    }
}

/// Replica-a with a turn whose question is pending while its agent talks on (a write due
/// every 20 ms): the execution, the question's `runtime_request.created` payload, and the
/// processes below the service.
async fn a_turn_talking_on(service: &ServiceProcess, dirs: &ServiceDirs) -> (pb::Execution, Value, Vec<HostProcess>) {
    let mut client = service.client().await;
    let execution = create_execution_in(&mut client, &dirs.workspace, "create-1").await;
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    for _ in 0..5 {
        events.next_event().await;
    }
    let agents = descendants_of(service.child.id() as i32);
    assert!(!agents.is_empty(), "the agent runs below the service");
    (execution, created, agents)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_replica_stopped_past_its_lease_writes_nothing_after_it_stops_its_agents_on_sigcont_and_its_restart_settles_once()
 {
    let postgres = PrivatePostgres::start();
    let url = postgres.url();
    let dirs = ServiceDirs::new();
    let mut service = replica(&url, &dirs);
    let (execution, created, agents) = a_turn_talking_on(&service, &dirs).await;

    service.signal(Signal::SIGSTOP);
    let mut database = sqlx::PgConnection::connect(&url).await.unwrap();
    until_past_the_lease(&mut database).await;
    let when_the_lease_ended = written(&mut database, &execution.execution_id).await;
    service.signal(Signal::SIGCONT);

    assert_eq!(
        service.exit_status().await.code(),
        Some(LEASE_LOST_EXIT),
        "a replica whose lease ended exits for its successor to settle what it owned"
    );
    until_all_gone("the lost replica's agents", &agents).await;
    assert_eq!(
        written(&mut database, &execution.execution_id).await,
        when_the_lease_ended,
        "nothing was written after the lease ended"
    );
    assert_eq!(
        (
            when_the_lease_ended.turn.as_str(),
            when_the_lease_ended.question.as_str()
        ),
        ("running", "pending")
    );

    let restarted = replica(&url, &dirs);
    let mut client = restarted.client().await;
    let question = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(
        (question.state, question.reason.as_str()),
        (pb::InteractionState::Expired as i32, "service_restarted")
    );
    let mut replay = Subscriber::open(&mut client, &execution.execution_id, when_the_lease_ended.head)
        .await
        .unwrap();
    let settlement = replay.until_caught_up().await;
    let count = |event_type: &str| settlement.iter().filter(|e| e.event_type == event_type).count();
    assert_eq!(count("turn.failed"), 1, "{:?}", types(&settlement));
    assert_eq!(count("runtime_request.expired"), 1, "{:?}", types(&settlement));
    assert_eq!(
        settlement.first().map(|e| e.sequence),
        Some(when_the_lease_ended.head + 1),
        "the settlement follows what the lost replica wrote, with no gap"
    );
    restarted.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_of_a_replica_stopped_past_its_lease_are_killed_by_their_inits_before_it_resumes() {
    let postgres = PrivatePostgres::start();
    let url = postgres.url();
    let dirs = ServiceDirs::new();
    let mut service = replica(&url, &dirs);
    let (_, _, agents) = a_turn_talking_on(&service, &dirs).await;

    service.signal(Signal::SIGSTOP);
    let mut database = sqlx::PgConnection::connect(&url).await.unwrap();
    until_past_the_lease(&mut database).await;
    let alive: Vec<_> = agents.iter().filter(|p| p.still_running()).collect();
    assert!(
        alive.is_empty(),
        "processes outlived the lease of their stopped service: {alive:?}"
    );
    service.signal(Signal::SIGCONT);
    assert_eq!(service.exit_status().await.code(), Some(LEASE_LOST_EXIT));
}

/// Polls until `check` holds, or fails after `WAIT`.
async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_replica_whose_lease_ended_is_refused_unavailable_with_retry_info_and_writes_nothing() {
    let service = TestService::start(Backend::Postgres, "question_then_talks_on.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    // The lease ends on the database's clock (a partition, a freeze): the next heartbeat
    // finds it lost.
    let mut database = sqlx::PgConnection::connect(&service.database().url).await.unwrap();
    sqlx::query("UPDATE replicas SET lease_until_ms = 0 WHERE state <> 'ended'")
        .execute(&mut database)
        .await
        .unwrap();
    until("the replica sees its lease ended", || service.engine.lease_has_ended()).await;
    let when_the_lease_ended = written(&mut database, &execution.execution_id).await;

    let refused = client
        .answer_interaction(one_question_answer(&created, "answer-1", "pg"))
        .await
        .expect_err("a replica whose lease ended serves no call");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(reason(&refused), "REPLICA_FENCED");
    assert!(retry_delay(&refused).is_some(), "it says when to retry");
    assert_eq!(
        written(&mut database, &execution.execution_id).await,
        when_the_lease_ended,
        "nothing was written after the lease ended"
    );
    let (kept,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM idempotency_keys WHERE request_id = 'answer-1'")
        .fetch_one(&mut database)
        .await
        .unwrap();
    assert_eq!(
        kept, 0,
        "the refusal is no outcome: a retry under its request id, as RetryInfo asks, runs afresh"
    );
}

/// The database drops replica-a's identity connection (a network blip, a proxy's idle
/// timeout): its name's lock is gone though the process lives, and a second process takes
/// the name and settles what replica-a owned. Replica-a learns at its next renewal that its
/// incarnation ended, exits `LEASE_LOST_EXIT` with its agents, and none of its writes lands
/// after the successor's settlement: one live process per name, once the renewal has run.
/// Replica-a is frozen from the drop until the successor has registered: awake, its next
/// renewal would re-take the free name first (and the successor be refused
/// `REPLICA_NAME_IN_USE`, rightly, which is not this case), a race a loaded machine loses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_name_a_successor_took_while_it_lived_exits_and_none_of_its_writes_follows_the_settlement() {
    let postgres = PrivatePostgres::start();
    let url = postgres.url();
    let (first_dirs, second_dirs) = (ServiceDirs::new(), ServiceDirs::new());
    let mut first = replica(&url, &first_dirs);
    let (execution, created, agents) = a_turn_talking_on(&first, &first_dirs).await;

    first.signal(Signal::SIGSTOP);
    let mut database = sqlx::PgConnection::connect(&url).await.unwrap();
    let dropped: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_locks \
         WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut database)
    .await
    .unwrap();
    assert!(
        !dropped.is_empty(),
        "replica-a's identity connection held its name's lock"
    );
    let second = replica(&url, &second_dirs);
    let mut client = second.client().await;
    first.signal(Signal::SIGCONT);

    assert_eq!(
        first.exit_status().await.code(),
        Some(LEASE_LOST_EXIT),
        "the first process under the name fences itself"
    );
    until_all_gone("the first process's agents", &agents).await;
    let question = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(
        (question.state, question.reason.as_str()),
        (pb::InteractionState::Expired as i32, "service_restarted")
    );
    let mut replay = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let all = replay.until_caught_up().await;
    let settled_at = all
        .iter()
        .position(|e| e.event_type == "turn.failed")
        .unwrap_or_else(|| panic!("the turn was settled once: {:?}", types(&all)));
    assert_eq!(
        types(&all[settled_at..]).iter().filter(|t| **t == "item.delta").count(),
        0,
        "nothing the first process's agent said lands after the settlement: {:?}",
        types(&all[settled_at..])
    );
    assert_eq!(all.iter().filter(|e| e.event_type == "turn.failed").count(), 1);
    second.stop();
}

/// Settling what a SIGKILLed predecessor left takes as long as it takes (many executions, a
/// slow database): the restarted replica renews its lease meanwhile, so its own recovery is
/// never refused by its fence, and it starts serving with the question expired once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_whose_recovery_outlasts_the_lease_renews_it_and_settles_everything() {
    let postgres = PrivatePostgres::start();
    let url = postgres.url();
    let dirs = ServiceDirs::new();
    let first = replica(&url, &dirs);
    let (execution, created, _) = a_turn_talking_on(&first, &dirs).await;
    first.kill();

    let slow = vec![
        (
            "CURSOR_RUNNER_FAILPOINT".to_owned(),
            "settling_a_predecessors_execution".to_owned(),
        ),
        // Past the lease (its deadline would refuse the settlement without a renewal), within
        // the time a client waits for the service to listen.
        (
            "CURSOR_RUNNER_FAILPOINT_PAUSE_MS".to_owned(),
            (LEASE_MS + 1_000).to_string(),
        ),
    ];
    let restarted = replica_with(&url, &dirs, slow);
    restarted.wait_for_stderr("failpoint reached: settling_a_predecessors_execution");
    let mut client = restarted.client().await;
    let question = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(
        (question.state, question.reason.as_str()),
        (pb::InteractionState::Expired as i32, "service_restarted")
    );
    let settled = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(settled.state, pb::ExecutionState::Lost as i32);
    restarted.stop();
}
