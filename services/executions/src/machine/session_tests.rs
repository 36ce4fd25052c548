//! The configuration ladders, rung by rung: what each answer of the agent leads to.

use std::time::Duration;

use cursor_runner_acp::{AcpError, RpcError, methods};
use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::interaction::ApprovalPolicy;
use cursor_runner_domain::session_config::{ConfigRequest, SessionConfig};
use serde_json::{Value, json};

use super::session::*;
use crate::model_catalog::ModelCatalog;

const SESSION: &str = "s-1";

/// `configOptions` as the agent echoes them: a model, its `effort`, a boolean and the mode.
fn options(model: &str, effort: &str) -> Value {
    json!([
        {"id": "model", "type": "select", "currentValue": model,
         "options": [{"value": "default[]"}, {"value": "gpt-x"}]},
        {"id": "effort", "type": "select", "currentValue": effort,
         "options": [{"value": "low"}, {"value": "medium"}]},
        {"id": "thinking", "type": "boolean", "currentValue": false},
        {"id": "mode", "type": "select", "currentValue": "agent",
         "options": [{"value": "agent"}, {"value": "ask"}]},
    ])
}

fn echoed(model: &str, effort: &str) -> SessionConfig {
    SessionConfig::from_options(&cursor_runner_domain::session_config::parse_options(&options(
        model, effort,
    )))
}

/// What an agent offered when its session opened.
struct Agent {
    config_options: Value,
    legacy_models: Value,
    modes: Value,
}

impl Agent {
    fn with_config_options() -> Self {
        Self {
            config_options: options("default[]", "medium"),
            legacy_models: Value::Null,
            modes: Value::Null,
        }
    }

    /// An older build: `session/new` lists models and modes, and no `configOptions`.
    fn legacy() -> Self {
        Self {
            config_options: json!([]),
            legacy_models: json!({"currentModelId": "default[]",
                "availableModels": [{"modelId": "default[]"}, {"modelId": "gpt-x"}]}),
            modes: json!({"availableModes": [{"id": "agent"}, {"id": "ask"}]}),
        }
    }

    fn offer(&self) -> Offer<'_> {
        Offer {
            session_id: SESSION,
            config_options: &self.config_options,
            legacy_models: &self.legacy_models,
            modes: &self.modes,
        }
    }
}

fn request(model: Option<&str>, parameters: &[(&str, &str)], mode: Option<&str>) -> ConfigRequest {
    ConfigRequest {
        model: model.map(str::to_owned),
        parameters: parameters.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        mode: mode.map(str::to_owned),
    }
}

/// What the runtime is told to do, flattened: records, calls, the result.
#[derive(Debug, PartialEq)]
enum Seen {
    Options(Value),
    Record(SessionConfig),
    Send(ConfigCall, Value),
    Done(Result<SessionConfig, EngineError>),
}

/// Every step of a ladder, feeding `answers` in order, one per call.
fn climb(mut step: ConfigStep, answers: impl IntoIterator<Item = Result<Value, EngineError>>) -> Vec<Seen> {
    let mut answers = answers.into_iter();
    let mut seen = Vec::new();
    loop {
        seen.extend(step.effects.into_iter().map(|effect| match effect {
            ConfigEffect::Options(options) => Seen::Options(options),
            ConfigEffect::Record(config) => Seen::Record(config),
        }));
        match step.then {
            Then::Done(result) => {
                seen.push(Seen::Done(result));
                return seen;
            }
            Then::Send { call, params, ladder } => {
                seen.push(Seen::Send(call, params));
                step = ladder.answered(answers.next().expect("an answer for every call"));
            }
        }
    }
}

fn set_option(config_id: &str, value: &str) -> Seen {
    Seen::Send(
        ConfigCall::ConfigOption,
        json!({"sessionId": SESSION, "configId": config_id, "value": value}),
    )
}

fn refused(effects: &[Seen]) -> &EngineError {
    match effects.last() {
        Some(Seen::Done(Err(refusal))) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn protocol_error(message: &str) -> EngineError {
    EngineError::new(ErrorKind::Unavailable, Reason::ProtocolError, message)
}

fn unresponsive() -> EngineError {
    EngineError::new(ErrorKind::Unavailable, Reason::AgentUnresponsive, "no answer")
}

#[test]
fn each_option_is_set_and_its_echo_recorded_one_at_a_time_in_order() {
    let agent = Agent::with_config_options();
    let ladder = Ladder::configure(agent.offer(), &request(Some("gpt-x"), &[("effort", "low")], None));
    let effects = climb(
        ladder,
        [
            Ok(json!({"configOptions": options("gpt-x", "medium")})),
            Ok(json!({"configOptions": options("gpt-x", "low")})),
        ],
    );
    assert_eq!(
        effects,
        [
            set_option("model", "gpt-x"),
            Seen::Options(options("gpt-x", "medium")),
            Seen::Record(echoed("gpt-x", "medium")),
            set_option("effort", "low"),
            Seen::Options(options("gpt-x", "low")),
            Seen::Record(echoed("gpt-x", "low")),
            Seen::Done(Ok(echoed("gpt-x", "low"))),
        ]
    );
}

#[test]
fn a_boolean_option_is_sent_as_a_boolean() {
    let agent = Agent::with_config_options();
    let effects = climb(
        Ladder::option(agent.offer(), "thinking".into(), "true".into()).unwrap(),
        [Ok(json!({}))],
    );
    assert_eq!(
        effects[..1],
        [Seen::Send(
            ConfigCall::ConfigOption,
            json!({"sessionId": SESSION, "configId": "thinking", "type": "boolean", "value": true})
        )]
    );
}

#[test]
fn a_value_the_agent_does_not_offer_is_refused_before_anything_is_sent() {
    let agent = Agent::with_config_options();
    for (config_id, value) in [("model", "gpt-z"), ("fast", "true"), ("thinking", "yes")] {
        let effects = climb(
            Ladder::option(agent.offer(), config_id.into(), value.into()).unwrap(),
            [],
        );
        assert_eq!(effects.len(), 1, "{config_id}={value}: {effects:?}");
        assert_eq!(
            refused(&effects).reason,
            Reason::ModelUnavailable,
            "{config_id}={value}"
        );
    }
}

#[test]
fn a_change_keeping_the_model_is_refused_before_anything_is_sent_when_one_value_is_not_offered() {
    let agent = Agent::with_config_options();
    for asked in [
        request(Some("default[]"), &[("effort", "ultra")], None),
        request(None, &[("effort", "low"), ("thinking", "yes")], None),
        request(None, &[("effort", "low")], Some("plan")),
    ] {
        let effects = climb(Ladder::configure(agent.offer(), &asked), []);
        assert_eq!(effects.len(), 1, "{asked:?}: nothing is sent: {effects:?}");
        assert_eq!(refused(&effects).reason, Reason::ModelUnavailable, "{asked:?}");
    }
}

#[test]
fn a_change_switching_the_model_checks_its_parameters_once_the_new_model_is_in_effect() {
    let agent = Agent::with_config_options();
    let effects = climb(
        Ladder::configure(agent.offer(), &request(Some("gpt-x"), &[("effort", "ultra")], None)),
        [Ok(json!({"configOptions": options("gpt-x", "medium")}))],
    );
    assert_eq!(effects[0], set_option("model", "gpt-x"), "the switch is sent first");
    assert_eq!(refused(&effects).reason, Reason::ModelUnavailable);
}

#[test]
fn an_agent_refusing_set_config_option_is_a_typed_refusal_and_never_a_fallback() {
    let agent = Agent::with_config_options();
    let not_found = protocol_error("\"Method not found\": session/set_config_option");
    let table = [
        (not_found, Reason::ModelUnavailable),
        (protocol_error("invalid value"), Reason::ModelUnavailable),
        (unresponsive(), Reason::AgentUnresponsive),
        (
            EngineError::new(ErrorKind::Unavailable, Reason::AgentExited, "the agent exited"),
            Reason::AgentExited,
        ),
    ];
    for (answer, reason) in table {
        let ladder = Ladder::configure(agent.offer(), &request(Some("gpt-x"), &[], Some("ask")));
        let effects = climb(ladder, [Err(answer.clone())]);
        assert_eq!(effects[0], set_option("model", "gpt-x"));
        assert_eq!(effects.len(), 2, "no further call, no legacy call: {effects:?}");
        let refusal = refused(&effects);
        assert_eq!(refusal.reason, reason, "{answer:?}");
        if reason == Reason::ModelUnavailable {
            assert!(refusal.metadata.contains(&("config_id".into(), "model".into())));
            assert!(refusal.metadata.contains(&("requested".into(), "gpt-x".into())));
        }
    }
}

#[test]
fn an_echo_that_is_not_the_request_is_recorded_then_refused() {
    let agent = Agent::with_config_options();
    let ladder = Ladder::configure(agent.offer(), &request(Some("gpt-x"), &[("effort", "low")], None));
    let effects = climb(ladder, [Ok(json!({"configOptions": options("default[]", "medium")}))]);
    assert_eq!(
        effects[..3],
        [
            set_option("model", "gpt-x"),
            Seen::Options(options("default[]", "medium")),
            Seen::Record(echoed("default[]", "medium")),
        ]
    );
    let refusal = refused(&effects);
    assert_eq!(refusal.reason, Reason::ModelUnavailable);
    assert!(refusal.metadata.contains(&("echoed".into(), "default[]".into())));
    assert_eq!(effects.len(), 4, "the next step is not sent");
}

#[test]
fn an_answer_without_config_options_is_checked_against_the_last_echo() {
    let agent = Agent::with_config_options();
    let already = Ladder::option(agent.offer(), "effort".into(), "medium".into()).unwrap();
    let effects = climb(already, [Ok(json!({}))]);
    assert_eq!(
        effects[1..],
        [
            Seen::Record(echoed("default[]", "medium")),
            Seen::Done(Ok(echoed("default[]", "medium")))
        ]
    );
    let changed = Ladder::option(agent.offer(), "effort".into(), "low".into()).unwrap();
    assert_eq!(
        refused(&climb(changed, [Ok(json!({}))])).reason,
        Reason::ModelUnavailable
    );
}

#[test]
fn a_later_step_that_undid_an_earlier_one_is_caught_by_the_final_check() {
    let agent = Agent::with_config_options();
    let ladder = Ladder::configure(agent.offer(), &request(Some("gpt-x"), &[("effort", "low")], None));
    let effects = climb(
        ladder,
        [
            Ok(json!({"configOptions": options("gpt-x", "medium")})),
            Ok(json!({"configOptions": options("default[]", "low")})),
        ],
    );
    assert_eq!(effects.len(), 7, "both steps were sent: {effects:?}");
    let refusal = refused(&effects);
    assert!(
        refusal.metadata.contains(&("config_id".into(), "model".into())),
        "{refusal:?}"
    );
}

#[test]
fn an_empty_request_sends_nothing_and_reports_the_agent_s_configuration() {
    let agent = Agent::with_config_options();
    let effects = climb(Ladder::configure(agent.offer(), &ConfigRequest::default()), []);
    assert_eq!(effects, [Seen::Done(Ok(echoed("default[]", "medium")))]);
}

#[test]
fn an_agent_without_config_options_gets_set_model_with_its_parameters_bracketed_then_set_mode() {
    for config_options in [json!([]), Value::Null] {
        let agent = Agent {
            config_options,
            ..Agent::legacy()
        };
        let ladder = Ladder::configure(
            agent.offer(),
            &request(Some("gpt-x"), &[("effort", "low")], Some("ask")),
        );
        let effects = climb(ladder, [Ok(json!({})), Ok(json!({}))]);
        assert_eq!(
            effects,
            [
                Seen::Send(
                    ConfigCall::Model,
                    json!({"sessionId": SESSION, "modelId": "gpt-x[effort=low]"})
                ),
                Seen::Record(legacy_model("gpt-x", &[("effort", "low")])),
                Seen::Send(ConfigCall::Mode, json!({"sessionId": SESSION, "modeId": "ask"})),
                Seen::Done(Ok(SessionConfig {
                    mode: Some("ask".into()),
                    ..legacy_model("gpt-x", &[("effort", "low")])
                })),
            ]
        );
    }
}

/// What a legacy agent's acknowledged `session/set_model` puts in effect: unverified.
fn legacy_model(model: &str, parameters: &[(&str, &str)]) -> SessionConfig {
    SessionConfig {
        model: Some(model.into()),
        parameters: parameters.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..SessionConfig::default()
    }
}

#[test]
fn a_model_the_agent_switched_to_is_recorded_before_the_mode_is_refused() {
    let agent = Agent::legacy();
    // The agent refuses the mode, or the runner does (one the agent does not offer).
    for (mode, answers) in [
        ("ask", vec![Ok(json!({})), Err(protocol_error("no"))]),
        ("plan", vec![Ok(json!({}))]),
    ] {
        let ladder = Ladder::configure(agent.offer(), &request(Some("gpt-x"), &[("effort", "low")], Some(mode)));
        let effects = climb(ladder, answers);
        assert_eq!(
            effects[1],
            Seen::Record(legacy_model("gpt-x", &[("effort", "low")])),
            "{mode}: {effects:?}"
        );
        assert_eq!(refused(&effects).reason, Reason::ModelUnavailable, "{mode}");
        assert_eq!(
            effects.iter().filter(|e| matches!(e, Seen::Record(_))).count(),
            1,
            "{mode}: the refused mode is never recorded"
        );
    }
}

#[test]
fn nothing_asked_of_an_older_agent_reports_its_current_model_unverified() {
    let agent = Agent::legacy();
    let effects = climb(Ladder::configure(agent.offer(), &ConfigRequest::default()), []);
    assert_eq!(
        effects,
        [Seen::Done(Ok(SessionConfig {
            model: Some("default[]".into()),
            ..SessionConfig::default()
        }))]
    );
}

#[test]
fn every_legacy_rung_refuses_with_its_typed_reason() {
    let agent = Agent::legacy();
    let no_modes = Agent {
        modes: Value::Null,
        ..Agent::legacy()
    };
    /// (agent, request, its answers, calls sent, reason, words of the message)
    type Rung<'a> = (
        &'a Agent,
        ConfigRequest,
        Vec<Result<Value, EngineError>>,
        usize,
        Reason,
        &'a str,
    );
    let table: [Rung; 6] = [
        (
            &agent,
            request(Some("gpt-z"), &[], None),
            vec![],
            0,
            Reason::ModelUnavailable,
            "does not list the model `gpt-z`",
        ),
        (
            &agent,
            request(Some("gpt-x"), &[], None),
            vec![Err(protocol_error("unknown model"))],
            1,
            Reason::ModelUnavailable,
            "the agent refused `model` = `gpt-x`",
        ),
        (
            &agent,
            request(Some("gpt-x"), &[], Some("plan")),
            vec![Ok(json!({}))],
            1,
            Reason::ModelUnavailable,
            "does not offer mode `plan` (it offers: agent, ask)",
        ),
        (
            &no_modes,
            request(None, &[], Some("ask")),
            vec![],
            0,
            Reason::ModelUnavailable,
            "it offers no modes",
        ),
        (
            &agent,
            request(None, &[], Some("ask")),
            vec![Err(protocol_error("no"))],
            1,
            Reason::ModelUnavailable,
            "the agent refused `mode` = `ask`",
        ),
        (
            &agent,
            request(Some("gpt-x"), &[], None),
            vec![Err(unresponsive())],
            1,
            Reason::AgentUnresponsive,
            "no answer",
        ),
    ];
    for (agent, request, answers, calls, reason, message) in table {
        let effects = climb(Ladder::configure(agent.offer(), &request), answers);
        let sent = effects.iter().filter(|e| matches!(e, Seen::Send(..))).count();
        assert_eq!(sent, calls, "{request:?}: {effects:?}");
        let refusal = refused(&effects);
        assert_eq!(refusal.reason, reason, "{request:?}");
        assert!(refusal.message.contains(message), "{request:?}: {}", refusal.message);
    }
}

#[test]
fn set_config_option_on_an_agent_without_config_options_is_refused_before_anything_is_sent() {
    let refusal = Ladder::option(Agent::legacy().offer(), "model".into(), "gpt-x".into()).unwrap_err();
    assert_eq!(refusal.reason, Reason::ModelUnavailable);
    assert!(refusal.message.contains("use SetModel or SetMode"));
}

#[test]
fn the_catalog_asks_cursor_and_falls_back_to_the_session_only_when_the_method_is_not_found() {
    let agent = Agent::with_config_options();
    let from_session = ModelCatalog::from_session(&agent.config_options, &agent.legacy_models);
    assert_eq!(
        list_models(agent.offer(), true),
        CatalogStep::Known(from_session.clone()),
        "no Cursor extension under a profile"
    );
    assert_eq!(list_models(agent.offer(), false), CatalogStep::AskCursor);
    let limit = Duration::from_secs(5);
    let listed = json!({"models": [{"value": "gpt-x", "name": "GPT X"}]});
    assert_eq!(
        catalog(agent.offer(), Some(Ok(listed.clone())), limit),
        Ok(ModelCatalog::from_list(&listed))
    );
    let not_found = AcpError::Rpc(RpcError::method_not_found(methods::LIST_AVAILABLE_MODELS));
    assert_eq!(catalog(agent.offer(), Some(Err(not_found)), limit), Ok(from_session));
    let failures = [
        (
            Some(Err(AcpError::Rpc(RpcError::new(-32603, "boom")))),
            Reason::ProtocolError,
        ),
        (Some(Err(AcpError::Closed)), Reason::AgentExited),
        (
            Some(Err(AcpError::Stalled {
                limit: cursor_runner_acp::AGENT_WRITE_STALL_LIMIT,
            })),
            Reason::AgentUnresponsive,
        ),
        (None, Reason::AgentUnresponsive),
    ];
    for (answer, reason) in failures {
        assert_eq!(catalog(agent.offer(), answer, limit).unwrap_err().reason, reason);
    }
}

fn config(model: &str, parameters: &[(&str, &str)], mode: &str) -> SessionConfig {
    SessionConfig {
        model: Some(model.to_owned()),
        parameters: parameters
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        mode: Some(mode.to_owned()),
        ..SessionConfig::default()
    }
}

#[test]
fn a_change_refused_half_way_is_undone_by_the_steps_that_moved() {
    let before = config("gpt-x", &[("effort", "xhigh"), ("fast", "false")], "agent");
    let steps = |now: &SessionConfig| Ladder::undo(&before, now).map(|r| r.steps());
    let owned = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    };
    assert_eq!(steps(&before), None, "nothing moved");
    assert_eq!(
        steps(&config("claude-y", &[("effort", "low")], "agent")),
        Some(owned(&[("model", "gpt-x"), ("effort", "xhigh"), ("fast", "false")])),
        "a switch back restores every parameter the model had"
    );
    assert_eq!(
        steps(&config("gpt-x", &[("effort", "low"), ("fast", "false")], "agent")),
        Some(owned(&[("effort", "xhigh")])),
        "on the same model, only what moved"
    );
    assert_eq!(
        steps(&config("gpt-x", &[("effort", "xhigh"), ("fast", "false")], "ask")),
        Some(owned(&[("mode", "agent")]))
    );
}

/// The refusal's `key` metadata.
fn meta<'a>(refusal: &'a EngineError, key: &str) -> Option<&'a str> {
    refusal.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// An agent profile whose agent asks in `modes`.
fn asking_in(modes: &[String]) -> Option<AskModes<'_>> {
    Some(AskModes {
        profile: "codex",
        modes,
    })
}

#[test]
fn without_an_agent_profile_any_mode_goes_and_none_is_chosen() {
    let agent = Agent::with_config_options();
    let mut request = ConfigRequest::default();
    assert!(require_ask_mode(agent.offer(), None, ApprovalPolicy::Ask, &mut request).is_ok());
    assert_eq!(request.mode, None);
}

#[test]
fn under_a_profile_the_session_runs_in_its_first_ask_mode_unless_another_ask_mode_is_asked_for() {
    let agent = Agent::with_config_options();
    let modes = ["ask".to_owned(), "agent".to_owned()];
    let mut unspecified = ConfigRequest::default();
    assert!(require_ask_mode(agent.offer(), asking_in(&modes), ApprovalPolicy::Ask, &mut unspecified).is_ok());
    assert_eq!(unspecified.mode.as_deref(), Some("ask"));
    let mut second = ConfigRequest {
        mode: Some("agent".into()),
        ..ConfigRequest::default()
    };
    assert!(require_ask_mode(agent.offer(), asking_in(&modes), ApprovalPolicy::Ask, &mut second).is_ok());
    assert_eq!(second.mode.as_deref(), Some("agent"));
}

#[test]
fn under_a_profile_a_mode_that_does_not_ask_or_is_not_offered_or_none_named_is_refused() {
    let agent = Agent::with_config_options();
    let ask = ["ask".to_owned()];
    let unoffered = ["plan".to_owned()];
    let cases: [(&[String], Option<&str>, Option<&str>); 3] = [
        // The profile names no ask mode at all.
        (&[], None, None),
        // The caller asks for a mode in which the agent runs tools unasked.
        (&ask, Some("agent"), Some("agent")),
        // The profile's ask mode is one this agent does not advertise.
        (&unoffered, None, Some("plan")),
    ];
    for (modes, requested, refused_mode) in cases {
        let mut request = ConfigRequest {
            mode: requested.map(Into::into),
            ..ConfigRequest::default()
        };
        let refusal = require_ask_mode(agent.offer(), asking_in(modes), ApprovalPolicy::Ask, &mut request).unwrap_err();
        assert_eq!(
            refusal.reason,
            Reason::ApprovalModeUnavailable,
            "{modes:?} {requested:?}"
        );
        assert_eq!(meta(&refusal, "available_modes"), Some("agent,ask"));
        assert_eq!(meta(&refusal, "mode"), refused_mode);
    }
}

#[test]
fn a_configuration_changes_between_turns_only() {
    assert!(between_turns(None).is_ok());
    let running = cursor_runner_domain::ids::TurnId::from("turn-1");
    let refusal = between_turns(Some(&running)).unwrap_err();
    assert_eq!(refusal.reason, Reason::TurnActive);
    assert_eq!(meta(&refusal, "turn_id"), Some("turn-1"));
}
