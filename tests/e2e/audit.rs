//! The trace audit: fields a new Cursor build sends that the normalizer does not read are
//! counted by update kind and field, and an operator can capture an execution's raw wire
//! traffic (redacted, bounded) to turn it into fixture transcripts.

use cursor_runner_e2e::*;
use serde_json::Value;

on_both_backends!(
    fields_the_normalizer_does_not_read_are_counted_by_kind_and_field,
    the_wire_capture_holds_both_directions_with_secrets_redacted,
);

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

async fn the_wire_capture_holds_both_directions_with_secrets_redacted(backend: Backend) {
    let capture = tempfile::tempdir().unwrap();
    let options = Options {
        wire_capture_dir: Some(capture.path().to_path_buf()),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "echo_credential.json", options).await;
    let mut client = service.client().await;
    let secret = "sk-wire-capture-canary-77";
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
    service.shutdown().await;
}
