//! Peer differences the conformance suite found in the handshake, replayed by the fake
//! agent from scenario fixtures that copy each peer's own answers — so they stay covered
//! where the npm registry (and with it the real peers) is out of reach. The normalizer's
//! share of a peer's behaviour is in `fixtures/transcripts/codex_*.ndjson`.

use std::path::{Path, PathBuf};

use cursor_runner_e2e::*;
use serde_json::json;
use tonic::Code;

on_both_backends!(
    a_credential_bound_under_a_codex_like_env_var_methods_variable_names_that_method_for_authenticate,
    a_mode_an_agent_like_the_sdk_example_never_advertised_is_refused_and_never_sent,
    a_codex_like_agent_refusing_the_profiles_authenticate_with_an_error_of_its_own_is_auth_required,
    a_start_failing_under_a_profile_names_the_profiles_program_in_process_spawned,
);

const BOUND: &str = "sk-bound-like-codex-31d9";

/// A profile of the fake agent playing codex-acp's handshake (`codex_env_var_auth.json`),
/// naming no `authenticate` method, with OPENAI_API_KEY as a credential variable.
fn codex_like_profiles(dir: &Path) -> PathBuf {
    let path = dir.join("profiles.json");
    // What the agent read, in a file an agent under a uid of its own can append to.
    let received = dir.join("received.ndjson");
    agent_users::traversable(dir);
    agent_users::appendable_by_agents(&received);
    let mut argv = fake_agent_argv("codex_env_var_auth.json");
    // Under a program name of its own, so events can tell the profile's launch from the
    // service's default agent command.
    let program = codex_like_program(dir);
    std::os::unix::fs::symlink(&argv[0], &program).unwrap();
    argv[0] = program.display().to_string();
    argv.extend(["--record".to_owned(), received.display().to_string()]);
    let profile = json!({
        "argv": argv,
        "credential_variables": ["OPENAI_API_KEY"],
        "ask_mode": "agent",
    });
    // Names an offered method the agent then refuses (the fake answers -32602; codex-acp
    // answers -32603 "CODEX_API_KEY is not set"): not the -32000 of the spec.
    let mut refused = profile.clone();
    refused["authenticate"] = json!({"method_id": "codex-api-key"});
    std::fs::write(
        &path,
        json!({"profiles": {"codex_like": profile, "codex_like_refused": refused}}).to_string(),
    )
    .unwrap();
    path
}

/// A service playing `demo.json` by default, with the codex-like profiles of `dir`.
async fn codex_like_service(backend: Backend, dir: &Path) -> TestService {
    let options = Options {
        agent_profiles: Some(codex_like_profiles(dir)),
        ..Options::default()
    };
    TestService::start_with(backend, "demo.json", options).await
}

/// The program the codex-like profiles launch (a link to the fake agent).
fn codex_like_program(dir: &Path) -> PathBuf {
    dir.join("codex-like-acp")
}

/// `CreateExecution` under one of the codex-like profiles, with no credential.
async fn create_under(
    client: &mut Client,
    service: &TestService,
    profile: &str,
) -> Result<proto::Execution, tonic::Status> {
    client
        .create_execution(proto::CreateExecutionRequest {
            request_id: format!("{profile}-1"),
            workspace: service.workspace.display().to_string(),
            agent_profile: profile.into(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().execution.unwrap())
}

/// Peer difference 2: codex-acp wants `authenticate` even with OPENAI_API_KEY set. A
/// credential bound under the variable one of its `env_var` methods reads names that
/// method, so `authenticate` is called before `session/new` and the session opens.
async fn a_credential_bound_under_a_codex_like_env_var_methods_variable_names_that_method_for_authenticate(
    backend: Backend,
) {
    let dir = tempfile::tempdir().unwrap();
    let service = codex_like_service(backend, dir.path()).await;
    let mut client = service.client().await;
    let request = proto::CreateExecutionRequest {
        request_id: "bound-1".into(),
        workspace: service.workspace.display().to_string(),
        agent_profile: "codex_like".into(),
        control_session_id: "run-1".into(),
        credential: Some(proto::CredentialBinding {
            provider: "codex_like".into(),
            session_id: "run-1".into(),
            credential_name: "OPENAI_API_KEY".into(),
            secret: BOUND.into(),
            expire_time: None,
        }),
        ..Default::default()
    };
    let execution = client
        .create_execution(request)
        .await
        .expect("the session opens")
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(execution.state, proto::ExecutionState::Ready as i32);
    let received: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("received.ndjson"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let methods: Vec<&str> = received.iter().filter_map(|m| m["method"].as_str()).collect();
    let at = |method: &str| methods.iter().position(|m| *m == method);
    assert!(
        at("authenticate").is_some() && at("authenticate") < at("session/new"),
        "{methods:?}"
    );
    let called: Vec<&serde_json::Value> = received
        .iter()
        .filter(|m| m["method"] == "authenticate")
        .map(|m| &m["params"])
        .collect();
    assert_eq!(called, [&json!({"methodId": "openai-api-key"})]);
    service.shutdown().await;
}

/// Peer difference 3: the SDK's example agent offers no modes yet answers any
/// `session/set_mode` with `{}`. A mode it never offered is refused before anything is
/// sent, never recorded as set-but-unverified.
async fn a_mode_an_agent_like_the_sdk_example_never_advertised_is_refused_and_never_sent(backend: Backend) {
    let service = TestService::start(backend, "sdk_example_no_modes.json").await;
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
    assert!(
        !service
            .agent_received()
            .iter()
            .any(|m| m["method"] == "session/set_mode"),
        "a mode the agent never offered is not sent"
    );
    let recorded = get_execution(&mut client, &execution.execution_id).await;
    assert_ne!(
        recorded.session_config.map(|c| c.mode).unwrap_or_default(),
        "ask",
        "the refused mode is not recorded"
    );
    service.shutdown().await;
}

/// Peer difference 7: codex-acp refuses `authenticate` with an error of its own (-32603),
/// not -32000. Any refusal of the profile's `authenticate` is AUTH_REQUIRED, in the
/// agent's words and with its methods — not PROTOCOL_ERROR.
async fn a_codex_like_agent_refusing_the_profiles_authenticate_with_an_error_of_its_own_is_auth_required(
    backend: Backend,
) {
    let dir = tempfile::tempdir().unwrap();
    let service = codex_like_service(backend, dir.path()).await;
    let mut client = service.client().await;
    let refused = create_under(&mut client, &service, "codex_like_refused")
        .await
        .unwrap_err();
    assert_auth_required(
        &refused,
        "chatgpt,codex-api-key,openai-api-key",
        Some("unknown authentication method"),
    );
    service.shutdown().await;
}

/// A start that fails under a profile says which program it spawned: the profile's, not
/// the service's default agent command.
async fn a_start_failing_under_a_profile_names_the_profiles_program_in_process_spawned(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let service = codex_like_service(backend, dir.path()).await;
    let mut client = service.client().await;
    create_under(&mut client, &service, "codex_like_refused")
        .await
        .unwrap_err();
    let failed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .executions
        .into_iter()
        .find(|e| e.state == proto::ExecutionState::Failed as i32)
        .expect("the failed start is recorded");
    let mut events = Subscriber::open(&mut client, &failed.execution_id, 0).await.unwrap();
    let spawned = payload(events.events_until("process.spawned").await.last().unwrap());
    assert_eq!(
        spawned["program"],
        codex_like_program(dir.path()).display().to_string(),
        "{spawned}"
    );
    service.shutdown().await;
}
