//! The session's configuration: model, parameters and mode applied and echo-checked, changed between turns, and the model catalog.

use cursor_runner_acp::methods;
use cursor_runner_store::ExecutionRecord;
use serde_json::json;

use cursor_runner_domain::error::EngineError;
use cursor_runner_domain::session_config::{ConfigRequest, SessionConfig};
use cursor_runner_pool::handshake::{self};
use std::time::Duration;
use tracing::Instrument;

use super::data::*;
use crate::limits::AGENT_CALL_LIMIT;
use crate::machine::session::{self, AskModes, CatalogStep, ConfigEffect, ConfigStep, Ladder, Offer, Then};
use crate::model_catalog::ModelCatalog;

impl Actor {
    /// Applies the caller's model, parameters and mode (`machine::session`'s ladder) and
    /// records what is in effect; each call the agent takes over `limit` to answer is refused.
    pub(super) async fn configure(&mut self, request: &ConfigRequest, limit: Duration) -> Result<(), EngineError> {
        let step = Ladder::configure(self.offer(), request);
        let applied = self.climb(step, limit).await;
        let outcome = applied.map(|config| self.record_config(config));
        if !request.steps().is_empty() {
            self.emit_config().await?;
        }
        outcome
    }

    /// What the agent offers to configure, as last echoed.
    fn offer(&self) -> Offer<'_> {
        Offer {
            session_id: &self.session_id,
            config_options: &self.config_options,
            legacy_models: &self.legacy_models,
            modes: &self.modes,
        }
    }

    /// Runs a configuration ladder's steps in order, feeding each call's answer back.
    async fn climb(&mut self, mut step: ConfigStep, limit: Duration) -> Result<SessionConfig, EngineError> {
        loop {
            for effect in step.effects {
                match effect {
                    ConfigEffect::Options(options) => self.config_options = options,
                    ConfigEffect::Record(config) => self.record_config(config),
                }
            }
            let (call, params, ladder) = match step.then {
                Then::Done(result) => return result,
                Then::Send { call, params, ladder } => (call, params, ladder),
            };
            let answer = handshake::timed(limit, self.connection.request(call.method(), params)).await;
            step = ladder.answered(answer);
        }
    }

    /// The mode the session must run in under an agent profile ([`session::require_ask_mode`]).
    pub(super) fn require_ask_mode(&self, request: &mut ConfigRequest) -> Result<(), EngineError> {
        let profile = self.agent_profile.as_deref().map(|p| AskModes {
            profile: &p.name,
            modes: &p.ask_modes,
        });
        session::require_ask_mode(self.offer(), profile, self.policy, request)
    }

    /// `session.config.updated` with the agent's current options, through the same
    /// projection (and the same redaction as they come in) its own `config_option_update`
    /// gets.
    pub(super) async fn emit_config(&mut self) -> Result<(), EngineError> {
        if !self.config_options.is_array() {
            return Ok(());
        }
        let update = json!({"sessionUpdate": "config_option_update", "configOptions": self.config_options});
        let payloads = self.session_normalizer.on_update(&self.redacted_at_ingress(update));
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events.emit(turn_id.as_ref(), payloads).await
    }

    /// `SetModel` / `SetMode` / `SetConfigOption`: between turns only (Cursor's model
    /// is process-global and a change mid-turn has no defined effect).
    pub(super) async fn change_config(&mut self, steps: ConfigChange) -> Result<ExecutionRecord, EngineError> {
        session::between_turns(self.turn.as_ref().map(|t| &t.record.id))?;
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
            ConfigChange::Request(request) => {
                let before = self.in_effect();
                match self.configure(&request, AGENT_CALL_LIMIT).await {
                    Err(refusal) => Err(self.undo(before, refusal).await),
                    applied => applied,
                }
            }
            ConfigChange::Option { config_id, value } => match Ladder::option(self.offer(), config_id, value) {
                Err(refusal) => Err(refusal),
                Ok(step) => {
                    let applied = self.climb(step, AGENT_CALL_LIMIT).await;
                    let emitted = self.emit_config().await;
                    applied.and_then(|config| {
                        self.record_config(config);
                        emitted
                    })
                }
            },
        };
        // What the agent reports is recorded even when a change was refused half-way.
        self.save_record().await?;
        applied.map(|()| self.record.clone())
    }

    /// The configuration in effect, as recorded.
    fn in_effect(&self) -> Option<SessionConfig> {
        self.record.session_config.clone()
    }

    /// A change refused half-way (a model switched, then a parameter value the new model
    /// does not offer) is undone, so a refused call changes nothing; `refusal` says whether
    /// that worked (metadata `undone`). If the agent refuses the undo too, the record keeps
    /// what it reports.
    async fn undo(&mut self, before: Option<SessionConfig>, refusal: EngineError) -> EngineError {
        let Some(request) = before
            .zip(self.in_effect())
            .and_then(|(before, now)| Ladder::undo(&before, &now))
        else {
            return refusal;
        };
        match self.configure(&request, AGENT_CALL_LIMIT).await {
            Ok(()) => refusal.with("undone", "true"),
            Err(e) => {
                tracing::warn!(error = %e, "the agent refused to undo a configuration change refused half-way");
                refusal.with("undone", "false")
            }
        }
    }

    /// The model catalog, by `machine::session`'s catalog ladder. Cursor is asked off
    /// the actor: an agent that never answers holds this call for `AGENT_CALL_LIMIT`, never
    /// the turn's deadlines or the commands behind it.
    pub(super) fn list_models(&self, reply: Reply<ModelCatalog>) {
        let redactor = self.events.redactor().clone();
        if let CatalogStep::Known(catalog) = session::list_models(self.offer(), self.agent_profile.is_some()) {
            let _ = reply.send(Ok(catalog.redacted(&redactor)));
            return;
        }
        let connection = self.connection.clone();
        let (session_id, config_options) = (self.session_id.clone(), self.config_options.clone());
        let (legacy_models, modes) = (self.legacy_models.clone(), self.modes.clone());
        let asked = async move {
            let call = connection.request(methods::LIST_AVAILABLE_MODELS, json!({}));
            let answer = tokio::time::timeout(AGENT_CALL_LIMIT, call).await.ok();
            let offer = Offer {
                session_id: &session_id,
                config_options: &config_options,
                legacy_models: &legacy_models,
                modes: &modes,
            };
            let catalog = session::catalog(offer, answer, AGENT_CALL_LIMIT);
            let _ = reply.send(
                catalog
                    .map(|c| c.redacted(&redactor))
                    .map_err(|e| e.redacted(&redactor)),
            );
        };
        tokio::spawn(asked.instrument(tracing::Span::current()));
    }

    /// Records what is in effect: the agent's configuration (its words: redacted) and the
    /// session's MCP servers.
    pub(super) fn record_config(&mut self, config: SessionConfig) {
        let mut config = self.events.redactor().redacted(config);
        config.mcp_servers = self.mcp_servers.clone();
        self.record.session_config = Some(config);
    }
}
