//! A rolling restart (`docs/scale-out.md` stage 8): three `serve` replicas on one
//! PostgreSQL, each forwarding calls to the others, are restarted one after another — a
//! SIGTERM drain, then a new process under the same name and state directory — while a
//! soak of executions keeps asking questions and getting answers. The soak is driven as a
//! control plane drives it: through whichever replica is up, retrying under the same
//! request id what the service says to retry, recovering an execution a drain ended.
//! Nothing committed is lost, no stream has a gap or a duplicate, and every question is
//! delivered exactly once or expired.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use cursor_runner_e2e::*;
use nix::sys::signal::Signal;
use proto as pb;
use serde_json::{Value, json};
use tonic::Code;

/// Executions soaking at once, spread over the replicas.
const EXECUTIONS: usize = 12;
/// Every replica here ends by a drain, so no test waits out a lease.
const LEASE_MS: u64 = 60_000;
/// Short, so a restart is quick; turns answered in time finish, the others are cancelled.
const DRAIN_DEADLINE_SECS: u64 = 2;
/// What each execution still runs once every replica was restarted.
const TURNS_AFTER_THE_RESTARTS: usize = 2;
const NAMES: [&str; 3] = ["replica-a", "replica-b", "replica-c"];
/// Each turn asks one question (ids from 1000), answered with the first option.
const SCENARIO: &str = "questions_every_turn.json";
/// How often a driver looks for its turn's question or its end.
const POLL: Duration = Duration::from_millis(20);

fn start(database_url: &str, dirs: &ServiceDirs, name: &str, token: &str) -> ServiceProcess {
    let mut env = fleet_replica_env(name, LEASE_MS, dirs, token);
    env.push((
        "CURSOR_RUNNER_DRAIN_DEADLINE_SECS".to_owned(),
        DRAIN_DEADLINE_SECS.to_string(),
    ));
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner"));
    ServiceProcess::serve_in(binary, database_url, dirs, SCENARIO, env)
}

/// The replicas a control plane calls: a replica being restarted is taken out first, as
/// Kubernetes takes a terminating pod out of its Service before the pod drains.
struct Endpoints {
    clients: Mutex<Vec<Option<Client>>>,
    next: AtomicUsize,
}

impl Endpoints {
    /// The next replica in the rotation that is up.
    fn any(&self) -> Client {
        let clients = self.clients.lock().unwrap();
        (0..clients.len())
            .map(|_| self.next.fetch_add(1, Ordering::Relaxed) % clients.len())
            .find_map(|i| clients[i].clone())
            .expect("two replicas are always up")
    }

    fn set(&self, index: usize, client: Option<Client>) {
        self.clients.lock().unwrap()[index] = client;
    }
}

/// Whether a control plane retries `status` as it is, under the same request id: the
/// service says the call may succeed elsewhere or later (a drain, an unreachable owner,
/// a replica gone mid-call).
fn retried(status: &tonic::Status) -> bool {
    matches!(status.code(), Code::Unavailable | Code::Unknown | Code::Cancelled) || reason(status) == "POOL_EXHAUSTED"
}

/// Calls `call` through the replicas until one answers with something other than a
/// retry; that answer.
async fn until_answered<T, F, Fut>(endpoints: &Endpoints, mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut(Client) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match call(endpoints.any()).await {
            Ok(response) => return Ok(response.into_inner()),
            Err(status) if retried(&status) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(POLL).await;
            }
            Err(status) => return Err(status),
        }
    }
}

async fn execution(endpoints: &Endpoints, execution_id: &str) -> pb::Execution {
    let request = pb::GetExecutionRequest {
        execution_id: execution_id.to_owned(),
    };
    until_answered(endpoints, |mut c| {
        let request = request.clone();
        async move { c.get_execution(request).await }
    })
    .await
    .expect("GetExecution")
    .execution
    .unwrap()
}

/// `RecoverExecution` of a lost execution through any replica, once per generation.
async fn recover(endpoints: &Endpoints, lost: &pb::Execution) {
    let request = pb::RecoverExecutionRequest {
        request_id: format!("recover-{}-{}", lost.execution_id, lost.generation),
        execution_id: lost.execution_id.clone(),
        ..Default::default()
    };
    until_answered(endpoints, |mut c| {
        let request = request.clone();
        async move { c.recover_execution(request).await }
    })
    .await
    .expect("a drained execution recovers on any replica");
}

/// Starts turn `n` of the execution, recovering it first when a drain ended it; how many
/// recoveries that took.
async fn start_turn_n(endpoints: &Endpoints, execution_id: &str, n: usize) -> usize {
    let (mut attempt, mut recoveries) = (0, 0);
    loop {
        let request = pb::StartTurnRequest {
            request_id: format!("turn-{execution_id}-{n}-{attempt}"),
            execution_id: execution_id.to_owned(),
            prompt: vec![pb::PromptBlock {
                content: Some(pb::prompt_block::Content::Text(format!("turn {n}"))),
            }],
            ..Default::default()
        };
        let refused = match until_answered(endpoints, |mut c| {
            let request = request.clone();
            async move { c.start_turn(request).await }
        })
        .await
        {
            Ok(_) => return recoveries,
            Err(refused) => refused,
        };
        assert_eq!(reason(&refused), "EXECUTION_NOT_READY", "{refused:?}");
        let now = execution(endpoints, execution_id).await;
        match pb::ExecutionState::try_from(now.state).unwrap() {
            pb::ExecutionState::Lost => {
                assert_eq!(now.failure_reason, "DRAINING", "only drains end executions here");
                recover(endpoints, &now).await;
                recoveries += 1;
            }
            pb::ExecutionState::Starting | pb::ExecutionState::Ready => tokio::time::sleep(POLL).await,
            ended => panic!("a drain left execution {execution_id} {ended:?}: it cannot be continued"),
        }
        attempt += 1;
    }
}

/// Answers the running turn's question (when it still waits) and waits for the turn to
/// end.
async fn answer_until_settled(endpoints: &Endpoints, execution_id: &str) {
    loop {
        let request = pb::ListInteractionsRequest {
            execution_id: execution_id.to_owned(),
            state: pb::InteractionState::Pending as i32,
            ..Default::default()
        };
        let pending = until_answered(endpoints, |mut c| {
            let request = request.clone();
            async move { c.list_interactions(request).await }
        })
        .await
        .expect("ListInteractions")
        .interactions;
        for question in pending {
            let created = json!({"interactionId": question.interaction_id, "etag": question.etag});
            let request = one_question_answer(&created, &format!("answer-{}", question.interaction_id), "option-1");
            match until_answered(endpoints, |mut c| {
                let request = request.clone();
                async move { c.answer_interaction(request).await }
            })
            .await
            {
                Ok(_) => {}
                // The drain cancelled the turn first: the question expired.
                Err(refused) => assert_eq!(reason(&refused), "INTERACTION_NOT_PENDING", "{refused:?}"),
            }
        }
        let now = execution(endpoints, execution_id).await;
        if now.active_turn_id.is_empty() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One execution's soak: turn after turn until `stop`, then `TURNS_AFTER_THE_RESTARTS`
/// more; its turns and recoveries.
async fn drive(endpoints: &Endpoints, execution_id: &str, stop: &AtomicBool) -> (usize, usize) {
    let (mut turns, mut recoveries, mut after_stop) = (0, 0, 0);
    while after_stop < TURNS_AFTER_THE_RESTARTS {
        if stop.load(Ordering::Relaxed) {
            after_stop += 1;
        }
        turns += 1;
        recoveries += start_turn_n(endpoints, execution_id, turns).await;
        answer_until_settled(endpoints, execution_id).await;
    }
    (turns, recoveries)
}

/// Every interaction of the execution, through one replica.
async fn interactions(client: &mut Client, execution_id: &str) -> Vec<pb::Interaction> {
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_interactions(pb::ListInteractionsRequest {
                execution_id: execution_id.to_owned(),
                page_token: page_token.clone(),
                page_size: 100,
                ..Default::default()
            })
            .await
            .expect("ListInteractions")
            .into_inner();
        all.extend(page.interactions);
        if page.next_page_token.is_empty() {
            return all;
        }
        page_token = page.next_page_token;
    }
}

/// The answers the agents of one replica read: responses to a question (ids from 1000)
/// with an `answered` outcome.
fn answers_read(record: &std::path::Path) -> usize {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m.get("method").is_none() && m["id"].as_u64().is_some_and(|id| id >= 1000))
        .filter(|m| m["result"]["outcome"]["outcome"] == "answered")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_three_replicas_during_a_soak_loses_no_event_and_delivers_no_answer_twice() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let token = format!("rolling-fleet-token-{}", uuid::Uuid::new_v4().simple());
    let dirs: Vec<ServiceDirs> = NAMES.iter().map(|_| ServiceDirs::new()).collect();
    let mut processes: Vec<ServiceProcess> = NAMES
        .iter()
        .zip(&dirs)
        .map(|(name, dirs)| start(&database.url, dirs, name, &token))
        .collect();
    let mut clients = Vec::new();
    for process in &processes {
        clients.push(Some(process.client().await));
    }
    let endpoints = std::sync::Arc::new(Endpoints {
        clients: Mutex::new(clients),
        next: AtomicUsize::new(0),
    });
    // Created through each replica in turn: each owns a third of them.
    let mut executions = Vec::new();
    for n in 0..EXECUTIONS {
        let mut client = endpoints.any();
        executions
            .push(create_execution_in(&mut client, &dirs[n % NAMES.len()].workspace, &format!("create-{n}")).await);
    }
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let drivers: Vec<_> = executions
        .iter()
        .map(|e| {
            let (endpoints, stop, id) = (endpoints.clone(), stop.clone(), e.execution_id.clone());
            tokio::spawn(async move { drive(&endpoints, &id, &stop).await })
        })
        .collect();

    for (index, name) in NAMES.iter().enumerate() {
        // Answers flow for a while before each restart.
        tokio::time::sleep(Duration::from_millis(500)).await;
        endpoints.set(index, None);
        let mut draining = processes.remove(index);
        draining.signal(Signal::SIGTERM);
        let status = draining.exit_status().await;
        assert!(status.success(), "{name} drained and exited 0: {status:?}");
        let restarted = start(&database.url, &dirs[index], name, &token);
        endpoints.set(index, Some(restarted.client().await));
        processes.insert(index, restarted);
    }
    stop.store(true, Ordering::Relaxed);
    let (mut turns, mut recoveries) = (0, 0);
    for driver in drivers {
        let (driven, recovered) = driver.await.expect("a driver");
        (turns, recoveries) = (turns + driven, recoveries + recovered);
    }

    let mut client = processes[0].client().await;
    let (mut delivered, mut expired) = (0, 0);
    for execution in &executions {
        let mut stream = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
        let events = stream.until_caught_up().await;
        let sequences: Vec<i64> = events.iter().map(|e| e.sequence).collect();
        assert_eq!(
            sequences,
            (1..=events.len() as i64).collect::<Vec<_>>(),
            "every event once, in order, with no gap"
        );
        let ids: HashSet<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
        assert_eq!(ids.len(), events.len(), "no event twice");
        for interaction in interactions(&mut client, &execution.execution_id).await {
            match pb::InteractionState::try_from(interaction.state).unwrap() {
                pb::InteractionState::Delivered => delivered += 1,
                pb::InteractionState::Expired => {
                    assert!(!interaction.replay_allowed, "{interaction:?}");
                    expired += 1
                }
                other => panic!("an interaction left {other:?}: {interaction:?}"),
            }
        }
    }
    let read: usize = dirs.iter().map(|d| answers_read(&d.record)).sum();
    println!(
        "{turns} turns, {recoveries} recoveries; {delivered} answers delivered, {expired} questions expired; \
         the agents read {read}"
    );
    assert_eq!(
        read, delivered,
        "each delivered answer reached its agent once, and no other did"
    );
    assert!(
        turns >= EXECUTIONS * (TURNS_AFTER_THE_RESTARTS + 1),
        "the soak ran: {turns} turns"
    );
    // Every execution lived on some replica at each restart: each was drained and
    // recovered at least once.
    assert!(recoveries >= EXECUTIONS, "{recoveries} recoveries");

    for execution in &executions {
        let request = pb::CloseExecutionRequest {
            request_id: format!("close-{}", execution.execution_id),
            execution_id: execution.execution_id.clone(),
        };
        until_answered(&endpoints, |mut c| {
            let request = request.clone();
            async move { c.close_execution(request).await }
        })
        .await
        .expect("CloseExecution");
    }
    for process in processes {
        process.stop();
    }
    database.drop_database().await;
}
