//! The SQL implementation shared by both backends: one module per concept, each adding
//! its statements to [`SqlStore`]; this file only maps the [`Store`] trait onto them.
//!
//! Imports flow one way: `connection` (pools, migrations, `on_pool!`) ← `identity`; the
//! concept modules use `connection`; this file uses them all.

mod announce;
mod append_group;
mod batch;
mod connection;
mod events;
mod executions;
mod fence;
mod idempotency;
mod identity;
mod interactions;
mod one_statement;
mod replica;
mod rows;
mod sessions;
mod turns;

pub use append_group::{GROUPS_IN_FLIGHT, MAX_GROUP_EVENTS};
pub use connection::{IDLE_IN_TRANSACTION_LIMIT, PING_AFTER_IDLE, SqlStore};
pub use fence::CLAIM_LOCK_WAIT;

use async_trait::async_trait;
use std::sync::Arc;

use crate::batch::Batch;
use crate::contract::*;
use crate::records::*;
use crate::replica::*;
use connection::Pool;
use cursor_runner_domain::placement::WarmKey;
use cursor_runner_domain::state::{ExecutionState, InteractionState};

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> &'static str {
        match self.shared.pool {
            Pool::Postgres(_) => "postgres",
            Pool::Sqlite(_) => "sqlite",
        }
    }

    fn observe_with(&self, observer: Arc<dyn StoreObserver>) {
        let _ = self.shared.observer.set(observer);
    }

    fn with_patience(&self, patience: Patience) -> Arc<dyn Store> {
        Arc::new(Self {
            shared: self.shared.clone(),
            patience,
        })
    }

    async fn register_replica(
        &self,
        name: &str,
        address: Option<&str>,
        terms: LeaseTerms,
    ) -> StoreResult<Registration> {
        SqlStore::register_replica(self, name, address, terms).await
    }
    async fn renew_replica_lease(&self) -> StoreResult<Renewal> {
        SqlStore::renew_replica_lease(self).await
    }
    fn lease(&self) -> tokio::sync::watch::Receiver<Lease> {
        self.shared.fence.subscribe()
    }
    async fn end_replica(&self) -> StoreResult<()> {
        SqlStore::end_replica(self).await
    }
    async fn mark_replica_draining(&self) -> StoreResult<()> {
        SqlStore::mark_replica_draining(self).await
    }
    async fn publish_warm_keys(&self, warm: &[WarmKey]) -> StoreResult<()> {
        SqlStore::publish_warm_keys(self, warm).await
    }
    async fn placement_targets(&self, limit: usize, wanted: Option<&WarmKey>) -> StoreResult<Vec<ReplicaAddress>> {
        SqlStore::placement_targets(self, limit, wanted).await
    }
    async fn execution_owner(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
    ) -> StoreResult<Option<ExecutionOwner>> {
        SqlStore::execution_owner(self, tenant_id, execution_id).await
    }

    async fn claim_idempotency(
        &self,
        key: &IdempotencyKey,
        request_digest: &str,
        token: &ClaimToken,
    ) -> StoreResult<IdempotencyClaim> {
        SqlStore::claim_idempotency(self, key, request_digest, token).await
    }
    async fn adopt_idempotency(&self, key: &IdempotencyKey, token: &ClaimToken) -> StoreResult<bool> {
        SqlStore::adopt_idempotency(self, key, token).await
    }
    async fn find_idempotency(
        &self,
        key: &IdempotencyKey,
        request_digest: &str,
    ) -> StoreResult<Option<IdempotencyClaim>> {
        SqlStore::find_idempotency(self, key, request_digest).await
    }
    async fn complete_idempotency(&self, key: &IdempotencyKey, response: &serde_json::Value) -> StoreResult<bool> {
        SqlStore::complete_idempotency(self, key, response).await
    }
    async fn release_idempotency(&self, key: &IdempotencyKey, token: &ClaimToken) -> StoreResult<()> {
        SqlStore::release_idempotency(self, key, token).await
    }
    async fn complete_abandoned_idempotency(&self, claimed_by: &str, response: &serde_json::Value) -> StoreResult<u64> {
        SqlStore::complete_abandoned_idempotency(self, claimed_by, response).await
    }
    async fn prune_idempotency(&self, created_before_ms: i64, limit: i64) -> StoreResult<u64> {
        SqlStore::prune_idempotency(self, created_before_ms, limit).await
    }

    async fn insert_execution(&self, execution: &ExecutionRecord) -> StoreResult<()> {
        SqlStore::insert_execution(self, execution).await
    }
    async fn update_execution(&self, expected_state: ExecutionState, execution: &ExecutionRecord) -> StoreResult<bool> {
        SqlStore::update_execution(self, expected_state, execution).await
    }
    async fn advance_generation(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        expected: Generation,
    ) -> StoreResult<bool> {
        SqlStore::advance_generation(self, tenant_id, execution_id, expected).await
    }
    async fn get_execution(&self, tenant_id: &str, id: &ExecutionId) -> StoreResult<Option<ExecutionRecord>> {
        SqlStore::get_execution(self, tenant_id, id).await
    }
    async fn list_executions(
        &self,
        tenant_id: &str,
        after_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<ExecutionRecord>> {
        SqlStore::list_executions(self, tenant_id, after_id, limit).await
    }
    async fn claim_execution(
        &self,
        execution_id: &ExecutionId,
        generation: Generation,
        from: &str,
    ) -> StoreResult<bool> {
        SqlStore::claim_execution(self, execution_id, generation, from).await
    }
    async fn list_live_executions_of(&self, owner_incarnation: &str) -> StoreResult<Vec<ExecutionRecord>> {
        SqlStore::list_live_executions_of(self, owner_incarnation).await
    }
    async fn abandoned_incarnations(&self) -> StoreResult<Vec<String>> {
        SqlStore::abandoned_incarnations(self).await
    }
    async fn find_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<ExecutionRecord>> {
        SqlStore::find_session(self, tenant_id, session_id).await
    }
    async fn executions_leasing(&self, text: &str, limit: i64) -> StoreResult<Vec<ExecutionRecord>> {
        SqlStore::executions_leasing(self, text, limit).await
    }
    async fn list_sessions(
        &self,
        tenant_id: &str,
        after_session_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<ExecutionRecord>> {
        SqlStore::list_sessions(self, tenant_id, after_session_id, limit).await
    }

    async fn save_session_checkpoint(&self, checkpoint: &SessionCheckpoint) -> StoreResult<bool> {
        SqlStore::save_session_checkpoint(self, checkpoint).await
    }
    async fn session_checkpoint(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<SessionCheckpoint>> {
        SqlStore::session_checkpoint(self, tenant_id, session_id).await
    }
    async fn claim_session_open(
        &self,
        tenant_id: &str,
        session_id: &str,
        claim_id: &str,
        hold: std::time::Duration,
    ) -> StoreResult<bool> {
        SqlStore::claim_session_open(self, tenant_id, session_id, claim_id, hold).await
    }
    async fn renew_session_open(
        &self,
        tenant_id: &str,
        session_id: &str,
        claim_id: &str,
        hold: std::time::Duration,
    ) -> StoreResult<bool> {
        SqlStore::renew_session_open(self, tenant_id, session_id, claim_id, hold).await
    }
    async fn release_session_open(&self, tenant_id: &str, session_id: &str, claim_id: &str) -> StoreResult<()> {
        SqlStore::release_session_open(self, tenant_id, session_id, claim_id).await
    }

    async fn insert_turn(&self, turn: &TurnRecord) -> StoreResult<()> {
        SqlStore::insert_turn(self, turn).await
    }
    async fn settle_turn(&self, turn: &TurnRecord) -> StoreResult<bool> {
        SqlStore::settle_turn(self, turn).await
    }
    async fn get_turn(&self, tenant_id: &str, id: &TurnId) -> StoreResult<Option<TurnRecord>> {
        SqlStore::get_turn(self, tenant_id, id).await
    }
    async fn list_turns(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        after_number: i64,
        limit: i64,
    ) -> StoreResult<Vec<TurnRecord>> {
        SqlStore::list_turns(self, tenant_id, execution_id, after_number, limit).await
    }

    async fn insert_interaction(&self, interaction: &InteractionRecord) -> StoreResult<()> {
        SqlStore::insert_interaction(self, interaction).await
    }
    async fn transition_interaction(
        &self,
        expected_state: InteractionState,
        next: &InteractionRecord,
    ) -> StoreResult<bool> {
        SqlStore::transition_interaction(self, expected_state, next).await
    }
    async fn get_interaction(&self, tenant_id: &str, id: &InteractionId) -> StoreResult<Option<InteractionRecord>> {
        SqlStore::get_interaction(self, tenant_id, id).await
    }
    async fn list_interactions(&self, query: &InteractionQuery) -> StoreResult<Vec<InteractionRecord>> {
        SqlStore::list_interactions(self, query).await
    }

    async fn append_events(&self, events: Arc<[EventRecord]>) -> StoreResult<()> {
        SqlStore::append(self, events.clone()).await?;
        self.committed(&events);
        Ok(())
    }
    async fn commit(&self, batch: &Batch) -> StoreResult<bool> {
        let landed = SqlStore::commit(self, batch).await?;
        if landed {
            self.committed(&batch.events);
        }
        Ok(landed)
    }
    async fn read_events(
        &self,
        execution_id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
    ) -> StoreResult<Vec<EventRecord>> {
        SqlStore::read_events(self, execution_id, after_sequence, limit).await
    }
    async fn head_sequence(&self, execution_id: &ExecutionId) -> StoreResult<i64> {
        SqlStore::head_sequence(self, execution_id).await
    }
    async fn listen_for_heads(&self) -> StoreResult<Option<crate::notify::HeadListener>> {
        match &self.shared.pool {
            Pool::Postgres(pool) => Ok(Some(crate::notify::HeadListener::listen(pool).await?)),
            Pool::Sqlite(_) => Ok(None),
        }
    }
    async fn oldest_sequence(&self, execution_id: &ExecutionId) -> StoreResult<Option<i64>> {
        SqlStore::oldest_sequence(self, execution_id).await
    }
    async fn prune_events(
        &self,
        execution_id: &ExecutionId,
        through: i64,
        emitted_before_ms: i64,
        limit: i64,
    ) -> StoreResult<u64> {
        SqlStore::prune_events(self, execution_id, through, emitted_before_ms, limit).await
    }
    async fn acknowledged_executions(
        &self,
        after_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<(ExecutionId, i64)>> {
        SqlStore::acknowledged_executions(self, after_id, limit).await
    }
    async fn set_acked_sequence(&self, tenant_id: &str, execution_id: &ExecutionId, through: i64) -> StoreResult<()> {
        SqlStore::set_acked_sequence(self, tenant_id, execution_id, through).await
    }
}
