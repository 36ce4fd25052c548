//! Agent profiles (`serve --agent-profiles`): a standard ACP agent launched from an argv
//! array with the operator's environment (literal values and secret files), the
//! credential variables it names, and the `authenticate` method it asks for.

use std::path::{Path, PathBuf};

use cursor_runner_e2e::*;
use serde_json::{Value, json};
use tonic::Code;

on_both_backends!(
    a_profile_launches_its_argv_with_its_environment_and_authenticates_before_session_new,
    an_agent_asking_for_authentication_the_profile_does_not_configure_is_refused_with_its_methods,
    an_unknown_profile_is_refused_before_anything_is_launched,
    an_unreadable_secret_file_is_refused_naming_the_variable_and_launches_nothing,
    a_credential_bound_under_a_profile_variable_reaches_the_agent_under_that_name,
    under_ask_the_profiles_ask_mode_is_set_before_the_first_prompt_so_an_auto_approving_agent_asks,
    under_ask_an_agent_whose_modes_cannot_be_made_to_ask_is_refused_not_run_unguarded,
    set_mode_takes_the_agents_own_modes_and_under_ask_never_leaves_its_ask_mode,
    a_profiled_agent_is_sent_no_cursor_extension_and_its_missing_usage_is_not_called_cursors,
);

const SECRET: &str = "sk-profile-file-5c1e2b";
const BOUND: &str = "sk-bound-by-the-control-plane-77a0";
const METHOD: &str = "fake-api-key";

/// A profiles file beside `dir/secret` holding [`SECRET`]; `edit` shapes the one profile.
fn profiles(dir: &Path, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let secret = dir.join("secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let mut profile = json!({
        "argv": fake_agent_argv("requires_authenticate.json"),
        "env": {"LOG_LEVEL": {"value": "debug"}, "FAKE_API_KEY": {"file": secret}},
        "authenticate": {"method_id": METHOD},
        "ask_mode": "agent",
    });
    edit(&mut profile);
    let path = dir.join("profiles.json");
    std::fs::write(&path, json!({"profiles": {"sdk": profile}}).to_string()).unwrap();
    path
}

async fn serve(backend: Backend, profiles: PathBuf) -> TestService {
    // The default command would play a scenario that needs no authentication: only the
    // profile's agent does.
    let options = Options {
        agent_profiles: Some(profiles),
        ..Options::default()
    };
    TestService::start_with(backend, "env_report.json", options).await
}

fn under_profile(service: &TestService, request_id: &str) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        request_id: request_id.into(),
        workspace: service.workspace.display().to_string(),
        agent_profile: "sdk".into(),
        ..Default::default()
    }
}

async fn a_profile_launches_its_argv_with_its_environment_and_authenticates_before_session_new(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let service = serve(backend, profiles(dir.path(), |_| {})).await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, under_profile(&service, "p-1")).await;
    let all = events.until_turn_settles().await;
    assert_eq!(types(&all).last(), Some(&"turn.completed"));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(service.workspace.join("env.json")).unwrap()).unwrap();
    assert_eq!(report["env"]["LOG_LEVEL"], "debug");
    assert_eq!(
        report["env"]["FAKE_API_KEY"], SECRET,
        "the secret file's value, newline dropped"
    );
    let argv: Vec<String> = serde_json::from_value(report["argv"].clone()).unwrap();
    assert_eq!(
        argv[1..],
        fake_agent_argv("requires_authenticate.json")[1..],
        "an argv array, unsplit"
    );
    assert!(!report["argv"].to_string().contains(SECRET), "never in argv");

    let execution = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(execution.lease.as_ref().unwrap().agent_profile, "sdk");
    let spawned = payload(all.iter().find(|e| e.event_type == "process.spawned").unwrap());
    assert_eq!(spawned["program"], fake_agent().display().to_string());
    let stored = service
        .store
        .read_events(&execution.execution_id.as_str().into(), 0, 10_000)
        .await
        .unwrap();
    assert!(
        !format!("{stored:?} {execution:?}").contains(SECRET),
        "not in events or records"
    );
    service.shutdown().await;
}

async fn an_agent_asking_for_authentication_the_profile_does_not_configure_is_refused_with_its_methods(
    backend: Backend,
) {
    let dir = tempfile::tempdir().unwrap();
    let service = serve(
        backend,
        profiles(dir.path(), |p| {
            p.as_object_mut().unwrap().remove("authenticate");
        }),
    )
    .await;
    let mut client = service.client().await;
    let refused = client
        .create_execution(under_profile(&service, "p-2"))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code(), reason(&refused).as_str()),
        (Code::FailedPrecondition, "AUTH_REQUIRED")
    );
    assert_eq!(error_metadata(&refused, "auth_methods").as_deref(), Some(METHOD));
    assert!(refused.message().contains(METHOD), "{}", refused.message());
    service.shutdown().await;
}

async fn an_unknown_profile_is_refused_before_anything_is_launched(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let service = serve(backend, profiles(dir.path(), |_| {})).await;
    let mut client = service.client().await;
    let request = proto::CreateExecutionRequest {
        agent_profile: "nope".into(),
        ..under_profile(&service, "p-3")
    };
    let refused = client.create_execution(request).await.unwrap_err();
    assert_eq!(
        (refused.code(), reason(&refused).as_str()),
        (Code::FailedPrecondition, "AGENT_PROFILE_UNKNOWN")
    );
    assert_eq!(error_metadata(&refused, "agent_profile").as_deref(), Some("nope"));
    assert!(service.engine.pool_status().profiles.is_empty(), "nothing was launched");
    service.shutdown().await;
}

async fn an_unreadable_secret_file_is_refused_naming_the_variable_and_launches_nothing(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let path = profiles(dir.path(), |_| {});
    let service = serve(backend, path).await;
    std::fs::remove_file(dir.path().join("secret")).unwrap();
    let mut client = service.client().await;
    let refused = client
        .create_execution(under_profile(&service, "p-4"))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code(), reason(&refused).as_str()),
        (Code::FailedPrecondition, "AGENT_PROFILE_SECRET_UNREADABLE")
    );
    assert_eq!(error_metadata(&refused, "variable").as_deref(), Some("FAKE_API_KEY"));
    assert_eq!(error_metadata(&refused, "agent_profile").as_deref(), Some("sdk"));
    assert!(service.engine.pool_status().profiles.is_empty(), "nothing was launched");
    service.shutdown().await;
}

async fn a_credential_bound_under_a_profile_variable_reaches_the_agent_under_that_name(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let service = serve(
        backend,
        profiles(dir.path(), |p| p["credential_variables"] = json!(["FAKE_API_KEY"])),
    )
    .await;
    let mut client = service.client().await;
    let request = proto::CreateExecutionRequest {
        control_session_id: "run-9".into(),
        credential: Some(proto::CredentialBinding {
            provider: "sdk".into(),
            session_id: "run-9".into(),
            credential_name: "FAKE_API_KEY".into(),
            secret: BOUND.into(),
            expire_time: None,
        }),
        ..under_profile(&service, "p-5")
    };
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, request).await;
    events.until_turn_settles().await;
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(service.workspace.join("env.json")).unwrap()).unwrap();
    assert_eq!(
        report["env"]["FAKE_API_KEY"], BOUND,
        "the binding wins over the profile's file"
    );
    let execution = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(execution.credential_name, "FAKE_API_KEY");
    service.shutdown().await;
}

/// Profiles of an agent whose default mode (`yolo`) runs tools without asking; only
/// its `default` mode sends permission requests.
fn mode_profiles(dir: &Path) -> PathBuf {
    let argv = fake_agent_argv("auto_approves_by_default.json");
    let path = dir.join("profiles.json");
    let profiles = json!({"profiles": {
        "asks": {"argv": argv, "ask_mode": ["default", "readonly"]},
        "no-ask-mode": {"argv": argv},
        "unadvertised-ask-mode": {"argv": argv, "ask_mode": "careful"},
    }});
    std::fs::write(&path, profiles.to_string()).unwrap();
    path
}

fn with_policy(service: &TestService, profile: &str, policy: proto::ApprovalPolicy) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        agent_profile: profile.into(),
        approval_policy: policy as i32,
        ..under_profile(service, "unused")
    }
}

async fn under_ask_the_profiles_ask_mode_is_set_before_the_first_prompt_so_an_auto_approving_agent_asks(
    backend: Backend,
) {
    let dir = tempfile::tempdir().unwrap();
    let service = serve(backend, mode_profiles(dir.path())).await;
    let mut client = service.client().await;
    let request = with_policy(&service, "asks", proto::ApprovalPolicy::Ask);
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, request).await;
    let seen = events.events_until("runtime_request.created").await;
    assert_eq!(
        payload(seen.last().unwrap())["kind"],
        "permission",
        "the agent asked before running the tool"
    );
    let record = get_execution(&mut client, &execution.execution_id).await;
    assert_eq!(record.session_config.as_ref().unwrap().mode, "default");
    service.shutdown().await;
}

async fn under_ask_an_agent_whose_modes_cannot_be_made_to_ask_is_refused_not_run_unguarded(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let service = serve(backend, mode_profiles(dir.path())).await;
    let mut client = service.client().await;
    for (n, profile) in ["no-ask-mode", "unadvertised-ask-mode"].into_iter().enumerate() {
        for policy in [
            proto::ApprovalPolicy::Ask,
            proto::ApprovalPolicy::AllowSessionScope,
            proto::ApprovalPolicy::DenyAll,
        ] {
            let request = proto::CreateExecutionRequest {
                request_id: format!("refused-{n}-{}", policy as i32),
                ..with_policy(&service, profile, policy)
            };
            let refused = client.create_execution(request).await.unwrap_err();
            assert_eq!(
                (refused.code(), reason(&refused).as_str()),
                (Code::FailedPrecondition, "APPROVAL_MODE_UNAVAILABLE"),
                "{profile} {policy:?}: {}",
                refused.message()
            );
            assert_eq!(
                error_metadata(&refused, "available_modes").as_deref(),
                Some("yolo,default,readonly"),
                "{profile}"
            );
        }
    }
    service.shutdown().await;
}

async fn set_mode_takes_the_agents_own_modes_and_under_ask_never_leaves_its_ask_mode(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let service = serve(backend, mode_profiles(dir.path())).await;
    let mut client = service.client().await;
    let set_mode = |execution_id: &str, request_id: &str, mode: &str| proto::SetModeRequest {
        request_id: request_id.into(),
        execution_id: execution_id.into(),
        mode: mode.into(),
    };
    let asking = proto::CreateExecutionRequest {
        request_id: "asking".into(),
        ..with_policy(&service, "asks", proto::ApprovalPolicy::Ask)
    };
    let asking = client
        .create_execution(asking)
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let changed = client
        .set_mode(set_mode(&asking.execution_id, "m-1", "readonly"))
        .await
        .expect("an advertised mode of the agent's own (and one in which it asks)")
        .into_inner();
    assert_eq!(changed.execution.unwrap().session_config.unwrap().mode, "readonly");
    assert_refused(
        client.set_mode(set_mode(&asking.execution_id, "m-3", "yolo")).await,
        Code::FailedPrecondition,
        "APPROVAL_MODE_UNAVAILABLE",
    );
    let record = get_execution(&mut client, &asking.execution_id).await;
    assert_eq!(record.session_config.unwrap().mode, "readonly", "still asking");
    service.shutdown().await;
}

async fn a_profiled_agent_is_sent_no_cursor_extension_and_its_missing_usage_is_not_called_cursors(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("profile-agent.ndjson");
    if agent_users::agent_users().is_some() {
        agent_users::traversable(dir.path());
        agent_users::appendable_by_agents(&record);
    }
    let recorded = record.clone();
    let service = serve(
        backend,
        profiles(dir.path(), move |p| {
            p["argv"]
                .as_array_mut()
                .unwrap()
                .extend([json!("--record"), json!(recorded)]);
        }),
    )
    .await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn_with(&mut client, &service, under_profile(&service, "p-6")).await;
    let settled = events.until_turn_settles().await;
    let usage = payload(settled.iter().find(|e| e.event_type == "usage.reported").unwrap());
    assert_eq!(usage["providerCostUnavailableReason"], "agent_reported_no_usage");
    let models = client
        .list_models(proto::ListModelsRequest {
            execution_id: execution.execution_id.clone(),
        })
        .await
        .expect("the catalog from what session/new offered")
        .into_inner();
    assert!(!models.models.is_empty());
    let sent = std::fs::read_to_string(&record).unwrap();
    assert!(sent.contains("session/prompt"), "the record is the profile agent's");
    assert!(
        !sent.contains("cursor/list_available_models"),
        "a Cursor extension is never sent to an agent that did not advertise it"
    );
    service.shutdown().await;
}
