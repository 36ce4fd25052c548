//! The session's configuration: model, parameters and mode applied and echo-checked, changed between turns, and the model catalog.

use cursor_runner_acp::AcpError;
use cursor_runner_acp::methods;
use cursor_runner_store::ExecutionRecord;
use serde_json::{Value, json};

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::session_config::{self, ConfigRequest, SessionConfig};
use cursor_runner_pool::handshake::{self};

use super::data::*;
use crate::model_catalog::ModelCatalog;

impl Actor {
    /// Applies the caller's model, parameters and mode one option at a time, each echo
    /// checked, and records what is in effect. On an agent without `configOptions` it
    /// falls back to `session/set_model` / `session/set_mode`, which echo nothing
    /// (recorded `verified: false`).
    pub(super) async fn configure(&mut self, request: &ConfigRequest) -> Result<(), EngineError> {
        let applied = if self.config_options.as_array().is_some_and(|o| !o.is_empty()) {
            self.apply_steps(request.steps()).await
        } else {
            self.configure_legacy(request).await
        };
        let outcome = applied.map(|config| self.record_config(config));
        if !request.steps().is_empty() {
            self.emit_config().await?;
        }
        outcome
    }

    /// Under an agent profile: every approval policy presents the agent's permission
    /// requests (to a human, or answers them itself), so the agent must run in a mode in
    /// which it asks. The request's mode becomes the profile's first ask mode, or must be
    /// one of them, and the agent must advertise it; else the execution is refused rather
    /// than run unguarded. Cursor without a profile asks in each of its modes.
    pub(super) fn require_ask_mode(&self, request: &mut ConfigRequest) -> Result<(), EngineError> {
        let Some(profile) = &self.agent_profile else {
            return Ok(());
        };
        let advertised = session_config::advertised_modes(&self.config_options, &self.modes);
        let refuse = |message: String| {
            EngineError::precondition(Reason::ApprovalModeUnavailable, message)
                .with("available_modes", advertised.join(","))
        };
        let Some(first) = profile.ask_modes.first() else {
            return Err(refuse(format!(
                "agent profile `{}` names no mode in which the agent asks before running tools (`ask_mode`), so the {} approval policy would not hold; the agent offers: {}",
                profile.name,
                self.policy.as_str(),
                advertised.join(", ")
            )));
        };
        let mode = request.mode.get_or_insert_with(|| first.clone()).clone();
        if !profile.ask_modes.contains(&mode) {
            return Err(refuse(format!(
                "mode `{mode}` is not one in which the agent asks (agent profile `{}`: {})",
                profile.name,
                profile.ask_modes.join(", ")
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

    /// `configId = value` for each step, in order, each echo checked; then every step
    /// again, so a later change cannot have silently undone an earlier one.
    pub(super) async fn apply_steps(&mut self, steps: Vec<(String, String)>) -> Result<SessionConfig, EngineError> {
        let limit = self.config.handshake_timeout;
        for (config_id, value) in &steps {
            let options = session_config::parse_options(&self.config_options);
            session_config::check_offered(&options, config_id, value)?;
            let boolean = options
                .iter()
                .find(|o| o.id == *config_id)
                .is_some_and(|o| matches!(o.value, session_config::OptionValue::Boolean { .. }));
            let params = if boolean {
                json!({"sessionId": self.session_id, "configId": config_id, "type": "boolean", "value": value == "true"})
            } else {
                json!({"sessionId": self.session_id, "configId": config_id, "value": value})
            };
            let answered = handshake::timed(
                limit,
                self.connection.request(methods::SESSION_SET_CONFIG_OPTION, params),
            )
            .await
            .map_err(|e| refused_change(e, config_id, value))?;
            if answered["configOptions"].is_array() {
                self.config_options = answered["configOptions"].clone();
            }
            let echoed = session_config::parse_options(&self.config_options);
            self.record_config(SessionConfig::from_options(&echoed));
            session_config::check_echo(&echoed, config_id, value)?;
        }
        let options = session_config::parse_options(&self.config_options);
        for (config_id, value) in &steps {
            session_config::check_echo(&options, config_id, value)?;
        }
        Ok(SessionConfig::from_options(&options))
    }

    pub(super) async fn configure_legacy(&mut self, request: &ConfigRequest) -> Result<SessionConfig, EngineError> {
        let limit = self.config.handshake_timeout;
        let mut config = SessionConfig {
            model: self.legacy_models["currentModelId"].as_str().map(str::to_owned),
            ..SessionConfig::default()
        };
        if let Some(model_id) = session_config::legacy_model_id(&self.legacy_models, request)? {
            let params = json!({"sessionId": self.session_id, "modelId": model_id});
            handshake::timed(limit, self.connection.request(methods::SESSION_SET_MODEL, params))
                .await
                .map_err(|e| refused_change(e, "model", &model_id))?;
            config.model = request.model.clone();
            config.parameters = request.parameters.clone();
        }
        if let Some(mode) = &request.mode {
            let advertised = session_config::advertised_modes(&Value::Null, &self.modes);
            if !advertised.contains(mode) {
                let offered = if advertised.is_empty() {
                    "it offers no modes".to_owned()
                } else {
                    format!("it offers: {}", advertised.join(", "))
                };
                return Err(EngineError::precondition(
                    Reason::ModelUnavailable,
                    format!("the agent does not offer mode `{mode}` ({offered})"),
                )
                .with("config_id", "mode")
                .with("requested", mode.clone()));
            }
            let params = json!({"sessionId": self.session_id, "modeId": mode});
            handshake::timed(limit, self.connection.request(methods::SESSION_SET_MODE, params))
                .await
                .map_err(|e| refused_change(e, "mode", mode))?;
            config.mode = Some(mode.clone());
        }
        Ok(config)
    }

    /// `session.config.updated` with the agent's current options, through the same
    /// projection its own `config_option_update` gets.
    pub(super) async fn emit_config(&mut self) -> Result<(), EngineError> {
        if !self.config_options.is_array() {
            return Ok(());
        }
        let update = json!({"sessionUpdate": "config_option_update", "configOptions": self.config_options});
        let payloads = self.session_normalizer.on_update(&update);
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events.emit(turn_id.as_deref(), payloads).await
    }

    /// `SetModel` / `SetMode` / `SetConfigOption`: between turns only (Cursor's model
    /// is process-global and a change mid-turn has no defined effect).
    pub(super) async fn change_config(&mut self, steps: ConfigChange) -> Result<ExecutionRecord, EngineError> {
        if let Some(turn) = &self.turn {
            return Err(EngineError::precondition(
                Reason::TurnActive,
                format!(
                    "turn `{}` is running; change the configuration between turns",
                    turn.record.id
                ),
            )
            .with("turn_id", turn.record.id.clone()));
        }
        let mode = match &steps {
            ConfigChange::Request(request) => request.mode.clone(),
            ConfigChange::Option { config_id, value } => (config_id == "mode").then(|| value.clone()),
        };
        if let Some(mut request) = mode.map(|mode| ConfigRequest {
            mode: Some(mode),
            ..ConfigRequest::default()
        }) {
            // Never out of the mode in which the agent asks.
            self.require_ask_mode(&mut request)?;
        }
        let applied = match steps {
            ConfigChange::Request(request) => self.configure(&request).await,
            ConfigChange::Option { config_id, value } => {
                if self.config_options.as_array().is_none_or(|o| o.is_empty()) {
                    Err(EngineError::precondition(
                        Reason::ModelUnavailable,
                        "the agent has no configOptions (an older build): use SetModel or SetMode",
                    ))
                } else {
                    let applied = self.apply_steps(vec![(config_id, value)]).await;
                    let emitted = self.emit_config().await;
                    applied.and_then(|config| {
                        self.record_config(config);
                        emitted
                    })
                }
            }
        };
        // What the agent reports is recorded even when a change was refused half-way.
        self.save_record().await?;
        applied.map(|()| self.record.clone())
    }

    /// The model catalog: `cursor/list_available_models` (every model with its own
    /// parameters) from Cursor, else what `session/new` offered. A Cursor extension is
    /// never sent to an agent under a profile (one that never advertised it).
    pub(super) async fn list_models(&self) -> Result<ModelCatalog, EngineError> {
        if self.agent_profile.is_some() {
            return Ok(ModelCatalog::from_session(&self.config_options, &self.legacy_models));
        }
        let limit = self.config.handshake_timeout;
        let call = self.connection.request(methods::LIST_AVAILABLE_MODELS, json!({}));
        match tokio::time::timeout(limit, call).await {
            Ok(Ok(result)) => Ok(ModelCatalog::from_list(&result)),
            Ok(Err(AcpError::Rpc(e))) if e.code == cursor_runner_acp::METHOD_NOT_FOUND => {
                Ok(ModelCatalog::from_session(&self.config_options, &self.legacy_models))
            }
            Ok(Err(e)) => Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::ProtocolError,
                e.to_string(),
            )),
            Err(_) => Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::AgentUnresponsive,
                format!("{} got no answer within {limit:?}", methods::LIST_AVAILABLE_MODELS),
            )),
        }
    }

    /// Records what is in effect: the agent's configuration and the session's MCP servers.
    pub(super) fn record_config(&mut self, mut config: SessionConfig) {
        config.mcp_servers = self.mcp_servers.clone();
        self.record.session_config = Some(config.to_json());
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
