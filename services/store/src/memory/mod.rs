//! An in-memory [`Store`] with the SQL backends' semantics and no I/O: for unit tests of
//! what sits on the store (the pool, idempotency, streams) without a database. The
//! behavioural suite (`tests/behaviour.rs`) holds it, SQLite and PostgreSQL to the same
//! rules; where they differ, SQL is the reference.

mod replicas;
mod tables;

use async_trait::async_trait;
use parking_lot::Mutex;
use std::sync::{Arc, OnceLock};

use crate::batch::Batch;
use crate::contract::*;
use crate::records::*;
use crate::replica::*;
use cursor_runner_domain::placement::WarmKey;
use cursor_runner_domain::state::{ExecutionState, InteractionState};
use replicas::{Replicas, millis};
use tables::Tables;

/// Clones share the same rows (and observer), like the patiences of one SQL store.
#[derive(Clone, Default)]
pub struct MemoryStore {
    tables: Arc<Mutex<Tables>>,
    replicas: Arc<Mutex<Replicas>>,
    observer: Arc<OnceLock<Arc<dyn StoreObserver>>>,
    fence: Arc<OwnerFence>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs one operation on the rows as one atomic step, reported to the observer.
    fn run<T>(&self, operation: &'static str, step: impl FnOnce(&mut Tables) -> T) -> StoreResult<T> {
        self.try_run(operation, |tables| Ok(step(tables)))
    }

    /// [`Self::try_run`] for an owner write: refused before it touches a row once the
    /// lease's local deadline has passed, as the SQL stores refuse it without a round trip.
    fn owner_write<T>(
        &self,
        operation: &'static str,
        step: impl FnOnce(&mut Tables) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.try_run(operation, |tables| {
            self.fence.owner_write_allowed()?;
            step(tables)
        })
    }

    /// Publishes what a registration or heartbeat sent at `sent_at` found (`None`: the
    /// lease ended) to the rows the fence checks and to the lease watch.
    fn publish(&self, sent_at: tokio::time::Instant, terms: LeaseTerms, lease_until_ms: Option<i64>) {
        match lease_until_ms {
            Some(_) => self.fence.renewed(sent_at, terms, true),
            None => self.fence.lost(),
        }
        self.tables.lock().my_lease_until_ms = Some(lease_until_ms.unwrap_or(i64::MIN));
    }

    /// [`Self::run`] for an operation that can be refused.
    fn try_run<T>(&self, operation: &'static str, step: impl FnOnce(&mut Tables) -> StoreResult<T>) -> StoreResult<T> {
        let started = std::time::Instant::now();
        let outcome = step(&mut self.tables.lock());
        if let Some(observer) = self.observer.get() {
            observer.observed(operation, started.elapsed(), outcome.is_ok());
        }
        outcome
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn observe_with(&self, observer: Arc<dyn StoreObserver>) {
        let _ = self.observer.set(observer);
    }

    /// Nothing here is ever unavailable: every patience is the same store.
    fn with_patience(&self, _patience: Patience) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    /// Nothing another process could share (like `sqlite::memory:`): every earlier
    /// incarnation is a predecessor.
    async fn register_replica(
        &self,
        name: &str,
        address: Option<&str>,
        terms: LeaseTerms,
    ) -> StoreResult<Registration> {
        let sent_at = tokio::time::Instant::now();
        let registration = self.replicas.lock().register(name, address, terms)?;
        self.run("register_replica", |t| t.me = registration.incarnation.clone())?;
        self.publish(sent_at, terms, Some(registration.lease_until_ms));
        Ok(registration)
    }
    async fn renew_replica_lease(&self) -> StoreResult<Renewal> {
        let sent_at = tokio::time::Instant::now();
        let (renewal, terms) = {
            let mut replicas = self.replicas.lock();
            (replicas.renew()?, replicas.terms())
        };
        match (renewal, terms) {
            (Renewal::Held { lease_until_ms }, Some(terms)) => self.publish(sent_at, terms, Some(lease_until_ms)),
            _ => self.fence.lost(),
        }
        Ok(renewal)
    }
    fn lease(&self) -> tokio::sync::watch::Receiver<Lease> {
        self.fence.subscribe()
    }
    async fn end_replica(&self) -> StoreResult<()> {
        self.replicas.lock().end();
        self.fence.lost();
        self.tables.lock().my_lease_until_ms = Some(i64::MIN);
        Ok(())
    }
    async fn mark_replica_draining(&self) -> StoreResult<()> {
        self.replicas.lock().drain();
        Ok(())
    }
    async fn publish_warm_keys(&self, warm: &[WarmKey]) -> StoreResult<()> {
        self.replicas.lock().publish_warm(warm);
        Ok(())
    }
    async fn placement_targets(&self, limit: usize, wanted: Option<&WarmKey>) -> StoreResult<Vec<ReplicaAddress>> {
        let candidates = self.replicas.lock().serving_elsewhere(wanted);
        self.run("placement_targets", |t| {
            let mut ranked: Vec<(bool, usize, ReplicaAddress)> = candidates
                .into_iter()
                .map(|(incarnation, warm, target)| (!warm, t.list_live_executions_of(&incarnation).len(), target))
                .collect();
            ranked.sort_by_key(|(cold, load, _)| (*cold, *load));
            ranked.into_iter().take(limit).map(|(_, _, target)| target).collect()
        })
    }
    async fn execution_owner(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
    ) -> StoreResult<Option<ExecutionOwner>> {
        let incarnation = self.run("execution_owner", |t| {
            t.owner(tenant_id, execution_id).map(str::to_owned)
        })?;
        Ok(incarnation.map(|incarnation| self.replicas.lock().owner(&incarnation)))
    }

    async fn claim_idempotency(
        &self,
        key: &IdempotencyKey,
        request_digest: &str,
        token: &ClaimToken,
    ) -> StoreResult<IdempotencyClaim> {
        self.run("claim_idempotency", |t| t.claim_idempotency(key, request_digest, token))
    }
    async fn adopt_idempotency(&self, key: &IdempotencyKey, token: &ClaimToken) -> StoreResult<bool> {
        self.run("adopt_idempotency", |t| t.adopt_idempotency(key, token))
    }
    async fn find_idempotency(
        &self,
        key: &IdempotencyKey,
        request_digest: &str,
    ) -> StoreResult<Option<IdempotencyClaim>> {
        self.run("find_idempotency", |t| t.find_idempotency(key, request_digest))
    }
    async fn complete_idempotency(&self, key: &IdempotencyKey, response: &serde_json::Value) -> StoreResult<bool> {
        self.run("complete_idempotency", |t| t.complete_idempotency(key, response))
    }
    async fn release_idempotency(&self, key: &IdempotencyKey, token: &ClaimToken) -> StoreResult<()> {
        self.run("release_idempotency", |t| t.release_idempotency(key, token))
    }
    async fn complete_abandoned_idempotency(&self, claimed_by: &str, response: &serde_json::Value) -> StoreResult<u64> {
        let live = self.replicas.lock().lease_live(claimed_by);
        self.run("complete_abandoned_idempotency", |t| {
            if live {
                0
            } else {
                t.complete_abandoned_idempotency(claimed_by, response)
            }
        })
    }
    async fn prune_idempotency(&self, created_before_ms: i64, limit: i64) -> StoreResult<u64> {
        self.run("prune_idempotency", |t| t.prune_idempotency(created_before_ms, limit))
    }

    async fn insert_execution(&self, execution: &ExecutionRecord) -> StoreResult<()> {
        self.owner_write("insert_execution", |t| t.insert_execution(execution))
    }
    async fn update_execution(&self, expected_state: ExecutionState, execution: &ExecutionRecord) -> StoreResult<bool> {
        self.owner_write(
            "update_execution",
            |t| Ok(t.update_execution(expected_state, execution)),
        )
    }
    async fn advance_generation(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        expected: Generation,
    ) -> StoreResult<bool> {
        self.owner_write("advance_generation", |t| {
            Ok(t.advance_generation(tenant_id, execution_id, expected))
        })
    }
    async fn claim_execution(
        &self,
        execution_id: &ExecutionId,
        generation: Generation,
        from: &str,
    ) -> StoreResult<bool> {
        let from_live = self.replicas.lock().lease_live(from);
        self.owner_write("claim_execution", |t| {
            Ok(t.claim_execution(execution_id, generation, from, from_live))
        })
    }
    async fn get_execution(&self, tenant_id: &str, id: &ExecutionId) -> StoreResult<Option<ExecutionRecord>> {
        self.run("get_execution", |t| t.get_execution(tenant_id, id))
    }
    async fn list_executions(
        &self,
        tenant_id: &str,
        after_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<ExecutionRecord>> {
        self.run("list_executions", |t| t.list_executions(tenant_id, after_id, limit))
    }
    async fn list_live_executions_of(&self, owner_incarnation: &str) -> StoreResult<Vec<ExecutionRecord>> {
        self.run("list_live_executions_of", |t| {
            t.list_live_executions_of(owner_incarnation)
        })
    }
    async fn abandoned_incarnations(&self) -> StoreResult<Vec<String>> {
        let candidates = {
            let replicas = self.replicas.lock();
            if replicas.terms().is_none() {
                return Ok(Vec::new());
            }
            replicas.ended_elsewhere()
        };
        self.run("abandoned_incarnations", |t| {
            candidates
                .into_iter()
                .filter(|incarnation| t.holds_live_work(incarnation))
                .collect()
        })
    }
    async fn find_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<ExecutionRecord>> {
        self.run("find_session", |t| t.find_session(tenant_id, session_id))
    }
    async fn executions_leasing(&self, text: &str, limit: i64) -> StoreResult<Vec<ExecutionRecord>> {
        self.run("executions_leasing", |t| t.executions_leasing(text, limit))
    }
    async fn list_sessions(
        &self,
        tenant_id: &str,
        after_session_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<ExecutionRecord>> {
        self.run("list_sessions", |t| t.list_sessions(tenant_id, after_session_id, limit))
    }

    async fn save_session_checkpoint(&self, checkpoint: &SessionCheckpoint) -> StoreResult<bool> {
        self.owner_write("save_session_checkpoint", |t| Ok(t.save_session_checkpoint(checkpoint)))
    }
    async fn session_checkpoint(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<SessionCheckpoint>> {
        self.run("session_checkpoint", |t| t.session_checkpoint(tenant_id, session_id))
    }
    async fn claim_session_open(
        &self,
        tenant_id: &str,
        session_id: &str,
        claim_id: &str,
        hold: std::time::Duration,
    ) -> StoreResult<bool> {
        let replicas = self.replicas.lock().clone();
        let now = now_ms();
        let until = now.saturating_add(millis(hold));
        self.run("claim_session_open", |t| {
            t.claim_session_open((tenant_id, session_id), claim_id, (now, until), |incarnation| {
                replicas.lease_live(incarnation)
            })
        })
    }
    async fn renew_session_open(
        &self,
        tenant_id: &str,
        session_id: &str,
        claim_id: &str,
        hold: std::time::Duration,
    ) -> StoreResult<bool> {
        let until = now_ms().saturating_add(millis(hold));
        self.run("renew_session_open", |t| {
            t.renew_session_open((tenant_id, session_id), claim_id, until)
        })
    }
    async fn release_session_open(&self, tenant_id: &str, session_id: &str, claim_id: &str) -> StoreResult<()> {
        self.run("release_session_open", |t| {
            t.release_session_open(tenant_id, session_id, claim_id)
        })
    }

    async fn insert_turn(&self, turn: &TurnRecord) -> StoreResult<()> {
        self.owner_write("insert_turn", |t| t.insert_turn(turn))
    }
    async fn settle_turn(&self, turn: &TurnRecord) -> StoreResult<bool> {
        self.owner_write("settle_turn", |t| Ok(t.settle_turn(turn)))
    }
    async fn get_turn(&self, tenant_id: &str, id: &TurnId) -> StoreResult<Option<TurnRecord>> {
        self.run("get_turn", |t| t.get_turn(tenant_id, id))
    }
    async fn list_turns(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        after_number: i64,
        limit: i64,
    ) -> StoreResult<Vec<TurnRecord>> {
        self.run("list_turns", |t| {
            t.list_turns(tenant_id, execution_id, after_number, limit)
        })
    }

    async fn insert_interaction(&self, interaction: &InteractionRecord) -> StoreResult<()> {
        self.owner_write("insert_interaction", |t| t.insert_interaction(interaction))
    }
    async fn transition_interaction(
        &self,
        expected_state: InteractionState,
        next: &InteractionRecord,
    ) -> StoreResult<bool> {
        self.owner_write("transition_interaction", |t| {
            Ok(t.transition_interaction(expected_state, next))
        })
    }
    async fn get_interaction(&self, tenant_id: &str, id: &InteractionId) -> StoreResult<Option<InteractionRecord>> {
        self.run("get_interaction", |t| t.get_interaction(tenant_id, id))
    }
    async fn list_interactions(&self, query: &InteractionQuery) -> StoreResult<Vec<InteractionRecord>> {
        self.run("list_interactions", |t| t.list_interactions(query))
    }

    async fn append_events(&self, events: Arc<[EventRecord]>) -> StoreResult<()> {
        self.owner_write("append_events", |t| t.append_events(&events))
    }
    async fn commit(&self, batch: &Batch) -> StoreResult<bool> {
        self.owner_write("commit", |t| t.commit(batch))
    }
    async fn read_events(
        &self,
        execution_id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
    ) -> StoreResult<Vec<EventRecord>> {
        self.run("read_events", |t| t.read_events(execution_id, after_sequence, limit))
    }
    async fn head_sequence(&self, execution_id: &ExecutionId) -> StoreResult<i64> {
        self.run("head_sequence", |t| t.head_sequence(execution_id))
    }
    async fn oldest_sequence(&self, execution_id: &ExecutionId) -> StoreResult<Option<i64>> {
        self.run("oldest_sequence", |t| t.oldest_sequence(execution_id))
    }
    async fn prune_events(
        &self,
        execution_id: &ExecutionId,
        through: i64,
        emitted_before_ms: i64,
        limit: i64,
    ) -> StoreResult<u64> {
        self.run("prune_events", |t| {
            t.prune_events(execution_id, through, emitted_before_ms, limit)
        })
    }
    async fn acknowledged_executions(
        &self,
        after_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<(ExecutionId, i64)>> {
        self.run("acknowledged_executions", |t| {
            t.acknowledged_executions(after_id, limit)
        })
    }
    async fn set_acked_sequence(&self, tenant_id: &str, execution_id: &ExecutionId, through: i64) -> StoreResult<()> {
        self.run("set_acked_sequence", |t| {
            t.set_acked_sequence(tenant_id, execution_id, through)
        })
    }
}
