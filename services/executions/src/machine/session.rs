//! The session's configuration ladders, as a state machine: each rung a call to the agent
//! whose answer comes back as an input, so what every answer leads to is a table test.
//!
//! An agent with `configOptions` gets `session/set_config_option`, one option at a time,
//! each echo checked, then every step checked again against the last echo (a later change
//! must not have silently undone an earlier one). An agent without them (an older build)
//! gets `session/set_model` / `session/set_mode`, which echo nothing: what they set is
//! recorded `verified: false`, each step as the agent acknowledges it. A refusal is typed (`MODEL_UNAVAILABLE`); a dead or silent
//! agent stays what it is.
//!
//! The model catalog has a ladder of its own: Cursor's `cursor/list_available_models`,
//! and what `session/new` offered when the agent does not know that method.

use std::time::Duration;

use cursor_runner_acp::{AcpError, METHOD_NOT_FOUND, methods};
use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::ids::TurnId;
use cursor_runner_domain::interaction::ApprovalPolicy;
use cursor_runner_domain::session_config::{self, ConfigRequest, OptionValue, SessionConfig};
use serde_json::{Value, json};

use crate::model_catalog::ModelCatalog;

/// A configuration call to the agent: `session/set_config_option`, or the legacy
/// `session/set_model` / `session/set_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfigCall {
    ConfigOption,
    Model,
    Mode,
}

impl ConfigCall {
    pub(crate) fn method(self) -> &'static str {
        match self {
            Self::ConfigOption => methods::SESSION_SET_CONFIG_OPTION,
            Self::Model => methods::SESSION_SET_MODEL,
            Self::Mode => methods::SESSION_SET_MODE,
        }
    }
}

/// What the runtime records of an answer, in order.
#[derive(Debug, PartialEq)]
pub(crate) enum ConfigEffect {
    /// The agent's `configOptions` as it just answered them: they replace the session's.
    Options(Value),
    /// The configuration in effect as echoed (or, on a legacy agent, acknowledged) so far,
    /// recorded even if a later step fails.
    Record(SessionConfig),
}

/// One step of a ladder: what to record, then the next call or the result.
#[derive(Debug)]
pub(crate) struct ConfigStep {
    pub(crate) effects: Vec<ConfigEffect>,
    pub(crate) then: Then,
}

#[derive(Debug)]
pub(crate) enum Then {
    /// Call the agent; its answer goes to `ladder.answered`.
    Send {
        call: ConfigCall,
        params: Value,
        ladder: Box<Ladder>,
    },
    Done(Result<SessionConfig, EngineError>),
}

impl ConfigStep {
    fn done(result: Result<SessionConfig, EngineError>) -> Self {
        Self {
            effects: Vec::new(),
            then: Then::Done(result),
        }
    }
}

/// What the agent offered when the session opened (and has echoed since).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Offer<'a> {
    pub(crate) session_id: &'a str,
    /// `configOptions` (empty or absent on builds without them).
    pub(crate) config_options: &'a Value,
    /// `session/new`'s flat `models`, for builds without `configOptions`.
    pub(crate) legacy_models: &'a Value,
    /// `session/new`'s `modes`, for builds without `configOptions`.
    pub(crate) modes: &'a Value,
}

impl Offer<'_> {
    fn has_config_options(&self) -> bool {
        self.config_options.as_array().is_some_and(|o| !o.is_empty())
    }
}

#[derive(Debug)]
enum Rung {
    /// `session/set_config_option` for `steps[next]`; `options` is the last echo.
    Option {
        steps: Vec<(String, String)>,
        next: usize,
        options: Value,
    },
    /// `session/set_model` with `model_id`; the mode comes after it.
    Model {
        model_id: String,
        request: ConfigRequest,
        config: SessionConfig,
        modes: Value,
    },
    /// `session/set_mode`.
    Mode { mode: String, config: SessionConfig },
}

/// The modes an agent profile names as those in which its agent asks before running a tool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AskModes<'a> {
    pub(crate) profile: &'a str,
    pub(crate) modes: &'a [String],
}

/// Under an agent profile, every approval policy presents the agent's permission requests
/// (to a human, or answers them itself), so the agent must run in a mode in which it asks:
/// the request's mode becomes the profile's first ask mode, or must be one of them, and the
/// agent must advertise it; else the execution is refused rather than run unguarded.
/// Cursor without a profile (`None`) asks in each of its modes.
pub(crate) fn require_ask_mode(
    offer: Offer<'_>,
    profile: Option<AskModes<'_>>,
    policy: ApprovalPolicy,
    request: &mut ConfigRequest,
) -> Result<(), EngineError> {
    let Some(AskModes { profile, modes }) = profile else {
        return Ok(());
    };
    let advertised = session_config::advertised_modes(offer.config_options, offer.modes);
    let refuse = |message: String| {
        EngineError::precondition(Reason::ApprovalModeUnavailable, message)
            .with("available_modes", advertised.join(","))
    };
    let Some(first) = modes.first() else {
        return Err(refuse(format!(
            "agent profile `{profile}` names no mode in which the agent asks before running tools (`ask_mode`), so the {} approval policy would not hold; the agent offers: {}",
            policy.as_str(),
            advertised.join(", ")
        )));
    };
    let mode = request.mode.get_or_insert_with(|| first.clone()).clone();
    if !modes.contains(&mode) {
        return Err(refuse(format!(
            "mode `{mode}` is not one in which the agent asks (agent profile `{profile}`: {})",
            modes.join(", ")
        ))
        .with("mode", mode));
    }
    if !advertised.contains(&mode) {
        return Err(refuse(format!(
            "the agent does not advertise its ask mode `{mode}` (it offers: {})",
            advertised.join(", ")
        ))
        .with("mode", mode));
    }
    Ok(())
}

/// `SetModel` / `SetMode` / `SetConfigOption` go through between turns only: Cursor's model
/// is process-global, and a change mid-turn has no defined effect.
pub(crate) fn between_turns(running: Option<&TurnId>) -> Result<(), EngineError> {
    match running {
        None => Ok(()),
        Some(turn_id) => Err(EngineError::precondition(
            Reason::TurnActive,
            format!("turn `{turn_id}` is running; change the configuration between turns"),
        )
        .with("turn_id", turn_id.as_str())),
    }
}

/// A configuration change with a call out to the agent: what its answer leads to.
#[derive(Debug)]
pub(crate) struct Ladder {
    session_id: String,
    rung: Rung,
}

impl Ladder {
    /// The caller's model, parameters and mode: through `configOptions` when the agent has
    /// them, else through the legacy calls.
    pub(crate) fn configure(offer: Offer<'_>, request: &ConfigRequest) -> ConfigStep {
        let session_id = offer.session_id.to_owned();
        if offer.has_config_options() {
            let steps = request.steps();
            if let Err(unoffered) = offered_before_sending(offer.config_options, &steps) {
                return ConfigStep::done(Err(unoffered));
            }
            return next_option(session_id, steps, 0, offer.config_options.clone());
        }
        let config = SessionConfig {
            model: offer.legacy_models["currentModelId"].as_str().map(str::to_owned),
            ..SessionConfig::default()
        };
        match session_config::legacy_model_id(offer.legacy_models, request) {
            Err(unlisted) => ConfigStep::done(Err(unlisted)),
            Ok(None) => mode(session_id, request.mode.clone(), offer.modes, config),
            Ok(Some(model_id)) => {
                let params = json!({"sessionId": session_id, "modelId": model_id});
                let rung = Rung::Model {
                    model_id,
                    request: request.clone(),
                    config,
                    modes: offer.modes.clone(),
                };
                send(ConfigCall::Model, params, session_id, rung)
            }
        }
    }

    /// What puts the agent back on `before` when a change refused half-way left it on
    /// `now`: after a model switch, that model with every parameter it had (a switch resets
    /// them to the model's defaults); else only the parameters that moved; and the mode,
    /// if it moved. `None` when nothing moved.
    pub(crate) fn undo(before: &SessionConfig, now: &SessionConfig) -> Option<ConfigRequest> {
        let switched = before.model != now.model;
        let request = ConfigRequest {
            model: if switched { before.model.clone() } else { None },
            parameters: before
                .parameters
                .iter()
                .filter(|(id, value)| switched || now.parameters.get(*id) != Some(*value))
                .map(|(id, value)| (id.clone(), value.clone()))
                .collect(),
            mode: before.mode.clone().filter(|mode| now.mode.as_ref() != Some(mode)),
        };
        (!request.steps().is_empty()).then_some(request)
    }

    /// `SetConfigOption`: one option by its id, only through `configOptions`; refused
    /// before anything is sent to an agent without them.
    pub(crate) fn option(offer: Offer<'_>, config_id: String, value: String) -> Result<ConfigStep, EngineError> {
        if !offer.has_config_options() {
            return Err(EngineError::precondition(
                Reason::ModelUnavailable,
                "the agent has no configOptions (an older build): use SetModel or SetMode",
            ));
        }
        let steps = vec![(config_id, value)];
        Ok(next_option(
            offer.session_id.to_owned(),
            steps,
            0,
            offer.config_options.clone(),
        ))
    }

    /// What the agent answered the call (typed by the handshake's rules).
    pub(crate) fn answered(self, answer: Result<Value, EngineError>) -> ConfigStep {
        let session_id = self.session_id;
        let answered = match (self.rung, answer) {
            (Rung::Option { steps, next, .. }, Err(e)) => {
                let (config_id, value) = &steps[next];
                return ConfigStep::done(Err(refused_change(e, config_id, value)));
            }
            (Rung::Model { model_id, .. }, Err(e)) => {
                return ConfigStep::done(Err(refused_change(e, "model", &model_id)));
            }
            (Rung::Mode { mode, .. }, Err(e)) => return ConfigStep::done(Err(refused_change(e, "mode", &mode))),
            (rung, Ok(answered)) => (rung, answered),
        };
        match answered {
            (Rung::Option { steps, next, options }, answered) => {
                let mut effects = Vec::new();
                let options = if answered["configOptions"].is_array() {
                    effects.push(ConfigEffect::Options(answered["configOptions"].clone()));
                    answered["configOptions"].clone()
                } else {
                    options
                };
                let echoed = session_config::parse_options(&options);
                effects.push(ConfigEffect::Record(SessionConfig::from_options(&echoed)));
                let (config_id, value) = &steps[next];
                let step = match session_config::check_echo(&echoed, config_id, value) {
                    Err(mismatch) => ConfigStep::done(Err(mismatch)),
                    Ok(()) => next_option(session_id, steps, next + 1, options),
                };
                effects.extend(step.effects);
                ConfigStep {
                    effects,
                    then: step.then,
                }
            }
            (
                Rung::Model {
                    request,
                    mut config,
                    modes,
                    ..
                },
                _,
            ) => {
                config.model = request.model.clone();
                config.parameters = request.parameters.clone();
                // The agent switched: recorded now, so a mode refused next does not hide it.
                let mut step = mode(session_id, request.mode, &modes, config.clone());
                step.effects.insert(0, ConfigEffect::Record(config));
                step
            }
            (Rung::Mode { mode, mut config }, _) => {
                config.mode = Some(mode);
                ConfigStep::done(Ok(config))
            }
        }
    }
}

fn send(call: ConfigCall, params: Value, session_id: String, rung: Rung) -> ConfigStep {
    ConfigStep {
        effects: Vec::new(),
        then: Then::Send {
            call,
            params,
            ladder: Box::new(Ladder { session_id, rung }),
        },
    }
}

/// Unless a step switches the model (whose parameters are known only once it is in
/// effect), every step is checked against what the agent offers now, before anything is
/// sent: a change refused for one value then changes nothing (setting a model again resets
/// its parameters to their defaults).
fn offered_before_sending(options: &Value, steps: &[(String, String)]) -> Result<(), EngineError> {
    let parsed = session_config::parse_options(options);
    let switches_model = steps.iter().any(|(config_id, value)| {
        config_id == "model" && session_config::check_echo(&parsed, config_id, value).is_err()
    });
    if switches_model {
        return Ok(());
    }
    steps
        .iter()
        .try_for_each(|(config_id, value)| session_config::check_offered(&parsed, config_id, value))
}

/// `steps[next]`'s call, once the agent offers its value; after the last, every step
/// checked against the last echo.
fn next_option(session_id: String, steps: Vec<(String, String)>, next: usize, options: Value) -> ConfigStep {
    let parsed = session_config::parse_options(&options);
    let Some((config_id, value)) = steps.get(next) else {
        let checked = steps
            .iter()
            .try_for_each(|(config_id, value)| session_config::check_echo(&parsed, config_id, value))
            .map(|()| SessionConfig::from_options(&parsed));
        return ConfigStep::done(checked);
    };
    if let Err(unoffered) = session_config::check_offered(&parsed, config_id, value) {
        return ConfigStep::done(Err(unoffered));
    }
    let boolean = parsed
        .iter()
        .find(|o| o.id == *config_id)
        .is_some_and(|o| matches!(o.value, OptionValue::Boolean { .. }));
    let params = if boolean {
        json!({"sessionId": session_id, "configId": config_id, "type": "boolean", "value": value == "true"})
    } else {
        json!({"sessionId": session_id, "configId": config_id, "value": value})
    };
    let rung = Rung::Option { steps, next, options };
    send(ConfigCall::ConfigOption, params, session_id, rung)
}

/// The legacy mode rung: `session/set_mode` for a mode the agent advertises.
fn mode(session_id: String, mode: Option<String>, modes: &Value, config: SessionConfig) -> ConfigStep {
    let Some(mode) = mode else {
        return ConfigStep::done(Ok(config));
    };
    let advertised = session_config::advertised_modes(&Value::Null, modes);
    if !advertised.contains(&mode) {
        let offered = if advertised.is_empty() {
            "it offers no modes".to_owned()
        } else {
            format!("it offers: {}", advertised.join(", "))
        };
        let refusal = EngineError::precondition(
            Reason::ModelUnavailable,
            format!("the agent does not offer mode `{mode}` ({offered})"),
        )
        .with("config_id", "mode")
        .with("requested", mode);
        return ConfigStep::done(Err(refusal));
    }
    let params = json!({"sessionId": session_id, "modeId": mode});
    send(ConfigCall::Mode, params, session_id, Rung::Mode { mode, config })
}

/// Where the model catalog comes from.
#[derive(Debug, PartialEq)]
pub(crate) enum CatalogStep {
    /// Ask `cursor/list_available_models`; its answer goes to [`catalog`].
    AskCursor,
    Known(ModelCatalog),
}

/// A Cursor extension is never sent to an agent under a profile (one that never
/// advertised it): its catalog is what `session/new` offered.
pub(crate) fn list_models(offer: Offer<'_>, under_profile: bool) -> CatalogStep {
    if under_profile {
        return CatalogStep::Known(ModelCatalog::from_session(offer.config_options, offer.legacy_models));
    }
    CatalogStep::AskCursor
}

/// The catalog from `cursor/list_available_models`'s answer (`None`: none within `limit`):
/// every model with its own parameters; an agent without the method falls back to what
/// `session/new` offered.
pub(crate) fn catalog(
    offer: Offer<'_>,
    answer: Option<Result<Value, AcpError>>,
    limit: Duration,
) -> Result<ModelCatalog, EngineError> {
    match answer {
        Some(Ok(listed)) => Ok(ModelCatalog::from_list(&listed)),
        Some(Err(AcpError::Rpc(e))) if e.code == METHOD_NOT_FOUND => {
            Ok(ModelCatalog::from_session(offer.config_options, offer.legacy_models))
        }
        Some(Err(AcpError::Rpc(e))) => Err(EngineError::new(
            ErrorKind::Unavailable,
            Reason::ProtocolError,
            e.to_string(),
        )),
        Some(Err(e)) => Err(cursor_runner_pool::handshake::unheard(&e)),
        None => Err(EngineError::new(
            ErrorKind::Unavailable,
            Reason::AgentUnresponsive,
            format!("{} got no answer within {limit:?}", methods::LIST_AVAILABLE_MODELS),
        )),
    }
}

/// A configuration call the agent refused: an unknown value is `MODEL_UNAVAILABLE`;
/// a dead or silent agent stays what it is.
fn refused_change(error: EngineError, config_id: &str, value: &str) -> EngineError {
    if error.reason == Reason::ProtocolError {
        EngineError::precondition(
            Reason::ModelUnavailable,
            format!("the agent refused `{config_id}` = `{value}`: {}", error.message),
        )
        .with("config_id", config_id)
        .with("requested", value)
    } else {
        error
    }
}
