//! The standard protocol against an ACP agent nobody here wrote: the example agent of
//! `@agentclientprotocol/sdk` (pinned in `tests/conformance/peers/`), launched through the
//! ordinary agent-command path — same closed environment, pool and handshake as Cursor — and
//! driven through the gRPC API on PostgreSQL. The pipe is tapped with the wire capture, so
//! what reached the agent is checked as the agent saw it. Outside CI, with no npm registry,
//! each test says SKIPPED and returns.

use std::path::Path;

use cursor_runner_e2e::*;
use cursor_runner_supervisor::AgentCommand;
use serde_json::{Value, json};
use tonic::Code;

use crate::peer_matrix::{SDK, observed};

/// A service whose agent is the SDK's example agent, capturing its wire traffic.
async fn with_the_sdk_example_agent(capture: &Path) -> Option<TestService> {
    let command = acp_peers::sdk_example_agent()?;
    let options = Options {
        agent_command: Some(AgentCommand::parse(&command).expect("an agent command")),
        wire_capture_dir: Some(capture.to_path_buf()),
        ..Options::default()
    };
    Some(TestService::start_with(Backend::Postgres, "demo.json", options).await)
}

/// Every line of an execution's capture as (direction, message).
pub(crate) fn wire(capture: &Path, execution_id: &str) -> Vec<(String, Value)> {
    std::fs::read_to_string(capture.join(format!("{execution_id}.ndjson")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|l| {
            Some((
                l["dir"].as_str()?.to_owned(),
                serde_json::from_str(l["line"].as_str()?).ok()?,
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_example_agent_streams_a_turn_and_gets_exactly_one_answer_to_its_permission_request() {
    let capture = tempfile::tempdir().unwrap();
    let Some(service) = with_the_sdk_example_agent(capture.path()).await else {
        return;
    };
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn(&mut client, &service).await;
    let before = events.events_until("runtime_request.created").await;
    assert_eq!(
        types(&before[..3]),
        ["process.spawned", "turn.started", "item.started"],
        "{:?}",
        types(&before)
    );
    let read = before
        .iter()
        .find(|e| e.event_type == "tool.execution.completed")
        .map(payload)
        .expect("the read tool call completed");
    assert_eq!(read["operation"], "read");
    observed(
        SDK,
        "text turn",
        &format!(
            "{} first, text and a read tool call (operation {}) streamed in order",
            types(&before[..3]).join(" → "),
            read["operation"]
        ),
    );

    let created = payload(before.last().unwrap());
    assert_eq!(created["kind"], "permission");
    let answered = allow_once(&mut client, &created, "allow-1").await;
    assert_eq!(answered.state, proto::InteractionState::Delivered as i32);
    let after = events.until_turn_settles().await;
    let settled = after.last().unwrap();
    assert_eq!(
        (settled.event_type.as_str(), settled.turn_id.as_str()),
        ("turn.completed", turn.turn_id.as_str())
    );
    assert!(
        after
            .iter()
            .any(|e| e.event_type == "tool.execution.completed" && payload(e)["status"] == "completed"),
        "the permitted edit ran: {:?}",
        types(&after)
    );

    let lines = wire(capture.path(), &execution.execution_id);
    let asked = lines
        .iter()
        .find(|(dir, m)| dir == "agent" && m["method"] == "session/request_permission")
        .map(|(_, m)| m["id"].clone())
        .expect("the agent asked");
    let responses: Vec<&Value> = lines
        .iter()
        .filter(|(dir, m)| dir == "runner" && m.get("method").is_none() && m["id"] == asked)
        .map(|(_, m)| m)
        .collect();
    assert_eq!(
        responses,
        [&json!({"jsonrpc": "2.0", "id": asked, "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}})],
        "exactly one response, under the agent's own id and option id"
    );
    let native: Vec<String> = lines
        .iter()
        .find(|(dir, m)| dir == "agent" && m["method"] == "session/request_permission")
        .and_then(|(_, m)| m["params"]["options"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|o| o["optionId"].as_str().map(str::to_owned))
        .collect();
    observed(
        SDK,
        "permission",
        &format!(
            "integer id {asked}; options {}; one response selecting `allow`",
            native.join(", ")
        ),
    );
    service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_turn_of_the_sdk_example_agent_settles_it_cancelled() {
    let capture = tempfile::tempdir().unwrap();
    let Some(service) = with_the_sdk_example_agent(capture.path()).await else {
        return;
    };
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("item.delta").await;
    cancel_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    let settled = events.until_turn_settles().await.pop().unwrap();
    assert_eq!(settled.event_type, "turn.cancelled", "{:?}", payload(&settled));
    let lines = wire(capture.path(), &execution.execution_id);
    assert!(
        lines
            .iter()
            .any(|(dir, m)| dir == "agent" && m["result"]["stopReason"] == "cancelled"),
        "the agent itself settled the prompt as cancelled"
    );
    observed(SDK, "cancel", "session/cancel → stopReason cancelled → turn.cancelled");
    service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_an_execution_of_the_sdk_example_agent_leaves_no_process() {
    let capture = tempfile::tempdir().unwrap();
    let Some(service) = with_the_sdk_example_agent(capture.path()).await else {
        return;
    };
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let pid = execution.pid.expect("a pid");
    assert!(process_alive(pid));
    let agent = get_execution(&mut client, &execution.execution_id)
        .await
        .lease
        .and_then(|l| l.agent)
        .expect("the agent's initialize report");
    observed(
        SDK,
        "initialize report",
        &format!(
            "recorded: agentInfo {}, authMethods [{}]",
            if agent.name.is_empty() { "none" } else { &agent.name },
            agent
                .auth_methods
                .iter()
                .map(|m| m.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    observed(
        SDK,
        "cursor extensions",
        &agent
            .unavailable
            .iter()
            .find(|u| u.capability == "cursor_extensions")
            .map(|u| format!("unavailable: {}", u.reason))
            .expect("cursor extensions are unavailable"),
    );
    client
        .close_execution(proto::CloseExecutionRequest {
            request_id: "close-1".into(),
            execution_id: execution.execution_id.clone(),
        })
        .await
        .expect("closed");
    eventually("the agent is gone", || !process_alive(pid)).await;
    let exited = service
        .store
        .read_events(&execution.execution_id.as_str().into(), 0, 10_000)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.event_type == "process.exited")
        .map(|e| serde_json::from_str::<Value>(&e.payload).unwrap())
        .expect("the exit proof");
    // The ladder signals right after closing stdin, so the proof alone cannot tell
    // whether EOF would have ended it: the same agent, with stdin at EOF from the start,
    // exits by itself (node's event loop empties once stdin ends; nothing in
    // `dist/examples/agent.js` keeps it alive).
    let command = acp_peers::sdk_example_agent().unwrap();
    let argv: Vec<&str> = command.split(' ').collect();
    let mut alone = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let began = std::time::Instant::now();
    let status = loop {
        if let Some(status) = alone.try_wait().unwrap() {
            break Some(status);
        }
        if began.elapsed() > std::time::Duration::from_secs(10) {
            let _ = alone.kill();
            let _ = alone.wait();
            break None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "the SDK example agent exits cleanly at stdin EOF"
    );
    observed(
        SDK,
        "stdin EOF",
        &match exited["signal"].as_i64() {
            None => format!("exits by itself (exit code {}), no process left", exited["exitCode"]),
            Some(signal) => format!(
                "exits by itself at EOF (code 0); through the service the ladder's signal {signal} right after stdin closes comes first, no process left"
            ),
        },
    );
    service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_the_sdk_example_agent_does_not_advertise_is_refused_not_recorded_unverified() {
    let capture = tempfile::tempdir().unwrap();
    let Some(service) = with_the_sdk_example_agent(capture.path()).await else {
        return;
    };
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    assert_refused(
        client
            .set_mode(proto::SetModeRequest {
                request_id: "mode-1".into(),
                execution_id: execution.execution_id.clone(),
                mode: "ask".into(),
            })
            .await,
        Code::FailedPrecondition,
        "MODEL_UNAVAILABLE",
    );
    let sent_modes = wire(capture.path(), &execution.execution_id)
        .iter()
        .filter(|(dir, m)| dir == "runner" && m["method"] == "session/set_mode")
        .count();
    assert_eq!(sent_modes, 0, "a mode the agent never offered is not sent");
    service.shutdown().await;
}
