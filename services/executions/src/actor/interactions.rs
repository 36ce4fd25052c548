//! Durable interactions: persisted before they are exposed, answered once, delivered down the pipe, or ended with their turn.

use std::time::Duration;

use cursor_runner_acp::{AgentMessage, AgentRequest, MalformedParams, RpcError};
use cursor_runner_activity::*;
use cursor_runner_store::{InteractionRecord, StoreError, Write, now_ms};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use tracing::Instrument;

use crate::failpoint::failpoint;
use crate::interaction_row::{self, not_pending};
use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::interaction::{
    ApprovalPolicy, InteractionAnswer, PermissionRequest, PersistedRequest, PlanRequest, QuestionRequest,
    RequestRefused, cancelled_result,
};
use cursor_runner_domain::state::InteractionState;

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
            (Ok(persisted), Some(turn)) if turn.phase.is_running() => {
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
        let durable = match persisted.to_durable_json().map(|text| with_child(text, child.as_ref())) {
            Ok(text) => text,
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
        // The row keeps the agent's words without the secrets it was handed; answers are
        // mapped through `persisted`, which stays in memory as the agent sent it.
        let durable = self.events.redactor().redact_json_text(durable);
        let native_request_id = serde_json::to_string(&request.id).unwrap_or_default();
        let native_request_id = self.events.redactor().redact_text(&native_request_id).0;
        let id = uuid::Uuid::now_v7().to_string();
        let now = now_ms();
        let record = InteractionRecord {
            etag: etag(&id, self.record.generation, &turn.id),
            id,
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
            created_at_ms: now,
            updated_at_ms: now,
        };
        let created = ActivityPayload::RuntimeRequestCreated(RuntimeRequestCreated {
            interaction_id: record.id.clone(),
            kind: persisted.kind(),
            etag: record.etag.clone(),
            turn_id: turn.id.clone(),
            request: serde_json::from_str(&record.request).unwrap_or_default(),
            tool_call_known,
            child_id: child.map(|c| c.child_id),
        });
        // Persist before expose: the row and its event commit together, and only then
        // does the head move.
        failpoint("interaction_before_persist").await;
        let committed = self
            .events
            .commit(
                vec![Write::InsertInteraction(record.clone())],
                vec![(Some(turn.id.clone()), created)],
            )
            .await;
        match committed.and_then(|landed| if landed { Ok(()) } else { Err(StoreError::Fenced) }) {
            Ok(()) => {}
            // The agent reused a request id of this process: never answer two requests
            // through one identity.
            Err(StoreError::Duplicate) => {
                respond(request, Ok(cancelled_result())).await;
                return self
                    .notice(
                        "duplicate_request_id",
                        format!(
                            "`{method}` reused request id {} of this process; answered `cancelled`",
                            record.native_request_id
                        ),
                    )
                    .await;
            }
            Err(e) => {
                respond(request, Ok(cancelled_result())).await;
                if matches!(e, StoreError::Fenced) {
                    self.events.refused_by_fence("interaction");
                }
                return Err(e.into());
            }
        }
        let denial = match (&persisted, self.policy) {
            (PersistedRequest::Permission(p), ApprovalPolicy::DenyAll) => Some(p.policy_denial()),
            _ => None,
        };
        let pending = PendingInteraction {
            record,
            request,
            persisted,
            handoff_at: Instant::now() + self.wait_limit,
        };
        match denial {
            // The policy answers at once, without a human; the tool must not run.
            Some(outcome) => {
                let span = deliver_span(&pending, "policy");
                self.deliver(pending, outcome, None, "policy").instrument(span).await?;
            }
            None => {
                self.pending.insert(pending.record.id.clone(), pending);
            }
        }
        Ok(())
    }

    pub(super) async fn answer(
        &mut self,
        record: InteractionRecord,
        etag: &str,
        request_id: &str,
        answer: InteractionAnswer,
    ) -> Result<InteractionRecord, EngineError> {
        let Some(pending) = self.pending.get(&record.id) else {
            let current = self
                .store
                .get_interaction(&record.tenant_id, &record.id)
                .await?
                .unwrap_or(record);
            return Err(not_pending(&current));
        };
        if etag != pending.record.etag {
            self.events.refused_stale_etag();
            return Err(EngineError::precondition(
                Reason::StaleEtag,
                "the etag is not the interaction's current one",
            ));
        }
        let outcome = pending.persisted.outcome_for(&answer)?;
        let pending = self
            .pending
            .remove(&record.id)
            .ok_or_else(|| EngineError::internal("pending entry vanished"))?;
        let span = deliver_span(&pending, "human");
        self.deliver(pending, outcome, Some((request_id, answer.fingerprint())), "human")
            .instrument(span)
            .await
    }

    /// Records the answer, writes it to the agent, and records `delivered` only once
    /// the write is flushed. If the write fails the process is gone: the interaction
    /// expires with `delivery: unknown`, never claimed delivered.
    pub(super) async fn deliver(
        &mut self,
        pending: PendingInteraction,
        outcome: Value,
        answer: Option<(&str, String)>,
        answered_by: &str,
    ) -> Result<InteractionRecord, EngineError> {
        let arrived = Instant::now();
        let mut answered = pending.record.clone();
        answered.state = InteractionState::Answered;
        answered.outcome = Some(outcome.to_string());
        answered.answer_request_id = answer.as_ref().map(|(id, _)| (*id).to_owned());
        answered.answer_fingerprint = answer.map(|(_, fingerprint)| fingerprint);
        answered.reason = (answered_by == "policy").then(|| format!("approval_policy_{}", self.policy.as_str()));
        answered.updated_at_ms = now_ms();
        if !interaction_row::transition(self.store.as_ref(), InteractionState::Pending, &answered).await? {
            let current = self
                .store
                .get_interaction(&answered.tenant_id, &answered.id)
                .await?
                .unwrap_or(answered);
            if current.state == InteractionState::Pending {
                // Still pending, so the compare-and-set failed on the execution's
                // generation: another lease owns it now. Nothing reaches this agent.
                self.events.refused_by_fence("answer");
                return Err(StoreError::Fenced.into());
            }
            return Err(not_pending(&current));
        }
        failpoint("answer_recorded_before_pipe_write").await;
        let written = pending.request.respond(Ok(outcome.clone())).await;
        if let (Ok(_), Some(metrics)) = (&written, self.events.metrics()) {
            metrics.answer_delivered_after(arrived.elapsed());
        }
        if written.is_ok() {
            failpoint("answer_written_before_delivered").await;
        }
        let mut settled = answered.clone();
        settled.updated_at_ms = now_ms();
        if written.is_err() {
            settled.state = InteractionState::Expired;
            settled.delivery = Some("unknown".into());
            settled.reason = Some("provider_process_lost".into());
            self.end(InteractionState::Answered, &settled).await?;
            return Err(not_pending(&settled));
        }
        settled.state = InteractionState::Delivered;
        settled.delivery = Some("pipe_written".into());
        let resolved = ActivityPayload::RuntimeRequestResolved(RuntimeRequestResolved {
            interaction_id: settled.id.clone(),
            kind: settled.kind,
            turn_id: settled.turn_id.clone(),
            outcome,
            delivery: "pipe_written".into(),
            answered_by: answered_by.into(),
        });
        // `delivered` and its event in one commit.
        let write = interaction_row::write(InteractionState::Answered, &settled)?;
        if self
            .events
            .commit(vec![write], vec![(Some(settled.turn_id.clone()), resolved)])
            .await?
        {
            self.observe_wait(&settled);
        }
        Ok(settled)
    }

    /// Answers every pending interaction `cancelled` on the wire and records it by its
    /// kind's rule: a permission `cancelled`; a question or plan `expired` (not
    /// replayable, full request kept for a durable hand-off).
    pub(super) async fn settle_pending(&mut self, reason: &str) -> Result<(), EngineError> {
        // In the order they were asked (ids are time-ordered UUIDv7).
        let mut ids: Vec<String> = self.pending.keys().cloned().collect();
        ids.sort_unstable();
        for id in ids {
            self.settle_one(&id, reason).await?;
        }
        Ok(())
    }

    pub(super) async fn settle_one(&mut self, id: &str, reason: &str) -> Result<(), EngineError> {
        let Some(p) = self.pending.remove(id) else {
            return Ok(());
        };
        let written = p.request.respond(Ok(cancelled_result())).await;
        let mut record = p.record;
        record.outcome = Some(cancelled_result().to_string());
        let delivery = if written.is_ok() { "pipe_written" } else { "not_sent" };
        self.end_pending(record, p.persisted.state_when_turn_ends(), reason, delivery)
            .await
    }

    /// Records a pending interaction's end (compare-and-set from `pending`; never
    /// replayable) and exposes it with the full request.
    pub(super) async fn end_pending(
        &mut self,
        mut record: InteractionRecord,
        state: InteractionState,
        reason: &str,
        delivery: &str,
    ) -> Result<(), EngineError> {
        record.state = state;
        record.reason = Some(reason.into());
        record.delivery = Some(delivery.into());
        record.replay_allowed = false;
        record.updated_at_ms = now_ms();
        self.end(InteractionState::Pending, &record).await
    }

    /// Commits an interaction's end from `from` together with the event that says so (with
    /// the full request, for a durable hand-off). Nothing happens if the row had moved on.
    async fn end(&mut self, from: InteractionState, record: &InteractionRecord) -> Result<(), EngineError> {
        let write = interaction_row::write(from, record)?;
        let ended = interaction_row::ended(record, true);
        if self
            .events
            .commit(vec![write], vec![(Some(record.turn_id.clone()), ended)])
            .await?
        {
            self.observe_wait(record);
        }
        Ok(())
    }

    /// Hands off every question or plan that has waited past the execution's limit:
    /// Cursor never times them out, so they would pin the process forever. They expire
    /// (`durable_handoff`), the agent gets `cancelled`, and the turn is cancelled so it
    /// settles; the control plane asks the human durably and continues with a new turn.
    pub(super) async fn on_handoff_due(&mut self) -> Result<Ending, EngineError> {
        let now = Instant::now();
        let due: Vec<String> = self
            .pending
            .values()
            .filter(|p| p.handoff_at <= now)
            .map(|p| p.record.id.clone())
            .collect();
        for id in due {
            self.settle_one(&id, "durable_handoff").await?;
        }
        if let Some(turn_id) = self.running_turn_id() {
            self.cancel_turn_with(&turn_id, "durable_handoff", None).await?;
        }
        Ok(Ending::Continue)
    }

    /// How long an interaction that just ended had been pending.
    pub(super) fn observe_wait(&self, record: &InteractionRecord) {
        if let (Some(metrics), state) = (self.events.metrics(), record.state) {
            let waited = Duration::from_millis((now_ms() - record.created_at_ms).max(0) as u64);
            metrics.interaction_waited(record.kind, state.as_str(), waited);
        }
    }
}

/// The durable request JSON, with the child agent it came from (if any) under `child`.
fn with_child(durable: String, child: Option<&ChildRef>) -> String {
    let Some(child) = child else { return durable };
    match serde_json::from_str::<Value>(&durable) {
        Ok(Value::Object(mut map)) => {
            map.insert("child".into(), json!(child));
            Value::Object(map).to_string()
        }
        _ => durable,
    }
}

/// The span of one answer's way to the agent.
fn deliver_span(pending: &PendingInteraction, answered_by: &str) -> tracing::Span {
    tracing::info_span!(
        "interaction.deliver",
        interaction_id = %pending.record.id,
        kind = %pending.record.kind,
        generation = pending.record.generation,
        turn_id = %pending.record.turn_id,
        answered_by,
    )
}

/// An opaque token naming the interaction's fence (execution generation and turn).
fn etag(interaction_id: &str, generation: i64, turn_id: &str) -> String {
    let digest = Sha256::digest(format!("{interaction_id}|{generation}|{turn_id}").as_bytes());
    hex::encode(&digest[..12])
}
