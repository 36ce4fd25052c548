//! The session surface: an exact model with its parameters and a mode, applied one
//! option at a time and echo-checked before any prompt; changes between turns; the
//! model catalog; older builds without `configOptions`.

use std::collections::BTreeMap;

use cursor_runner_e2e::*;
use serde_json::Value;
use tonic::Code;

on_both_backends!(
    an_exact_model_with_parameters_and_a_mode_is_applied_in_order_echo_checked_and_recorded,
    a_model_named_without_parameters_shows_the_defaults_it_brings,
    an_unknown_model_parameter_or_value_fails_admission_before_any_prompt,
    an_echo_that_differs_from_the_request_fails_admission_before_any_prompt,
    model_mode_and_options_change_between_turns_echo_checked_and_never_mid_turn,
    list_models_returns_every_model_with_its_parameters,
    an_older_build_gets_the_model_through_set_model_and_is_recorded_unverified,
    an_agent_that_never_answers_initialize_is_unresponsive_and_stopped,
    an_agent_exiting_at_start_is_refused_with_its_exit_status_and_the_end_of_its_stderr,
    a_parameter_or_mode_echoed_differently_fails_admission_naming_the_option,
    an_older_build_refusing_the_mode_after_the_model_records_the_model_it_switched_to,
    a_set_model_refused_for_a_value_its_model_does_not_offer_changes_nothing,
    a_model_switch_refused_for_a_value_the_new_model_does_not_offer_is_undone,
);

fn request(
    service: &TestService,
    request_id: &str,
    model: &str,
    parameters: &[(&str, &str)],
) -> proto::CreateExecutionRequest {
    proto::CreateExecutionRequest {
        request_id: request_id.into(),
        workspace: service.workspace.display().to_string(),
        model: model.into(),
        model_parameters: parameters.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    }
}

/// The `session/set_config_option` calls the agent received, as `configId=value`.
fn config_calls(service: &TestService) -> Vec<String> {
    service
        .agent_received()
        .iter()
        .filter(|m| m["method"] == "session/set_config_option")
        .map(|m| format!("{}={}", m["params"]["configId"].as_str().unwrap(), m["params"]["value"]))
        .collect()
}

fn prompts(service: &TestService) -> usize {
    service
        .agent_received()
        .iter()
        .filter(|m| m["method"] == "session/prompt")
        .count()
}

fn config(execution: &proto::Execution) -> &proto::SessionConfig {
    execution
        .session_config
        .as_ref()
        .expect("a ready execution records its session config")
}

/// Model parameters as a test writes them.
type Parameters<'a> = &'a [(&'a str, &'a str)];

fn parameters(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

async fn an_exact_model_with_parameters_and_a_mode_is_applied_in_order_echo_checked_and_recorded(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let mut create = request(&service, "create-1", "gpt-x", &[("fast", "false"), ("effort", "high")]);
    create.mode = "plan".into();
    let execution = client
        .create_execution(create)
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let recorded = config(&execution);
    assert_eq!(recorded.model, "gpt-x");
    assert_eq!(
        recorded.model_parameters,
        parameters(&[("effort", "high"), ("fast", "false")])
    );
    assert_eq!(recorded.mode, "plan");
    assert!(recorded.verified);
    // Model first (it resets its parameters), then each parameter, then the mode.
    assert_eq!(
        config_calls(&service),
        ["model=\"gpt-x\"", "effort=\"high\"", "fast=\"false\"", "mode=\"plan\""]
    );
    let initialize = service
        .agent_received()
        .into_iter()
        .find(|m| m["method"] == "initialize")
        .unwrap();
    assert_eq!(
        initialize["params"]["clientCapabilities"]["_meta"]["parameterizedModelPicker"],
        true
    );
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let updated = payload(events.events_until("session.config.updated").await.last().unwrap());
    assert!(updated.to_string().contains("gpt-x"), "{updated}");
    service.shutdown().await;
}

async fn a_model_named_without_parameters_shows_the_defaults_it_brings(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = client
        .create_execution(request(&service, "create-1", "gpt-x", &[]))
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    // The expensive `fast` default is the agent's, never ours — and it is shown.
    assert_eq!(
        config(&execution).model_parameters,
        parameters(&[("effort", "medium"), ("fast", "true")])
    );
    assert_eq!(config_calls(&service), ["model=\"gpt-x\""]);
    service.shutdown().await;
}

async fn an_unknown_model_parameter_or_value_fails_admission_before_any_prompt(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let cases: [(&str, Parameters, &str); 3] = [
        ("gpt-z", &[], "model"),
        ("gpt-x", &[("turbo", "true")], "turbo"),
        ("gpt-x", &[("effort", "ultra")], "effort"),
    ];
    for (n, (model, params, config_id)) in cases.into_iter().enumerate() {
        let refused = client
            .create_execution(request(&service, &format!("create-{n}"), model, params))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::FailedPrecondition, "{model} {params:?}");
        assert_eq!(reason(&refused), "MODEL_UNAVAILABLE");
        let details = tonic_types::StatusExt::get_error_details(&refused);
        assert_eq!(details.error_info().unwrap().metadata["config_id"], config_id);
    }
    assert!(
        !config_calls(&service).iter().any(|c| c.starts_with("model=\"gpt-z\"")),
        "an unknown model is never sent"
    );
    assert_eq!(prompts(&service), 0, "no prompt was ever sent");
    let listed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .executions;
    assert!(listed.iter().all(|e| e.state == proto::ExecutionState::Failed as i32));
    assert!(
        listed.iter().all(|e| !process_alive(e.pid.unwrap())),
        "every agent was stopped"
    );
    service.shutdown().await;
}

async fn an_echo_that_differs_from_the_request_fails_admission_before_any_prompt(backend: Backend) {
    let service = TestService::start(backend, "config_echo_mismatch.json").await;
    let mut client = service.client().await;
    let refused = client
        .create_execution(request(&service, "create-1", "gpt-x", &[]))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "MODEL_UNAVAILABLE");
    let details = tonic_types::StatusExt::get_error_details(&refused);
    let metadata = &details.error_info().unwrap().metadata;
    assert_eq!(metadata["requested"], "gpt-x");
    assert_eq!(metadata["echoed"], "default[]");
    assert_eq!(prompts(&service), 0);
    service.shutdown().await;
}

async fn set(client: &mut Client, request: proto::SetConfigOptionRequest) -> Result<proto::Execution, tonic::Status> {
    client
        .set_config_option(request)
        .await
        .map(|r| r.into_inner().execution.unwrap())
}

async fn model_mode_and_options_change_between_turns_echo_checked_and_never_mid_turn(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let id = execution.execution_id.clone();
    let changed = client
        .set_model(proto::SetModelRequest {
            request_id: "model-1".into(),
            execution_id: id.clone(),
            model: "claude-y".into(),
            model_parameters: parameters(&[("effort", "high")]),
        })
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(config(&changed).model, "claude-y");
    assert_eq!(config(&changed).model_parameters, parameters(&[("effort", "high")]));
    let changed = client
        .set_mode(proto::SetModeRequest {
            request_id: "mode-1".into(),
            execution_id: id.clone(),
            mode: "ask".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(config(&changed).mode, "ask");
    let option = |request_id: &str, config_id: &str, value: &str| proto::SetConfigOptionRequest {
        request_id: request_id.into(),
        execution_id: id.clone(),
        config_id: config_id.into(),
        value: value.into(),
    };
    let changed = set(&mut client, option("option-1", "effort", "low")).await.unwrap();
    assert_eq!(config(&changed).model_parameters["effort"], "low");
    assert_refused(
        set(&mut client, option("option-2", "effort", "xhigh")).await,
        Code::FailedPrecondition,
        "MODEL_UNAVAILABLE",
    );
    assert_refused(
        client
            .set_mode(proto::SetModeRequest {
                request_id: "mode-2".into(),
                execution_id: id.clone(),
                mode: "code".into(),
            })
            .await,
        Code::FailedPrecondition,
        "MODEL_UNAVAILABLE",
    );
    // While a turn runs, nothing changes.
    let mut events = Subscriber::open(&mut client, &id, 0).await.unwrap();
    start_turn(&mut client, &id, "turn-1").await.unwrap();
    events.events_until("runtime_request.created").await;
    assert_refused(
        set(&mut client, option("option-3", "effort", "high")).await,
        Code::FailedPrecondition,
        "TURN_ACTIVE",
    );
    let record = get_execution(&mut client, &id).await;
    assert_eq!(
        config(&record).model_parameters["effort"],
        "low",
        "the record is what the agent reports"
    );
    service.shutdown().await;
}

async fn list_models_returns_every_model_with_its_parameters(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let catalog = client
        .list_models(proto::ListModelsRequest {
            execution_id: execution.execution_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(catalog.source, "cursor/list_available_models");
    let ids: Vec<&str> = catalog.models.iter().map(|m| m.model_id.as_str()).collect();
    assert_eq!(ids, ["default[]", "gpt-x", "claude-y"]);
    let gpt = &catalog.models[1];
    let params: Vec<(&str, Vec<&str>)> = gpt
        .parameters
        .iter()
        .map(|p| (p.id.as_str(), p.values.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(
        params,
        [
            ("effort", vec!["low", "medium", "high", "xhigh"]),
            ("fast", vec!["false", "true"])
        ]
    );
    service.shutdown().await;
}

async fn an_older_build_gets_the_model_through_set_model_and_is_recorded_unverified(backend: Backend) {
    let service = TestService::start(backend, "legacy_models.json").await;
    let mut client = service.client().await;
    let execution = client
        .create_execution(request(&service, "create-1", "gpt-x", &[("effort", "low")]))
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let set_model: Vec<Value> = service
        .agent_received()
        .into_iter()
        .filter(|m| m["method"] == "session/set_model")
        .collect();
    assert_eq!(set_model.len(), 1);
    assert_eq!(set_model[0]["params"]["modelId"], "gpt-x[effort=low]");
    let recorded = config(&execution);
    assert_eq!(recorded.model, "gpt-x");
    assert!(!recorded.verified, "nothing was echoed, so nothing is claimed verified");
    let catalog = client
        .list_models(proto::ListModelsRequest {
            execution_id: execution.execution_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(catalog.source, "session/new models", "-32601 is tolerated");
    assert!(catalog.models.iter().any(|m| m.model_id == "gpt-x"));
    let refused = client
        .create_execution(request(&service, "create-2", "gpt-z", &[]))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "MODEL_UNAVAILABLE");
    service.shutdown().await;
}

async fn an_agent_that_never_answers_initialize_is_unresponsive_and_stopped(backend: Backend) {
    let options = Options {
        handshake_timeout: std::time::Duration::from_millis(300),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "initialize_never.json", options).await;
    let mut client = service.client().await;
    let refused = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-1".into(),
            workspace: service.workspace.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_refused(refused, tonic::Code::Unavailable, "AGENT_UNRESPONSIVE");
    let listed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .executions;
    let failed = &listed[0];
    assert_eq!(failed.state, proto::ExecutionState::Failed as i32);
    assert!(
        failed.exit_status.is_some(),
        "the silent agent was stopped and reaped: {failed:?}"
    );
    service.shutdown().await;
}

async fn an_agent_exiting_at_start_is_refused_with_its_exit_status_and_the_end_of_its_stderr(backend: Backend) {
    let service = TestService::start(backend, "crash_on_start_noisy.json").await;
    let mut client = service.client().await;
    let refused = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-1".into(),
            workspace: service.workspace.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "AGENT_EXITED");
    let message = refused.message();
    assert!(message.contains("exit code 3"), "{message}");
    let tail = message.split_once("stderr tail: ").expect("the stderr tail").1;
    // The fake logs one line after its scripted stderr: the tail is the end of both.
    let (scripted, logged) = tail
        .trim()
        .rsplit_once("fake-cursor: ")
        .expect("the fake's own line last");
    assert!(logged.contains("exiting with 3 on start"), "{logged}");
    assert!(
        "0123456789".repeat(700).ends_with(scripted) && scripted.len() < 7000,
        "only the end of what the agent wrote"
    );
    assert!(
        !tail.is_empty() && tail.len() <= cursor_runner_supervisor::STDERR_TAIL_BYTES,
        "bounded: {} bytes",
        tail.len()
    );
    service.shutdown().await;
}

async fn a_parameter_or_mode_echoed_differently_fails_admission_naming_the_option(backend: Backend) {
    let service = TestService::start(backend, "config_echo_parameter_mismatch.json").await;
    let mut client = service.client().await;
    let mut by_mode = request(&service, "create-2", "", &[]);
    by_mode.mode = "plan".into();
    for (request, option, asked, echoed) in [
        (
            request(&service, "create-1", "gpt-x", &[("effort", "high")]),
            "effort",
            "high",
            "low",
        ),
        (by_mode, "mode", "plan", "agent"),
    ] {
        let refused = client.create_execution(request).await.unwrap_err();
        assert_eq!(reason(&refused), "MODEL_UNAVAILABLE");
        let details = tonic_types::StatusExt::get_error_details(&refused);
        let metadata = &details.error_info().unwrap().metadata;
        assert_eq!(
            (
                metadata["config_id"].as_str(),
                metadata["requested"].as_str(),
                metadata["echoed"].as_str()
            ),
            (option, asked, echoed)
        );
    }
    assert_eq!(prompts(&service), 0, "nothing was prompted");
    service.shutdown().await;
}

async fn an_older_build_refusing_the_mode_after_the_model_records_the_model_it_switched_to(backend: Backend) {
    let service = TestService::start(backend, "legacy_mode_refused.json").await;
    let mut client = service.client().await;
    let mut create = request(&service, "create-1", "gpt-x", &[("effort", "low")]);
    create.mode = "ask".into();
    let refused = client.create_execution(create).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert_eq!(reason(&refused), "MODEL_UNAVAILABLE");
    assert_eq!(error_metadata(&refused, "config_id").as_deref(), Some("mode"));
    let calls: Vec<Value> = service
        .agent_received()
        .into_iter()
        .filter(|m| m["method"] == "session/set_model" || m["method"] == "session/set_mode")
        .map(|m| m["method"].clone())
        .collect();
    assert_eq!(calls, ["session/set_model", "session/set_mode"]);
    let listed = client
        .list_executions(proto::ListExecutionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .executions;
    let failed = get_execution(&mut client, &listed[0].execution_id).await;
    assert_eq!(failed.state, proto::ExecutionState::Failed as i32);
    let recorded = failed
        .session_config
        .as_ref()
        .expect("the model the agent acknowledged is recorded");
    assert_eq!(recorded.model, "gpt-x", "the model the agent switched to");
    assert_eq!(recorded.model_parameters, parameters(&[("effort", "low")]));
    assert_eq!(recorded.mode, "", "the refused mode is not claimed");
    assert!(!recorded.verified, "nothing was echoed");
    service.shutdown().await;
}

/// An execution created on `gpt-x` with `parameters`.
async fn created_on_gpt_x(client: &mut Client, service: &TestService, parameters: Parameters<'_>) -> proto::Execution {
    client
        .create_execution(request(service, "create-1", "gpt-x", parameters))
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap()
}

/// A `SetModel` refused because the model does not offer one of its parameter values
/// changes nothing: no step is sent before every value is known to be offered (the model
/// stays, so its options are known), and the recorded configuration is the one before.
async fn a_set_model_refused_for_a_value_its_model_does_not_offer_changes_nothing(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let created = created_on_gpt_x(&mut client, &service, &[("effort", "low"), ("fast", "false")]).await;
    let calls_before = config_calls(&service);
    assert_refused(
        client
            .set_model(proto::SetModelRequest {
                request_id: "model-1".into(),
                execution_id: created.execution_id.clone(),
                model: "gpt-x".into(),
                model_parameters: parameters(&[("effort", "ultra"), ("fast", "false")]),
            })
            .await,
        Code::FailedPrecondition,
        "MODEL_UNAVAILABLE",
    );
    assert_eq!(config_calls(&service), calls_before, "nothing was sent to the agent");
    let after = get_execution(&mut client, &created.execution_id).await;
    assert_eq!(config(&after), config(&created), "the configuration is the one before");
    service.shutdown().await;
}

/// A `SetModel` to another model whose parameter value that model does not offer (known
/// only once the agent has switched) is refused, and the switch is undone: the agent is
/// put back on the model and parameters it had, and the record says so.
async fn a_model_switch_refused_for_a_value_the_new_model_does_not_offer_is_undone(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let created = created_on_gpt_x(&mut client, &service, &[("effort", "xhigh"), ("fast", "false")]).await;
    let refused = client
        .set_model(proto::SetModelRequest {
            request_id: "model-1".into(),
            execution_id: created.execution_id.clone(),
            model: "claude-y".into(),
            model_parameters: parameters(&[("effort", "xhigh")]),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert_eq!(reason(&refused), "MODEL_UNAVAILABLE");
    assert_eq!(error_metadata(&refused, "undone").as_deref(), Some("true"));
    let after = get_execution(&mut client, &created.execution_id).await;
    assert_eq!(config(&after), config(&created), "the configuration is the one before");
    let calls = config_calls(&service);
    assert_eq!(
        calls.iter().rev().take(3).rev().cloned().collect::<Vec<_>>(),
        ["model=\"gpt-x\"", "effort=\"xhigh\"", "fast=\"false\""],
        "the agent was put back on what it had: {calls:?}"
    );
    service.shutdown().await;
}
