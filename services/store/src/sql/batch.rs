//! [`Batch`]es: one transaction of compare-and-set writes and the fenced event append, or
//! one statement for an answer's batches on PostgreSQL (`sql::one_statement`).

use super::connection::{Pool, SqlStore, on_pool};
use super::events::{append_events_on, bind_event_columns};
use super::executions::update_execution_on;
use super::idempotency::{
    bind_claim_idempotency, bind_complete_idempotency, claim_idempotency_on, complete_idempotency_on,
};
use super::interactions::{bind_transition_interaction, insert_interaction_on, transition_interaction_on};
use super::one_statement::{Shape, refused_write};
use super::turns::{insert_turn_on, settle_turn_on};
use crate::batch::{Batch, Write};
use crate::contract::*;

/// How an attempt to commit a batch as one statement ended.
enum OneStatement {
    /// The batch's outcome, as the transaction would have given it.
    Done(StoreResult<bool>),
    /// A transient failure, left to the transaction and its patience; `maybe_committed`
    /// when the connection was lost with the statement in flight.
    Failed { maybe_committed: bool },
}

impl SqlStore {
    pub(super) async fn commit(&self, batch: &Batch) -> StoreResult<bool> {
        let fence = one_execution_and_generation(&batch.events)?;
        // An attempt that failed in transit may have committed: the transaction below then
        // looks for the batch as after its own such attempt.
        let tried_in_one_statement = match self.commit_in_one_statement(batch).await {
            Some(OneStatement::Done(outcome)) => return outcome,
            Some(OneStatement::Failed { maybe_committed }) => maybe_committed,
            None => false,
        };
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
                    Write::ClaimIdempotency { key, digest, token } => {
                        let claimed = claim_idempotency_on!(&mut *tx, sql, key, digest, claimant, token);
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
        let retried = retried || tried_in_one_statement;
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

    /// `batch` as one statement (`sql::one_statement`) when it has one of the shapes and
    /// the store is PostgreSQL; `None` when it goes through a transaction.
    async fn commit_in_one_statement(&self, batch: &Batch) -> Option<OneStatement> {
        let (Pool::Postgres(pool), Some(statements)) = (&self.shared.pool, &self.shared.one_statement) else {
            return None;
        };
        let shape = Shape::of(batch)?;
        let (Write::Interaction { expected_state, record }, Ok(fence)) =
            (&batch.writes[0], one_execution_and_generation(&batch.events))
        else {
            return None;
        };
        let started = std::time::Instant::now();
        let mut maybe_committed = false;
        let outcome = async {
            self.shared.fence.owner_write_allowed()?;
            let (me, claimant) = (self.shared.identity.fence_owner(), self.shared.identity.me());
            let query = sqlx::query(sqlx::AssertSqlSafe(statements.of(&shape, fence.is_some())));
            let query = bind_transition_interaction!(query, expected_state, record, me);
            let query = match &shape {
                Shape::Claim { key, digest, token } => bind_claim_idempotency!(query, key, *digest, claimant, token),
                Shape::Complete { key, response } => bind_complete_idempotency!(query, key, response, claimant),
            };
            let query = match fence {
                Some((execution_id, generation)) => {
                    let rows = || batch.events.iter();
                    bind_event_columns!(query, rows)
                        .bind(execution_id)
                        .bind(generation.get())
                }
                None => query,
            };
            match query.execute(pool).await {
                Ok(_) => Ok(true),
                Err(e) => match refused_write(&e) {
                    // The transaction would have stopped at this write: a claim found taken
                    // is the key's, anything else (the events' fence included) lands nothing.
                    Some(index) => match batch.writes.get(index) {
                        Some(Write::ClaimIdempotency { .. }) => Err(StoreError::KeyTaken),
                        _ => Ok(false),
                    },
                    None => {
                        maybe_committed = connection_lost(&e);
                        Err(StoreError::from(e))
                    }
                },
            }
        }
        .await;
        self.observe("commit", started.elapsed(), outcome.is_ok());
        Some(match outcome {
            // Sure not to have landed and no patience to spend: the caller hears it now, as
            // from the transaction's own first attempt (which tries past a lost session).
            Err(e)
                if e.is_transient()
                    && (maybe_committed
                        || self.patience != Patience::None
                        || matches!(e, StoreError::SessionLost(_))) =>
            {
                OneStatement::Failed { maybe_committed }
            }
            other => OneStatement::Done(other),
        })
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

/// Whether `e` lost the connection, so that what was sent may have committed.
fn connection_lost(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::WorkerCrashed)
}
