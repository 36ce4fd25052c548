//! The trace audit: fields a new Cursor build sends that the normalizer does not read are
//! counted by update kind and field, and an operator can capture an execution's raw wire
//! traffic (redacted, bounded) to turn it into fixture transcripts.

use cursor_runner_e2e::*;
use serde_json::Value;

on_both_backends!(
    fields_the_normalizer_does_not_read_are_counted_by_kind_and_field,
    the_wire_capture_holds_both_directions_with_secrets_redacted,
    a_secret_with_characters_json_escapes_is_redacted_from_the_wire_capture,
    the_wire_capture_starts_at_the_first_byte_with_initialize,
    a_start_that_fails_keeps_its_wire_traffic_under_the_slots_name,
);

/// The capture file's lines as (direction, parsed message).
fn captured(path: &std::path::Path) -> Vec<(String, Value)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|l| {
            let line = serde_json::from_str(l["line"].as_str().unwrap()).unwrap();
            (l["dir"].as_str().unwrap().to_owned(), line)
        })
        .collect()
}

async fn the_wire_capture_starts_at_the_first_byte_with_initialize(backend: Backend) {
    let capture = tempfile::tempdir().unwrap();
    let options = Options {
        wire_capture_dir: Some(capture.path().to_path_buf()),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "demo.json", options).await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let lines = captured(&capture.path().join(format!("{}.ndjson", execution.execution_id)));
    let (dir, first) = &lines[0];
    assert_eq!((dir.as_str(), &first["method"]), ("runner", &Value::from("initialize")));
    let answered = lines
        .iter()
        .find(|(dir, m)| dir == "agent" && m["id"] == first["id"])
        .expect("the agent's answer to initialize");
    assert!(
        answered.1["result"]["agentCapabilities"].is_object(),
        "capabilities recorded: {}",
        answered.1
    );
    service.shutdown().await;
}

async fn a_start_that_fails_keeps_its_wire_traffic_under_the_slots_name(backend: Backend) {
    let capture = tempfile::tempdir().unwrap();
    let options = Options {
        wire_capture_dir: Some(capture.path().to_path_buf()),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "crash_on_start.json", options).await;
    let mut client = service.client().await;
    let refused = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-1".into(),
            workspace: service.workspace.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_refused(refused, tonic::Code::Unavailable, "AGENT_EXITED");
    let files: Vec<_> = std::fs::read_dir(capture.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("slot-") && name.ends_with(".ndjson"), "{name}");
    let lines = captured(&files[0]);
    assert_eq!(
        lines[0].1["method"], "initialize",
        "what the runner said before the agent died"
    );
    service.shutdown().await;
}

async fn fields_the_normalizer_does_not_read_are_counted_by_kind_and_field(backend: Backend) {
    let service = TestService::start(backend, "extra_fields.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    events.until_turn_settles().await;
    let scrape = service.metrics();
    for (series, count) in [
        ("update_kind=\"tool_call\",field=\"cursorDurationMs\"", 1),
        ("update_kind=\"tool_call_update\",field=\"cursorDurationMs\"", 1),
        ("update_kind=\"agent_message_chunk\",field=\"messageId\"", 1),
    ] {
        let line = format!("cursor_runner_unconsumed_fields_total{{{series}}} {count}");
        assert!(scrape.contains(&line), "{line} in\n{scrape}");
    }
    assert!(
        !scrape.contains("field=\"toolCallId\""),
        "fields the normalizer reads are not reported"
    );
    service.shutdown().await;
}

/// The wire capture of one turn of `echo_credential.json` (the agent says its credential
/// back) with `secret` bound, as the file's text.
async fn capture_of_an_echoed(backend: Backend, secret: &str) -> String {
    let capture = tempfile::tempdir().unwrap();
    let options = Options {
        wire_capture_dir: Some(capture.path().to_path_buf()),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "echo_credential.json", options).await;
    let mut client = service.client().await;
    let request = proto::CreateExecutionRequest {
        control_session_id: "run-3".into(),
        credential: Some(proto::CredentialBinding {
            provider: "cursor".into(),
            session_id: "run-3".into(),
            credential_name: "CURSOR_API_KEY".into(),
            secret: secret.into(),
            expire_time: None,
        }),
        ..Default::default()
    };
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, request).await;
    events.until_turn_settles().await;
    let text = std::fs::read_to_string(capture.path().join(format!("{}.ndjson", execution.execution_id))).unwrap();
    service.shutdown().await;
    text
}

/// A secret read from a file often ends in a newline, and may hold a backslash or a quote:
/// on the wire the agent's lines carry it JSON-escaped, and the capture redacts that form.
async fn a_secret_with_characters_json_escapes_is_redacted_from_the_wire_capture(backend: Backend) {
    let secret = "sk-wire\\capture\"canary-78\n";
    let text = capture_of_an_echoed(backend, secret).await;
    let escaped = serde_json::to_string(secret).unwrap();
    let core = "canary-78";
    assert!(!text.contains(core), "neither raw nor escaped: {}", escaped);
    assert!(
        text.contains("[redacted:CURSOR_API_KEY]"),
        "what the agent echoed, redacted"
    );
}

async fn the_wire_capture_holds_both_directions_with_secrets_redacted(backend: Backend) {
    let secret = "sk-wire-capture-canary-77";
    let text = capture_of_an_echoed(backend, secret).await;
    assert!(!text.contains(secret), "redacted in the capture too");
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let sent: Vec<Value> = lines
        .iter()
        .filter(|l| l["dir"] == "runner")
        .map(|l| serde_json::from_str(l["line"].as_str().unwrap()).unwrap())
        .collect();
    let received: Vec<Value> = lines
        .iter()
        .filter(|l| l["dir"] == "agent")
        .map(|l| serde_json::from_str(l["line"].as_str().unwrap()).unwrap())
        .collect();
    assert!(
        sent.iter().any(|m| m["method"] == "session/new"),
        "the handshake from session/new on"
    );
    assert!(sent.iter().any(|m| m["method"] == "session/prompt"));
    assert!(received.iter().any(|m| m["result"]["stopReason"] == "end_turn"));
    assert!(
        text.contains("[redacted:CURSOR_API_KEY]"),
        "what the agent echoed, redacted"
    );
}
