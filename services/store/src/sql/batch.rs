//! [`Batch`]es: one transaction of compare-and-set writes and the fenced event append.

use super::connection::{SqlStore, on_pool};
use super::events::append_events_on;
use super::executions::update_execution_on;
use super::idempotency::{claim_idempotency_on, complete_idempotency_on};
use super::interactions::{insert_interaction_on, transition_interaction_on};
use super::turns::{insert_turn_on, settle_turn_on};
use crate::batch::{Batch, Write};
use crate::contract::*;

impl SqlStore {
    pub(super) async fn commit(&self, batch: &Batch) -> StoreResult<bool> {
        let fence = one_execution_and_generation(&batch.events)?;
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let claimant = self.shared.identity.me();
        let (outcome, retried) = on_pool!(@owner_write self, |pool| {
            let mut tx = pool.begin().await?;
            let mut landed = true;
            let mut key_taken = false;
            for write in &batch.writes {
                let affected = match write {
                    Write::InsertTurn(turn) => insert_turn_on!(&mut *tx, sql, turn, me),
                    Write::InsertInteraction(interaction) => insert_interaction_on!(&mut *tx, sql, interaction, me),
                    Write::Execution { expected_state, record } => {
                        update_execution_on!(&mut *tx, sql, expected_state, record, me)
                    }
                    Write::SettleTurn(turn) => settle_turn_on!(&mut *tx, sql, turn, me),
                    Write::Interaction { expected_state, record } => {
                        transition_interaction_on!(&mut *tx, sql, expected_state, record, me)
                    }
                    Write::ClaimIdempotency { key, digest } => {
                        let claimed = claim_idempotency_on!(&mut *tx, sql, key, digest, claimant);
                        key_taken = claimed != 1;
                        claimed
                    }
                    Write::CompleteIdempotency { key, response } => {
                        complete_idempotency_on!(&mut *tx, sql, key, response, claimant)
                    }
                };
                if affected != 1 {
                    landed = false;
                    break;
                }
            }
            if landed && let Some((execution_id, generation)) = fence {
                landed = append_events_on!(&mut *tx, sql, &batch.events, execution_id, generation, me) > 0;
            }
            if landed {
                crate::failpoint::failpoint("holding_a_batch_open").await;
                tx.commit().await?;
            } else {
                tx.rollback().await?;
            }
            if key_taken {
                return Err(StoreError::KeyTaken);
            }
            landed
        });
        match outcome {
            // The attempt that failed may have committed: then this one found its rows
            // moved on by itself.
            Ok(false) | Err(StoreError::Duplicate) if retried => self.batch_landed(batch).await,
            // Taken by this batch's own earlier attempt only if the batch is there.
            Err(StoreError::KeyTaken) if retried => match self.batch_landed(batch).await? {
                true => Ok(true),
                false => Err(StoreError::KeyTaken),
            },
            other => other,
        }
    }

    /// Whether `batch` is in the store already: its first event, or else its first write.
    async fn batch_landed(&self, batch: &Batch) -> StoreResult<bool> {
        if let Some(first) = batch.events.first() {
            let found = self.read_events(&first.execution_id, first.sequence - 1, 1).await?;
            return Ok(found.first().is_some_and(|e| e.event_id == first.event_id));
        }
        Ok(match batch.writes.first() {
            None => true,
            Some(Write::Execution { record, .. }) => {
                self.execution_state(&record.id, record.generation).await?
                    == Some((record.state.as_str().to_owned(), record.updated_at_ms))
            }
            Some(Write::InsertTurn(turn)) => self.turn_state(&turn.id, turn.generation).await?.is_some(),
            Some(Write::InsertInteraction(interaction)) => self
                .interaction_state(&interaction.id, interaction.generation)
                .await?
                .is_some(),
            Some(Write::SettleTurn(turn)) => {
                self.turn_state(&turn.id, turn.generation).await?.as_deref() == Some(turn.state.as_str())
            }
            Some(Write::Interaction { record, .. }) => {
                self.interaction_state(&record.id, record.generation).await?
                    == Some((record.state.as_str().to_owned(), record.updated_at_ms))
            }
            // A call's key rides behind the rows it claims or completes, never first.
            Some(Write::ClaimIdempotency { .. } | Write::CompleteIdempotency { .. }) => false,
        })
    }
}
