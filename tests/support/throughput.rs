//! The end-to-end throughput measurement behind goal P1 (`benches/throughput.rs`
//! prints it; a smoke test runs it tiny): a flood of `agent_message_chunk` updates from
//! the fake agent through the service, the durable outbox and a `StreamEvents`
//! subscriber, beside the raw limit of line splitting and JSON parsing the same bytes.

use std::time::{Duration, Instant};

use cursor_runner_supervisor::AgentCommand;
use proto::stream_events_response::Frame;
use serde_json::json;

use crate::{Backend, Options, Subscriber, TestService, begin_turn, fake_agent, proto};

/// Text of each flooded chunk, sized so a line is about the anchor's 237 bytes.
const CHUNK_TEXT: &str =
    "The quick brown fox jumps over the lazy dog; the quick brown fox jumps over the lazy dog again!";

#[derive(Debug, Clone, serde::Serialize)]
pub struct ThroughputReport {
    pub backend: String,
    pub updates: usize,
    pub line_bytes: usize,
    /// Updates per second from the agent's stdout to a gRPC subscriber, durable.
    pub end_to_end_per_sec: f64,
    /// Updates per second for splitting and parsing the same lines in memory.
    pub parse_limit_per_sec: f64,
    pub events_streamed: usize,
    /// Bytes of `item.delta` text the subscriber received: every chunk's, whether or not
    /// adjacent chunks were coalesced into one event.
    pub text_bytes_streamed: usize,
    /// Bytes of text the agent sent.
    pub text_bytes_sent: usize,
}

/// Floods `updates` chunks through a fresh service and measures both rates.
pub async fn measure(backend: Backend, updates: usize) -> ThroughputReport {
    let dir = tempfile::tempdir().expect("temp dir");
    let scenario = dir.path().join("flood.json");
    let flood = json!({"turns": [[{"flood": {"count": updates, "text": CHUNK_TEXT}}]]});
    std::fs::write(&scenario, flood.to_string()).expect("scenario");
    let command =
        AgentCommand::parse(&format!("{} --scenario {}", fake_agent().display(), scenario.display())).expect("command");
    let options = Options {
        agent_command: Some(command),
        heartbeat: Duration::from_secs(60),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "flood.json", options).await;
    let mut client = service.client().await;
    let started = Instant::now();
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let (streamed, text_bytes_streamed) = count_until_settled(&mut events).await;
    let elapsed = started.elapsed();
    service.shutdown().await;

    let line = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": CHUNK_TEXT}}}})
    .to_string();
    let mut stream = Vec::with_capacity((line.len() + 1) * updates);
    for _ in 0..updates {
        stream.extend_from_slice(line.as_bytes());
        stream.push(b'\n');
    }
    let parse_started = Instant::now();
    let parsed = stream
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter(|l| {
            matches!(
                cursor_runner_acp::classify(l),
                cursor_runner_acp::Classified::Notification { .. }
            )
        })
        .count();
    let parse_elapsed = parse_started.elapsed();
    assert_eq!(parsed, updates);

    ThroughputReport {
        backend: format!("{backend:?}"),
        updates,
        line_bytes: line.len() + 1,
        end_to_end_per_sec: updates as f64 / elapsed.as_secs_f64(),
        parse_limit_per_sec: updates as f64 / parse_elapsed.as_secs_f64(),
        events_streamed: streamed,
        text_bytes_streamed,
        text_bytes_sent: updates * CHUNK_TEXT.len(),
    }
}

/// Events up to the turn's settlement, and the bytes of delta text among them.
async fn count_until_settled(events: &mut Subscriber) -> (usize, usize) {
    let mut count = 0;
    let mut text_bytes = 0;
    loop {
        if let Frame::Event(event) = events.next_frame().await {
            count += 1;
            if event.event_type == "item.delta" {
                text_bytes += crate::payload(&event)["text"].as_str().map_or(0, str::len);
            }
            if crate::is_settlement(&event.event_type) {
                return (count, text_bytes);
            }
        }
    }
}
