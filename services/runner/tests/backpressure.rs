//! A subscriber that reads nothing, through the real binary and the gRPC API on PostgreSQL.
//! Its stream fills and stays full while the agent floods: the agent's output is still read,
//! committed and settled at the writer's pace (nothing waits on the subscriber), the
//! service's memory stays within a bound however much is written, and once the subscriber
//! reads, it gets every update in order, nothing lost.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cursor_runner_e2e::stream_latency::rss_kib;
use cursor_runner_e2e::throughput::{CHUNK_TEXT, plain_flood};
use cursor_runner_e2e::*;
use proto::stream_events_response::Frame;

/// The flood's size: the million updates.
const FLOOD_UPDATES: usize = 1_000_000;
/// How far the service's RSS may grow over its size before the turn while the flood is
/// written with a subscriber that reads nothing: a sixth of what holding the flood would take
/// (about 100 bytes of text per update, ~100 MB), three times what a run here grew (5 MB).
const MAX_RSS_GROWTH_KIB: u64 = 16 * 1024;
/// How long the flood may take to settle in a debug build before the test gives up (a bound on
/// waiting, not a measurement).
const SETTLE_PATIENCE: Duration = Duration::from_secs(600);

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_cursor-runner"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_reads_nothing_holds_back_neither_the_agent_nor_the_service_s_memory() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let scenario = plain_flood(dirs.root.path(), FLOOD_UPDATES);
    let service = ServiceProcess::start(ServiceSettings {
        binary: binary(),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario: scenario.to_str().expect("a UTF-8 path"),
        record: &dirs.record,
        env: Vec::new(),
        args: Vec::new(),
    });
    let pid = service.child.id();
    let mut client = service.client().await;
    let execution = create_execution_in(&mut client, &dirs.workspace, "create-1").await;
    // Its own connection: a full stream must not hold back this test's other calls.
    let mut stalled_client = service.client().await;
    let mut stalled = Subscriber::open(&mut stalled_client, &execution.execution_id, 0)
        .await
        .expect("StreamEvents");

    let before = rss_kib(pid);
    let peak = Arc::new(AtomicU64::new(before));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let turn = start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .expect("StartTurn");
    let settled = settled_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    sampler.abort();
    let growth = peak.load(Ordering::Relaxed).saturating_sub(before);
    eprintln!("service RSS {before} KiB before the flood, grew at most {growth} KiB");
    assert_eq!(
        settled.state,
        proto::TurnState::Completed as i32,
        "the whole flood was read and the turn ended while the subscriber read nothing"
    );
    assert!(
        growth <= MAX_RSS_GROWTH_KIB,
        "the service grew {growth} KiB over {before} KiB, past {MAX_RSS_GROWTH_KIB} KiB"
    );

    let (mut next_sequence, mut chunks) = (1, 0);
    loop {
        let Frame::Event(event) = stalled.next_frame().await else {
            continue;
        };
        assert_eq!(event.sequence, next_sequence, "no gap, no duplicate");
        next_sequence += 1;
        if event.event_type == "item.delta" {
            chunks += payload(&event)["text"]
                .as_str()
                .unwrap_or_default()
                .matches(CHUNK_TEXT)
                .count();
        }
        if is_settlement(&event.event_type) {
            break;
        }
    }
    assert_eq!(chunks, FLOOD_UPDATES, "every update reached the late reader");
    service.stop();
    database.drop_database().await;
}

/// The turn once it is no longer running, read through `ListTurns`.
async fn settled_turn(client: &mut Client, execution_id: &str, turn_id: &str) -> proto::Turn {
    let deadline = tokio::time::Instant::now() + SETTLE_PATIENCE;
    loop {
        let turn = list_turns(client, execution_id)
            .await
            .turns
            .into_iter()
            .find(|t| t.turn_id == turn_id)
            .expect("the turn is listed");
        if turn.state != proto::TurnState::Running as i32 {
            return turn;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the flood did not settle in time"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
