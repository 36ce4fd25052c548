//! The normalizer's fixture transcripts, played by the fake agent through the whole
//! service: the events a `StreamEvents` client sees for the turn are exactly the events
//! `services/activity/tests/transcripts.rs` expects from the normalizer alone.

use std::path::Path;

use cursor_runner_e2e::*;
use serde_json::Value;

on_both_backends!(every_replayable_transcript_streams_exactly_its_expected_events_through_the_service);

/// Transcripts the service cannot reproduce: a between-turns normalizer, a turn the
/// client ends, a normalizer without the subagent opt-in (the service always opts in,
/// so there `subagent_spawned` is a child, not an unclassified update), and a permission
/// the client must answer (its `permissionRequested` line is the replay harness's own
/// record; `conformance_codex` drives the real agent through the same turn).
const NOT_REPLAYABLE: &[&str] = &[
    "children_between_turns",
    "codex_permission_before_tool_call",
    "tools_open_when_cancelled",
    "unknown_update_kinds",
];

/// The workspace the transcripts are written against; the fake agent replaces it with
/// the session's real one, and the comparison maps it back.
const TRANSCRIPT_WORKSPACE: &str = "/work/repo";

/// The turn id the normalizer tests use; the service's is a fresh id per turn.
const TRANSCRIPT_TURN_ID: &str = "t1";

async fn every_replayable_transcript_streams_exactly_its_expected_events_through_the_service(backend: Backend) {
    let dir = workspace_root().join("fixtures/transcripts");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("fixtures/transcripts")
        .filter_map(|entry| {
            entry
                .ok()?
                .file_name()
                .into_string()
                .ok()?
                .strip_suffix(".ndjson")
                .map(str::to_owned)
        })
        .filter(|name| !NOT_REPLAYABLE.contains(&name.as_str()))
        .collect();
    names.sort();
    assert!(names.len() >= 15, "the transcripts are found: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let transcript = dir.join(format!("{name}.ndjson"));
        let command = format!("{} --transcript {}", fake_agent().display(), transcript.display());
        let options = Options {
            agent_command: Some(cursor_runner_supervisor::AgentCommand::parse(&command).expect("command")),
            ..Options::default()
        };
        let service = TestService::start_with(backend, "", options).await;
        let mut client = service.client().await;
        let (_execution, turn, mut events) = begin_turn(&mut client, &service).await;
        let settled = events.until_turn_settles().await;
        let streamed = joined_deltas(turn_events(&settled, &turn.turn_id, &service.workspace));
        service.shutdown().await;
        let expected_text = std::fs::read_to_string(dir.join(format!("{name}.expected.json"))).expect("expected file");
        let expected = joined_deltas(comparable(serde_json::from_str(&expected_text).expect("expected JSON")));
        if let Some(difference) = first_difference(&streamed, &expected) {
            failures.push(format!("{name}: {difference}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The normalizer's share of a settled turn: what lies between `turn.started` and the
/// settlement, as `{eventType, payload}` with the turn id and workspace spelled as in the
/// transcripts.
fn turn_events(settled: &[cursor_runner_api::pb::ActivityEvent], turn_id: &str, workspace: &Path) -> Vec<Value> {
    let started = settled
        .iter()
        .position(|e| e.event_type == "turn.started")
        .expect("turn.started");
    let events: Vec<Value> = settled[started + 1..settled.len() - 1]
        .iter()
        .map(|event| serde_json::json!({"eventType": event.event_type, "payload": payload(event)}))
        .collect();
    let real_workspace = workspace.canonicalize().expect("workspace");
    let text = serde_json::to_string(&events)
        .expect("serializes")
        .replace(&*real_workspace.to_string_lossy(), TRANSCRIPT_WORKSPACE)
        .replace(&*workspace.to_string_lossy(), TRANSCRIPT_WORKSPACE)
        .replace(&format!("\"{turn_id}\""), &format!("\"{TRANSCRIPT_TURN_ID}\""))
        .replace(&format!("\"{turn_id}:"), &format!("\"{TRANSCRIPT_TURN_ID}:"));
    comparable(serde_json::from_str(&text).expect("JSON"))
}

/// Adjacent `item.delta`s of one item joined: the service coalesces the deltas that wait
/// together on the pipe (how many depends on timing), the normalizer alone never does.
fn joined_deltas(events: Vec<Value>) -> Vec<Value> {
    let without_text = |event: &Value| {
        let mut payload = event["payload"].clone();
        payload.as_object_mut().map(|p| p.remove("text"));
        payload
    };
    let mut joined: Vec<Value> = Vec::with_capacity(events.len());
    for event in events {
        if let Some(last) = joined.last_mut()
            && last["eventType"] == "item.delta"
            && event["eventType"] == "item.delta"
            && without_text(last) == without_text(&event)
        {
            let text = format!(
                "{}{}",
                last["payload"]["text"].as_str().unwrap_or_default(),
                event["payload"]["text"].as_str().unwrap_or_default()
            );
            last["payload"]["text"] = Value::String(text);
            continue;
        }
        joined.push(event);
    }
    joined
}

/// Numbers as `f64`: the stream's payload is a protobuf `Struct`, whose numbers are doubles.
fn comparable(value: Value) -> Vec<Value> {
    fn doubles(value: Value) -> Value {
        match value {
            Value::Number(n) => n
                .as_f64()
                .and_then(serde_json::Number::from_f64)
                .map_or(Value::Null, Value::Number),
            Value::Array(items) => Value::Array(items.into_iter().map(doubles).collect()),
            Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, doubles(v))).collect()),
            other => other,
        }
    }
    match doubles(value) {
        Value::Array(items) => items,
        other => panic!("a list of events, not {other}"),
    }
}

fn first_difference(streamed: &[Value], expected: &[Value]) -> Option<String> {
    for (index, (got, want)) in streamed.iter().zip(expected).enumerate() {
        if got != want {
            return Some(format!("event {index}: streamed {got}, expected {want}"));
        }
    }
    (streamed.len() != expected.len()).then(|| {
        let extra = streamed.get(expected.len()).or(expected.get(streamed.len()));
        format!(
            "{} events streamed, {} expected; first unmatched: {}",
            streamed.len(),
            expected.len(),
            extra.map(Value::to_string).unwrap_or_default()
        )
    })
}
