//! The answer latency measurement behind goal P3 (`benches/perf.rs` prints it): from a
//! gRPC client's `AnswerInteraction` on PostgreSQL to the agent having read the answer off
//! its stdin (the agent stamps its next update with the wall-clock time it got the answer),
//! and the call's own round trip — it returns only after the answer was written and
//! flushed to the agent's stdin and `delivered` was committed — beside one single-row
//! `INSERT` commit on the same server, measured in the same run. Also counts the store
//! operations one question costs (persisted, exposed, answered, delivered, resolved), from
//! the service's own per-operation metric.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use sqlx::Connection;

use crate::lease_latency::Percentiles;
use crate::stream_latency::{stamps, unix_nanos};
use crate::{Backend, Options, TestService, begin_turn, one_question_answer, payload, proto};

#[derive(Debug, Clone, serde::Serialize)]
pub struct AnswerReport {
    pub questions: usize,
    /// From the call's start to the agent's stamp on the update it sent once it had read
    /// the answer (the goal's "answer → bytes on the agent's stdin").
    pub answer_to_stdin: Percentiles,
    /// `AnswerInteraction` as the client sees it (ends after the flushed write and the
    /// `delivered` commit).
    pub answer: Percentiles,
    /// One single-row `INSERT` in its own transaction, same server, same run: one before
    /// each answer, while the service waits for it, so that they span the same seconds as
    /// the answers (the machine's once-a-second stalls, its disk's slow flushes). They also
    /// meet what is left of each question's own commits, so they run slower than an idle
    /// server's: a diagnostic beside the goal's anchor, not the anchor.
    pub single_row_commit: Percentiles,
    /// The same commits back to back after the answers: the goal's anchor. They span
    /// ~100 ms, which the machine's once-a-second stalls may miss.
    pub single_row_commit_back_to_back: Percentiles,
    /// Store operations per question, by operation (from `store_operation_duration_seconds`).
    pub store_operations_per_question: BTreeMap<String, f64>,
}

/// A turn that asks `questions` questions one after another, each waiting for its answer;
/// once it has one, the agent sends a chunk stamped with when it read it.
pub(crate) fn write_question_scenario(dir: &std::path::Path, questions: usize) -> std::path::PathBuf {
    let steps: Vec<Value> = (0..questions)
        .flat_map(|i| {
            [
                json!({"request": {"method": "cursor/ask_question", "id": 100 + i, "params": {
                    "toolCallId": format!("tq-{i}"), "title": "Go on?",
                    "questions": [{"id": "q", "prompt": "Go on?", "allowMultiple": false,
                        "options": [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]}]}}}),
                json!({"flood": {"count": 1, "text": "answer read", "stamp": true}}),
            ]
        })
        .collect();
    let path = dir.join("questions.json");
    std::fs::write(
        &path,
        json!({"session_id": "sess-answers", "turns": [steps]}).to_string(),
    )
    .unwrap();
    path
}

/// `operation → count` from a scrape's `…store_operation_duration_seconds_count` lines.
pub(crate) fn store_operations(scrape: &str) -> BTreeMap<String, f64> {
    scrape
        .lines()
        .filter(|l| l.starts_with("cursor_runner_store_operation_duration_seconds_count{"))
        .filter_map(|l| {
            let operation = l.split("operation=\"").nth(1)?.split('"').next()?.to_owned();
            let count: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((operation, count))
        })
        .collect()
}

pub async fn measure(questions: usize) -> AnswerReport {
    let dir = tempfile::tempdir().unwrap();
    let script = write_question_scenario(dir.path(), questions);
    let service = TestService::start_with(Backend::Postgres, script.to_str().unwrap(), Options::default()).await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let before = store_operations(&service.metrics());
    let mut anchor = anchor_table(&service.database().url).await;
    let (mut answers, mut to_stdin) = (Vec::with_capacity(questions), Vec::with_capacity(questions));
    let mut commits = Vec::with_capacity(questions);
    for i in 0..questions {
        let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
        commits.push(single_row_commit(&mut anchor, i).await);
        let answer = one_question_answer(&created, &format!("answer-{i}"), "option-1");
        let called_at = unix_nanos(SystemTime::now());
        let started = Instant::now();
        let answered = client.answer_interaction(answer).await.expect("answered").into_inner();
        answers.push(started.elapsed());
        assert_eq!(
            answered.interaction.unwrap().state,
            proto::InteractionState::Delivered as i32
        );
        let read = events.events_until("item.delta").await;
        let text = payload(read.last().expect("the agent's stamped chunk"))["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let read_at = stamps(&text).next().expect("a stamp");
        to_stdin.push(Duration::from_nanos(read_at.saturating_sub(called_at) as u64));
    }
    events.until_turn_settles().await;
    let after = store_operations(&service.metrics());
    let per_question = after
        .iter()
        .map(|(operation, count)| {
            let earlier = before.get(operation).copied().unwrap_or(0.0);
            (operation.clone(), (count - earlier) / questions as f64)
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    let mut back_to_back = single_row_commits(&service.database().url, questions).await;
    service.shutdown().await;
    AnswerReport {
        questions,
        answer_to_stdin: Percentiles::of(&mut to_stdin),
        answer: Percentiles::of(&mut answers),
        single_row_commit: Percentiles::of(&mut commits),
        single_row_commit_back_to_back: Percentiles::of(&mut back_to_back),
        store_operations_per_question: per_question,
    }
}

/// The bench's own connection to the database at `url`, with the anchor's table.
async fn anchor_table(url: &str) -> sqlx::PgConnection {
    let mut connection = sqlx::PgConnection::connect(url)
        .await
        .expect("the bench's own connection");
    sqlx::query("CREATE TABLE IF NOT EXISTS bench_single_row (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)")
        .execute(&mut connection)
        .await
        .unwrap();
    connection
}

/// One single-row INSERT commit (the `i`th), timed.
async fn single_row_commit(connection: &mut sqlx::PgConnection, i: usize) -> Duration {
    let started = Instant::now();
    sqlx::query("INSERT INTO bench_single_row (body) VALUES ($1)")
        .bind(format!("row {i}"))
        .execute(connection)
        .await
        .unwrap();
    started.elapsed()
}

/// `n` single-row INSERT commits on the database at `url`, one after another, each timed.
pub(crate) async fn single_row_commits(url: &str, n: usize) -> Vec<Duration> {
    let mut connection = anchor_table(url).await;
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        samples.push(single_row_commit(&mut connection, i).await);
    }
    samples
}
