//! The cross-replica latencies behind issue 20's benchmark (`benches/perf.rs`): two `serve`
//! replicas on one PostgreSQL database, the executions owned by the first.
//! - S1: `AnswerInteraction` timed from a gRPC client through the owner (same replica) and
//!   through the other replica (forwarded one hop to the owner's internal listener),
//!   questions interleaved so both see the same machine, beside one single-row `INSERT`
//!   commit on the same server, in the same run. Each call returns only after the owner
//!   wrote the answer to the agent's stdin, so each bounds "answer → bytes on stdin".
//! - S2: one execution's agent streaming a steady rate of stamped chunks, read by a
//!   `StreamEvents` subscriber on the owner and one on the other replica (woken by the
//!   database's notifications); each chunk's stamp → its arrival at each subscriber.

use std::time::Instant;

use crate::answer_latency::{single_row_commits, write_question_scenario};
use crate::lease_latency::Percentiles;
use crate::service_process::{ServiceDirs, ServiceProcess, ServiceSettings, fleet_replica_env};
use crate::stream_latency::{arrivals, unix_nanos};
use crate::throughput::{CHUNK_TEXT, flood_scenario};
use crate::{Backend, Client, Subscriber, TestDatabase, one_question_answer, payload, proto, turn_started};

/// The replicas' shared secret (the bench's own).
const FLEET_TOKEN: &str = "bench-fleet-token-0123456789abcdef01234567";
/// Long enough that no lease runs out during a run.
const LEASE_MS: u64 = 60_000;

#[derive(Debug, Clone, serde::Serialize)]
pub struct FleetAnswerReport {
    pub questions: usize,
    /// Answers sent to the replica that owns the execution.
    pub same_replica: Percentiles,
    /// Answers sent to another replica, which forwards them to the owner.
    pub cross_replica: Percentiles,
    /// One single-row `INSERT` in its own transaction, same server, same run.
    pub single_row_commit: Percentiles,
}

/// Replica `name` of a fleet on `database_url`, its agents asking `scenario`'s questions.
fn replica(database_url: &str, dirs: &ServiceDirs, name: &str, scenario: &std::path::Path) -> ServiceProcess {
    let env = fleet_replica_env(name, LEASE_MS, dirs, FLEET_TOKEN);
    ServiceProcess::start(ServiceSettings {
        binary: &crate::agent_init(),
        database_url,
        state_dir: dirs.root.path(),
        scenario: scenario.to_str().expect("a UTF-8 path"),
        record: &dirs.record,
        env,
        args: Vec::new(),
    })
}

/// Answers the next question `events` shows through `client`; how long the call took.
async fn answer_next(client: &mut Client, events: &mut Subscriber, request_id: String) -> std::time::Duration {
    let created = payload(
        events
            .events_until("runtime_request.created")
            .await
            .last()
            .expect("a question"),
    );
    let answer = one_question_answer(&created, &request_id, "option-1");
    let started = Instant::now();
    let answered = client.answer_interaction(answer).await.expect("answered").into_inner();
    let took = started.elapsed();
    assert_eq!(
        answered.interaction.expect("interaction").state,
        proto::InteractionState::Delivered as i32
    );
    took
}

pub async fn measure(questions: usize) -> FleetAnswerReport {
    let database = TestDatabase::create(Backend::Postgres).await;
    let scratch = tempfile::tempdir().expect("scratch");
    let scenario = write_question_scenario(scratch.path(), questions);
    let (a_dirs, b_dirs) = (ServiceDirs::new(), ServiceDirs::new());
    let a = replica(&database.url, &a_dirs, "bench-a", &scenario);
    let b = replica(&database.url, &b_dirs, "bench-b", &scenario);
    let (mut a_client, mut b_client) = (a.client().await, b.client().await);
    let (_, mut local) = turn_started(&mut a_client, &a_dirs.workspace, "same").await;
    let (_, mut forwarded) = turn_started(&mut a_client, &a_dirs.workspace, "cross").await;
    let (mut same, mut cross) = (Vec::with_capacity(questions), Vec::with_capacity(questions));
    for i in 0..questions {
        same.push(answer_next(&mut a_client, &mut local, format!("same-{i}")).await);
        cross.push(answer_next(&mut b_client, &mut forwarded, format!("cross-{i}")).await);
    }
    local.until_turn_settles().await;
    forwarded.until_turn_settles().await;
    let mut commits = single_row_commits(&database.url, questions).await;
    a.stop();
    b.stop();
    database.drop_database().await;
    FleetAnswerReport {
        questions,
        same_replica: Percentiles::of(&mut same),
        cross_replica: Percentiles::of(&mut cross),
        single_row_commit: Percentiles::of(&mut commits),
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct FleetStreamReport {
    pub updates_per_sec: u64,
    pub seconds: f64,
    /// Chunks timed at each subscriber.
    pub samples: usize,
    /// A subscriber on the replica that owns the execution.
    pub same_replica: Percentiles,
    /// A subscriber on the other replica.
    pub cross_replica: Percentiles,
}

/// S2: `updates_per_sec` stamped chunks for `seconds`, read through both replicas at once.
pub async fn measure_streams(updates_per_sec: u64, seconds: f64) -> FleetStreamReport {
    let chunks = (seconds * updates_per_sec as f64).ceil().max(1.0) as u64;
    let scratch = tempfile::tempdir().expect("scratch");
    let scenario = flood_scenario(
        scratch.path(),
        serde_json::json!({"count": chunks, "text": CHUNK_TEXT, "stamp": true,
                           "interval_us": 1_000_000 / updates_per_sec.max(1)}),
    );
    let database = TestDatabase::create(Backend::Postgres).await;
    let (a_dirs, b_dirs) = (ServiceDirs::new(), ServiceDirs::new());
    let a = replica(&database.url, &a_dirs, "bench-a", &scenario);
    let b = replica(&database.url, &b_dirs, "bench-b", &scenario);
    let (mut a_client, mut b_client) = (a.client().await, b.client().await);
    let execution = crate::create_execution_in(&mut a_client, &a_dirs.workspace, "create-streaming").await;
    let on_owner = Subscriber::open(&mut a_client, &execution.execution_id, 0)
        .await
        .expect("StreamEvents on the owner");
    let elsewhere = Subscriber::open(&mut b_client, &execution.execution_id, 0)
        .await
        .expect("StreamEvents on the other replica");
    let started = unix_nanos(std::time::SystemTime::now());
    crate::start_turn(&mut a_client, &execution.execution_id, "turn-streaming")
        .await
        .expect("StartTurn");
    let (same, cross) = tokio::join!(arrivals(on_owner), arrivals(elsewhere));
    a.stop();
    b.stop();
    database.drop_database().await;
    let latencies = |stamps: Vec<(u128, u128)>| -> Vec<std::time::Duration> {
        stamps
            .into_iter()
            .filter(|(sent, _)| *sent >= started)
            .map(|(sent, arrived)| std::time::Duration::from_nanos(arrived.saturating_sub(sent) as u64))
            .collect()
    };
    let (mut same, mut cross) = (latencies(same), latencies(cross));
    FleetStreamReport {
        updates_per_sec,
        seconds,
        samples: cross.len(),
        same_replica: Percentiles::of(&mut same),
        cross_replica: Percentiles::of(&mut cross),
    }
}
