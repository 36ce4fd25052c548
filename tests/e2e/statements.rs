//! What one call costs the store: the statements (store operations, from the service's
//! own `cursor_runner_store_operation_duration_seconds` counts) one `StartTurn` and one
//! `AnswerInteraction` make on PostgreSQL, counted while the agent is silent so nothing
//! else writes. A bound here is a budget: raising it is a decision, not drift.

use std::collections::BTreeMap;

use cursor_runner_e2e::*;
use serde_json::json;

/// Statements one `StartTurn` makes: one batch, which commits the turn with the execution
/// row, `turn.started`, and the call's key claimed and completed. (The execution is not
/// read: its actor runs here.)
const START_TURN_STATEMENTS: f64 = 1.0;
/// Statements one `AnswerInteraction` makes: record `answered` with the call's key claimed
/// (one batch, before the pipe write); commit `delivered` with `runtime_request.resolved`
/// and the key completed (one batch). (The interaction is not read: its actor here holds it
/// pending.)
const ANSWER_STATEMENTS: f64 = 2.0;

/// `operation → count` of the store operations the service has made so far.
fn statements(service: &TestService) -> BTreeMap<String, f64> {
    service
        .metrics()
        .lines()
        .filter(|l| l.starts_with("cursor_runner_store_operation_duration_seconds_count{"))
        .filter_map(|l| {
            let operation = l.split("operation=\"").nth(1)?.split('"').next()?.to_owned();
            Some((operation, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// What an open event stream reads on its own, the replica's takeover scan (every
/// renewal period, whatever the calls), and the announcement of committed heads to other
/// replicas (after the commit has returned, one statement for whatever was committed
/// meanwhile, durable nothing): not on the call's path.
const NOT_THE_CALLS: [&str; 5] = [
    "read_events",
    "head_sequence",
    "oldest_sequence",
    "abandoned_incarnations",
    "announce_heads",
];

/// The statements made between two counts, by operation.
fn made(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter(|(op, _)| !NOT_THE_CALLS.contains(&op.as_str()))
        .map(|(op, n)| (op.clone(), n - before.get(op).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_turn_and_answer_interaction_stay_within_their_statement_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("quiet_question.json");
    let question = json!({"request": {"method": "cursor/ask_question", "id": 0, "params": {
        "toolCallId": "tq-1", "questions": [{"id": "q", "prompt": "Go on?",
            "options": [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]}]}}});
    std::fs::write(
        &script,
        json!({"session_id": "sess-quiet", "turns": [[{"sleep_ms": 5000}, question, {"sleep_ms": 5000}]]}).to_string(),
    )
    .unwrap();
    let service = TestService::start_with(Backend::Postgres, script.to_str().unwrap(), Options::default()).await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    // What the session sent on its own after `session/new` is in before counting starts.
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    events.events_until("session.commands.updated").await;

    let before = statements(&service);
    start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    let start_turn = made(&before, &statements(&service));

    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    let before = statements(&service);
    client
        .answer_interaction(one_question_answer(&created, "answer-1", "option-1"))
        .await
        .unwrap();
    let answer = made(&before, &statements(&service));

    let total = |m: &BTreeMap<String, f64>| m.values().sum::<f64>();
    println!("StartTurn: {} statements {start_turn:?}", total(&start_turn));
    println!("AnswerInteraction: {} statements {answer:?}", total(&answer));
    assert!(total(&start_turn) <= START_TURN_STATEMENTS, "{start_turn:?}");
    assert!(total(&answer) <= ANSWER_STATEMENTS, "{answer:?}");
    service.shutdown().await;
}
