//! The memory store's rows and the rules the SQL statements and constraints enforce on
//! them (primary and unique keys, foreign keys, compare-and-set `WHERE` clauses, ordering),
//! one method per [`Store`](crate::Store) operation.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::batch::{Batch, Write};
use crate::contract::*;
use crate::records::*;
use crate::replica::LEGACY_INCARNATION;
use cursor_runner_domain::state::{ExecutionState, InteractionState, TurnState};

#[derive(Clone, Default)]
pub(super) struct Tables {
    executions: BTreeMap<ExecutionId, ExecutionRecord>,
    turns: BTreeMap<TurnId, TurnRecord>,
    interactions: BTreeMap<InteractionId, InteractionRecord>,
    /// By (execution id, sequence): the primary key, in read order.
    events: BTreeMap<(ExecutionId, i64), EventRecord>,
    /// Every kept event's id (unique across executions).
    event_ids: HashSet<String>,
    idempotency: HashMap<IdempotencyKey, IdempotencyRow>,
    /// By (tenant, session id).
    checkpoints: HashMap<(String, String), SessionCheckpoint>,
    /// By (tenant, session id): the open claimed now.
    session_opens: HashMap<(String, String), SessionOpen>,
    /// Execution id → the incarnation that owns it (`executions.owner_incarnation`).
    owners: HashMap<String, String>,
    /// The incarnation this store writes as owner (`""` until it registers).
    pub(super) me: String,
    /// The end of `me`'s lease on this store's clock (`replicas.lease_until_ms`); `None`
    /// until it registers, when writes are fenced by generation only.
    pub(super) my_lease_until_ms: Option<i64>,
}

/// A claim of one session's open (`session_opens`).
#[derive(Clone)]
struct SessionOpen {
    claim_id: String,
    claimed_by: String,
    expires_at_ms: i64,
}

#[derive(Clone)]
struct IdempotencyRow {
    digest: String,
    /// `None` while the call is in flight; its stored response once done.
    response: Option<serde_json::Value>,
    created_at_ms: i64,
    claimed_by: String,
    token: ClaimToken,
}

/// `LIMIT n` of a non-negative `n` (the callers' limits are).
fn take(limit: i64) -> usize {
    usize::try_from(limit).unwrap_or(0)
}

fn missing_parent(what: &str) -> StoreError {
    StoreError::Database(format!("foreign key violation: no such {what}"))
}

impl Tables {
    pub(super) fn claim_idempotency(
        &mut self,
        key: &IdempotencyKey,
        digest: &str,
        token: &ClaimToken,
    ) -> IdempotencyClaim {
        if let Some(held) = self.find_idempotency(key, digest) {
            return held;
        }
        let row = IdempotencyRow {
            digest: digest.to_owned(),
            response: None,
            created_at_ms: now_ms(),
            claimed_by: self.me.clone(),
            token: token.clone(),
        };
        self.idempotency.insert(key.clone(), row);
        IdempotencyClaim::Claimed
    }

    /// What the key holds for `digest`, without claiming it; `None` while it is free.
    pub(super) fn find_idempotency(&self, key: &IdempotencyKey, digest: &str) -> Option<IdempotencyClaim> {
        // The id is the tenant's, whatever the RPC: used by another one, it is another body.
        let elsewhere = self.idempotency.iter().find(|(k, _)| {
            k.tenant_id == key.tenant_id && k.request_id == key.request_id && k.operation != key.operation
        });
        if let Some((_, row)) = elsewhere {
            return Some(IdempotencyClaim::DigestMismatch {
                held: row.digest.clone(),
            });
        }
        match self.idempotency.get(key)? {
            row if row.digest != digest => Some(IdempotencyClaim::DigestMismatch {
                held: row.digest.clone(),
            }),
            IdempotencyRow {
                response: Some(response),
                ..
            } => Some(IdempotencyClaim::Completed(response.clone())),
            row if row.claimed_by == self.me && self.me != LEGACY_INCARNATION => Some(IdempotencyClaim::InFlightHere),
            _ => Some(IdempotencyClaim::InFlight),
        }
    }

    pub(super) fn complete_idempotency(&mut self, key: &IdempotencyKey, response: &serde_json::Value) -> bool {
        let mine = self.me.is_empty() || self.my_lease_live();
        match self.idempotency.get_mut(key) {
            Some(row) if row.response.is_none() && row.claimed_by == self.me && mine => {
                row.response = Some(response.clone());
                true
            }
            _ => false,
        }
    }

    pub(super) fn adopt_idempotency(&mut self, key: &IdempotencyKey, token: &ClaimToken) -> bool {
        if self.me == LEGACY_INCARNATION {
            return false;
        }
        match self.idempotency.get_mut(key) {
            Some(row) if row.response.is_none() && row.claimed_by == self.me => {
                row.token = token.clone();
                true
            }
            _ => false,
        }
    }

    pub(super) fn release_idempotency(&mut self, key: &IdempotencyKey, token: &ClaimToken) {
        if self
            .idempotency
            .get(key)
            .is_some_and(|row| row.response.is_none() && row.claimed_by == self.me && row.token == *token)
        {
            self.idempotency.remove(key);
        }
    }

    /// Completes `claimed_by`'s keys in flight; the caller has checked its lease ended.
    pub(super) fn complete_abandoned_idempotency(&mut self, claimed_by: &str, response: &serde_json::Value) -> u64 {
        let mut completed = 0;
        for row in self
            .idempotency
            .values_mut()
            .filter(|row| row.response.is_none() && row.claimed_by == claimed_by)
        {
            row.response = Some(response.clone());
            completed += 1;
        }
        completed
    }

    pub(super) fn prune_idempotency(&mut self, created_before_ms: i64, limit: i64) -> u64 {
        let mut done: Vec<(i64, IdempotencyKey)> = self
            .idempotency
            .iter()
            .filter(|(_, row)| row.response.is_some() && row.created_at_ms < created_before_ms)
            .map(|(key, row)| (row.created_at_ms, key.clone()))
            .collect();
        done.sort_by(|a, b| {
            (a.0, &a.1.tenant_id, &a.1.operation, &a.1.request_id).cmp(&(
                b.0,
                &b.1.tenant_id,
                &b.1.operation,
                &b.1.request_id,
            ))
        });
        done.truncate(take(limit));
        for (_, key) in &done {
            self.idempotency.remove(key);
        }
        done.len() as u64
    }

    /// Whether `me`'s lease is live now (no replica registered: no owner fence).
    fn my_lease_live(&self) -> bool {
        self.my_lease_until_ms.is_none_or(|until| until > now_ms())
    }

    /// The owner fence on an execution row: `OWNED` without its generation.
    fn owner_is_me(&self, execution_id: &str) -> bool {
        self.my_lease_until_ms.is_none()
            || (self.owner_of(execution_id) == Some(self.me.as_str()) && self.my_lease_live())
    }

    /// `OWNED(execution, generation)`, like the SQL predicate.
    fn owned(&self, execution_id: &str, generation: Generation) -> bool {
        self.executions.get(execution_id).map(|e| e.generation) == Some(generation) && self.owner_is_me(execution_id)
    }

    pub(super) fn insert_execution(&mut self, e: &ExecutionRecord) -> StoreResult<()> {
        if !self.my_lease_live() {
            return Err(StoreError::Fenced);
        }
        if self.executions.contains_key(&e.id) {
            return Err(StoreError::Duplicate);
        }
        self.executions.insert(e.id.clone(), e.clone());
        self.owners.insert(e.id.to_string(), self.me.clone());
        Ok(())
    }

    /// Writes the columns `UPDATE executions SET …` writes; the others (tenant, workspace,
    /// policy, limits, acked sequence, creation time, generation) keep their values.
    pub(super) fn update_execution(&mut self, expected_state: ExecutionState, e: &ExecutionRecord) -> bool {
        let Some(row) = self.executions.get_mut(&e.id) else {
            return false;
        };
        if row.generation != e.generation || row.state != expected_state {
            return false;
        }
        if !self.owner_is_me(&e.id) {
            return false;
        }
        let row = self.executions.get_mut(&e.id).expect("found above");
        row.state = e.state;
        row.session_id = e.session_id.clone();
        row.active_turn_id = e.active_turn_id.clone();
        row.turn_count = e.turn_count;
        row.pid = e.pid;
        row.exit_code = e.exit_code;
        row.exit_signal = e.exit_signal;
        row.failure_reason = e.failure_reason.clone();
        row.failure_message = e.failure_message.clone();
        row.updated_at_ms = e.updated_at_ms;
        // As in SQL: an update never clears the lease or the configuration.
        if e.lease.is_some() {
            row.lease = e.lease.clone();
        }
        if e.session_config.is_some() {
            row.session_config = e.session_config.clone();
        }
        row.credential_name = e.credential_name.clone();
        row.active_ms = e.active_ms;
        true
    }

    pub(super) fn advance_generation(&mut self, tenant_id: &str, execution_id: &str, expected: Generation) -> bool {
        if !self.my_lease_live() {
            return false;
        }
        match self.executions.get_mut(execution_id) {
            Some(row) if row.tenant_id == tenant_id && row.generation == expected => {
                row.generation = row.generation.next();
                self.owners.insert(execution_id.to_owned(), self.me.clone());
                true
            }
            _ => false,
        }
    }

    pub(super) fn get_execution(&self, tenant_id: &str, id: &str) -> Option<ExecutionRecord> {
        self.executions.get(id).filter(|e| e.tenant_id == tenant_id).cloned()
    }

    pub(super) fn list_executions(&self, tenant_id: &str, after_id: Option<&str>, limit: i64) -> Vec<ExecutionRecord> {
        self.executions
            .values()
            .filter(|e| e.tenant_id == tenant_id && e.id.as_str() > after_id.unwrap_or(""))
            .take(take(limit))
            .cloned()
            .collect()
    }

    pub(super) fn list_live_executions_of(&self, owner_incarnation: &str) -> Vec<ExecutionRecord> {
        self.executions
            .values()
            .filter(|e| !e.state.is_terminal() && self.owner_of(&e.id) == Some(owner_incarnation))
            .cloned()
            .collect()
    }

    /// Whether `incarnation` owns a live execution or holds a call in flight.
    pub(super) fn holds_live_work(&self, incarnation: &str) -> bool {
        self.executions
            .values()
            .any(|e| !e.state.is_terminal() && self.owner_of(&e.id) == Some(incarnation))
            || self
                .idempotency
                .values()
                .any(|row| row.response.is_none() && row.claimed_by == incarnation)
    }

    /// The incarnation owning an execution, of the tenant's.
    pub(super) fn owner(&self, tenant_id: &str, id: &str) -> Option<&str> {
        self.get_execution(tenant_id, id).and_then(|e| self.owner_of(&e.id))
    }

    fn owner_of(&self, id: &str) -> Option<&str> {
        self.owners.get(id).map(String::as_str)
    }

    pub(super) fn find_session(&self, tenant_id: &str, session_id: &str) -> Option<ExecutionRecord> {
        let mut of_the_session = self
            .executions
            .values()
            .rev()
            .filter(|e| e.tenant_id == tenant_id && e.session_id.as_deref() == Some(session_id));
        let newest = of_the_session.clone().next();
        of_the_session.find(|e| !e.state.is_terminal()).or(newest).cloned()
    }

    pub(super) fn executions_leasing(&self, text: &str, limit: i64) -> Vec<ExecutionRecord> {
        self.executions
            .values()
            .filter(|e| e.lease.as_ref().is_some_and(|lease| lease.to_json().contains(text)))
            .take(usize::try_from(limit).unwrap_or(0))
            .cloned()
            .collect()
    }

    pub(super) fn list_sessions(
        &self,
        tenant_id: &str,
        after_session_id: Option<&str>,
        limit: i64,
    ) -> Vec<ExecutionRecord> {
        // Per session, its newest execution: executions are walked in id order, so the
        // last one seen for a session is its newest.
        let mut newest: BTreeMap<&str, &ExecutionRecord> = BTreeMap::new();
        for e in self.executions.values().filter(|e| e.tenant_id == tenant_id) {
            if let Some(session) = e.session_id.as_deref()
                && session > after_session_id.unwrap_or("")
            {
                newest.insert(session, e);
            }
        }
        newest.into_values().take(take(limit)).cloned().collect()
    }

    /// Like the SQL claim: a live execution of `from`, whose lease has ended, becomes `me`'s.
    pub(super) fn claim_execution(
        &mut self,
        execution_id: &str,
        generation: Generation,
        from: &str,
        from_live: bool,
    ) -> bool {
        let claimable = self
            .executions
            .get(execution_id)
            .is_some_and(|e| e.generation == generation && !e.state.is_terminal())
            && self.owner_of(execution_id) == Some(from)
            && !from_live
            && self.my_lease_until_ms.is_some()
            && self.my_lease_live();
        if claimable {
            self.owners.insert(execution_id.to_owned(), self.me.clone());
        }
        claimable
    }

    pub(super) fn save_session_checkpoint(&mut self, c: &SessionCheckpoint) -> bool {
        if !self.owned(&c.execution_id, c.generation) {
            return false;
        }
        let key = (c.tenant_id.clone(), c.session_id.clone());
        let newer = self.checkpoints.get(&key).is_none_or(|stored| {
            stored.execution_id != c.execution_id
                || (stored.generation, stored.turn_count) <= (c.generation, c.turn_count)
        });
        if newer {
            self.checkpoints.insert(key, c.clone());
        }
        newer
    }

    pub(super) fn session_checkpoint(&self, tenant_id: &str, session_id: &str) -> Option<SessionCheckpoint> {
        self.checkpoints
            .get(&(tenant_id.to_owned(), session_id.to_owned()))
            .cloned()
    }

    /// Claims a session's open as `claim_id` until `expires_at_ms`, unless another
    /// incarnation's live claim (`live`: its lease is) holds it until later than `now`.
    pub(super) fn claim_session_open(
        &mut self,
        (tenant_id, session_id): (&str, &str),
        claim_id: &str,
        (now, expires_at_ms): (i64, i64),
        live: impl Fn(&str) -> bool,
    ) -> bool {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        let free = self
            .session_opens
            .get(&key)
            .is_none_or(|held| held.claimed_by == self.me || held.expires_at_ms <= now || !live(&held.claimed_by));
        if free {
            let claimed_by = self.me.clone();
            self.session_opens.insert(
                key,
                SessionOpen {
                    claim_id: claim_id.to_owned(),
                    claimed_by,
                    expires_at_ms,
                },
            );
        }
        free
    }

    pub(super) fn renew_session_open(
        &mut self,
        (tenant_id, session_id): (&str, &str),
        claim_id: &str,
        expires_at_ms: i64,
    ) -> bool {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        match self.session_opens.get_mut(&key) {
            Some(held) if held.claim_id == claim_id => {
                held.expires_at_ms = expires_at_ms;
                true
            }
            _ => false,
        }
    }

    pub(super) fn release_session_open(&mut self, tenant_id: &str, session_id: &str, claim_id: &str) {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        if self
            .session_opens
            .get(&key)
            .is_some_and(|held| held.claim_id == claim_id)
        {
            self.session_opens.remove(&key);
        }
    }

    pub(super) fn insert_turn(&mut self, t: &TurnRecord) -> StoreResult<()> {
        if !self.owned(&t.execution_id, t.generation) {
            return Err(StoreError::Fenced);
        }
        let taken = self
            .turns
            .values()
            .any(|other| other.execution_id == t.execution_id && other.turn_number == t.turn_number);
        if taken || self.turns.contains_key(&t.id) {
            return Err(StoreError::Duplicate);
        }
        self.turns.insert(t.id.clone(), t.clone());
        Ok(())
    }

    /// Settles a `running` turn of the record's generation, while that is still the
    /// execution's.
    pub(super) fn settle_turn(&mut self, t: &TurnRecord) -> bool {
        let owned = self.owned(&t.execution_id, t.generation);
        let Some(row) = self.turns.get_mut(&t.id) else {
            return false;
        };
        if row.generation != t.generation || row.state != TurnState::Running || !owned {
            return false;
        }
        row.state = t.state;
        row.stop_reason = t.stop_reason.clone();
        row.failure_reason = t.failure_reason.clone();
        row.failure_message = t.failure_message.clone();
        row.ended_at_ms = t.ended_at_ms;
        row.usage = t.usage.clone();
        true
    }

    pub(super) fn get_turn(&self, tenant_id: &str, id: &str) -> Option<TurnRecord> {
        self.turns.get(id).filter(|t| t.tenant_id == tenant_id).cloned()
    }

    pub(super) fn list_turns(
        &self,
        tenant_id: &str,
        execution_id: &str,
        after_number: i64,
        limit: i64,
    ) -> Vec<TurnRecord> {
        let mut turns: Vec<TurnRecord> = self
            .turns
            .values()
            .filter(|t| t.tenant_id == tenant_id && t.execution_id == execution_id && t.turn_number > after_number)
            .cloned()
            .collect();
        turns.sort_by_key(|t| t.turn_number);
        turns.truncate(take(limit));
        turns
    }

    pub(super) fn insert_interaction(&mut self, i: &InteractionRecord) -> StoreResult<()> {
        if !self.owned(&i.execution_id, i.generation) {
            return Err(StoreError::Fenced);
        }
        if !self.turns.contains_key(&i.turn_id) {
            return Err(missing_parent("turn"));
        }
        let taken = self.interactions.values().any(|other| {
            other.execution_id == i.execution_id
                && other.generation == i.generation
                && other.native_request_id == i.native_request_id
        });
        if taken || self.interactions.contains_key(&i.id) {
            return Err(StoreError::Duplicate);
        }
        self.interactions.insert(i.id.clone(), i.clone());
        Ok(())
    }

    pub(super) fn transition_interaction(&mut self, expected_state: InteractionState, i: &InteractionRecord) -> bool {
        let owned = self
            .interactions
            .get(&i.id)
            .is_some_and(|row| self.owned(&row.execution_id, i.generation));
        let Some(row) = self.interactions.get_mut(&i.id) else {
            return false;
        };
        if row.generation != i.generation || row.state != expected_state || !owned {
            return false;
        }
        row.state = i.state;
        row.outcome = i.outcome.clone();
        row.answer_request_id = i.answer_request_id.clone();
        row.answer_fingerprint = i.answer_fingerprint.clone();
        row.reason = i.reason;
        row.delivery = i.delivery;
        row.replay_allowed = i.replay_allowed;
        row.updated_at_ms = i.updated_at_ms;
        true
    }

    pub(super) fn get_interaction(&self, tenant_id: &str, id: &str) -> Option<InteractionRecord> {
        self.interactions.get(id).filter(|i| i.tenant_id == tenant_id).cloned()
    }

    /// An empty execution id or no state filters nothing, as in SQL (`$2 = '' OR …`).
    pub(super) fn list_interactions(&self, q: &InteractionQuery) -> Vec<InteractionRecord> {
        let execution = q.execution_id.as_deref().unwrap_or("");
        self.interactions
            .values()
            .filter(|i| {
                i.tenant_id == q.tenant_id
                    && (execution.is_empty() || i.execution_id == execution)
                    && q.state.is_none_or(|state| i.state == state)
                    && i.id.as_str() > q.after_id.as_deref().unwrap_or("")
            })
            .take(take(q.limit))
            .cloned()
            .collect()
    }

    /// All or nothing, like the one `INSERT … SELECT … WHERE EXISTS` statement.
    pub(super) fn append_events(&mut self, events: &[EventRecord]) -> StoreResult<()> {
        let Some((execution_id, generation)) = one_execution_and_generation(events)? else {
            return Ok(());
        };
        if !self.owned(execution_id, generation) {
            return Err(StoreError::Fenced);
        }
        let mut keys = HashSet::new();
        let mut ids = HashSet::new();
        for e in events {
            let key = (e.execution_id.clone(), e.sequence);
            if self.events.contains_key(&key)
                || self.event_ids.contains(&e.event_id)
                || !keys.insert(key)
                || !ids.insert(e.event_id.as_str())
            {
                return Err(StoreError::Duplicate);
            }
        }
        for e in events {
            self.event_ids.insert(e.event_id.clone());
            self.events.insert((e.execution_id.clone(), e.sequence), e.clone());
        }
        Ok(())
    }

    /// An execution's events with a sequence in `range`, in order.
    fn events_of<'a>(
        &'a self,
        execution_id: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> impl DoubleEndedIterator<Item = &'a EventRecord> {
        let (from, to) = range.into_inner();
        self.events
            .range((ExecutionId::from(execution_id), from)..=(ExecutionId::from(execution_id), to))
            .map(|(_, e)| e)
    }

    pub(super) fn read_events(&self, execution_id: &str, after_sequence: i64, limit: i64) -> Vec<EventRecord> {
        let from = after_sequence.saturating_add(1);
        self.events_of(execution_id, from..=i64::MAX)
            .take(take(limit))
            .cloned()
            .collect()
    }

    pub(super) fn head_sequence(&self, execution_id: &str) -> i64 {
        self.events_of(execution_id, i64::MIN..=i64::MAX)
            .next_back()
            .map_or(0, |e| e.sequence)
    }

    pub(super) fn oldest_sequence(&self, execution_id: &str) -> Option<i64> {
        self.events_of(execution_id, i64::MIN..=i64::MAX)
            .next()
            .map(|e| e.sequence)
    }

    pub(super) fn prune_events(&mut self, execution_id: &str, through: i64, emitted_before_ms: i64, limit: i64) -> u64 {
        let doomed: Vec<(ExecutionId, i64)> = self
            .events_of(execution_id, i64::MIN..=through)
            .filter(|e| e.emitted_at_ms < emitted_before_ms)
            .take(take(limit))
            .map(|e| (e.execution_id.clone(), e.sequence))
            .collect();
        for key in &doomed {
            if let Some(e) = self.events.remove(key) {
                self.event_ids.remove(&e.event_id);
            }
        }
        doomed.len() as u64
    }

    pub(super) fn acknowledged_executions(&self, after_id: Option<&str>, limit: i64) -> Vec<(ExecutionId, i64)> {
        self.executions
            .values()
            .filter(|e| e.acked_sequence > 0 && e.id.as_str() > after_id.unwrap_or(""))
            .take(take(limit))
            .map(|e| (e.id.clone(), e.acked_sequence))
            .collect()
    }

    /// Cumulative: an acknowledgement never moves back.
    pub(super) fn set_acked_sequence(&mut self, tenant_id: &str, execution_id: &str, through: i64) {
        if let Some(e) = self.executions.get_mut(execution_id)
            && e.tenant_id == tenant_id
            && e.acked_sequence <= through
        {
            e.acked_sequence = through;
        }
    }

    /// All or nothing, like the SQL transaction: the writes and the append run on a copy
    /// of the rows, which replaces them only if every one of them landed.
    pub(super) fn commit(&mut self, batch: &Batch) -> StoreResult<bool> {
        let mut next = self.clone();
        let mut inserted = Ok(());
        let landed = batch.writes.iter().all(|write| match write {
            Write::InsertTurn(turn) => {
                inserted = next.insert_turn(turn);
                inserted.is_ok()
            }
            Write::InsertInteraction(interaction) => {
                inserted = next.insert_interaction(interaction);
                inserted.is_ok()
            }
            Write::Execution { expected_state, record } => next.update_execution(*expected_state, record),
            Write::SettleTurn(turn) => next.settle_turn(turn),
            Write::Interaction { expected_state, record } => next.transition_interaction(*expected_state, record),
            Write::ClaimIdempotency { key, digest, token } => {
                let claimed = matches!(next.claim_idempotency(key, digest, token), IdempotencyClaim::Claimed);
                if !claimed {
                    inserted = Err(StoreError::KeyTaken);
                }
                claimed
            }
            Write::CompleteIdempotency { key, response } => next.complete_idempotency(key, response),
        });
        match inserted {
            Err(StoreError::Fenced) => return Ok(false),
            other => other?,
        }
        if !landed {
            return Ok(false);
        }
        match next.append_events(&batch.events) {
            Err(StoreError::Fenced) => return Ok(false),
            other => other?,
        }
        *self = next;
        Ok(true)
    }
}
