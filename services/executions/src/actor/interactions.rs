//! Durable interactions: persisted before they are exposed, answered once, delivered down the pipe, or ended with their turn.

use cursor_runner_acp::{AgentMessage, AgentRequest, MalformedParams, RpcError};
use cursor_runner_activity::*;
use cursor_runner_store::{Generation, InteractionId, InteractionRecord, StoreError, now_ms};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use tracing::Instrument;

use crate::call_key::CallKey;
use crate::interaction_row::not_pending;
use crate::machine::Now;
use crate::machine::interaction::{Committed, Effect, EndReason, Input, Interaction, Observation};
use crate::machine::turn::CancelCause;
use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::interaction::{
    InteractionAnswer, PermissionRequest, PersistedRequest, PlanRequest, QuestionRequest, RequestRefused,
    cancelled_result,
};
use cursor_runner_domain::state::InteractionState;
use cursor_runner_store::failpoint::failpoint;

use super::data::*;

impl Actor {
    pub(super) async fn on_agent_request(&mut self, request: AgentRequest) -> Result<(), EngineError> {
        let refused = |e: MalformedParams| RequestRefused(e.to_string());
        let parsed = match request.classify() {
            AgentMessage::AskQuestion(params) => params
                .map_err(refused)
                .and_then(QuestionRequest::from_native)
                .map(PersistedRequest::Question),
            AgentMessage::CreatePlan(params) => params
                .map_err(refused)
                .and_then(PlanRequest::from_native)
                .map(PersistedRequest::Plan),
            AgentMessage::RequestPermission(params) => self.permission_request(params),
            message if message.is_fire_and_forget() => {
                // Acknowledged at once, never waiting on anyone.
                drop(message);
                let (method, params) = (request.method.clone(), request.params.clone());
                respond(request, Ok(json!({}))).await;
                return self.on_extension(&AgentMessage::classify(&method, &params)).await;
            }
            message => {
                let error = RpcError::method_not_found(message.method());
                drop(message);
                respond(request, Err(error)).await;
                return Ok(());
            }
        };
        self.open_interaction(request, parsed).await
    }

    /// A permission request, accepted only for this execution's session or a child the
    /// running turn knows.
    fn permission_request(&self, params: &Value) -> Result<PersistedRequest, RequestRefused> {
        let permission = PermissionRequest::from_native(params, self.policy)?;
        let child_session = self
            .turn
            .as_ref()
            .is_some_and(|t| t.normalizer.child_for(Some(&permission.session_id), None).is_some());
        if permission.session_id == self.session_id || child_session {
            Ok(PersistedRequest::Permission(permission))
        } else {
            Err(RequestRefused(format!(
                "a permission for foreign session `{}`",
                permission.session_id
            )))
        }
    }

    /// Validates a human-facing request, persists it bound to the running turn, and
    /// only then exposes it. A request that cannot be accepted is refused on the wire
    /// at once (`cancelled`) with a notice; nothing is half-recorded.
    pub(super) async fn open_interaction(
        &mut self,
        request: AgentRequest,
        parsed: Result<PersistedRequest, RequestRefused>,
    ) -> Result<(), EngineError> {
        let method = request.method.clone();
        let (category, summary) = match (parsed, self.turn.as_ref()) {
            (Ok(persisted), Some(turn)) if turn.lifecycle.phase().is_running() => {
                return self.persist_interaction(request, persisted).await;
            }
            (Ok(_), _) => (
                "interaction_outside_turn",
                format!("`{method}` arrived with no running turn; answered `cancelled`"),
            ),
            (Err(why), _) => (
                "interaction_refused",
                format!("`{method}` refused and answered `cancelled`: {why}"),
            ),
        };
        respond(request, Ok(cancelled_result())).await;
        self.notice(category, summary).await
    }

    /// Persists an accepted request bound to the running turn, then exposes it.
    async fn persist_interaction(
        &mut self,
        request: AgentRequest,
        persisted: PersistedRequest,
    ) -> Result<(), EngineError> {
        let method = request.method.clone();
        let turn = self
            .turn
            .as_ref()
            .map(|t| t.record.clone())
            .ok_or_else(|| EngineError::internal("no turn"))?;
        let active = self.turn.as_ref().map(|t| &t.normalizer);
        let tool_call_known = persisted
            .tool_call_id()
            .map(|id| active.is_some_and(|n| n.knows_tool_call(id)));
        // A request from a child agent (a permission on its session, or any request whose
        // tool call is the child's) is attributed to that child.
        let session_id = match &persisted {
            PersistedRequest::Permission(p) => Some(p.session_id.as_str()),
            _ => None,
        };
        let child =
            active.and_then(|n| n.child_for(session_id.filter(|s| *s != self.session_id), persisted.tool_call_id()));
        let mut durable = match persisted.to_durable_json() {
            // Text this service just wrote from a typed request: it reads back.
            Ok(text) => serde_json::from_str::<Value>(&text).unwrap_or_default(),
            Err(why) => {
                respond(request, Ok(cancelled_result())).await;
                return self
                    .notice(
                        "interaction_refused",
                        format!("`{method}` refused and answered `cancelled`: {why}"),
                    )
                    .await;
            }
        };
        with_child(&mut durable, child.as_ref());
        // The row keeps the agent's words without the secrets it was handed; answers are
        // mapped through `persisted`, which stays in memory as the agent sent it.
        self.events.redactor().redact_json(&mut durable);
        let native_request_id = serde_json::to_string(&request.id).unwrap_or_default();
        let native_request_id = self.events.redactor().redact_text(&native_request_id).0;
        let id = uuid::Uuid::now_v7().to_string();
        let now = self.now();
        let record = InteractionRecord {
            etag: etag(&id, self.record.generation, &turn.id),
            id: id.into(),
            execution_id: self.record.id.clone(),
            tenant_id: self.record.tenant_id.clone(),
            generation: self.record.generation,
            turn_id: turn.id.clone(),
            native_request_id,
            kind: persisted.kind(),
            state: InteractionState::Pending,
            request: durable,
            outcome: None,
            answer_request_id: None,
            answer_fingerprint: None,
            reason: None,
            delivery: None,
            replay_allowed: false,
            created_at_ms: now.ms,
            updated_at_ms: now.ms,
        };
        let created = ActivityPayload::RuntimeRequestCreated(RuntimeRequestCreated {
            interaction_id: record.id.to_string(),
            kind: persisted.kind(),
            etag: record.etag.clone(),
            turn_id: turn.id.to_string(),
            request: record.request.clone(),
            tool_call_known,
            child_id: child.map(|c| c.child_id),
        });
        let handoff_at = now.instant + self.wait_limit;
        let redactor = self.events.redactor().clone();
        let (interaction, effects) = Interaction::open(record, persisted, created, self.policy, handoff_at, redactor);
        let span = open_span(interaction.record());
        let live = LiveInteraction {
            interaction,
            request: Some(request),
            key: None,
        };
        self.drive(live, effects).instrument(span).await.map(drop)
    }

    pub(super) async fn answer(
        &mut self,
        (tenant_id, interaction_id): (String, InteractionId),
        etag: String,
        request_id: String,
        answer: InteractionAnswer,
        key: CallKey,
    ) -> Result<InteractionRecord, EngineError> {
        let Some(live) = self.pending.remove(&interaction_id) else {
            return Err(match self.store.get_interaction(&tenant_id, &interaction_id).await? {
                Some(current) => not_pending(&current),
                None => EngineError::not_found(
                    Reason::InteractionNotFound,
                    format!("interaction `{interaction_id}` not found"),
                ),
            });
        };
        let span = deliver_span(live.interaction.record(), "human");
        let mut live = live;
        live.key = Some(key.clone());
        let effects = live.interaction.handle(
            Input::Answer {
                etag,
                request_id,
                answer,
                key: Some(key),
            },
            self.now(),
        );
        self.drive(live, effects)
            .instrument(span)
            .await?
            .unwrap_or_else(|| Err(EngineError::internal("an answer ended without a reply")))
    }

    /// Runs an interaction's effects strictly in order, feeding the outcome of each commit
    /// and pipe write back to it, until it waits on nobody; keeps it while it is pending.
    /// Returns the caller's reply, if the machine gave one.
    async fn drive(
        &mut self,
        mut live: LiveInteraction,
        effects: Vec<Effect>,
    ) -> Result<Option<Result<InteractionRecord, EngineError>>, EngineError> {
        let mut queue = std::collections::VecDeque::from(effects);
        let mut reply = None;
        while let Some(effect) = queue.pop_front() {
            let outcome = match effect {
                Effect::Commit { writes, events } => {
                    let keyed: Vec<_> = match &live.key {
                        Some(_) => writes.iter().filter(|w| w.is_idempotency()).cloned().collect(),
                        None => Vec::new(),
                    };
                    let committed = match self.events.commit(writes, events).await {
                        Ok(true) => {
                            if let Some(key) = &live.key {
                                key.landed(&keyed);
                            }
                            Committed::Landed
                        }
                        Ok(false) => {
                            let record = live.interaction.record();
                            let current = self.store.get_interaction(&record.tenant_id, &record.id).await;
                            Committed::Moved {
                                current: current.ok().flatten(),
                            }
                        }
                        Err(StoreError::Duplicate) => Committed::Duplicate,
                        Err(StoreError::KeyTaken) => Committed::KeyTaken,
                        Err(e) => Committed::Failed(e.into()),
                    };
                    Some(Input::Committed(committed))
                }
                Effect::Respond(result) => {
                    let written = match live.request.take() {
                        Some(request) => request.respond(Ok(result)).await.is_ok(),
                        None => false,
                    };
                    Some(Input::Written(written))
                }
                Effect::Reply(result) => {
                    reply = Some(result);
                    None
                }
                Effect::Notice { category, summary } => {
                    self.notice(category, summary).await?;
                    None
                }
                Effect::Observe(observation) => {
                    self.observe(observation);
                    None
                }
                Effect::Failpoint(name) => {
                    failpoint(name).await;
                    None
                }
                Effect::Stop(e) => return Err(e),
            };
            if let Some(input) = outcome {
                queue.extend(live.interaction.handle(input, self.now()));
            }
        }
        // A machine whose effects ran out waits on nobody: it is pending or it is over.
        debug_assert!(live.interaction.is_pending() || live.interaction.is_ended());
        if live.interaction.is_pending() {
            live.key = None;
            self.pending.insert(live);
        }
        Ok(reply)
    }

    pub(super) fn observe(&mut self, observation: Observation) {
        match observation {
            Observation::Fenced(what) => self.events.refused_by_fence(what),
            Observation::StaleEtag => self.events.refused_stale_etag(),
            Observation::DeliveredAfter(took) => {
                if let Some(metrics) = self.events.metrics() {
                    metrics.answer_delivered_after(took);
                }
            }
            Observation::Waited { kind, state, waited } => {
                if let Some(metrics) = self.events.metrics() {
                    metrics.interaction_waited(kind, state.as_str(), waited);
                }
            }
        }
    }

    /// Answers every pending interaction `cancelled` on the wire and records it by its
    /// kind's rule: a permission `cancelled`; a question or plan `expired` (not
    /// replayable, full request kept for a durable hand-off).
    pub(super) async fn settle_pending(&mut self, reason: EndReason) -> Result<(), EngineError> {
        // In the order they were asked (ids are time-ordered UUIDv7).
        let mut ids = self.pending.ids();
        ids.sort_unstable();
        for id in ids {
            self.settle_one(&id, reason).await?;
        }
        Ok(())
    }

    async fn settle_one(&mut self, id: &str, reason: EndReason) -> Result<(), EngineError> {
        let Some(mut live) = self.pending.remove(id) else {
            return Ok(());
        };
        let effects = live.interaction.handle(Input::End(reason), self.now());
        self.drive(live, effects).await.map(drop)
    }

    /// The time an input arrives at, for the machines.
    pub(super) fn now(&self) -> Now {
        Now {
            instant: Instant::now(),
            ms: now_ms(),
        }
    }

    /// Hands off every question or plan that has waited past the execution's limit:
    /// Cursor never times them out, so they would pin the process forever. They expire
    /// (`durable_handoff`), the agent gets `cancelled`, and the turn is cancelled so it
    /// settles; the control plane asks the human durably and continues with a new turn.
    pub(super) async fn on_handoff_due(&mut self) -> Result<Ending, EngineError> {
        let now = Instant::now();
        let due: Vec<InteractionId> = self
            .pending
            .values()
            .filter(|live| live.interaction.handoff_at() <= now)
            .map(|live| live.interaction.record().id.clone())
            .collect();
        for id in due {
            self.settle_one(&id, EndReason::DurableHandoff).await?;
        }
        if let Some(turn_id) = self.running_turn_id() {
            self.cancel_turn_with(&turn_id, CancelCause::Handoff).await?;
        }
        Ok(Ending::Continue)
    }
}

/// The durable request JSON, with the child agent it came from (if any) under `child`.
fn with_child(durable: &mut Value, child: Option<&ChildRef>) {
    if let (Some(child), Value::Object(map)) = (child, durable) {
        map.insert("child".into(), json!(child));
    }
}

/// The span of one answer's way to the agent.
fn deliver_span(record: &InteractionRecord, answered_by: &str) -> tracing::Span {
    tracing::info_span!(
        "interaction.deliver",
        interaction_id = %record.id,
        kind = %record.kind,
        generation = record.generation.get(),
        turn_id = %record.turn_id,
        answered_by,
    )
}

/// The span of one request's way to being recorded (and, under a denying policy, answered).
fn open_span(record: &InteractionRecord) -> tracing::Span {
    tracing::info_span!(
        "interaction.open",
        interaction_id = %record.id,
        kind = %record.kind,
        generation = record.generation.get(),
        turn_id = %record.turn_id,
    )
}

/// An opaque token naming the interaction's fence (execution generation and turn).
fn etag(interaction_id: &str, generation: Generation, turn_id: &str) -> String {
    let digest = Sha256::digest(format!("{interaction_id}|{generation}|{turn_id}").as_bytes());
    hex::encode(&digest[..12])
}
