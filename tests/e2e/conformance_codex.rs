//! The standard protocol against `@zed-industries/codex-acp` 0.16.0 (a Rust ACP agent
//! nobody here wrote, pinned in `tests/conformance/peers/`), launched under an agent
//! profile — its binary, `-c` overrides pointing its model provider at a mock OpenAI
//! Responses API on loopback (`support/mock_responses.rs`), `OPENAI_API_KEY` from a
//! secret file — and driven through the gRPC API on PostgreSQL. codex-acp reads no
//! `OPENAI_BASE_URL`: the provider's `base_url` is the only way to point it elsewhere,
//! and `-c` overrides on argv are how a profile sets it without a shared `CODEX_HOME`.
//! Outside CI, with no npm registry, each test says SKIPPED and returns.

use std::path::{Path, PathBuf};

use cursor_runner_e2e::mock_responses::{self, MockResponses};
use cursor_runner_e2e::*;
use serde_json::{Value, json};

use crate::conformance::wire;
use crate::peer_matrix::{CODEX, observed};

const API_KEY: &str = "sk-conformance-mock-7f3a";

/// A service with two codex profiles (`codex`: the mock provider, names `authenticate`;
/// `codex_unauthenticated`: codex's own provider, names none), a mock Responses API, and
/// the wire capture.
struct Codex {
    service: TestService,
    mock: MockResponses,
    capture: tempfile::TempDir,
    _dir: tempfile::TempDir,
}

async fn with_codex() -> Option<Codex> {
    let binary = acp_peers::codex_acp()?;
    let mock = MockResponses::start().await;
    let dir = tempfile::tempdir().unwrap();
    let capture = tempfile::tempdir().unwrap();
    let profiles = profiles_file(dir.path(), &binary, &mock.base_url());
    let options = Options {
        agent_profiles: Some(profiles),
        wire_capture_dir: Some(capture.path().to_path_buf()),
        ..Options::default()
    };
    let service = TestService::start_with(Backend::Postgres, "demo.json", options).await;
    Some(Codex {
        service,
        mock,
        capture,
        _dir: dir,
    })
}

fn profiles_file(dir: &Path, binary: &Path, base_url: &str) -> PathBuf {
    let secret = dir.join("openai-api-key");
    std::fs::write(&secret, format!("{API_KEY}\n")).unwrap();
    let mut argv = vec![binary.display().to_string()];
    for setting in [
        "model_provider=\"mock\"".to_owned(),
        "model_providers.mock.name=\"mock\"".to_owned(),
        format!("model_providers.mock.base_url=\"{base_url}\""),
        "model_providers.mock.wire_api=\"responses\"".to_owned(),
        "model_providers.mock.env_key=\"OPENAI_API_KEY\"".to_owned(),
    ] {
        argv.extend(["-c".to_owned(), setting]);
    }
    let profile = json!({
        "argv": argv,
        "env": {"OPENAI_API_KEY": {"file": secret}},
        "credential_variables": ["OPENAI_API_KEY"],
        "authenticate": {"method_id": "openai-api-key"},
        // codex-acp asks before running a command outside its sandbox in these presets.
        "ask_mode": ["read-only", "auto"],
    });
    // codex-acp's own `openai` provider (no overrides): it answers `session/new` -32000
    // until `authenticate`, even with OPENAI_API_KEY set (a provider of the profile's own,
    // with `env_key`, needs none). Nothing here reaches the network: no turn is run.
    let mut unauthenticated = profile.clone();
    unauthenticated.as_object_mut().unwrap().remove("authenticate");
    unauthenticated["argv"] = json!([binary.display().to_string()]);
    // Names codex's `codex-api-key` method without setting CODEX_API_KEY: codex refuses
    // that `authenticate` with its own -32603, after `initialize` has answered.
    let mut wrong_method = profile.clone();
    wrong_method["authenticate"] = json!({"method_id": "codex-api-key"});
    let path = dir.join("profiles.json");
    std::fs::write(
        &path,
        json!({"profiles": {
            "codex": profile,
            "codex_unauthenticated": unauthenticated,
            "codex_wrong_method": wrong_method,
        }})
        .to_string(),
    )
    .unwrap();
    path
}

fn under(codex: &Codex, profile: &str, request_id: &str) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        request_id: request_id.into(),
        workspace: codex.service.workspace.display().to_string(),
        agent_profile: profile.into(),
        ..Default::default()
    }
}

async fn create(client: &mut Client, request: proto::CreateExecutionRequest) -> proto::Execution {
    client
        .create_execution(request)
        .await
        .expect("CreateExecution")
        .into_inner()
        .execution
        .unwrap()
}

async fn prompt(client: &mut Client, execution_id: &str, request_id: &str, text: &str) -> proto::Turn {
    client
        .start_turn(proto::StartTurnRequest {
            request_id: request_id.into(),
            execution_id: execution_id.into(),
            prompt: vec![proto::PromptBlock {
                content: Some(proto::prompt_block::Content::Text(text.into())),
            }],
            ..Default::default()
        })
        .await
        .expect("StartTurn")
        .into_inner()
        .turn
        .unwrap()
}

/// A codex execution with a subscriber from its start and one turn running `text`.
async fn turn_of(codex: &Codex, client: &mut Client, text: &str) -> (proto::Execution, proto::Turn, Subscriber) {
    let execution = create(client, under(codex, "codex", "create-1")).await;
    let events = Subscriber::open(client, &execution.execution_id, 0).await.unwrap();
    let turn = prompt(client, &execution.execution_id, "turn-1", text).await;
    (execution, turn, events)
}

fn text_of(events: &[proto::ActivityEvent]) -> String {
    events
        .iter()
        .filter(|e| e.event_type == "item.delta")
        .filter_map(|e| payload(e)["text"].as_str().map(str::to_owned))
        .collect()
}

/// Every top-level field of an agent `session/update` the normalizer does not read is
/// counted (`cursor_runner_unconsumed_fields_total`): nothing a peer sends vanishes
/// unseen. Returns the (kind, field) pairs found, for the matrix.
fn unread_fields_are_counted(service: &TestService, lines: &[(String, Value)]) -> Vec<String> {
    let metrics = service.metrics();
    let mut unread = Vec::new();
    for (_, message) in lines
        .iter()
        .filter(|(dir, m)| dir == "agent" && m["method"] == "session/update")
    {
        if let Some((kind, fields)) = cursor_runner_activity::unconsumed_fields(&message["params"]["update"]) {
            for field in fields {
                assert!(
                    metrics.contains(&format!("update_kind=\"{kind}\"")) && metrics.contains(field),
                    "{kind}.{field} is counted as unconsumed"
                );
                unread.push(format!("{kind}.{field}"));
            }
        }
    }
    unread.sort();
    unread.dedup();
    unread
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_streams_a_text_turn_from_the_mock_responses_api_as_canonical_events_in_order() {
    let Some(codex) = with_codex().await else {
        return;
    };
    let mut client = codex.service.client().await;
    let (execution, turn, mut events) = turn_of(&codex, &mut client, "Say hello").await;
    let all = events.until_turn_settles().await;
    let turn_events: Vec<&str> = types(&all)
        .into_iter()
        .filter(|t| !t.starts_with("session.") && *t != "item.delta")
        .collect();
    assert_eq!(
        turn_events,
        [
            "process.spawned",
            "turn.started",
            "item.started",
            "item.completed",
            "usage.reported",
            "turn.completed"
        ],
        "{:?}",
        types(&all)
    );
    assert_eq!(all.last().unwrap().turn_id, turn.turn_id);
    assert_eq!(text_of(&all), mock_responses::TEXT_REPLY.concat());
    let usage = payload(all.iter().find(|e| e.event_type == "usage.reported").unwrap());
    observed(
        CODEX,
        "text turn",
        &format!(
            "{} in order; usage_update projected (used {})",
            turn_events.join(" → "),
            usage["used"]
        ),
    );

    // The profile's secret reached the model provider, and only through the agent.
    let requests = codex.mock.requests();
    assert!(!requests.is_empty(), "the agent called the mock");
    assert!(
        requests
            .iter()
            .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {API_KEY}"))),
        "the profile's OPENAI_API_KEY is what the agent sent"
    );

    // `authenticate` with the profile's method went before `session/new`.
    // (The execution's capture holds its process's handshake too.)
    let lines = wire(codex.capture.path(), &execution.execution_id);
    let methods: Vec<&str> = lines
        .iter()
        .filter(|(dir, _)| dir == "runner")
        .filter_map(|(_, m)| m["method"].as_str())
        .collect();
    let position = |method: &str| methods.iter().position(|m| *m == method).unwrap();
    assert!(position("initialize") < position("authenticate") && position("authenticate") < position("session/new"));
    let unread = unread_fields_are_counted(&codex.service, &lines);
    observed(
        CODEX,
        "unconsumed fields",
        &if unread.is_empty() {
            "none at the top level of any update; raw tool fields kept in rawInput/rawOutput and the wire capture"
                .to_owned()
        } else {
            format!("counted: {}", unread.join(", "))
        },
    );

    // What the agent reported at `initialize`, as it reported it.
    let record = get_execution(&mut client, &execution.execution_id).await;
    let agent = record.lease.unwrap().agent.expect("the agent's initialize report");
    assert_eq!((agent.name.as_str(), agent.version.as_str()), ("codex-acp", "0.16.0"));
    let capabilities: Value = serde_json::from_str(&agent.capabilities_json).unwrap();
    assert_eq!(capabilities["loadSession"], true);
    let methods: Vec<String> = agent
        .auth_methods
        .iter()
        .map(|m| format!("{}:{}:{}", m.id, m.r#type, m.variables.join("+")))
        .collect();
    assert_eq!(
        methods,
        [
            "chatgpt::",
            "codex-api-key:env_var:CODEX_API_KEY",
            "openai-api-key:env_var:OPENAI_API_KEY"
        ],
        "each method as reported (the first has no `type`)"
    );
    observed(
        CODEX,
        "initialize report",
        &format!("recorded: authMethods {}", methods.join(", ")),
    );
    let unavailable: Vec<String> = agent
        .unavailable
        .iter()
        .map(|u| format!("{} ({})", u.capability, u.reason))
        .collect();
    assert!(
        agent.unavailable.iter().any(|u| u.capability == "cursor_extensions"),
        "{unavailable:?}"
    );
    observed(
        CODEX,
        "cursor extensions",
        &agent
            .unavailable
            .iter()
            .find(|u| u.capability == "cursor_extensions")
            .map(|u| format!("unavailable: {}", u.reason))
            .unwrap(),
    );
    codex.service.shutdown().await;
}

/// Every captured line, of every process (a failed start's file keeps the slot's name).
fn all_wire(capture: &Path) -> Vec<(String, Value)> {
    std::fs::read_dir(capture)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .into_string()
                .ok()?
                .strip_suffix(".ndjson")
                .map(str::to_owned)
        })
        .flat_map(|id| wire(capture, &id))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_asks_before_its_shell_call_and_gets_exactly_one_answer_under_its_uuid_id_with_its_own_option() {
    let Some(codex) = with_codex().await else {
        return;
    };
    let mut client = codex.service.client().await;
    let (execution, turn, mut events) = turn_of(&codex, &mut client, mock_responses::SHELL_PROMPT).await;
    let before = events.events_until("runtime_request.created").await;
    let created = payload(before.last().unwrap());
    assert_eq!(created["kind"], "permission");
    // codex asks before it reports the tool call (the fake agent reports it first):
    // fixtures/transcripts/codex_permission_before_tool_call.ndjson.
    assert_eq!(created["toolCallKnown"], false, "{created}");
    let options = created["request"]["options"].as_array().unwrap();
    let kinds: Vec<&str> = options.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["allow_once", "reject_once"],
        "allow_always withheld under `ask`"
    );
    let answered = allow_once(&mut client, &created, "allow-1").await;
    assert_eq!(answered.state, proto::InteractionState::Delivered as i32);
    let after = events.until_turn_settles().await;
    let settled = after.last().unwrap();
    assert_eq!(
        (settled.event_type.as_str(), settled.turn_id.as_str()),
        ("turn.completed", turn.turn_id.as_str()),
        "{:?}",
        types(&after)
    );
    let ran = after
        .iter()
        .find(|e| e.event_type == "tool.execution.completed")
        .map(payload)
        .expect("the shell call completed");
    assert_eq!(
        (
            ran["toolCallId"].as_str(),
            ran["operation"].as_str(),
            ran["status"].as_str()
        ),
        (Some(mock_responses::CALL_ID), Some("execute"), Some("completed")),
        "{ran}"
    );
    assert_eq!(ran["exitCode"], 0, "codex's snake_case exit_code is read: {ran}");
    assert!(
        codex.service.workspace.join("shell-ran.txt").is_file(),
        "the command ran"
    );
    assert_eq!(text_of(&after), mock_responses::AFTER_TOOL_TEXT);
    observed(
        CODEX,
        "shell tool call",
        &format!(
            "tool.execution.completed operation {} status {} exitCode {}",
            ran["operation"], ran["status"], ran["exitCode"]
        ),
    );

    let lines = wire(codex.capture.path(), &execution.execution_id);
    let asked = lines
        .iter()
        .find(|(dir, m)| dir == "agent" && m["method"] == "session/request_permission")
        .map(|(_, m)| m.clone())
        .expect("the agent asked");
    let id = asked["id"].clone();
    assert!(
        id.as_str().is_some_and(|s| uuid::Uuid::parse_str(s).is_ok()),
        "a UUID string id: {id}"
    );
    let native: Vec<&str> = asked["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["optionId"].as_str())
        .collect();
    assert_eq!(native, ["approved", "approved-execpolicy-amendment", "abort"]);
    let responses: Vec<&Value> = lines
        .iter()
        .filter(|(dir, m)| dir == "runner" && m.get("method").is_none() && m["id"] == id)
        .map(|(_, m)| m)
        .collect();
    assert_eq!(
        responses,
        [&json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": {"outcome": "selected", "optionId": "approved"}}})],
        "exactly one response, under the agent's own string id and option id"
    );
    observed(
        CODEX,
        "permission",
        &format!(
            "UUID string id; options {} ; one response selecting `approved`",
            native.join(", ")
        ),
    );
    let outputs = codex
        .mock
        .requests()
        .iter()
        .filter(|r| {
            r.body["input"]
                .as_array()
                .is_some_and(|i| i.iter().any(|item| item["type"] == "function_call_output"))
        })
        .count();
    assert_eq!(outputs, 1, "the tool's result went back to the model once");
    codex.service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_without_a_named_authentication_method_is_auth_required_with_its_own_methods() {
    let Some(codex) = with_codex().await else {
        return;
    };
    let mut client = codex.service.client().await;
    let refused = client
        .create_execution(under(&codex, "codex_unauthenticated", "unauthenticated-1"))
        .await
        .unwrap_err();
    let methods = "chatgpt,codex-api-key,openai-api-key";
    assert_auth_required(&refused, methods, None);
    let all = all_wire(codex.capture.path());
    let refusal = all
        .iter()
        .find(|(dir, m)| dir == "agent" && m["error"]["code"] == -32000)
        .map(|(_, m)| m["error"]["message"].clone())
        .expect("the agent's own -32000");
    assert!(
        !all.iter()
            .any(|(dir, m)| dir == "runner" && m["method"] == "authenticate"),
        "nothing named a method, so none was called"
    );
    observed(
        CODEX,
        "authentication",
        &format!("session/new -32000 {refusal} → AUTH_REQUIRED auth_methods {methods}"),
    );
    assert!(
        !format!("{refused:?}").contains(API_KEY),
        "the secret is not in the error"
    );

    // A credential bound under a variable of one of the agent's own `env_var` methods
    // names that method: it is called, and the session opens.
    let bound = proto::CreateExecutionRequest {
        control_session_id: "run-1".into(),
        credential: Some(proto::CredentialBinding {
            provider: "codex_unauthenticated".into(),
            session_id: "run-1".into(),
            credential_name: "OPENAI_API_KEY".into(),
            secret: API_KEY.into(),
            expire_time: None,
        }),
        ..under(&codex, "codex_unauthenticated", "bound-1")
    };
    let execution = create(&mut client, bound).await;
    let lines = wire(codex.capture.path(), &execution.execution_id);
    let called: Vec<&Value> = lines
        .iter()
        .filter(|(dir, m)| dir == "runner" && m["method"] == "authenticate")
        .map(|(_, m)| &m["params"])
        .collect();
    assert_eq!(called, [&json!({"methodId": "openai-api-key"})]);
    observed(
        CODEX,
        "authentication by credential",
        "a credential bound as OPENAI_API_KEY names the env_var method openai-api-key: authenticate, then session/new",
    );
    assert_eq!(
        get_execution(&mut client, &execution.execution_id).await.state,
        proto::ExecutionState::Ready as i32
    );
    codex.service.shutdown().await;
}

/// The one execution a refused CreateExecution left behind, as ListExecutions shows it.
async fn the_failed_execution(client: &mut Client) -> proto::Execution {
    let listed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .expect("ListExecutions")
        .into_inner()
        .executions;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].state, proto::ExecutionState::Failed as i32);
    listed[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_refusing_the_profiles_authenticate_with_its_own_error_is_auth_required_with_its_words_and_methods() {
    let Some(codex) = with_codex().await else {
        return;
    };
    let mut client = codex.service.client().await;
    let refused = client
        .create_execution(under(&codex, "codex_wrong_method", "wrong-method-1"))
        .await
        .unwrap_err();
    assert_auth_required(
        &refused,
        "chatgpt,codex-api-key,openai-api-key",
        Some("CODEX_API_KEY is not set"),
    );
    let answer = all_wire(codex.capture.path())
        .into_iter()
        .find(|(dir, m)| dir == "agent" && m["error"]["data"] == "CODEX_API_KEY is not set")
        .map(|(_, m)| m["error"]["code"].clone())
        .expect("codex's refusal of authenticate");
    observed(
        CODEX,
        "authentication refused",
        &format!(
            "authenticate codex-api-key without CODEX_API_KEY → {answer} \"CODEX_API_KEY is not set\" → AUTH_REQUIRED with the agent's words and methods"
        ),
    );
    codex.service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_start_failing_at_authenticate_keeps_its_initialize_report_on_the_failed_execution() {
    let Some(codex) = with_codex().await else {
        return;
    };
    let mut client = codex.service.client().await;
    client
        .create_execution(under(&codex, "codex_wrong_method", "wrong-method-1"))
        .await
        .unwrap_err();
    let failed = the_failed_execution(&mut client).await;
    let lease = failed.lease.expect("the failed start's lease");
    assert_eq!(lease.agent_profile, "codex_wrong_method");
    let agent = lease.agent.expect("the agent's initialize report");
    assert_eq!((agent.name.as_str(), agent.version.as_str()), ("codex-acp", "0.16.0"));
    let capabilities: Value = serde_json::from_str(&agent.capabilities_json).unwrap();
    assert_eq!(capabilities["loadSession"], true);
    let methods: Vec<&str> = agent.auth_methods.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(methods, ["chatgpt", "codex-api-key", "openai-api-key"]);
    assert!(
        agent.unavailable.iter().any(|u| u.capability == "cursor_extensions"),
        "{:?}",
        agent.unavailable
    );
    codex.service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_ignoring_stdin_eof_is_ended_by_the_stop_ladder_and_leaves_no_process() {
    let Some(codex) = with_codex().await else {
        return;
    };
    let mut client = codex.service.client().await;
    let execution = create(&mut client, under(&codex, "codex", "create-1")).await;
    let pid = execution.pid.expect("a pid") as i32;
    let mut everything = vec![host_process(pid).expect("the agent runs")];
    everything.extend(descendants_of(pid));
    client
        .close_execution(proto::CloseExecutionRequest {
            request_id: "close-1".into(),
            execution_id: execution.execution_id.clone(),
        })
        .await
        .expect("closed");
    until_all_gone("after CloseExecution", &everything).await;
    let exited = codex
        .service
        .store
        .read_events(&execution.execution_id.as_str().into(), 0, 10_000)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.event_type == "process.exited")
        .map(|e| serde_json::from_str::<Value>(&e.payload).unwrap())
        .expect("the exit proof");
    let signal = exited["signal"].as_i64();
    assert!(
        matches!(signal, Some(15 | 9)),
        "stdin EOF did not end it; the ladder's signal did: {exited}"
    );
    // The ladder signals right after closing stdin, so the proof alone cannot say EOF
    // was ignored: the same binary, with stdin at EOF from the start, still runs later.
    let home = tempfile::tempdir().unwrap();
    let mut alone = std::process::Command::new(acp_peers::codex_acp().unwrap())
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let still_running = alone.try_wait().unwrap().is_none();
    let _ = alone.kill();
    let _ = alone.wait();
    assert!(still_running, "codex-acp does not exit at stdin EOF");
    observed(
        CODEX,
        "stdin EOF",
        &format!(
            "ignores it (still running 2 s after EOF); the stop ladder ends it (signal {}), no process left",
            signal.unwrap()
        ),
    );
    codex.service.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_codex_turn_settles_it_cancelled() {
    let Some(codex) = with_codex().await else {
        return;
    };
    let mut client = codex.service.client().await;
    let (execution, turn, mut events) = turn_of(&codex, &mut client, mock_responses::HANG_PROMPT).await;
    let streamed = events.events_until("item.delta").await;
    assert_eq!(text_of(&streamed), mock_responses::HANG_TEXT);
    cancel_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    let settled = events.until_turn_settles().await.pop().unwrap();
    assert_eq!(settled.event_type, "turn.cancelled", "{:?}", payload(&settled));
    let lines = wire(codex.capture.path(), &execution.execution_id);
    let stop = lines
        .iter()
        .find(|(dir, m)| dir == "agent" && m["result"]["stopReason"].is_string())
        .map(|(_, m)| m["result"]["stopReason"].clone())
        .expect("the agent settled the prompt");
    assert_eq!(stop, "cancelled", "the agent itself settled the prompt as cancelled");
    observed(
        CODEX,
        "cancel",
        "session/cancel → stopReason cancelled → turn.cancelled",
    );
    codex.service.shutdown().await;
}
