//! The throughput measurements behind goal P1 (`benches/perf.rs` prints them; a smoke
//! test runs the service's tiny): a flood of `agent_message_chunk` updates from the fake
//! agent through the service, the durable outbox and a `StreamEvents` subscriber; and the
//! same flood read by the parse-only Rust drive (spawn, handshake, one `serde_json::Value`
//! per line). Each returns the wall time of one run: start-up is subtracted by the caller
//! from two floods of different sizes ([`rate_without_startup`]).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cursor_runner_supervisor::AgentCommand;
use proto::stream_events_response::Frame;
use serde_json::{Value, json};

use crate::{Backend, Options, Subscriber, TestService, begin_turn, fake_agent, proto};

/// Text of each flooded chunk, sized so a line is about the anchors' 237 bytes.
pub const CHUNK_TEXT: &str =
    "The quick brown fox jumps over the lazy dog; the quick brown fox jumps over the lazy dog again!";

/// Writes a fake-agent scenario whose one turn is a `flood` step with these settings
/// (`{"count", "text"?, "interval_us"?, "stamp"?}`) to `dir/flood.json`.
pub fn flood_scenario(dir: &Path, flood: Value) -> PathBuf {
    let path = dir.join("flood.json");
    std::fs::write(&path, json!({"turns": [[{"flood": flood}]]}).to_string()).expect("scenario");
    path
}

/// The plain flood of `updates` chunks of [`CHUNK_TEXT`], as fast as the agent can write.
pub fn plain_flood(dir: &Path, updates: usize) -> PathBuf {
    flood_scenario(dir, json!({"count": updates, "text": CHUNK_TEXT}))
}

/// Updates per second with process start-up and handshakes subtracted: the extra updates of
/// the larger flood over the extra time they took.
pub fn rate_without_startup(tiny: (usize, Duration), large: (usize, Duration)) -> f64 {
    let extra = large.1.saturating_sub(tiny.1).as_secs_f64();
    if extra > 0.0 {
        large.0.saturating_sub(tiny.0) as f64 / extra
    } else {
        f64::NAN
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ThroughputReport {
    pub backend: String,
    pub updates: usize,
    /// From `CreateExecution` to the turn's settlement at the subscriber: start-up included.
    pub elapsed_secs: f64,
    pub events_streamed: usize,
    /// Bytes of `item.delta` text the subscriber received: every chunk's, whether or not
    /// adjacent chunks were coalesced into one event.
    pub text_bytes_streamed: usize,
    /// Bytes of text the agent sent.
    pub text_bytes_sent: usize,
}

/// Floods `updates` chunks through a fresh service, timed from `CreateExecution` until the
/// subscriber sees the turn settle.
pub async fn measure(backend: Backend, updates: usize) -> ThroughputReport {
    let dir = tempfile::tempdir().expect("temp dir");
    let scenario = plain_flood(dir.path(), updates);
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
    ThroughputReport {
        backend: format!("{backend:?}"),
        updates,
        elapsed_secs: elapsed.as_secs_f64(),
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

/// One run of the parse-only limit: spawns the fake agent flooding `updates` chunks,
/// sends `initialize`, `session/new` and (with the session's id) `session/prompt` on its
/// stdin, parses every line of its stdout into a `serde_json::Value`, and counts the
/// chunks until the prompt's response. Returns the time from spawn to that response and
/// the bytes of one chunk's line (newline included).
pub fn rust_drive(updates: usize) -> (Duration, usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let scenario = plain_flood(dir.path(), updates);
    let started = Instant::now();
    let mut agent = Command::new(fake_agent())
        .arg("--scenario")
        .arg(&scenario)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the fake agent");
    let mut stdin = agent.stdin.take().expect("stdin");
    let mut send = |message: Value| writeln!(stdin, "{message}").expect("write to the agent");
    send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}));
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
        "params": {"cwd": dir.path(), "mcpServers": []}}));
    let mut stdout = BufReader::with_capacity(1 << 16, agent.stdout.take().expect("stdout"));
    let (mut chunks, mut chunk_line_bytes) = (0, 0);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = stdout.read_until(b'\n', &mut line).expect("read the agent's stdout");
        assert!(read > 0, "the agent closed stdout after {chunks} chunks");
        let message: Value = serde_json::from_slice(&line).expect("a JSON line");
        if message["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            chunks += 1;
            chunk_line_bytes = line.len();
        } else if message["id"] == 1 {
            send(
                json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {
                "sessionId": message["result"]["sessionId"], "prompt": [{"type": "text", "text": "go"}]}}),
            );
        } else if message["id"] == 2 {
            break;
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(chunks, updates, "the drive counted every chunk");
    drop(stdin);
    let _ = agent.wait();
    (elapsed, chunk_line_bytes)
}
