//! Settling what a dead owner left (`docs/scale-out.md` stage 3). A restart under a
//! replica's name settles its predecessors' executions at start-up
//! ([`Loss::ServiceRestarted`]); every replica also scans, each renewal period, for
//! replicas whose lease ended with nobody alive under their name, and takes their live
//! executions over ([`Loss::OwnerLost`]). Each execution is claimed first (a
//! compare-and-set on its owner: of racing survivors exactly one wins, and the claim waits
//! for every owner transaction in flight), then settled in one fenced batch, so each
//! ending is written once and a frozen owner that wakes writes nothing after it.

use std::sync::Weak;
use std::time::Duration;

use cursor_runner_activity::Redactor;
use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::settlement::Loss;
use cursor_runner_domain::state::{InteractionState, TurnState};
use cursor_runner_store::{ExecutionRecord, InteractionQuery, now_ms};

use super::data::*;
use crate::events::EventWriter;
use crate::settlement::{self, LiveTurn};

impl Engine {
    /// A key `predecessor` left `in_flight` belongs to a call that died with it: it gets a
    /// final, typed outcome, so a retry is neither refused for ever ("in flight
    /// elsewhere") nor run a second time. Keys of a replica whose lease is live are theirs.
    pub(super) async fn complete_abandoned_calls(&self, predecessor: &str) -> Result<(), EngineError> {
        let interrupted = EngineError::new(
            ErrorKind::Aborted,
            Reason::RequestInterrupted,
            "the service stopped while this call ran; what it had begun was settled at restart; \
             send a new request_id to try again",
        );
        let completed = self
            .store
            .complete_abandoned_idempotency(predecessor, &interrupted.to_json())
            .await?;
        if completed > 0 {
            tracing::warn!(
                completed,
                "calls interrupted by the previous incarnation were completed as REQUEST_INTERRUPTED"
            );
        }
        Ok(())
    }

    /// Settles what `predecessor` left live, by the same rule and in the same one batch
    /// per execution as an actor whose agent is gone ([`Loss::ServiceRestarted`]), once
    /// each execution is claimed: the owner fence lets only its owner write it.
    pub(super) async fn recover_after_restart(&self, predecessor: &str) -> Result<(), EngineError> {
        for execution in self.store.list_live_executions_of(predecessor).await? {
            if !self
                .store
                .claim_execution(&execution.id, execution.generation, predecessor)
                .await?
            {
                tracing::warn!(execution_id = %execution.id, "the execution moved on before it could be claimed at start-up; left as found");
                continue;
            }
            cursor_runner_store::failpoint::failpoint("settling_a_predecessors_execution").await;
            self.settle_claimed(&execution, &Loss::ServiceRestarted).await?;
        }
        Ok(())
    }

    /// One takeover scan: settles what an earlier scan claimed but could not settle
    /// (`unsettled`, kept by the caller), then claims and settles every live execution of
    /// each abandoned replica and ends its calls in flight. The number taken over.
    async fn take_over_abandoned(&self, unsettled: &mut Vec<ExecutionRecord>) -> Result<usize, EngineError> {
        let mut taken_over = 0;
        for execution in std::mem::take(unsettled) {
            taken_over += self.settle_taken_over(execution, unsettled).await;
        }
        for dead in self.store.abandoned_incarnations().await? {
            for execution in self.store.list_live_executions_of(&dead).await? {
                // False: another survivor won it, or it ended meanwhile.
                if self
                    .store
                    .claim_execution(&execution.id, execution.generation, &dead)
                    .await?
                {
                    taken_over += self.settle_taken_over(execution, unsettled).await;
                }
            }
            self.complete_abandoned_calls(&dead).await?;
        }
        Ok(taken_over)
    }

    /// Settles a claimed execution as [`Loss::OwnerLost`]; one that fails is kept in
    /// `unsettled` for the next scan (this replica owns it now: nobody else will).
    async fn settle_taken_over(&self, execution: ExecutionRecord, unsettled: &mut Vec<ExecutionRecord>) -> usize {
        match self.settle_claimed(&execution, &Loss::OwnerLost).await {
            Ok(()) => {
                tracing::warn!(execution_id = %execution.id, "took over an execution whose replica's ownership lease ended; it is lost");
                self.metrics.taken_over();
                1
            }
            Err(e) => {
                tracing::warn!(execution_id = %execution.id, error = %e, "settling a taken-over execution failed; the next scan retries");
                unsettled.push(execution);
                0
            }
        }
    }

    /// Settles `execution`, claimed by this replica at its recorded generation, and what is
    /// live on it as `loss` says, in one fenced batch.
    async fn settle_claimed(&self, execution: &ExecutionRecord, loss: &Loss) -> Result<(), EngineError> {
        let mut interactions = Vec::new();
        for state in [InteractionState::Pending, InteractionState::Answered] {
            interactions.extend(
                self.store
                    .list_interactions(&InteractionQuery {
                        tenant_id: execution.tenant_id.clone(),
                        execution_id: Some(execution.id.clone()),
                        state: Some(state),
                        after_id: None,
                        limit: i64::MAX,
                    })
                    .await?,
            );
        }
        // In the order they were asked (ids are time-ordered UUIDv7).
        interactions.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        let turn = match &execution.active_turn_id {
            Some(turn_id) => self
                .store
                .get_turn(&execution.tenant_id, turn_id)
                .await?
                .filter(|turn| turn.state == TurnState::Running)
                .map(|record| LiveTurn {
                    record,
                    closing: Vec::new(),
                }),
            None => None,
        };
        let settled = settlement::settle(
            loss,
            execution,
            execution.state,
            interactions,
            turn,
            &Redactor::default(),
            now_ms(),
        )?;
        let head = self.store.head_sequence(&execution.id).await?;
        let mut events = EventWriter::new(self.store.clone(), execution.id.clone(), execution.generation, head)
            .with_heads(&self.heads)
            .with_metrics(self.metrics.clone());
        if !events.commit(settled.writes, settled.events).await? {
            tracing::warn!(execution_id = %execution.id, "the execution moved on while it was settled; left as found");
        }
        Ok(())
    }
}

/// Scans for abandoned replicas every `every` (a renewal period: a dead owner's executions
/// are settled within about a lease and a period of its last renewal) until the engine is
/// gone. A scan that fails is logged and retried at the next tick.
pub(super) async fn take_over_abandoned_every(engine: Weak<Engine>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut unsettled = Vec::new();
    loop {
        ticks.tick().await;
        let Some(engine) = engine.upgrade() else { return };
        match engine.take_over_abandoned(&mut unsettled).await {
            Ok(0) => {}
            Ok(taken_over) => tracing::info!(taken_over, "took over executions of replicas whose lease ended"),
            Err(e) => tracing::warn!(error = %e, "a takeover scan failed; retrying at the next tick"),
        }
    }
}
