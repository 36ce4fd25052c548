//! Idempotent calls: one outcome per `request_id`, a retry waiting for the first call's
//! outcome, transient failures releasing the key.

use std::future::Future;
use std::sync::Arc;

use cursor_runner_store::{
    ClaimToken, ExecutionRecord, IdempotencyClaim, IdempotencyKey, InteractionRecord, Patience, Store, TurnId,
    TurnRecord,
};

use serde_json::Value;
use tokio::sync::{oneshot, watch};

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};

use super::data::*;
use crate::call_key::{CallKey, KeyProgress, stored_execution, stored_interaction, stored_turn};
use crate::ownership;

impl Engine {
    /// Runs `run` once per (tenant, operation, request_id). A retry with the same body
    /// while the first call runs joins it; after it, gets its stored result; with
    /// another body, is refused. The work runs in its own task, so a client that
    /// disconnects cannot abandon it half-done.
    ///
    /// The work is handed its [`CallKey`]: it may put the
    /// key's completion into the commit that makes its outcome true, and, when `claim` is
    /// [`KeyClaim::InFirstCommit`], the key's claim into its first commit. That is sound only
    /// for work that changes nothing before its first commit: a call that finds its key
    /// taken then ran nothing, and gets what the key holds. Whatever the work left undone
    /// of the key, this does after it.
    pub(super) async fn idempotent<T, F, Fut>(
        &self,
        meta: RequestMeta,
        operation: &str,
        claim: KeyClaim,
        run: F,
    ) -> Result<Outcome<T>, EngineError>
    where
        T: Send + 'static,
        F: FnOnce(CallKey) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(Value, T), EngineError>> + Send + 'static,
    {
        if meta.request_id.is_empty() {
            return Err(EngineError::invalid(
                Reason::RequestIdRequired,
                "request_id is required",
            ));
        }
        let key = IdempotencyKey {
            tenant_id: meta.tenant_id.clone(),
            operation: operation.to_owned(),
            request_id: meta.request_id.clone(),
        };
        // The call that runs the work hands its caller the fresh result; a retry that
        // joins it, or comes after it, gets the stored one.
        let (fresh_tx, fresh_rx) = oneshot::channel::<T>();
        // The call that starts the work keeps its own receiver: a retry that joined it may
        // see the result first and take the entry away.
        let (ran_here, mut rx) = {
            let mut in_flight = self.in_flight.lock();
            match in_flight.get(&key) {
                Some((digest, _)) if *digest != meta.request_digest => {
                    return Err(mismatch(digest, &meta.request_digest));
                }
                Some((_, rx)) => (false, rx.clone()),
                None => {
                    let (tx, rx) = watch::channel(None);
                    in_flight.insert(key.clone(), (meta.request_digest.clone(), rx.clone()));
                    drop(in_flight);
                    let call = KeyedCall {
                        store: self.store.clone(),
                        // The outcome must be recorded, or the key would answer "in flight"
                        // until the next start: it waits for the store if need be.
                        recorder: self.store.with_patience(Patience::UntilBack),
                        key: key.clone(),
                        digest: meta.request_digest.clone(),
                        token: ClaimToken::new(),
                    };
                    tokio::spawn(tracing::Instrument::in_current_span(async move {
                        tx.send_replace(Some(call.run(claim, run, fresh_tx).await));
                    }));
                    (true, rx)
                }
            }
        };
        let result = loop {
            if let Some(result) = rx.borrow_and_update().clone() {
                break result;
            }
            if rx.changed().await.is_err() {
                break rx
                    .borrow()
                    .clone()
                    .unwrap_or_else(|| Err(EngineError::internal("an in-flight call vanished")));
            }
        };
        {
            // This call's entry only: a later call under the key may hold its own by now.
            let mut in_flight = self.in_flight.lock();
            if in_flight.get(&key).is_some_and(|(_, held)| held.same_channel(&rx)) {
                in_flight.remove(&key);
            }
        }
        let stored = result.map_err(|e| self.fenced_if_lease_ended(e))?;
        if !ran_here {
            return Ok(Outcome::Stored(stored));
        }
        Ok(match fresh_rx.await {
            Ok(fresh) => Outcome::Ran(fresh),
            // The key held a completed outcome already: this call ran nothing.
            Err(_) => Outcome::Stored(stored),
        })
    }

    /// A write the database refused once this replica's lease had ended (a transaction
    /// begun before, committed after) reads as the replica's refusal, as a write refused
    /// before it is sent does: the execution was not handed on, this replica lost it.
    fn fenced_if_lease_ended(&self, e: EngineError) -> EngineError {
        if e.reason == Reason::ExecutionFenced && self.lease_has_ended() {
            ownership::fenced_refusal()
        } else {
            e
        }
    }

    /// [`Self::idempotent`] for work that results in a record: stored by its id; the call
    /// that ran the work gets the record as the work returned it, a retry (or a call that
    /// joined the first) gets it read back as it is now (tenant-scoped: stored results
    /// name resources of the caller's own tenant).
    pub(super) async fn idempotent_record<T, F, Fut>(
        &self,
        meta: RequestMeta,
        operation: &str,
        run: F,
    ) -> Result<T, EngineError>
    where
        T: Recorded,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, EngineError>> + Send + 'static,
    {
        self.idempotent_record_keyed(meta, operation, KeyClaim::Before, move |_| run())
            .await
    }

    /// [`Self::idempotent_record`] for work handed its [`CallKey`] (see
    /// [`Self::idempotent`]).
    pub(super) async fn idempotent_record_keyed<T, F, Fut>(
        &self,
        meta: RequestMeta,
        operation: &str,
        claim: KeyClaim,
        run: F,
    ) -> Result<T, EngineError>
    where
        T: Recorded,
        F: FnOnce(CallKey) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, EngineError>> + Send + 'static,
    {
        let tenant_id = meta.tenant_id.clone();
        let outcome = self
            .idempotent(meta, operation, claim, move |key| async move {
                run(key).await.map(|record| (record.stored(), record))
            })
            .await?;
        match outcome {
            Outcome::Ran(record) => Ok(record),
            Outcome::Stored(stored) => T::read_back(self, &tenant_id, &stored).await,
        }
    }
}

/// Where a call's key is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyClaim {
    /// Before the work runs, in a statement of its own.
    Before,
    /// In the work's first commit (see [`Engine::idempotent`]).
    InFirstCommit,
}

/// Claims a call makes before it reports its key in flight: each may find an earlier
/// call's claim of this process's, gone before it is taken on.
const CLAIM_ATTEMPTS: usize = 2;

/// The one run of an idempotent call, in its own task.
struct KeyedCall {
    store: Arc<dyn Store>,
    recorder: Arc<dyn Store>,
    key: IdempotencyKey,
    digest: String,
    /// This call's hold on the key, whichever way it gets it.
    token: ClaimToken,
}

impl KeyedCall {
    /// Claims the key (unless the work does), runs the work, and leaves the key holding the
    /// call's outcome; the work's fresh result goes to `fresh` only if that outcome is
    /// this run's.
    async fn run<T, F, Fut>(self, claim: KeyClaim, work: F, fresh: oneshot::Sender<T>) -> Result<Value, EngineError>
    where
        F: FnOnce(CallKey) -> Fut,
        Fut: Future<Output = Result<(Value, T), EngineError>>,
    {
        let progress = match claim {
            KeyClaim::InFirstCommit => KeyProgress::Unclaimed,
            KeyClaim::Before => match self.claim().await {
                Ok(None) => KeyProgress::Claimed,
                Ok(Some(taken)) => return taken,
                // A claim the store did not confirm may have committed, its reply lost: let
                // the key go now if the store answers, so a retry through another replica
                // finds it free. If it does not, this process's next call under the key
                // takes the claim on (`IdempotencyClaim::InFlightHere`).
                Err(e) if e.is_transient() => {
                    let _ = self.store.release_idempotency(&self.key, &self.token).await;
                    return Err(e);
                }
                Err(e) => return Err(e),
            },
        };
        let call_key = CallKey::new(self.key.clone(), self.digest.clone(), self.token.clone(), progress);
        let result = work(call_key.clone()).await;
        let settled = match call_key.progress() {
            KeyProgress::Completed => None,
            KeyProgress::Claimed => self.record(result.as_ref().map(|(stored, _)| stored)).await,
            KeyProgress::Unclaimed => match &result {
                // The store was unreachable: a first commit whose acknowledgement was lost
                // may hold the key, and nothing is known of the call, so let the key go.
                Err(e) if e.is_transient() => match self.recorder.release_idempotency(&self.key, &self.token).await {
                    Ok(()) => None,
                    Err(e) => Some(Err(e.into())),
                },
                // Refused before its first commit, so it changed nothing: a call that found
                // its key taken, or was refused because an earlier call with it changed
                // things, gets what the key holds; a free key stays free.
                Err(e) if e.is_refusal() => self
                    .store
                    .find_idempotency(&self.key, &self.digest)
                    .await?
                    .map(|held| held_outcome(held, &self.digest)),
                // An outcome reached without a commit (none of the callers' work has one):
                // recorded as any other.
                _ => match self.claim().await? {
                    None => self.record(result.as_ref().map(|(stored, _)| stored)).await,
                    Some(taken) => Some(taken),
                },
            },
        };
        if let Some(stands) = settled {
            return stands;
        }
        result.map(|(stored, value)| {
            let _ = fresh.send(value);
            stored
        })
    }

    /// Claims the key: `None` once claimed, else what the key holds instead.
    async fn claim(&self) -> Result<Option<Result<Value, EngineError>>, EngineError> {
        for _ in 0..CLAIM_ATTEMPTS {
            match self
                .store
                .claim_idempotency(&self.key, &self.digest, &self.token)
                .await?
            {
                IdempotencyClaim::Claimed => return Ok(None),
                // This is the process's one call under the key (`Engine::in_flight`), so a
                // claim of this incarnation's is an earlier call's that is over: one whose
                // claim committed as its reply was lost, so it ran nothing. This call takes
                // it on, so that call's late release cannot drop it; gone meanwhile (that
                // release landed), the key is free to claim again.
                IdempotencyClaim::InFlightHere => {
                    if self.store.adopt_idempotency(&self.key, &self.token).await? {
                        return Ok(None);
                    }
                }
                held => return Ok(Some(held_outcome(held, &self.digest))),
            }
        }
        Ok(Some(held_outcome(IdempotencyClaim::InFlight, &self.digest)))
    }

    /// Records the outcome of the work under the claimed key: `None` if it stands, else
    /// the outcome that replaces it.
    async fn record(&self, result: Result<&Value, &EngineError>) -> Option<Result<Value, EngineError>> {
        let recorded = match result {
            Ok(value) => self.recorder.complete_idempotency(&self.key, value).await,
            // A refusal changed nothing: the key stays free, so the caller may fix the
            // request and send it again. A store outage is no outcome either: the same call
            // may be retried (each write it made is its own to find again).
            Err(e) if e.is_refusal() || e.is_transient() => self
                .recorder
                .release_idempotency(&self.key, &self.token)
                .await
                .map(|()| true),
            Err(e) => self.recorder.complete_idempotency(&self.key, &e.to_json()).await,
        };
        match recorded {
            Ok(true) => None,
            // Not this call's to complete any more: a survivor ended the key while this
            // replica was frozen. Its outcome is the one every retry gets, so it is this
            // call's too.
            Ok(false) => Some(outcome_that_stands(self.store.as_ref(), &self.key, &self.digest).await),
            Err(e) => Some(Err(e.into())),
        }
    }
}

/// The outcome a key held by another call (or completed) gives this one, whose digest is
/// `mine`.
fn held_outcome(held: IdempotencyClaim, mine: &str) -> Result<Value, EngineError> {
    match held {
        IdempotencyClaim::Completed(stored) => EngineError::from_json(&stored).map_or(Ok(stored), Err),
        IdempotencyClaim::DigestMismatch { held } => Err(mismatch(&held, mine)),
        IdempotencyClaim::InFlight | IdempotencyClaim::InFlightHere | IdempotencyClaim::Claimed => {
            Err(EngineError::new(
                ErrorKind::Aborted,
                Reason::RequestInFlight,
                "a call with this request_id is in flight elsewhere; retry later",
            ))
        }
    }
}

/// The refusal of a call whose request id holds the digest `held`, not its own. A digest is
/// `body`, or `subject/body` for a call on one subject ([`RequestMeta::answer`]): another
/// body on the same subject is that subject's conflict (an interaction answered differently),
/// anything else a reuse of the id for another request.
fn mismatch(held: &str, mine: &str) -> EngineError {
    let subject = |digest: &str| digest.split_once('/').map(|(subject, _)| subject.to_owned());
    match (subject(held), subject(mine)) {
        (Some(held), Some(mine)) if held == mine => answer_conflict(),
        _ => reused(),
    }
}

/// An interaction answered under this request id with another answer.
pub(super) fn answer_conflict() -> EngineError {
    EngineError::new(
        ErrorKind::Aborted,
        Reason::AnswerConflict,
        "this request_id already answered the interaction differently",
    )
}

fn reused() -> EngineError {
    EngineError::new(
        ErrorKind::Aborted,
        Reason::RequestIdReused,
        "request_id was used with another request",
    )
}

/// What a key holds for a call that could not record its own outcome (this replica's lease
/// ended): the survivor's ending, which every retry gets too; while nobody has ended it
/// yet, the replica's refusal (retry later, elsewhere).
async fn outcome_that_stands(store: &dyn Store, key: &IdempotencyKey, digest: &str) -> Result<Value, EngineError> {
    match store.find_idempotency(key, digest).await? {
        Some(IdempotencyClaim::Completed(stored)) => EngineError::from_json(&stored).map_or(Ok(stored), Err),
        _ => Err(ownership::fenced_refusal()),
    }
}

/// A record an idempotent call results in: stored by its id, read back as it is now.
pub(super) trait Recorded: Sized + Send + 'static {
    /// The stored result, naming the record.
    fn stored(&self) -> Value;

    /// The record a stored result names, as it is now.
    fn read_back(
        engine: &Engine,
        tenant_id: &str,
        stored: &Value,
    ) -> impl Future<Output = Result<Self, EngineError>> + Send;
}

/// The id a stored result names under `field`.
fn stored_id<'a>(stored: &'a Value, field: &str) -> Result<&'a str, EngineError> {
    stored[field]
        .as_str()
        .ok_or_else(|| EngineError::internal("malformed stored result"))
}

impl Recorded for ExecutionRecord {
    fn stored(&self) -> Value {
        stored_execution(&self.id)
    }

    async fn read_back(engine: &Engine, tenant_id: &str, stored: &Value) -> Result<Self, EngineError> {
        engine
            .get_execution(tenant_id, &stored_id(stored, "executionId")?.into())
            .await
    }
}

impl Recorded for TurnRecord {
    fn stored(&self) -> Value {
        stored_turn(&self.id)
    }

    async fn read_back(engine: &Engine, tenant_id: &str, stored: &Value) -> Result<Self, EngineError> {
        let id = TurnId::from(stored_id(stored, "turnId")?);
        engine
            .store
            .get_turn(tenant_id, &id)
            .await?
            .ok_or_else(|| EngineError::not_found(Reason::TurnNotFound, format!("turn `{id}` not found")))
    }
}

impl Recorded for InteractionRecord {
    fn stored(&self) -> Value {
        stored_interaction(&self.id)
    }

    async fn read_back(engine: &Engine, tenant_id: &str, stored: &Value) -> Result<Self, EngineError> {
        engine
            .get_interaction(tenant_id, &stored_id(stored, "interactionId")?.into())
            .await
    }
}

/// What an idempotent call gives its caller.
#[derive(Debug)]
pub(super) enum Outcome<T> {
    /// This call ran the work: its result as the work returned it.
    Ran(T),
    /// The stored result of the call that ran it (this one joined or retried it).
    Stored(Value),
}

#[cfg(test)]
#[path = "idempotency_tests.rs"]
mod tests;
