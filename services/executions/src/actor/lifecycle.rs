//! How an execution ends: closing, draining, a lost or failed agent, a fenced writer, and the fenced write of its row.

use cursor_runner_acp::methods;
use cursor_runner_acp::schema;
use cursor_runner_activity::*;
use cursor_runner_store::{ExecutionRecord, Patience, StoreError, TurnId, Write, now_ms};
use cursor_runner_supervisor::ExitProof;

use crate::execution_row;
use crate::ownership;
use crate::settlement::{self, LiveTurn};
use crate::turn_row;
use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::settlement::{Loss, TurnEnd};
use cursor_runner_domain::state::{ExecutionState, TurnState};
use cursor_runner_pool::exit_message;
use cursor_runner_store::failpoint::failpoint;

use super::data::*;
use super::launch::fail_execution;
use crate::machine::drain::{DrainEffect, DrainInput};
use crate::machine::interaction::{EndReason, Observation};
use crate::machine::turn::CancelCause;

impl Actor {
    /// A launch that failed after the process was leased: stop it, record the exit
    /// proof, fail the execution.
    pub(super) async fn fail_launch(mut self, error: EngineError, recovery: bool) -> EngineError {
        let error = error.redacted(self.events.redactor());
        if let Some(ticket) = &self.ticket {
            self.pool
                .record_failure(&ticket.profile_id, error.reason, &error.message);
        }
        self.connection.close_stdin().await;
        let exit = self.process.stop(self.config.stop_grace).await;
        let _ = self
            .events
            .emit(None, vec![exited(self.process.pid(), exit, "runner")])
            .await;
        fail_execution(&self.store, &mut self.record, &error, Some(exit), recovery).await;
        error
    }

    pub(super) async fn on_process_lost(&mut self) -> Result<Ending, EngineError> {
        let exit = match self.process.wait_for(self.config.stop_grace).await {
            Some(exit) => exit,
            None => self.process.stop(self.config.stop_grace).await,
        };
        let message = exit_message(&exit, &self.process.stderr_tail(), self.events.redactor());
        if let Some(ticket) = &self.ticket {
            self.pool
                .record_failure(&ticket.profile_id, Reason::AgentExited, &message);
        }
        self.record.exit_code = exit.exit_code.map(i64::from);
        self.record.exit_signal = exit.signal.map(i64::from);
        self.events
            .emit(None, vec![exited(self.process.pid(), exit, "agent")])
            .await?;
        self.settle_loss(Loss::AgentGone {
            reason: Reason::AgentExited,
            turn_failure: TurnFailureReason::AgentExited,
            message,
        })
        .await?;
        Ok(Ending::Stop)
    }

    /// The actor cannot go on (the store stayed unavailable past the outage limit, or
    /// refused a write for good): the agent is stopped and everything live settles as for
    /// a lost process — pending interactions expire, the running turn fails, the execution
    /// is `lost` — so no turn is left `running` without an owner. After a store outage
    /// those writes wait until the store is back.
    pub(super) async fn fail(&mut self, error: EngineError) {
        let error = error.redacted(self.events.redactor());
        tracing::error!(execution_id = %self.record.id, error = %error, "execution actor failed; stopping its agent");
        // First, so the agent never waits on a store that may be gone for long.
        let exit = self.stop_agent().await;
        if error.reason == Reason::StoreUnavailable {
            self.store = self.store.with_patience(Patience::UntilBack);
            if let Err(e) = self.events.resume_with(self.store.clone()).await {
                tracing::error!(execution_id = %self.record.id, error = %e, "could not read the outbox's head back");
            }
        }
        let failure = match error.reason {
            Reason::StoreUnavailable => TurnFailureReason::StoreUnavailable,
            Reason::ProtocolError => TurnFailureReason::ProtocolError,
            _ => TurnFailureReason::ProviderLost,
        };
        if let Err(e) = self.settle_failed(exit, &error, failure).await {
            tracing::error!(execution_id = %self.record.id, error = %e, "could not record the execution's failure");
        }
    }

    pub(super) async fn settle_failed(
        &mut self,
        exit: ExitProof,
        error: &EngineError,
        failure: TurnFailureReason,
    ) -> Result<(), EngineError> {
        self.events
            .emit(None, vec![exited(self.process.pid(), exit, "runner")])
            .await?;
        self.settle_loss(Loss::AgentGone {
            reason: error.reason,
            turn_failure: failure,
            message: error.message.clone(),
        })
        .await
    }

    /// The agent is gone: everything live settles by the domain's rule in one batch —
    /// pending interactions expire (never re-sent), the running turn ends, the execution
    /// is `lost` — so a crash leaves all of it or none of it for recovery.
    pub(super) async fn settle_loss(&mut self, loss: Loss) -> Result<(), EngineError> {
        // What was checkpointed before lands before the execution ends: a load of its
        // session, possible from then on, never meets a late upload of this one.
        let _ = self.checkpoints_stored().await;
        // The agent's requests go with their handles: nobody can answer them any more.
        let mut interactions: Vec<_> = self
            .pending
            .take_all()
            .into_iter()
            .map(|live| live.interaction.record().clone())
            .collect();
        interactions.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        let turn = self.turn.take().map(|mut turn| LiveTurn {
            closing: turn
                .normalizer
                .finish(turn_row::normalizer_ending(loss.turn_end().state)),
            record: turn.record,
        });
        failpoint("agent_lost_while_settling").await;
        let settled = settlement::settle(
            &loss,
            &self.record,
            self.stored_state,
            interactions.clone(),
            turn,
            self.events.redactor(),
            now_ms(),
        )?;
        self.commit("execution", settled.writes, settled.events).await?;
        let now = self.now();
        for interaction in &interactions {
            if let Some(end) = loss.interaction_end(interaction.state) {
                let waited = std::time::Duration::from_millis((now.ms - interaction.created_at_ms).max(0) as u64);
                self.observe(Observation::Waited {
                    kind: interaction.kind,
                    state: end.state,
                    waited,
                });
            }
        }
        if let Some(turn) = settled.turn
            && let Some(metrics) = self.events.metrics()
        {
            let ran = std::time::Duration::from_millis(turn_row::ran_ms(&turn) as u64);
            metrics.turn_settled_after(loss.turn_end().state.as_str(), ran);
        }
        self.record = settled.execution;
        self.stored_state = ExecutionState::Lost;
        Ok(())
    }

    pub(super) async fn close(&mut self) -> Result<ExecutionRecord, EngineError> {
        let mid_turn = self.turn.is_some();
        self.record.state = ExecutionState::Closing;
        self.save_record().await?;
        if self.turn.is_some() {
            let notify = schema::CancelNotification::new(self.session_id.clone());
            let _ = self.connection.notify(methods::SESSION_CANCEL, notify).await;
        }
        self.settle_pending(EndReason::TurnCancelled).await?;
        // A process that ends its session cleanly may serve the profile again.
        self.reuse = self.turn.is_none()
            && self
                .ticket
                .as_ref()
                .is_some_and(|t| self.pool.accepts_return(&t.profile_id, self.sessions_served));
        if self.reuse {
            self.events
                .emit(
                    None,
                    vec![ActivityPayload::ProcessReleased(ProcessReleased {
                        pid: self.process.pid(),
                        sessions_served: self.sessions_served + 1,
                    })],
                )
                .await?;
        } else {
            let exit = self.stop_process("runner").await?;
            self.record.exit_code = exit.exit_code.map(i64::from);
            self.record.exit_signal = exit.signal.map(i64::from);
        }
        if self.turn.is_some() {
            self.settle_turn(TurnEnd {
                state: TurnState::Interrupted,
                stop_reason: None,
                failure: Some(TurnFailureReason::ExecutionClosed),
                message: Some("the execution was closed".into()),
            })
            .await?;
        }
        self.checkpoint_between_turns(mid_turn).await?;
        self.record.state = ExecutionState::Closed;
        self.save_record().await?;
        Ok(self.record.clone())
    }

    /// The stop ladder: close stdin, SIGTERM the group, grace, SIGKILL, reap.
    pub(super) async fn stop_process(&mut self, initiated_by: &str) -> Result<ExitProof, EngineError> {
        let exit = self.stop_agent().await;
        self.events
            .emit(None, vec![exited(self.process.pid(), exit, initiated_by)])
            .await?;
        Ok(exit)
    }

    /// The stop ladder, recording nothing.
    pub(super) async fn stop_agent(&mut self) -> ExitProof {
        self.process.census_descendants();
        self.connection.close_stdin().await;
        self.process.stop(self.config.stop_grace).await
    }

    pub(super) async fn notice(&mut self, category: &str, summary: impl Into<String>) -> Result<(), EngineError> {
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        let notice = ProviderNotice::warning(category, NoticeScope::Turn, summary);
        self.events
            .emit(turn_id.as_ref(), vec![ActivityPayload::ProviderNotice(notice)])
            .await
    }

    /// Commits `writes` with the events they produce in one batch. Refused: the
    /// generation moved on (`what` names the write the metric counts as fenced).
    pub(super) async fn commit(
        &mut self,
        what: &'static str,
        writes: Vec<Write>,
        events: Vec<(Option<TurnId>, ActivityPayload)>,
    ) -> Result<(), EngineError> {
        if !self.events.commit(writes, events).await? {
            self.events.refused_by_fence(what);
            return Err(StoreError::Fenced.into());
        }
        Ok(())
    }

    /// `next` (the execution row as it is to become) as a batch write from the stored
    /// state, stamped and redacted; with the state it moves the row to.
    pub(super) fn execution_write(&self, next: &mut ExecutionRecord) -> Result<(Write, ExecutionState), EngineError> {
        stamp(next, self.events.redactor());
        execution_row::write(self.stored_state, next)
    }

    /// Writes the execution row, fenced by its generation, after every event before it.
    pub(super) async fn save_record(&mut self) -> Result<(), EngineError> {
        self.events.flush().await?;
        stamp(&mut self.record, self.events.redactor());
        if !execution_row::save(self.store.as_ref(), self.stored_state, &self.record).await? {
            self.events.refused_by_fence("execution");
            return Err(StoreError::Fenced.into());
        }
        self.stored_state = execution_row::check_transition(self.stored_state, &self.record)?;
        Ok(())
    }

    /// The execution's generation moved on, or this replica's lease ended: this process no
    /// longer serves it. Stop it without writing anything more for the execution (every
    /// write would be refused).
    pub(super) async fn stop_fenced(&mut self) {
        tracing::warn!(
            execution_id = %self.record.id,
            generation = self.record.generation.get(),
            "this replica no longer owns the execution (its generation moved on or its lease ended); stopping this agent"
        );
        self.process.census_descendants();
        self.connection.close_stdin().await;
        self.process.stop(self.config.stop_grace).await;
    }

    /// Why a call this actor no longer serves is refused: this replica's lease ended (retry
    /// on its restart), or the execution is over.
    pub(super) fn refusal(&self) -> EngineError {
        if ownership::lease_has_ended(&self.store.lease()) {
            return ownership::fenced_refusal();
        }
        EngineError::precondition(
            Reason::ExecutionNotReady,
            format!("execution `{}` is {}", self.record.id, self.record.state),
        )
        .with("state", self.record.state.as_str())
    }

    /// Draining and no turn runs (or waits to): the agent is stopped, its home
    /// checkpointed, and the execution ends `lost` / `DRAINING` (`docs/scale-out.md` D11):
    /// `RecoverExecution` continues it under the same id and stream on any replica, where
    /// `closed` — the client's word — could not be continued.
    pub(super) async fn close_if_drained(&mut self) -> Result<Ending, EngineError> {
        let stepped = DrainInput::Stepped {
            turn_live: self.turn.is_some(),
            start_queued: self.admission.has_queued(),
        };
        match self.drain.handle(stepped) {
            Some(DrainEffect::End) => {
                self.end_drained().await?;
                Ok(Ending::Stop)
            }
            Some(DrainEffect::CancelTurn) | None => Ok(Ending::Continue),
        }
    }

    /// Stops the agent and ends the execution `lost` / `DRAINING`, everything live with it
    /// (a turn still running, when the drain is forced). The home is checkpointed only
    /// between turns: a turn cut short may have left it torn, and the last good one stays.
    pub(super) async fn end_drained(&mut self) -> Result<(), EngineError> {
        let mid_turn = self.turn.is_some();
        let exit = self.stop_process("runner").await?;
        self.checkpoint_between_turns(mid_turn).await?;
        self.record.exit_code = exit.exit_code.map(i64::from);
        self.record.exit_signal = exit.signal.map(i64::from);
        self.settle_loss(Loss::AgentGone {
            reason: Reason::Draining,
            turn_failure: TurnFailureReason::ServiceDraining,
            message: "the replica drained; RecoverExecution continues the execution on any replica".into(),
        })
        .await
    }

    /// The drain deadline passed with a turn still running: cancel it (its pending
    /// interactions settle by the usual rules, reason `service_draining`).
    pub(super) async fn on_drain_deadline(&mut self) -> Result<Ending, EngineError> {
        let running = self.running_turn_id();
        let passed = DrainInput::DeadlinePassed {
            turn_running: running.is_some(),
        };
        if let (Some(DrainEffect::CancelTurn), Some(turn_id)) = (self.drain.handle(passed), running) {
            let draining = CancelCause::Interrupted(TurnFailureReason::ServiceDraining);
            self.cancel_turn_with(&turn_id, draining).await?;
        }
        Ok(Ending::Continue)
    }
}

/// Stamps a row's update time and keeps secrets out of its failure message.
fn stamp(record: &mut ExecutionRecord, redactor: &Redactor) {
    record.updated_at_ms = now_ms();
    if let Some(message) = &mut record.failure_message {
        *message = redactor.redact_text(message).0;
    }
}
