use cursor_runner_e2e::*;
use serde_json::{Value, json};
use tonic::Code;

on_both_backends!(
    every_agent_request_gets_exactly_one_response_and_unknown_requests_get_method_not_found,
    an_agent_request_whose_id_no_integer_holds_is_answered_invalid_with_its_id,
    the_agent_environment_is_built_from_nothing,
    closing_an_execution_stops_the_agent_and_every_process_in_its_group,
    a_workspace_that_does_not_exist_is_refused_before_any_launch,
    a_workspace_with_project_mcp_config_is_refused_before_any_launch,
    config_that_appears_before_session_new_is_refused_and_the_agent_stopped,
    generated_images_refer_only_to_verified_workspace_files,
    project_config_created_during_a_turn_is_reported_and_stops_the_turn,
    in_warn_mode_project_config_during_a_turn_is_reported_and_the_turn_goes_on,
    an_agent_ignoring_stdin_eof_and_sigterm_is_killed_at_the_end_of_the_stop_ladder,
    project_config_that_stopped_a_turn_also_refuses_the_next_one,
    project_config_created_between_turns_refuses_the_next_turn_until_it_is_gone,
    an_enterprise_hooks_file_appearing_mid_session_is_reported_and_refuses_the_next_turn,
);

fn prompts_received(service: &TestService) -> usize {
    service
        .agent_received()
        .iter()
        .filter(|m| m["method"] == "session/prompt")
        .count()
}

async fn project_config_that_stopped_a_turn_also_refuses_the_next_one(backend: Backend) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("item.delta").await;
    std::fs::create_dir_all(service.workspace.join(".cursor")).unwrap();
    std::fs::write(service.workspace.join(".cursor/mcp.json"), "{}").unwrap();
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.cancelled"
    );
    let refusal = start_turn(&mut client, &execution.execution_id, "turn-2")
        .await
        .unwrap_err();
    assert_eq!(
        (refusal.code(), reason(&refusal).as_str()),
        (Code::FailedPrecondition, "WORKSPACE_POLICY")
    );
    assert!(refusal.message().contains(".cursor/mcp.json"), "{}", refusal.message());
    assert_eq!(prompts_received(&service), 1, "the agent got no second prompt");
    service.shutdown().await;
}

async fn project_config_created_between_turns_refuses_the_next_turn_until_it_is_gone(backend: Backend) {
    let service = TestService::start(backend, "two_turns.json").await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn(&mut client, &service).await;
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.completed"
    );
    let hooks = service.workspace.join(".cursor/hooks.json");
    std::fs::create_dir_all(hooks.parent().unwrap()).unwrap();
    std::fs::write(&hooks, "{}").unwrap();
    let refusal = start_turn(&mut client, &execution.execution_id, "turn-2")
        .await
        .unwrap_err();
    assert_eq!(
        (refusal.code(), reason(&refusal).as_str()),
        (Code::FailedPrecondition, "WORKSPACE_POLICY")
    );
    assert!(
        refusal.message().contains(".cursor/hooks.json"),
        "{}",
        refusal.message()
    );
    assert_eq!(prompts_received(&service), 1, "the agent got no second prompt");
    std::fs::remove_file(&hooks).unwrap();
    let turn = start_turn(&mut client, &execution.execution_id, "turn-2").await;
    assert!(
        turn.is_ok(),
        "a refusal left the request id free, and the workspace is clean: {turn:?}"
    );
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.completed"
    );
    service.shutdown().await;
}

async fn an_enterprise_hooks_file_appearing_mid_session_is_reported_and_refuses_the_next_turn(backend: Backend) {
    let host = tempfile::tempdir().unwrap();
    let hooks = host.path().join("etc/cursor/hooks.json");
    let service = TestService::start_with(
        backend,
        "long_turn.json",
        Options {
            enterprise_hooks: Some(hooks.clone()),
            ..Default::default()
        },
    )
    .await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("item.delta").await;
    std::fs::create_dir_all(hooks.parent().unwrap()).unwrap();
    std::fs::write(&hooks, "{}").unwrap();
    let settled = events.until_turn_settles().await;
    let notice = settled
        .iter()
        .find(|e| e.event_type == "provider.notice.recorded" && payload(e)["category"] == "workspace_policy_violation")
        .expect("the violation is reported");
    assert!(
        payload(notice)["summary"].as_str().unwrap().contains("hooks.json"),
        "{notice:?}"
    );
    assert_eq!(settled.last().unwrap().event_type, "turn.cancelled");
    let refusal = start_turn(&mut client, &execution.execution_id, "turn-2")
        .await
        .unwrap_err();
    assert_eq!(reason(&refusal), "WORKSPACE_POLICY");
    assert_eq!(prompts_received(&service), 1);
    service.shutdown().await;
}

async fn project_config_created_during_a_turn_is_reported_and_stops_the_turn(backend: Backend) {
    let service = TestService::start(backend, "long_turn.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("item.delta").await;
    std::fs::create_dir_all(service.workspace.join(".cursor")).unwrap();
    std::fs::write(service.workspace.join(".cursor/mcp.json"), r#"{"mcpServers":{}}"#).unwrap();
    let settled = events.until_turn_settles().await;
    let notice = settled
        .iter()
        .find(|e| e.event_type == "provider.notice.recorded" && payload(e)["category"] == "workspace_policy_violation")
        .expect("the violation is reported");
    assert!(
        payload(notice)["summary"]
            .as_str()
            .unwrap()
            .contains(".cursor/mcp.json")
    );
    assert_eq!(
        settled.last().unwrap().event_type,
        "turn.cancelled",
        "and the turn is stopped"
    );
    service.shutdown().await;
}

async fn generated_images_refer_only_to_verified_workspace_files(backend: Backend) {
    let service = TestService::start(backend, "generate_image.json").await;
    let ws = &service.workspace;
    for file in ["out/cat.png", "ref/dog.png"] {
        std::fs::create_dir_all(ws.join(file).parent().unwrap()).unwrap();
        std::fs::write(ws.join(file), b"png").unwrap();
    }
    std::fs::write(ws.parent().unwrap().join("outside.png"), b"png").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", ws.join("link.png")).unwrap();
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let of = |t: &str| {
        settled
            .iter()
            .filter(|e| e.event_type == t)
            .map(payload)
            .collect::<Vec<Value>>()
    };
    let generated = of("artifact.generated");
    assert_eq!(generated[0]["reference"], "out/cat.png");
    assert_eq!(generated[0]["registered"], false);
    assert_eq!(
        generated[0]["sanitized"], true,
        "the escape sequence in the description is neutralized"
    );
    assert!(generated[1].get("reference").is_none(), "a symlink is never referenced");
    let viewed = of("artifact.viewed");
    assert_eq!(viewed.len(), 1);
    assert_eq!(viewed[0]["reference"], "ref/dog.png");
    let refused: Vec<Value> = of("provider.notice.recorded")
        .into_iter()
        .filter(|n| n["category"] == "artifact_path_refused")
        .collect();
    assert_eq!(refused.len(), 2);
    assert!(
        !format!("{refused:?}").contains("/etc/passwd"),
        "refused paths are never echoed"
    );
    let acks: Vec<Value> = service
        .agent_received()
        .into_iter()
        .filter(|m| m.get("method").is_none())
        .collect();
    assert_eq!(
        acks,
        vec![json!({"jsonrpc": "2.0", "id": 3, "result": {}})],
        "acknowledged once, at once"
    );
    service.shutdown().await;
}

async fn a_workspace_with_project_mcp_config_is_refused_before_any_launch(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    std::fs::create_dir_all(service.workspace.join(".cursor")).unwrap();
    std::fs::write(service.workspace.join(".cursor/mcp.json"), "{}").unwrap();
    let mut client = service.client().await;
    let status = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-1".into(),
            workspace: service.workspace.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(reason(&status), "WORKSPACE_POLICY");
    assert!(status.message().contains(".cursor/mcp.json"), "{}", status.message());
    assert!(service.agent_received().is_empty(), "no agent was launched");
    service.shutdown().await;
}

async fn config_that_appears_before_session_new_is_refused_and_the_agent_stopped(backend: Backend) {
    // The agent takes 300 ms to answer `initialize`; the hooks file appears meanwhile.
    let service = TestService::start(backend, "slow_start.json").await;
    let mut client = service.client().await;
    let workspace = service.workspace.clone();
    let creating = tokio::spawn(async move {
        client
            .create_execution(proto::CreateExecutionRequest {
                request_id: "create-1".into(),
                workspace: workspace.display().to_string(),
                ..Default::default()
            })
            .await
    });
    eventually("the agent to be initializing", || {
        service.agent_received().iter().any(|m| m["method"] == "initialize")
    })
    .await;
    std::fs::create_dir_all(service.workspace.join(".cursor")).unwrap();
    std::fs::write(service.workspace.join(".cursor/hooks.json"), "{}").unwrap();
    let status = creating.await.unwrap().unwrap_err();
    assert_eq!(reason(&status), "WORKSPACE_POLICY");
    assert!(
        !service.agent_received().iter().any(|m| m["method"] == "session/new"),
        "the workspace never entered the agent"
    );
    let mut client = service.client().await;
    let listed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .executions;
    assert_eq!(listed[0].state, proto::ExecutionState::Failed as i32);
    assert_eq!(listed[0].failure_reason, "WORKSPACE_POLICY");
    assert!(!process_alive(listed[0].pid.unwrap()), "the agent was stopped");
    service.shutdown().await;
}

async fn every_agent_request_gets_exactly_one_response_and_unknown_requests_get_method_not_found(backend: Backend) {
    let service = TestService::start(backend, "extension_requests.json").await;
    let mut client = service.client().await;
    let (_execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    let settled = events.until_turn_settles().await;
    // The fake agent exits 97 on any unexpected answer, so completion proves each matched.
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let notice = settled
        .iter()
        .find(|e| e.event_type == "provider.notice.recorded" && payload(e)["category"] == "protocol_invalid_frame");
    assert!(notice.is_some(), "the malformed line is reported, not fatal");
    let responses: Vec<Value> = service
        .agent_received()
        .into_iter()
        .filter(|m| m.get("method").is_none())
        .map(|m| m["id"].clone())
        .collect();
    let ids: Vec<Value> = vec![json!(0), json!("task-1"), json!(3), json!(4)];
    for id in &ids {
        assert_eq!(
            responses.iter().filter(|r| *r == id).count(),
            1,
            "exactly one response to {id}"
        );
    }
    assert_eq!(
        responses.len(),
        ids.len(),
        "the notification was never answered: {responses:?}"
    );
    service.shutdown().await;
}

async fn the_agent_environment_is_built_from_nothing(backend: Backend) {
    let service = TestService::start(backend, "env_report.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    events.until_turn_settles().await;
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(service.workspace.join("env.json")).unwrap()).unwrap();
    let mut names: Vec<&str> = report["env"].as_object().unwrap().keys().map(String::as_str).collect();
    names.sort_unstable();
    // Written out literally: the allowlist, and nothing of this test process's environment.
    assert_eq!(names, CLOSED_AGENT_ENVIRONMENT);
    assert_eq!(report["env"]["PATH"], "/usr/local/bin:/usr/bin:/bin");
    assert_eq!(report["env"]["AGENT_CLI_CREDENTIAL_STORE"], "memory");
    assert_eq!(report["env"]["NO_OPEN_BROWSER"], "1");
    let home = report["env"]["HOME"].as_str().unwrap();
    let slot = execution.lease.as_ref().unwrap().slot_id.clone();
    assert_eq!(
        std::path::Path::new(home),
        service.state_dir().join("homes").join(&slot),
        "a private home per process"
    );
    // The process runs in its private home; the workspace enters only with session/new.
    assert_eq!(report["cwd"].as_str().unwrap(), home);
    assert_eq!(
        report["session_cwd"].as_str().unwrap(),
        std::fs::canonicalize(&service.workspace).unwrap().to_str().unwrap()
    );
    assert_eq!(report["pgid"], report["pid"], "the agent leads its own process group");
    service.shutdown().await;
}

/// Every live process whose process group is `pgid`, found in the host's /proc.
fn group_members(pgid: i64) -> Vec<i64> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i64>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<i64>().ok()) == Some(pgid) && process_alive(pid) {
            members.push(pid);
        }
    }
    members
}

async fn closing_an_execution_stops_the_agent_and_every_process_in_its_group(backend: Backend) {
    let service = TestService::start(backend, "env_report.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    events.until_turn_settles().await;
    let pid = execution.pid.expect("pid");
    let members = group_members(pid);
    assert!(
        members.len() >= 2,
        "the agent and its grandchild were alive: {members:?}"
    );
    let closed = client
        .close_execution(proto::CloseExecutionRequest {
            request_id: "close-1".into(),
            execution_id: execution.execution_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(closed.state, proto::ExecutionState::Closed as i32);
    assert!(closed.exit_status.is_some(), "the exit proof is recorded");
    eventually("every process of the group to be gone", || {
        members.iter().all(|p| !process_alive(*p))
    })
    .await;
    let exited = events.events_until("process.exited").await;
    assert_eq!(payload(exited.last().unwrap())["initiatedBy"], "runner");
    assert_refused(
        start_turn(&mut client, &execution.execution_id, "turn-2").await,
        Code::FailedPrecondition,
        "EXECUTION_NOT_READY",
    );
    service.shutdown().await;
}

async fn a_workspace_that_does_not_exist_is_refused_before_any_launch(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let missing = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-1".into(),
            workspace: "/definitely/not/here".into(),
            ..Default::default()
        })
        .await;
    assert_refused(missing, Code::FailedPrecondition, "WORKSPACE_INVALID");
    let relative = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-2".into(),
            workspace: "relative/path".into(),
            ..Default::default()
        })
        .await;
    assert_refused(relative, Code::InvalidArgument, "WORKSPACE_INVALID");
    assert!(service.agent_received().is_empty());
    service.shutdown().await;
}

async fn in_warn_mode_project_config_during_a_turn_is_reported_and_the_turn_goes_on(backend: Backend) {
    let options = Options {
        on_workspace_violation: cursor_runner_executions::ViolationAction::Warn,
        ..Options::default()
    };
    let service = TestService::start_with(backend, "long_turn.json", options).await;
    let mut client = service.client().await;
    let (execution, turn, mut events) = begin_turn(&mut client, &service).await;
    events.events_until("item.delta").await;
    std::fs::create_dir_all(service.workspace.join(".cursor")).unwrap();
    std::fs::write(service.workspace.join(".cursor/hooks.json"), "{}").unwrap();
    let seen = events.events_until("provider.notice.recorded").await;
    let notice = payload(seen.last().unwrap());
    assert_eq!(notice["category"], "workspace_policy_violation");
    assert!(notice["summary"].as_str().unwrap().contains(".cursor/hooks.json"));
    assert!(
        !service.agent_received().iter().any(|m| m["method"] == "session/cancel"),
        "warned only: the turn was not stopped"
    );
    cancel_turn(&mut client, &execution.execution_id, &turn.turn_id).await;
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.cancelled"
    );
    service.shutdown().await;
}

async fn an_agent_ignoring_stdin_eof_and_sigterm_is_killed_at_the_end_of_the_stop_ladder(backend: Backend) {
    let options = Options {
        stop_grace: std::time::Duration::from_millis(300),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "stubborn.json", options).await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let pid = execution.pid.unwrap();
    let closed = client
        .close_execution(proto::CloseExecutionRequest {
            request_id: "close-1".into(),
            execution_id: execution.execution_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(closed.state, proto::ExecutionState::Closed as i32);
    let exit = closed.exit_status.expect("the exit proof");
    assert_eq!(
        exit.signal,
        Some(9),
        "SIGTERM was ignored, so SIGKILL ended it: {exit:?}"
    );
    assert!(!process_alive(pid), "gone once CloseExecution returns");
    service.shutdown().await;
}

/// JSON-RPC lets an id be any number; one no integer holds (1.5, 2^64) cannot be served,
/// but is still answered, `-32600` with its own id, so the agent never waits on it (the
/// fake agent awaits each answer before its turn goes on).
async fn an_agent_request_whose_id_no_integer_holds_is_answered_invalid_with_its_id(backend: Backend) {
    let service = TestService::start(backend, "unusual_request_ids.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let settled = events.until_turn_settles().await;
    assert_eq!(
        settled.last().unwrap().event_type,
        "turn.completed",
        "{:?}",
        types(&settled)
    );
    assert!(
        settled.iter().all(|e| e.event_type != "runtime_request.created"),
        "nothing unanswerable is exposed as a question"
    );
    service.shutdown().await;
}
