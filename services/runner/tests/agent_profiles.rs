//! `serve --agent-profiles` on the real binary: a standard ACP agent that requires
//! `authenticate` runs under its profile (argv array, secret file, method), a profile
//! added to the file later is served without a restart, and an agent whose default mode
//! approves tools by itself is put in its ask mode so that it asks.

use std::path::Path;

use cursor_runner_e2e::*;
use serde_json::{Value, json};

const SECRET: &str = "sk-binary-profile-9d41";

fn write_profiles(path: &std::path::Path, secret: &std::path::Path, names: &[&str]) {
    let profile = json!({
        "argv": fake_agent_argv("requires_authenticate.json"),
        "env": {"FAKE_API_KEY": {"file": secret}},
        "authenticate": {"method_id": "fake-api-key"},
        "ask_mode": "agent",
    });
    let profiles: serde_json::Map<String, Value> = names.iter().map(|n| ((*n).to_owned(), profile.clone())).collect();
    // Written beside, then renamed: the service never reads a half-written file.
    let partial = path.with_extension("partial");
    std::fs::write(&partial, json!({"profiles": profiles}).to_string()).unwrap();
    std::fs::rename(partial, path).unwrap();
}

/// `serve` with the profiles file `profiles` (named in the environment, as an operator's unit
/// file would) and `extra` arguments.
fn serve_with_profiles(dirs: &ServiceDirs, profiles: &Path, extra: &[&str]) -> ServiceProcess {
    ServiceProcess::start(ServiceSettings {
        binary: Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: "",
        state_dir: dirs.root.path(),
        scenario: "env_report.json",
        record: &dirs.record,
        env: vec![("CURSOR_RUNNER_AGENT_PROFILES".into(), profiles.display().to_string())],
        args: extra.iter().map(|a| a.to_string()).collect(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_runs_an_agent_that_requires_authenticate_under_its_profile_and_rereads_the_file() {
    let dirs = ServiceDirs::new();
    let secret = dirs.root.path().join("fake-api-key");
    std::fs::write(&secret, SECRET).unwrap();
    let profiles = dirs.root.path().join("profiles.json");
    write_profiles(&profiles, &secret, &["sdk"]);
    let service = serve_with_profiles(&dirs, &profiles, &[]);
    let mut client = service.client().await;
    let request = |profile: &str, request_id: &str| proto::CreateExecutionRequest {
        agent_profile: profile.into(),
        request_id: request_id.into(),
        workspace: dirs.workspace.display().to_string(),
        ..Default::default()
    };
    let (_, _, mut events) = begin_turn_at(&mut client, &dirs.workspace, request("sdk", "")).await;
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dirs.workspace.join("env.json")).unwrap()).unwrap();
    assert_eq!(report["env"]["FAKE_API_KEY"], SECRET);
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", service.child.id())).unwrap();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains(SECRET),
        "not on the service's command line"
    );

    let unknown = client.create_execution(request("later", "create-2")).await.unwrap_err();
    assert_eq!(reason(&unknown), "AGENT_PROFILE_UNKNOWN");
    write_profiles(&profiles, &secret, &["sdk", "later"]);
    let execution = client
        .create_execution(request("later", "create-3"))
        .await
        .expect("a profile added to the file")
        .into_inner()
        .execution
        .unwrap();
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    start_turn(&mut client, &execution.execution_id, "turn-2")
        .await
        .unwrap();
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.completed",
        "a profile added to the file is served without a restart"
    );
    let stderr = service.stop_and_collect_stderr().join("\n");
    assert!(!stderr.contains(SECRET), "not in the service's logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_puts_an_auto_approving_agent_in_its_ask_mode_so_it_asks() {
    let dirs = ServiceDirs::new();
    let profiles = dirs.root.path().join("profiles.json");
    let argv = fake_agent_argv("auto_approves_by_default.json");
    let file = json!({"profiles": {
        "asks": {"argv": argv, "ask_mode": "default"},
        "unguarded": {"argv": argv},
    }});
    std::fs::write(&profiles, file.to_string()).unwrap();
    // The permission is left pending: the stop need not wait out a long drain.
    let service = serve_with_profiles(&dirs, &profiles, &["--drain-deadline-secs", "1"]);
    let mut client = service.client().await;
    let request = |profile: &str| proto::CreateExecutionRequest {
        agent_profile: profile.into(),
        approval_policy: proto::ApprovalPolicy::Ask as i32,
        ..Default::default()
    };
    let refused = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "unguarded".into(),
            workspace: dirs.workspace.display().to_string(),
            ..request("unguarded")
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "APPROVAL_MODE_UNAVAILABLE");
    let (_, _, mut events) = begin_turn_at(&mut client, &dirs.workspace, request("asks")).await;
    let created = events.events_until("runtime_request.created").await;
    assert_eq!(payload(created.last().unwrap())["kind"], "permission");
    service.stop();
}

/// The real thing: an agent on the official ACP TypeScript SDK (a Node runtime) that needs
/// `authenticate` with the key from a secret file, and whose default mode does not ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_runs_an_sdk_agent_that_needs_authenticate_and_puts_it_in_its_ask_mode() {
    let agent_dir = cursor_runner_e2e::typescript::installed_node_agent();
    let node = which_node();
    let dirs = ServiceDirs::new();
    let secret = dirs.root.path().join("sdk-api-key");
    std::fs::write(&secret, SECRET).unwrap();
    let profiles = dirs.root.path().join("profiles.json");
    let file = json!({"profiles": {"sdk": {
        "argv": [node, agent_dir.join("standard-agent.mjs")],
        "env": {"SDK_API_KEY": {"file": secret}},
        "authenticate": {"method_id": "sdk-api-key"},
        "ask_mode": "default",
    }}});
    std::fs::write(&profiles, file.to_string()).unwrap();
    let service = serve_with_profiles(&dirs, &profiles, &[]);
    let mut client = service.client().await;
    let request = proto::CreateExecutionRequest {
        agent_profile: "sdk".into(),
        approval_policy: proto::ApprovalPolicy::Ask as i32,
        ..Default::default()
    };
    let (execution, _, mut events) = begin_turn_at(&mut client, &dirs.workspace, request).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    assert_eq!(created["kind"], "permission", "the SDK agent asked: {created}");
    let allow = created["request"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "allow_once")
        .unwrap()["optionId"]
        .as_str()
        .unwrap()
        .to_owned();
    client
        .answer_interaction(proto::AnswerInteractionRequest {
            request_id: "allow".into(),
            interaction_id: created["interactionId"].as_str().unwrap().into(),
            etag: created["etag"].as_str().unwrap().into(),
            answer: Some(proto::answer_interaction_request::Answer::Permission(
                proto::PermissionAnswer { option_id: allow },
            )),
        })
        .await
        .unwrap();
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let said: String = settled
        .iter()
        .filter(|e| e.event_type == "item.delta")
        .map(|e| payload(e)["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(said.contains("ran the tool in mode default"), "{said}");
    let record = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(record.session_config.unwrap().mode, "default");
    let stderr = service.stop_and_collect_stderr().join("\n");
    assert!(!stderr.contains(SECRET), "not in the service's logs");
}

fn which_node() -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", "command -v node"])
        .output()
        .expect("sh");
    let node = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(node.starts_with('/'), "`node` (v20+) is required for the SDK agent");
    node
}
