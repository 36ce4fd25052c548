//! Database outages while turns stream, through the real binary and the gRPC API. Each test
//! runs a PostgreSQL cluster of its own and stops or restarts it under a live service:
//! executions ride out restarts (their writes wait, their agents' output waits in the pipe,
//! nothing is dropped); past the outage limit an execution fails and its turn still settles
//! once the database is back; readiness follows the database and calls fail fast and typed.
//! A database that stays up but refuses the service (new connections, or writes) is ridden
//! out the same way.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cursor_runner_e2e::private_postgres::PrivatePostgres;
use cursor_runner_e2e::*;
use proto::stream_events_response::Frame;
use serde_json::{Value, json};

/// What an agent flooding a stalled store holds in memory, and how its updates go in once
/// the store is back.
#[path = "store_outage/flooding.rs"]
mod flooding;

/// Restarts during the streaming test (the count).
const RESTARTS: usize = 20;
/// Executions streaming at once.
const EXECUTIONS: usize = 3;
/// How long a call is retried while it meets the outage before the test gives up.
const CALL_PATIENCE: Duration = Duration::from_secs(60);
/// The JSON-RPC id of turn `t`'s question is `QUESTION_ID_BASE + t`.
const QUESTION_ID_BASE: u64 = 1000;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_cursor-runner"))
}

/// A scenario of `turns` turns, each streaming a tool call every 40 ms, asking one
/// question (its own JSON-RPC id) half-way, and ending normally.
fn streaming_scenario(dir: &Path, turns: u64, updates_per_half: u64) -> PathBuf {
    let half = |turn: u64, part: &str| -> Vec<Value> {
        (0..updates_per_half)
            .flat_map(|i| {
                [
                    json!({"update": {"sessionUpdate": "tool_call", "toolCallId": format!("tc-{turn}-{part}-{i}"),
                        "title": "step", "kind": "execute", "status": "completed"}}),
                    json!({"sleep_ms": 40}),
                ]
            })
            .collect()
    };
    let turns: Vec<Value> = (0..turns)
        .map(|t| {
            let mut steps = half(t, "a");
            steps.push(
                json!({"request": {"method": "cursor/ask_question", "id": QUESTION_ID_BASE + t, "params": {
                "toolCallId": format!("tq-{t}"), "title": "Go on?",
                "questions": [{"id": "q", "prompt": "Go on?", "allowMultiple": false,
                    "options": [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]}]}}}),
            );
            steps.extend(half(t, "b"));
            Value::Array(steps)
        })
        .collect();
    let path = dir.join("streaming.json");
    std::fs::write(&path, json!({"session_id": "sess-outage", "turns": turns}).to_string()).unwrap();
    path
}

/// A scenario of one turn playing `steps`, written as `name` in the service's directory.
fn one_turn_scenario(dirs: &ServiceDirs, name: &str, steps: &[Value]) -> PathBuf {
    let path = dirs.root.path().join(name);
    std::fs::write(&path, json!({"turns": [steps]}).to_string()).unwrap();
    path
}

fn serve(database_url: &str, dirs: &ServiceDirs, scenario: &Path, args: &[&str]) -> ServiceProcess {
    ServiceProcess::start(ServiceSettings {
        binary: binary(),
        database_url,
        state_dir: dirs.root.path(),
        scenario: scenario.to_str().unwrap(),
        record: &dirs.record,
        env: Vec::new(),
        args: args.iter().map(|a| a.to_string()).collect(),
    })
}

/// Runs `call` until it returns anything but `UNAVAILABLE` (the outage's typed answer),
/// within `CALL_PATIENCE`.
async fn retrying<T, F, Fut>(what: &str, call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    retrying_while(&[tonic::Code::Unavailable], CALL_PATIENCE, what, call).await
}

/// `GetExecution`, retried while it meets the outage.
async fn execution_riding_out(client: &Client, execution_id: &str) -> proto::Execution {
    retrying("GetExecution", || {
        let (mut client, id) = (client.clone(), execution_id.to_owned());
        async move {
            client
                .get_execution(proto::GetExecutionRequest { execution_id: id })
                .await
        }
    })
    .await
    .into_inner()
    .execution
    .unwrap()
}

/// A subscriber that resumes from its cursor whenever the stream ends (an outage ends it
/// with `UNAVAILABLE`), and checks that what it sees is contiguous: no gap, no duplicate.
struct ResumingSubscriber {
    client: Client,
    execution_id: String,
    cursor: i64,
    stream: Option<tonic::Streaming<proto::StreamEventsResponse>>,
    seen_ids: HashSet<String>,
    /// `next` ends at the first caught-up frame (a replay of what is stored).
    stop_at_head: bool,
}

impl ResumingSubscriber {
    fn new(client: Client, execution_id: &str) -> Self {
        Self {
            client,
            execution_id: execution_id.into(),
            cursor: 0,
            stream: None,
            seen_ids: HashSet::new(),
            stop_at_head: false,
        }
    }

    fn replay(client: Client, execution_id: &str) -> Self {
        Self {
            stop_at_head: true,
            ..Self::new(client, execution_id)
        }
    }

    async fn next_event(&mut self) -> proto::ActivityEvent {
        self.next().await.expect("an event, not the head")
    }

    /// The next event, or `None` once the stream says it is caught up with the head.
    async fn next(&mut self) -> Option<proto::ActivityEvent> {
        let give_up = tokio::time::Instant::now() + CALL_PATIENCE;
        loop {
            assert!(
                tokio::time::Instant::now() < give_up,
                "no event on {}",
                self.execution_id
            );
            let Some(stream) = &mut self.stream else {
                let opened = self
                    .client
                    .stream_events(proto::StreamEventsRequest {
                        execution_id: self.execution_id.clone(),
                        after_sequence: self.cursor,
                    })
                    .await;
                match opened {
                    Ok(response) => self.stream = Some(response.into_inner()),
                    Err(status) if status.code() == tonic::Code::Unavailable => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(status) => panic!("StreamEvents: {status:?}"),
                }
                continue;
            };
            match tokio::time::timeout(WAIT, stream.message()).await {
                Ok(Ok(Some(response))) => match response.frame {
                    Some(Frame::Event(event)) => {
                        assert_eq!(event.sequence, self.cursor + 1, "contiguous on {}", self.execution_id);
                        assert!(self.seen_ids.insert(event.event_id.clone()), "no event twice");
                        self.cursor = event.sequence;
                        return Some(event);
                    }
                    Some(Frame::CaughtUp(_)) if self.stop_at_head => return None,
                    _ => {}
                },
                Ok(Ok(None)) => self.stream = None,
                Ok(Err(status)) if status.code() == tonic::Code::Unavailable => self.stream = None,
                Ok(Err(status)) => panic!("StreamEvents: {status:?}"),
                Err(_) => panic!("no frame within {WAIT:?} on {}", self.execution_id),
            }
        }
    }

    async fn until(&mut self, mut done: impl FnMut(&proto::ActivityEvent) -> bool) -> proto::ActivityEvent {
        loop {
            let event = self.next_event().await;
            if done(&event) {
                return event;
            }
        }
    }
}

/// One execution running turns, each answered once, until `stop` says enough: the number
/// of turns it completed.
async fn run_turns(
    client: Client,
    workspace: PathBuf,
    index: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (String, u64) {
    let execution = retrying("CreateExecution", || {
        let mut client = client.clone();
        let workspace = workspace.clone();
        async move {
            client
                .create_execution(proto::CreateExecutionRequest {
                    request_id: format!("create-{index}"),
                    workspace: workspace.display().to_string(),
                    ..Default::default()
                })
                .await
        }
    })
    .await
    .into_inner()
    .execution
    .unwrap();
    let id = execution.execution_id.clone();
    let mut events = ResumingSubscriber::new(client.clone(), &id);
    let mut turns = 0;
    while !*stop.borrow() {
        let request_id = format!("turn-{index}-{turns}");
        let turn = retrying("StartTurn", || {
            let (mut client, id, request_id) = (client.clone(), id.clone(), request_id.clone());
            async move {
                client
                    .start_turn(proto::StartTurnRequest {
                        request_id,
                        execution_id: id,
                        prompt: vec![proto::PromptBlock {
                            content: Some(proto::prompt_block::Content::Text("go".into())),
                        }],
                        ..Default::default()
                    })
                    .await
            }
        })
        .await
        .into_inner()
        .turn
        .unwrap();
        let created = events.until(|e| e.event_type == "runtime_request.created").await;
        let answer = one_question_answer(&payload(&created), &format!("answer-{index}-{turns}"), "option-1");
        let answered = retrying("AnswerInteraction", || {
            let (mut client, answer) = (client.clone(), answer.clone());
            async move { client.answer_interaction(answer).await }
        })
        .await
        .into_inner()
        .interaction
        .unwrap();
        assert_eq!(
            answered.state,
            proto::InteractionState::Delivered as i32,
            "delivered, then returned"
        );
        let settled = events.until(|e| is_settlement(&e.event_type)).await;
        assert_eq!(
            (settled.event_type.as_str(), settled.turn_id.as_str()),
            ("turn.completed", turn.turn_id.as_str()),
            "{:?}",
            payload(&settled)
        );
        turns += 1;
    }
    (id, turns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn turns_ride_out_twenty_postgres_restarts_while_streaming_and_answering() {
    let pg = PrivatePostgres::start();
    let dirs = ServiceDirs::new();
    let scenario = streaming_scenario(dirs.root.path(), 200, 12);
    let service = serve(&pg.url(), &dirs, &scenario, &[]);
    let client = service.client().await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let drivers: Vec<_> = (0..EXECUTIONS)
        .map(|k| tokio::spawn(run_turns(client.clone(), dirs.workspace.clone(), k, stop_rx.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    for _ in 0..RESTARTS {
        let pg = &pg;
        tokio::task::block_in_place(|| pg.restart());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop_tx.send_replace(true);
    let mut ran = BTreeMap::new();
    for driver in drivers {
        let (id, turns) = driver.await.expect("driver");
        assert!(turns > 0, "execution {id} ran turns");
        ran.insert(id, turns);
    }

    let mut client = client;
    for (id, turns) in &ran {
        let execution = execution_riding_out(&client, id).await;
        assert_eq!(
            execution.state,
            proto::ExecutionState::Ready as i32,
            "{id} was not lost"
        );
        let listed = client
            .list_turns(proto::ListTurnsRequest {
                execution_id: id.clone(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .expect("ListTurns")
            .into_inner();
        assert_eq!(listed.turns.len() as u64, *turns);
        assert!(
            listed
                .turns
                .iter()
                .all(|t| t.state == proto::TurnState::Completed as i32),
            "no turn left running or failed on {id}"
        );
        // Replayed from the start: contiguous, each turn settled once, each answer resolved once.
        let mut replay = ResumingSubscriber::replay(client.clone(), id);
        let mut settled = 0;
        let mut resolved = 0;
        while let Some(event) = replay.next().await {
            settled += u64::from(is_settlement(&event.event_type));
            resolved += u64::from(event.event_type == "runtime_request.resolved");
        }
        assert_eq!((settled, resolved), (*turns, *turns), "on {id}");
    }
    // Each question reached the agent's stdin answered exactly once per execution that asked it.
    let record = std::fs::read_to_string(&dirs.record).unwrap();
    let mut answers: BTreeMap<u64, u64> = BTreeMap::new();
    for line in record.lines().filter(|l| !l.trim().is_empty()) {
        let message: Value = serde_json::from_str(line).unwrap();
        if message.get("method").is_none()
            && let Some(id) = message["id"].as_u64().filter(|id| *id >= QUESTION_ID_BASE)
        {
            *answers.entry(id - QUESTION_ID_BASE).or_default() += 1;
        }
    }
    for (turn, count) in &answers {
        let asked = ran.values().filter(|turns| **turns > *turn).count() as u64;
        assert_eq!(
            *count, asked,
            "turn {turn}'s question: one answer per execution, never two"
        );
    }
    service.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_outage_limit_the_execution_fails_and_its_turn_settles_once_the_store_is_back() {
    let pg = PrivatePostgres::start();
    let dirs = ServiceDirs::new();
    let scenario = streaming_scenario(dirs.root.path(), 1, 200);
    let service = serve(&pg.url(), &dirs, &scenario, &["--store-outage-limit-secs", "1"]);
    let mut client = service.client().await;
    let (execution, turn, _) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    let mut events = ResumingSubscriber::new(client.clone(), &execution.execution_id);
    events.until(|e| e.event_type == "tool.execution.completed").await;

    pg.stop();
    tokio::time::sleep(Duration::from_secs(4)).await;
    pg.start_server();

    let settled = events.until(|e| is_settlement(&e.event_type)).await;
    assert_eq!(
        (settled.event_type.as_str(), settled.turn_id.as_str()),
        ("turn.failed", turn.turn_id.as_str())
    );
    assert_eq!(payload(&settled)["failureReason"], "store_unavailable");
    let record = execution_riding_out(&client, &execution.execution_id).await;
    assert_eq!(record.state, proto::ExecutionState::Lost as i32);
    assert_eq!(record.failure_reason, "STORE_UNAVAILABLE");
    assert!(!process_alive(execution.pid.unwrap()), "the agent was stopped");
    service.kill();
}

/// How a test cuts the service off a database that stays up.
enum Refusal {
    /// New connections refused, open ones terminated (`ALLOW_CONNECTIONS false`:
    /// maintenance, a database being moved).
    NewConnections,
    /// Every write refused (a fail-over that lands the service on a standby).
    Writes,
}

/// A database that refuses the service for a few seconds without going down is an outage
/// like a stopped server: the turn rides it out and completes, every event stored once
/// and in order (the subscriber checks), and the execution stays ready.
async fn a_turn_rides_out(refusal: Refusal) {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let steps: Vec<Value> = (0..100)
        .flat_map(|i| {
            [
                json!({"update": {"sessionUpdate": "tool_call", "toolCallId": format!("tc-{i}"),
                    "title": "step", "kind": "execute", "status": "completed"}}),
                json!({"sleep_ms": 40}),
            ]
        })
        .collect();
    let service = serve(
        &database.url,
        &dirs,
        &one_turn_scenario(&dirs, "steady.json", &steps),
        &[],
    );
    let mut client = service.client().await;
    let (execution, turn, _) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    let mut events = ResumingSubscriber::new(client.clone(), &execution.execution_id);
    events.until(|e| e.event_type == "tool.execution.completed").await;

    let (cut_off, refusal) = (&database, &refusal);
    let refuse = |on: bool| async move {
        match refusal {
            Refusal::NewConnections => cut_off.set_unreachable(on).await,
            Refusal::Writes => cut_off.set_read_only(on).await,
        }
    };
    refuse(true).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    refuse(false).await;

    let settled = events.until(|e| is_settlement(&e.event_type)).await;
    assert_eq!(
        (settled.event_type.as_str(), settled.turn_id.as_str()),
        ("turn.completed", turn.turn_id.as_str())
    );
    let record = execution_riding_out(&client, &execution.execution_id).await;
    assert_eq!(record.state, proto::ExecutionState::Ready as i32, "{record:?}");
    service.kill();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_rides_out_a_database_that_refuses_new_connections_for_a_while() {
    a_turn_rides_out(Refusal::NewConnections).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_rides_out_a_database_that_turned_read_only_for_a_while() {
    a_turn_rides_out(Refusal::Writes).await
}

/// An answer sent while the database refuses new connections waits for it or is refused
/// `UNAVAILABLE`, and the agent reads nothing for its question meanwhile (no error, no
/// answer); once the database is back, the retry under the same request id is delivered,
/// and the agent reads the answer exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_sent_while_the_database_refuses_connections_is_delivered_once_when_it_is_back() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let service = serve(&database.url, &dirs, Path::new("demo.json"), &[]);
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    // What the agent read back for its requests: answers and errors alike.
    let replies = || -> Vec<Value> {
        std::fs::read_to_string(&dirs.record)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|m| m.get("method").is_none() && m.get("id").is_some())
            .collect()
    };
    let before = replies().len();

    database.set_unreachable(true).await;
    let answer = || {
        let mut request = tonic::Request::new(one_question_answer(&created, "answer-1", "option-1"));
        request.set_timeout(Duration::from_secs(20));
        request
    };
    let during = tokio::spawn({
        let mut client = client.clone();
        let request = answer();
        async move { client.answer_interaction(request).await }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        replies().len(),
        before,
        "the agent read nothing while the answer could not be stored"
    );
    database.set_unreachable(false).await;

    match during.await.unwrap() {
        Ok(answered) => assert_eq!(
            answered.into_inner().interaction.unwrap().state,
            proto::InteractionState::Delivered as i32
        ),
        Err(status) => assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}"),
    }
    let retried = retrying("AnswerInteraction", || {
        let mut client = client.clone();
        let request = answer();
        async move { client.answer_interaction(request).await }
    })
    .await;
    assert_eq!(
        retried.into_inner().interaction.unwrap().state,
        proto::InteractionState::Delivered as i32
    );
    let read = replies();
    assert_eq!(read.len(), before + 1, "one reply for the question: {read:?}");
    assert!(
        read.last().unwrap().get("error").is_none(),
        "an answer, not an error: {read:?}"
    );
    service.kill();
    database.drop_database().await;
}

/// A run of updates commits while the actor goes on. When that append fails past the outage
/// limit and the next write to learn of it is a command's (here an answer, refused), the
/// execution still fails and its turn settles `store_unavailable` once the store is back,
/// as when the actor waited for the append: never a turn completed without what the agent
/// said, its sequence numbers reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_lost_past_the_outage_limit_fails_the_execution_even_when_an_answer_learns_of_it_first() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let steps = [
        json!({"request": {"method": "cursor/ask_question", "id": 7, "params": {
            "toolCallId": "tq-1", "title": "Go on?",
            "questions": [{"id": "q", "prompt": "Go on?", "allowMultiple": false,
                "options": [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]}]}},
            "no_wait": true}),
        json!({"sleep_ms": 1500}),
        json!({"flood": {"count": 100, "text": "q"}}),
        json!({"sleep_ms": 8000}),
        json!({"stop_reason": "end_turn"}),
    ];
    let scenario = one_turn_scenario(&dirs, "lost-append.json", &steps);
    let service = serve(&database.url, &dirs, &scenario, &["--store-outage-limit-secs", "2"]);
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());

    // The flood's append meets the outage and keeps retrying; the answer comes meanwhile.
    database.set_unreachable(true).await;
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let answering = tokio::spawn({
        let mut client = client.clone();
        let mut request = tonic::Request::new(one_question_answer(&created, "answer-1", "option-1"));
        request.set_timeout(Duration::from_secs(30));
        async move { client.answer_interaction(request).await }
    });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    database.set_unreachable(false).await;
    let answered = answering.await.unwrap();
    assert!(answered.is_err(), "the answer could not be stored: {answered:?}");

    let mut events = ResumingSubscriber::new(client.clone(), &execution.execution_id);
    let settled = events.until(|e| is_settlement(&e.event_type)).await;
    assert_eq!(
        (settled.event_type.as_str(), settled.turn_id.as_str()),
        ("turn.failed", turn.turn_id.as_str())
    );
    assert_eq!(payload(&settled)["failureReason"], "store_unavailable");
    let record = execution_riding_out(&client, &execution.execution_id).await;
    assert_eq!(record.state, proto::ExecutionState::Lost as i32);
    service.kill();
    database.drop_database().await;
}

/// Sessions the database ends under a live service (an operator's `pg_terminate_backend`, a
/// pooler recycling them) are replaced without a caller hearing of it: reads right after,
/// on connections used a moment before, are answered, not refused `UNAVAILABLE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_right_after_the_database_ended_the_services_sessions_are_answered() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let service = serve(&database.url, &dirs, &scenario("demo.json"), &[]);
    let mut client = service.client().await;
    let execution = create_execution_in(&mut client, &dirs.workspace, "create-1").await;
    let read = || {
        let mut client = client.clone();
        let execution_id = execution.execution_id.clone();
        async move { client.get_execution(proto::GetExecutionRequest { execution_id }).await }
    };
    // Several of the pool's sessions, each used a moment ago.
    let mut reads = tokio::task::JoinSet::new();
    for _ in 0..4 {
        reads.spawn(read());
    }
    for answered in reads.join_all().await {
        answered.expect("read before");
    }
    database.end_sessions().await;
    for n in 0..4 {
        let answered = read().await;
        assert!(answered.is_ok(), "read {n} after the sessions ended: {answered:?}");
    }
    service.kill();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_a_stopped_postgres_and_calls_fail_fast_with_a_typed_retryable_status() {
    let pg = PrivatePostgres::start();
    let dirs = ServiceDirs::new();
    let service = serve(&pg.url(), &dirs, &scenario("demo.json"), &[]);
    let mut client = service.client().await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", service.address()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    health_becomes(
        &mut health,
        tonic_health::pb::health_check_response::ServingStatus::Serving,
    )
    .await;

    pg.stop();
    let stopped = tokio::time::Instant::now();
    health_becomes(
        &mut health,
        tonic_health::pb::health_check_response::ServingStatus::NotServing,
    )
    .await;
    let noticed = stopped.elapsed();
    // The bound, plus room for a loaded machine's scheduling.
    assert!(
        noticed <= cursor_runner_api::READINESS_BOUND + Duration::from_millis(1500),
        "readiness followed the store after {noticed:?}"
    );
    let mut request = tonic::Request::new(proto::ListExecutionsRequest::default());
    request.set_timeout(Duration::from_secs(15));
    let refused = client.list_executions(request).await.expect_err("no store, no listing");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(reason(&refused), "STORE_UNAVAILABLE");
    assert!(retry_delay(&refused).is_some(), "says when to retry");

    pg.start_server();
    health_becomes(
        &mut health,
        tonic_health::pb::health_check_response::ServingStatus::Serving,
    )
    .await;
    client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .expect("served again");
    service.kill();
}
