//! Turns: start (or replace), cancel, the bounds before spend, the idle watchdog, and settlement.

use std::time::Duration;

use cursor_runner_acp::methods;
use cursor_runner_acp::{AcpError, schema};
use cursor_runner_activity::*;
use cursor_runner_store::{TurnId, TurnRecord, Write, now_ms};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::call_key::{CallKey, stored_turn};
use crate::machine::turn::{
    CancelCause, StartEffect, StartFacts, StartInput, Starter, Turn, TurnEffect, pending_reason_at_settle,
};
use crate::turn_row;
use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::prompt::Prompt;
use cursor_runner_domain::settlement::{PromptOutcome, TurnEnd};
use cursor_runner_domain::state::TurnState;

use super::data::*;

impl Actor {
    /// The normalizer of one turn of this execution's session.
    pub(super) fn turn_normalizer(&self, turn_id: &str) -> TurnNormalizer {
        let normalizer = TurnNormalizer::new(turn_id)
            .with_workspace(self.record.workspace.clone())
            .with_root_session(self.session_id.clone());
        match self.agent_profile {
            Some(_) => normalizer.for_another_agent(),
            None => normalizer,
        }
    }

    /// The running turn hit its deadline or the execution's active-time budget: it is
    /// cancelled through the normal path and settles `interrupted` with that reason.
    pub(super) async fn on_turn_bound(&mut self) -> Result<Ending, EngineError> {
        let (now, grace) = (Instant::now(), self.config.cancel_grace);
        let effects = match self.turn.as_mut() {
            Some(turn) => turn.lifecycle.bound_reached(now, grace),
            None => Vec::new(),
        };
        self.run_turn_effects(effects).await
    }

    /// The agent sent nothing for the idle timeout and nothing waits on a human: the
    /// turn is cancelled through the normal path and settles `interrupted` (`agent_idle`);
    /// an agent too hung to settle it is stopped by the cancel ladder.
    pub(super) async fn on_turn_idle(&mut self) -> Result<Ending, EngineError> {
        let Some(turn_id) = self.running_turn_id() else {
            return Ok(Ending::Continue);
        };
        let idle = CancelCause::Interrupted(TurnFailureReason::AgentIdle);
        self.cancel_turn_with(&turn_id, idle).await?;
        Ok(Ending::Continue)
    }

    /// Runs the turn machine's effects in order.
    async fn run_turn_effects(&mut self, effects: Vec<TurnEffect>) -> Result<Ending, EngineError> {
        let mut ending = Ending::Continue;
        for effect in effects {
            match effect {
                TurnEffect::SendCancel => {
                    let notify = schema::CancelNotification::new(self.session_id.clone());
                    if let Err(e) = self.connection.notify(methods::SESSION_CANCEL, notify).await {
                        tracing::warn!(execution_id = %self.record.id, error = %e, "sending session/cancel failed");
                    }
                }
                TurnEffect::EndPending(reason) => self.settle_pending(reason).await?,
                TurnEffect::Settle(end) => self.settle_turn(end).await?,
                TurnEffect::StopAgent => {
                    self.stop_process("runner").await?;
                }
                TurnEffect::SettleLoss(loss) => {
                    self.settle_loss(loss).await?;
                    ending = Ending::Stop;
                }
            }
        }
        Ok(ending)
    }

    pub(super) fn touch_turn(&mut self) {
        if let Some(turn) = self.turn.as_mut() {
            turn.last_activity = Instant::now();
        }
    }

    /// `StartTurn`: the admission decides (`machine::turn::Admission`), this runs what it
    /// decided, in order.
    pub(super) async fn on_start_turn(
        &mut self,
        prompt: Prompt,
        replace_active: bool,
        key: CallKey,
        reply: Reply<TurnRecord>,
    ) -> Result<(), EngineError> {
        let start = StartInput::StartTurn { prompt, replace_active };
        let effects = self.admit(start);
        self.run_start_effects(effects, Some((key, reply))).await
    }

    /// Runs the admission's effects in order; `caller` is the key and reply of the call in hand.
    async fn run_start_effects(
        &mut self,
        mut effects: Vec<StartEffect>,
        mut caller: Option<(CallKey, Reply<TurnRecord>)>,
    ) -> Result<(), EngineError> {
        while !effects.is_empty() {
            let mut next = Vec::new();
            for effect in effects {
                match effect {
                    StartEffect::CheckWorkspace => {
                        let checked = StartInput::WorkspaceChecked(self.check_workspace());
                        next = self.admit(checked);
                    }
                    StartEffect::Refuse(starter, refusal) => self.reply_start(starter, &mut caller, Err(refusal)),
                    StartEffect::Queue => self.queued_reply = caller.take(),
                    StartEffect::Cancel(cause) => {
                        if let Some(turn_id) = self.turn.as_ref().map(|t| t.record.id.clone()) {
                            self.cancel_turn_with(&turn_id, cause).await?;
                        }
                    }
                    StartEffect::Start { starter, prompt, bound } => {
                        let key = match starter {
                            Starter::Caller => caller.as_ref(),
                            Starter::Queued => self.queued_reply.as_ref(),
                        }
                        .map(|(key, _)| key.clone());
                        let started = self.start_turn(prompt, bound, key).await;
                        self.reply_start(starter, &mut caller, started);
                    }
                }
            }
            effects = next;
        }
        Ok(())
    }

    /// The admission's decision on `input`, against the execution as it stands.
    fn admit(&mut self, input: StartInput) -> Vec<StartEffect> {
        let facts = StartFacts {
            record: &self.record,
            capabilities: self.prompt_capabilities,
            draining: self.drain.is_draining(),
            active_turn: self.turn.as_ref().map(|t| t.record.id.as_str()),
        };
        self.admission.handle(input, facts)
    }

    fn reply_start(
        &mut self,
        starter: Starter,
        caller: &mut Option<(CallKey, Reply<TurnRecord>)>,
        result: Result<TurnRecord, EngineError>,
    ) {
        let reply = match starter {
            Starter::Caller => caller.take(),
            Starter::Queued => self.queued_reply.take(),
        };
        if let Some((_, reply)) = reply {
            let _ = reply.send(result);
        }
    }

    /// Records the admitted turn with `turn.started` (and the call's outcome under `key`)
    /// and sends its prompt.
    async fn start_turn(
        &mut self,
        prompt: Prompt,
        bound: Option<(Duration, TurnFailureReason)>,
        key: Option<CallKey>,
    ) -> Result<TurnRecord, EngineError> {
        let turn_number = self.record.turn_count + 1;
        let record = TurnRecord {
            id: uuid::Uuid::now_v7().to_string().into(),
            execution_id: self.record.id.clone(),
            tenant_id: self.record.tenant_id.clone(),
            generation: self.record.generation,
            turn_number,
            state: TurnState::Running,
            stop_reason: None,
            failure_reason: None,
            failure_message: None,
            started_at_ms: now_ms(),
            ended_at_ms: None,
            credential_name: self.record.credential_name.clone(),
            session_config: self.record.session_config.clone(),
            usage: None,
        };
        let mut next = self.record.clone();
        next.turn_count = turn_number;
        next.active_turn_id = Some(record.id.clone());
        let (execution, stored) = self.execution_write(&mut next)?;
        let started = ActivityPayload::TurnStarted(TurnStarted {
            turn_id: record.id.to_string(),
            turn_number,
            prompt_chars: prompt.text_chars(),
        });
        // The turn, the execution pointing at it, `turn.started` and the call's key: one batch.
        let keyed: Vec<Write> = key
            .iter()
            .flat_map(|key| {
                key.claim_write()
                    .into_iter()
                    .chain([key.completion_write(stored_turn(&record.id))])
            })
            .collect();
        let writes = [Write::InsertTurn(record.clone()), execution]
            .into_iter()
            .chain(keyed.iter().cloned())
            .collect();
        self.commit("turn", writes, vec![(Some(record.id.clone()), started)])
            .await?;
        if let Some(key) = &key {
            key.landed(&keyed);
        }
        (self.record, self.stored_state) = (next, stored);
        let span = tracing::info_span!(
            "turn",
            execution_id = %self.record.id,
            generation = self.record.generation.get(),
            turn_id = %record.id,
            turn_number,
        );
        let mut request = serde_json::to_value(schema::PromptRequest::new(self.session_id.clone(), prompt.to_acp()))
            .map_err(|e| EngineError::internal(e.to_string()))?;
        // ACP reserves `_meta.traceparent` for W3C trace context: the agent's turn can
        // continue the caller's trace.
        let trace_context = crate::tracing_context::w3c_fields(&span);
        if !trace_context.is_empty() {
            request["_meta"] = json!(trace_context);
        }
        // The prompt's response comes back in wire order, after the updates before it.
        let prompt_request_id = self
            .connection
            .start_request(methods::SESSION_PROMPT, request)
            .await
            .ok();
        let now = Instant::now();
        self.turn = Some(ActiveTurn {
            normalizer: self.turn_normalizer(&record.id),
            record: record.clone(),
            lifecycle: Turn::running(prompt_request_id, bound, now),
            last_activity: now,
            span,
        });
        Ok(record)
    }

    pub(super) async fn cancel_turn(&mut self, turn_id: &str) -> Result<TurnRecord, EngineError> {
        self.cancel_turn_with(turn_id, CancelCause::Caller).await
    }

    /// `session/cancel`, then every pending interaction of the turn is answered
    /// `cancelled` and recorded with `reason`; the turn settles when the prompt returns.
    /// The running turn's id, unless it is being cancelled already.
    pub(super) fn running_turn_id(&self) -> Option<TurnId> {
        self.turn
            .as_ref()
            .filter(|t| t.lifecycle.phase().is_running())
            .map(|t| t.record.id.clone())
    }

    /// Cancels the turn `turn_id` (`session/cancel`, then its pending interactions end with
    /// the cause's reason); it settles when the prompt returns.
    pub(super) async fn cancel_turn_with(
        &mut self,
        turn_id: &str,
        cause: CancelCause,
    ) -> Result<TurnRecord, EngineError> {
        let (now, grace) = (Instant::now(), self.config.cancel_grace);
        let Some(turn) = self.turn.as_mut().filter(|t| t.record.id == turn_id) else {
            return Err(EngineError::precondition(
                Reason::NoActiveTurn,
                format!("turn `{turn_id}` is not running"),
            ));
        };
        let record = turn.record.clone();
        let effects = turn.lifecycle.cancel(cause, now, grace);
        self.run_turn_effects(effects).await?;
        Ok(record)
    }

    pub(super) async fn on_prompt_result(
        &mut self,
        request_id: i64,
        result: Result<Value, AcpError>,
    ) -> Result<Ending, EngineError> {
        let outcome = match &result {
            Ok(value) => PromptOutcome::Stopped(value.get("stopReason").and_then(Value::as_str)),
            Err(AcpError::Rpc(e)) => PromptOutcome::Refused {
                auth_required: e.code == cursor_runner_acp::AUTH_REQUIRED,
                message: e.to_string(),
            },
            // The connection is gone: the process-loss path settles the turn with the exit status.
            Err(_) => return Ok(Ending::Continue),
        };
        let effects = match &self.turn {
            Some(turn) => turn.lifecycle.prompt_answered(request_id, outcome),
            None => Vec::new(),
        };
        if effects.is_empty() {
            return Ok(Ending::Continue);
        }
        self.run_turn_effects(effects).await?;
        let effects = self.admit(StartInput::TurnSettled);
        self.run_start_effects(effects, None).await?;
        Ok(Ending::Continue)
    }

    pub(super) async fn settle_turn(&mut self, end: TurnEnd) -> Result<(), EngineError> {
        let state = end.state;
        self.settle_pending(pending_reason_at_settle(state)).await?;
        let Some(mut turn) = self.turn.take() else {
            return Ok(());
        };
        let turn_id = turn.record.id.clone();
        let mut payloads = turn.normalizer.finish(turn_row::normalizer_ending(state));
        // The agent's words may be in it (its stop reason, a prompt error, a stderr tail).
        let end = end.redacted(self.events.redactor());
        let (record, terminal) = turn_row::settled(turn.record, end, &payloads, now_ms());
        let ran = turn_row::ran_ms(&record);
        let mut next = self.record.clone();
        next.active_ms += ran;
        next.active_turn_id = None;
        let (execution, stored) = self.execution_write(&mut next)?;
        payloads.push(terminal);
        // The turn, the execution as the turn left it (active time, no active turn) and
        // the terminal event in one batch: a client reacting to the event reads them.
        let events = payloads.into_iter().map(|p| (Some(turn_id.clone()), p)).collect();
        self.commit("execution", vec![Write::SettleTurn(record), execution], events)
            .await?;
        (self.record, self.stored_state) = (next, stored);
        if let Some(metrics) = self.events.metrics() {
            metrics.turn_settled_after(state.as_str(), Duration::from_millis(ran as u64));
        }
        // Between turns the agent's state is whole; a closing execution checkpoints once,
        // after its stop ladder.
        if self.record.state != cursor_runner_domain::state::ExecutionState::Closing {
            self.checkpoint().await?;
        }
        Ok(())
    }

    /// The agent did not settle the cancelled turn within the grace: it is stopped, and the
    /// turn, its terminal event and the execution's `lost` commit in one batch, so a client
    /// reacting to the event already reads the final state.
    pub(super) async fn on_cancel_timeout(&mut self) -> Result<Ending, EngineError> {
        let effects = match &self.turn {
            Some(turn) => turn.lifecycle.grace_ran_out(self.config.cancel_grace),
            None => Vec::new(),
        };
        self.run_turn_effects(effects).await
    }
}
