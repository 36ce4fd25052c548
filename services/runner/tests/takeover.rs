//! Takeover (`docs/scale-out.md` stage 3): real `serve` replicas on one PostgreSQL with
//! short ownership leases. When a replica dies (SIGKILL) or freezes (SIGSTOP) past its
//! lease, and no process serves under its name, one survivor takes each of its live
//! executions over exactly once: the turn fails `provider_lost`, its questions expire
//! `provider_process_lost` (never replayed), the execution is `lost` / `OWNER_LOST`, and
//! every stream shows those endings once, after what the dead owner wrote, with no gap.

use std::net::SocketAddr;

use cursor_runner_e2e::*;
use nix::sys::signal::Signal;
use proto as pb;
use sqlx::Connection;

/// Short, so a test waits one out; four renewals (and takeover scans) fit in it.
const LEASE_MS: u64 = 2_000;
/// `serve`'s exit status when its lease is lost (`runner::replica::LEASE_LOST_EXIT`).
const LEASE_LOST_EXIT: i32 = 75;

/// `serve` as replica `name`, its agents scripted by `scenario`, its `/metrics` on the
/// returned address.
fn replica(database_url: &str, dirs: &ServiceDirs, name: &str, scenario: &str) -> (ServiceProcess, SocketAddr) {
    replica_with(database_url, dirs, name, scenario, Vec::new())
}

/// [`replica`] with more of the service's environment.
fn replica_with(
    database_url: &str,
    dirs: &ServiceDirs,
    name: &str,
    scenario: &str,
    more_env: Vec<(String, String)>,
) -> (ServiceProcess, SocketAddr) {
    let mut env = replica_env(name, LEASE_MS);
    env.push(("CURSOR_RUNNER_METRICS_LISTEN".to_owned(), ANY_PORT.to_owned()));
    env.extend(more_env);
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner"));
    let process = ServiceProcess::serve_in(binary, database_url, dirs, scenario, env);
    let metrics = process.metrics_address();
    (process, metrics)
}

/// Executions this replica took over, from its `/metrics`.
fn taken_over(metrics: SocketAddr) -> u64 {
    scrape_metrics(metrics)
        .lines()
        .find_map(|line| line.strip_prefix("cursor_runner_takeovers_total "))
        .and_then(|value| value.trim().parse().ok())
        .expect("cursor_runner_takeovers_total is exposed")
}

/// The execution's whole stream, read through `client` until it is caught up after the
/// turn settled: each sequence once, from 1 with no gap, and one settlement.
async fn settled_stream(client: &mut Client, execution_id: &str) -> Vec<pb::ActivityEvent> {
    let mut events = Subscriber::open(client, execution_id, 0).await.unwrap();
    let mut seen = events.until_turn_settles().await;
    seen.extend(events.until_caught_up().await);
    let sequences: Vec<i64> = seen.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        (1..=seen.len() as i64).collect::<Vec<_>>(),
        "every event once, in order, with no gap"
    );
    seen
}

fn count(events: &[pb::ActivityEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}

/// The takeover's endings, each once: the question expired as the agent's loss (never
/// replayable), the turn failed `provider_lost`, last.
fn assert_taken_over_once(events: &[pb::ActivityEvent]) {
    assert_eq!(count(events, "turn.failed"), 1, "{:?}", types(events));
    assert_eq!(count(events, "runtime_request.expired"), 1, "{:?}", types(events));
    let expired = events
        .iter()
        .find(|e| e.event_type == "runtime_request.expired")
        .map(payload)
        .unwrap();
    assert_eq!(expired["reason"], "provider_process_lost");
    assert_eq!(expired["replayAllowed"], false);
    let last = events.iter().rev().find(|e| is_settlement(&e.event_type)).unwrap();
    assert_eq!(
        (last.event_type.as_str(), payload(last)["failureReason"].as_str()),
        ("turn.failed", Some("provider_lost"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_mid_turn_with_a_pending_question_is_taken_over_exactly_once() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs: Vec<ServiceDirs> = (0..3).map(|_| ServiceDirs::new()).collect();
    let (a, _) = replica(&database.url, &dirs[0], "replica-a", "question_then_talks_on.json");
    let mut a_client = a.client().await;
    let (execution, _, created) = question_asked(&mut a_client, &dirs[0].workspace, "a").await;
    let agents = descendants_of(a.child.id() as i32);
    let (b, b_metrics) = replica(&database.url, &dirs[1], "replica-b", "demo.json");
    let (c, c_metrics) = replica(&database.url, &dirs[2], "replica-c", "demo.json");
    let (mut b_client, mut c_client) = (b.client().await, c.client().await);

    a.kill();
    let lost = execution_in_state(&mut b_client, &execution.execution_id, pb::ExecutionState::Lost).await;
    assert_eq!(lost.failure_reason, "OWNER_LOST");
    assert!(
        ["replica-b", "replica-c"].contains(&lost.owner_replica.as_str()),
        "a survivor owns it now: {}",
        lost.owner_replica
    );
    let question = get_interaction(&mut c_client, created["interactionId"].as_str().unwrap()).await;
    assert_eq!(
        (question.state, question.reason.as_str(), question.replay_allowed),
        (pb::InteractionState::Expired as i32, "provider_process_lost", false)
    );
    let refused = b_client
        .answer_interaction(one_question_answer(&created, "answer-late", "pg"))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "INTERACTION_NOT_PENDING");
    until_all_gone("the dead owner's agents", &agents).await;

    let through_b = settled_stream(&mut b_client, &execution.execution_id).await;
    assert_taken_over_once(&through_b);
    // Several scans later, nobody settled it again.
    tokio::time::sleep(std::time::Duration::from_millis(LEASE_MS)).await;
    let through_c = settled_stream(&mut c_client, &execution.execution_id).await;
    assert_eq!(types(&through_c), types(&through_b));
    assert_eq!(taken_over(b_metrics) + taken_over(c_metrics), 1);
    b.stop();
    c.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_survivors_racing_settle_each_of_several_executions_exactly_once() {
    const EXECUTIONS: usize = 4;
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs: Vec<ServiceDirs> = (0..3).map(|_| ServiceDirs::new()).collect();
    let (a, _) = replica(&database.url, &dirs[0], "replica-a", "demo.json");
    let mut a_client = a.client().await;
    let mut executions = Vec::new();
    for n in 0..EXECUTIONS {
        executions.push(
            question_asked(&mut a_client, &dirs[0].workspace, &format!("a{n}"))
                .await
                .0,
        );
    }
    let (b, b_metrics) = replica(&database.url, &dirs[1], "replica-b", "demo.json");
    let (c, c_metrics) = replica(&database.url, &dirs[2], "replica-c", "demo.json");
    let (mut b_client, mut c_client) = (b.client().await, c.client().await);

    a.kill();
    for execution in &executions {
        execution_in_state(&mut c_client, &execution.execution_id, pb::ExecutionState::Lost).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(LEASE_MS)).await;
    for execution in &executions {
        assert_taken_over_once(&settled_stream(&mut b_client, &execution.execution_id).await);
    }
    assert_eq!(
        taken_over(b_metrics) + taken_over(c_metrics),
        EXECUTIONS as u64,
        "each execution was taken over by exactly one survivor"
    );
    b.stop();
    c.stop();
    database.drop_database().await;
}

/// How many owners [`each_of_twenty_owners_killed_mid_turn_with_a_pending_question_is_taken_over_exactly_once`]
/// kills, one after another.
const KILLS: usize = 20;

/// SIGKILL of the owner mid-turn, twenty times over in one fleet of three (each dead owner
/// restarted under its name before the next kill): each execution is taken over once, its
/// question expires once and is never delivered, its agents are gone, and its stream, read
/// again once every kill is over, holds each ending exactly once with no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_of_twenty_owners_killed_mid_turn_with_a_pending_question_is_taken_over_exactly_once() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let names = ["replica-a", "replica-b", "replica-c"];
    let dirs: Vec<ServiceDirs> = names.iter().map(|_| ServiceDirs::new()).collect();
    let start = |i: usize| replica(&database.url, &dirs[i], names[i], "question_then_talks_on.json").0;
    let mut replicas: Vec<Option<ServiceProcess>> = (0..names.len()).map(|i| Some(start(i))).collect();
    let mut taken_over = Vec::new();
    for kill in 0..KILLS {
        let owner = kill % names.len();
        let mut client = replicas[owner].as_ref().unwrap().client().await;
        let (execution, _, created) =
            question_asked(&mut client, &dirs[owner].workspace, &format!("kill-{kill}")).await;
        let dying = replicas[owner].take().unwrap();
        let agents = descendants_of(dying.child.id() as i32);
        dying.kill();
        let survivor = replicas.iter().flatten().next().unwrap();
        let mut client = survivor.client().await;
        let lost = execution_in_state(&mut client, &execution.execution_id, pb::ExecutionState::Lost).await;
        assert_eq!(lost.failure_reason, "OWNER_LOST", "kill {kill}");
        let question = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
        assert_eq!(
            (question.state, question.reason.as_str()),
            (pb::InteractionState::Expired as i32, "provider_process_lost"),
            "kill {kill}"
        );
        until_all_gone("the dead owner's agents", &agents).await;
        assert_eq!(
            answers_read(&dirs[owner].record),
            0,
            "kill {kill}: nothing was delivered"
        );
        replicas[owner] = Some(start(owner));
        taken_over.push(execution.execution_id);
    }
    // A second takeover of any of them would have appended its endings again by now.
    tokio::time::sleep(std::time::Duration::from_millis(LEASE_MS)).await;
    let mut client = replicas[0].as_ref().unwrap().client().await;
    for execution_id in &taken_over {
        assert_taken_over_once(&settled_stream(&mut client, execution_id).await);
    }
    for replica in replicas.into_iter().flatten() {
        replica.stop();
    }
    database.drop_database().await;
}

/// The answers the agents of one replica read: responses with an `answered` outcome.
fn answers_read(record: &std::path::Path) -> usize {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m.get("method").is_none() && m["result"]["outcome"]["outcome"] == "answered")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_by_its_owners_death_resumes_on_a_survivor_from_its_cursor_with_no_gap_or_duplicate() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs: Vec<ServiceDirs> = (0..2).map(|_| ServiceDirs::new()).collect();
    let (a, _) = replica(&database.url, &dirs[0], "replica-a", "question_then_talks_on.json");
    let mut a_client = a.client().await;
    let (execution, _, _) = question_asked(&mut a_client, &dirs[0].workspace, "a").await;
    let mut on_a = Subscriber::open(&mut a_client, &execution.execution_id, 0)
        .await
        .unwrap();
    let mut cursor = 0;
    for _ in 0..20 {
        cursor = on_a.next_event().await.sequence;
    }
    let (b, _) = replica(&database.url, &dirs[1], "replica-b", "demo.json");
    let mut b_client = b.client().await;

    a.kill();
    let mut on_b = Subscriber::open(&mut b_client, &execution.execution_id, cursor)
        .await
        .unwrap();
    let resumed = on_b.until_turn_settles().await;
    let sequences: Vec<i64> = resumed.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        (cursor + 1..=cursor + resumed.len() as i64).collect::<Vec<_>>(),
        "the events after the cursor, each once, with no gap"
    );
    assert_taken_over_once(&resumed);
    b.stop();
    database.drop_database().await;
}

/// The head of an execution's events in the database.
async fn head(url: &str, execution_id: &str) -> i64 {
    let mut database = sqlx::PgConnection::connect(url).await.unwrap();
    let (head,): (Option<i64>,) = sqlx::query_as("SELECT MAX(sequence) FROM events WHERE execution_id = $1")
        .bind(execution_id)
        .fetch_one(&mut database)
        .await
        .unwrap();
    head.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_frozen_past_its_lease_is_taken_over_and_writes_nothing_once_it_wakes() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs: Vec<ServiceDirs> = (0..2).map(|_| ServiceDirs::new()).collect();
    let (mut a, _) = replica(&database.url, &dirs[0], "replica-a", "question_then_talks_on.json");
    let mut a_client = a.client().await;
    let (execution, _, _) = question_asked(&mut a_client, &dirs[0].workspace, "a").await;
    let (b, _) = replica(&database.url, &dirs[1], "replica-b", "demo.json");
    let mut b_client = b.client().await;

    // A partition, as the owner sees it: it is frozen with writes due every 20 ms.
    a.signal(Signal::SIGSTOP);
    execution_in_state(&mut b_client, &execution.execution_id, pb::ExecutionState::Lost).await;
    let settled = settled_stream(&mut b_client, &execution.execution_id).await;
    assert_taken_over_once(&settled);
    let at_takeover = head(&database.url, &execution.execution_id).await;
    a.signal(Signal::SIGCONT);

    assert_eq!(
        a.exit_status().await.code(),
        Some(LEASE_LOST_EXIT),
        "the woken owner finds its lease gone and exits"
    );
    assert_eq!(
        head(&database.url, &execution.execution_id).await,
        at_takeover,
        "nothing the woken owner had queued landed after the takeover"
    );
    let after = get_execution(&mut b_client, &execution.execution_id).await;
    assert_eq!(
        (after.state, after.owner_replica.as_str()),
        (pb::ExecutionState::Lost as i32, "replica-b")
    );
    b.stop();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_frozen_inside_a_transaction_is_taken_over_once_the_database_ends_that_transaction() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs: Vec<ServiceDirs> = (0..2).map(|_| ServiceDirs::new()).collect();
    // Every batch of replica-a stops inside its transaction, before its commit.
    let hold = vec![("CURSOR_RUNNER_FAILPOINT".to_owned(), "holding_a_batch_open".to_owned())];
    let (a, _) = replica_with(&database.url, &dirs[0], "replica-a", "demo.json", hold);
    let mut a_client = a.client().await;
    let execution = create_execution_in(&mut a_client, &dirs[0].workspace, "create-a").await;
    // The turn's batch (the turn, the execution pointing at it, `turn.started`) locks the
    // execution row and stops there; then the process freezes with it open.
    let held = tokio::spawn({
        let id = execution.execution_id.clone();
        async move { start_turn(&mut a_client, &id, "turn-a").await }
    });
    a.wait_for_stderr("failpoint reached: holding_a_batch_open");
    a.signal(Signal::SIGSTOP);
    let (b, _) = replica(&database.url, &dirs[1], "replica-b", "demo.json");
    let mut b_client = b.client().await;

    let lost = execution_in_state(&mut b_client, &execution.execution_id, pb::ExecutionState::Lost).await;
    assert_eq!(
        (
            lost.failure_reason.as_str(),
            lost.owner_replica.as_str(),
            lost.turn_count
        ),
        ("OWNER_LOST", "replica-b", 0),
        "taken over once the frozen transaction was ended, and nothing of it committed"
    );
    let mut events = Subscriber::open(&mut b_client, &execution.execution_id, 0)
        .await
        .unwrap();
    let shown = events.until_caught_up().await;
    assert_eq!(count(&shown, "turn.started"), 0, "{:?}", types(&shown));
    held.abort();
    a.kill();
    b.stop();
    database.drop_database().await;
}

/// Polls `query` (one boolean) on the database until it holds.
async fn until_database_says(url: &str, what: &str, query: &'static str) {
    let mut database = sqlx::PgConnection::connect(url).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (holds,): (bool,) = sqlx::query_as(query).fetch_one(&mut database).await.unwrap();
        if holds {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_key_a_survivor_ended_while_its_owner_was_frozen_gets_the_outcome_every_retry_gets() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs: Vec<ServiceDirs> = (0..2).map(|_| ServiceDirs::new()).collect();
    let (mut a, _) = replica(&database.url, &dirs[0], "replica-a", "slow_start.json");
    let mut a_client = a.client().await;
    let (b, _) = replica(&database.url, &dirs[1], "replica-b", "demo.json");
    let mut b_client = b.client().await;
    let workspace = dirs[0].workspace.display().to_string();
    let create = proto::CreateExecutionRequest {
        request_id: "create-held".into(),
        workspace,
        ..Default::default()
    };
    let first_call = tokio::spawn({
        let create = create.clone();
        async move { a_client.create_execution(create).await }
    });
    until_database_says(
        &database.url,
        "the call's key in flight",
        "SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE request_id = 'create-held' AND state = 'in_flight')",
    )
    .await;
    // Holds back the completion of the key (the call's last write) until the owner is gone.
    let mut holder = sqlx::PgConnection::connect(&database.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("LOCK TABLE idempotency_keys IN EXCLUSIVE MODE")
        .execute(&mut holder)
        .await
        .unwrap();
    until_database_says(
        &database.url,
        "the execution ready",
        "SELECT EXISTS (SELECT 1 FROM executions WHERE state = 'ready')",
    )
    .await;
    a.signal(Signal::SIGSTOP);
    until_database_says(
        &database.url,
        "the takeover",
        "SELECT EXISTS (SELECT 1 FROM executions WHERE state = 'lost')",
    )
    .await;
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    until_database_says(
        &database.url,
        "the key ended by the survivor",
        "SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE request_id = 'create-held' AND state = 'done')",
    )
    .await;
    a.signal(Signal::SIGCONT);

    let first = first_call
        .await
        .unwrap()
        .map(|r| r.into_inner().execution.unwrap().state);
    let retried = b_client
        .create_execution(create)
        .await
        .map(|r| r.into_inner().execution.unwrap().state);
    let outcome = |r: &Result<i32, tonic::Status>| match r {
        Ok(state) => format!("ok {state}"),
        Err(status) => format!("{:?} {}", status.code(), reason(status)),
    };
    assert_eq!(outcome(&first), outcome(&retried), "one request_id, one outcome");
    assert_eq!(outcome(&retried), "Aborted REQUEST_INTERRUPTED");
    let _ = a.exit_status().await;
    b.stop();
    database.drop_database().await;
}
