//! An agent that floods while the store stalls: what it leaves waiting in memory, and how
//! its updates go in once the store is back.

use std::time::Duration;

use cursor_runner_e2e::*;
use serde_json::json;

use super::{ResumingSubscriber, one_turn_scenario, serve};

/// While an append waits on the store, the updates that arrive meanwhile join the next
/// append, up to `MAX_UPDATES_PER_APPEND` and never more: a stall that holds back
/// thousands of one-character chunks shows as deltas of exactly that many characters
/// (adjacent deltas of one append are joined), and every chunk arrives once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_held_back_by_a_stalled_store_are_appended_in_runs_of_at_most_the_bound() {
    const CHUNKS: usize = 20_000;
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let steps = [
        json!({"flood": {"count": CHUNKS, "text": "x", "interval_us": 100}}),
        json!({"stop_reason": "end_turn"}),
    ];
    let service = serve(
        &database.url,
        &dirs,
        &one_turn_scenario(&dirs, "held-back.json", &steps),
        &[],
    );
    let mut client = service.client().await;
    let (execution, _, _) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    let mut events = ResumingSubscriber::new(client.clone(), &execution.execution_id);
    events.until(|e| e.event_type == "item.delta").await;

    // About 8000 chunks arrive while the store refuses connections (the flood lasts 2 s):
    // more than one append takes.
    database.set_unreachable(true).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    database.set_unreachable(false).await;

    let mut from_the_start = ResumingSubscriber::new(client.clone(), &execution.execution_id);
    let mut deltas = Vec::new();
    let settled = loop {
        let event = from_the_start.next_event().await;
        if event.event_type == "item.delta" {
            deltas.push(payload(&event)["text"].as_str().unwrap().len());
        }
        if is_settlement(&event.event_type) {
            break event;
        }
    };
    assert_eq!(settled.event_type, "turn.completed");
    assert_eq!(deltas.iter().sum::<usize>(), CHUNKS, "every chunk arrives once");
    assert_eq!(
        deltas.iter().max(),
        Some(&cursor_runner_executions::limits::MAX_UPDATES_PER_APPEND),
        "the held-back runs fill an append and go no further: {deltas:?}"
    );
    service.kill();
    database.drop_database().await;
}

/// An agent that floods long lines while the store stalls stops being read once the lines
/// waiting for the actor were read from `MAX_INBOUND_QUEUE_BYTES` of stdout: the service
/// grows by about that much, not by the thousand lines' worth its count bound would let wait
/// (64 MiB of 64 KiB lines), and the turn completes once the store is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_lines_held_back_by_a_stalled_store_wait_in_memory_only_up_to_the_byte_bound() {
    const LINE_TEXT_BYTES: usize = 64 * 1024;
    const LINES: usize = 2400;
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let steps = [
        json!({"sleep_ms": 1000}),
        json!({"flood": {"count": LINES, "text": "y".repeat(LINE_TEXT_BYTES)}}),
        json!({"stop_reason": "end_turn"}),
    ];
    let service = serve(
        &database.url,
        &dirs,
        &one_turn_scenario(&dirs, "long-lines.json", &steps),
        &[],
    );
    let pid = service.child.id();
    let mut client = service.client().await;
    let (execution, _, _) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    let before = cursor_runner_e2e::stream_latency::rss_kib(pid);
    // The flood starts while the store refuses connections, and waits on it for 3 s.
    database.set_unreachable(true).await;
    let mut peak = before;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        peak = peak.max(cursor_runner_e2e::stream_latency::rss_kib(pid));
    }
    database.set_unreachable(false).await;

    let mut events = ResumingSubscriber::new(client.clone(), &execution.execution_id);
    let settled = events.until(|e| is_settlement(&e.event_type)).await;
    assert_eq!(settled.event_type, "turn.completed");
    let grown_mib = peak.saturating_sub(before) / 1024;
    let bound_mib = (cursor_runner_acp::MAX_INBOUND_QUEUE_BYTES / (1024 * 1024)) as u64;
    assert!(
        grown_mib <= bound_mib + 16,
        "the service grew by {grown_mib} MiB while the store stalled; the inbound queue may hold {bound_mib} MiB"
    );
    service.kill();
    database.drop_database().await;
}
