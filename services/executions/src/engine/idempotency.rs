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
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use cursor_runner_store::MemoryStore;
    use cursor_runner_supervisor::AgentCommand;
    use serde_json::json;
    use tokio::sync::Notify;

    use super::*;
    use crate::config::EngineConfig;

    /// An engine on the in-memory store; no agent is ever launched.
    async fn engine() -> (Arc<Engine>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig::new(AgentCommand::parse("/bin/false").unwrap(), dir.path().to_path_buf());
        let engine = Engine::start(Arc::new(MemoryStore::new()), config).await.unwrap();
        (engine, dir)
    }

    fn meta(request_id: &str, digest: &str) -> RequestMeta {
        RequestMeta {
            tenant_id: "tenant-a".into(),
            request_id: request_id.into(),
            request_digest: digest.into(),
        }
    }

    #[test]
    fn another_body_on_the_same_subject_is_a_conflict_and_anything_else_a_reuse() {
        let reason = |held: &str, mine: &str| mismatch(held, mine).reason;
        assert_eq!(reason("i-1/answer-a", "i-1/answer-b"), Reason::AnswerConflict);
        assert_eq!(reason("i-1/answer-a", "i-2/answer-a"), Reason::RequestIdReused);
        assert_eq!(reason("create-execution-body", "i-1/answer-a"), Reason::RequestIdReused);
        assert_eq!(reason("body-a", "body-b"), Reason::RequestIdReused);
    }

    #[test]
    fn an_answer_s_identity_is_its_interaction_and_its_answer_not_the_etag_it_echoed() {
        use cursor_runner_domain::interaction::InteractionAnswer;
        let identity = |interaction: &str, answer: &InteractionAnswer| {
            RequestMeta::answer("t".into(), "r".into(), interaction, answer).request_digest
        };
        let cancel = InteractionAnswer::Cancel;
        let decline = InteractionAnswer::Decline { reason: None };
        assert_eq!(identity("i-1", &cancel), identity("i-1", &cancel));
        assert_eq!(
            mismatch(&identity("i-1", &cancel), &identity("i-1", &decline)).reason,
            Reason::AnswerConflict
        );
        assert_eq!(
            mismatch(&identity("i-1", &cancel), &identity("i-2", &cancel)).reason,
            Reason::RequestIdReused
        );
    }

    /// A call whose work counts its runs and yields `value`.
    async fn call(
        engine: &Engine,
        meta: RequestMeta,
        runs: &Arc<AtomicUsize>,
        value: u32,
    ) -> Result<Outcome<u32>, EngineError> {
        let runs = runs.clone();
        engine
            .idempotent(meta, "Test", KeyClaim::Before, move |_| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok((json!({"value": value}), value))
            })
            .await
    }

    #[tokio::test]
    async fn the_call_that_runs_the_work_gets_the_work_s_own_result() {
        let (engine, _dir) = engine().await;
        let runs = Arc::new(AtomicUsize::new(0));
        let outcome = call(&engine, meta("r-1", "d"), &runs, 7).await.unwrap();
        assert!(matches!(outcome, Outcome::Ran(7)));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        engine.shutdown().await;
    }

    #[tokio::test]
    async fn a_retry_after_the_call_gets_the_stored_result_and_runs_nothing() {
        let (engine, _dir) = engine().await;
        let runs = Arc::new(AtomicUsize::new(0));
        call(&engine, meta("r-1", "d"), &runs, 7).await.unwrap();
        let retried = call(&engine, meta("r-1", "d"), &runs, 8).await.unwrap();
        assert!(matches!(retried, Outcome::Stored(ref v) if *v == json!({"value": 7})));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        engine.shutdown().await;
    }

    /// Rounds of the race below; each is one key.
    const RACE_ROUNDS: usize = 300;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retries_racing_a_call_that_ends_at_once_get_its_result_never_an_internal_error() {
        let (engine, _dir) = engine().await;
        let runs = Arc::new(AtomicUsize::new(0));
        for round in 0..RACE_ROUNDS {
            let racers: Vec<_> = (0..4)
                .map(|_| {
                    let (engine, runs) = (engine.clone(), runs.clone());
                    let request_id = format!("r-{round}");
                    tokio::spawn(async move { call(&engine, meta(&request_id, "d"), &runs, 7).await })
                })
                .collect();
            for racer in racers {
                match racer.await.unwrap() {
                    Ok(Outcome::Ran(7)) => {}
                    Ok(Outcome::Stored(stored)) => assert_eq!(stored, json!({"value": 7})),
                    other => panic!("round {round}: {other:?}"),
                }
            }
        }
        assert_eq!(runs.load(Ordering::SeqCst), RACE_ROUNDS, "the work ran once per key");
        engine.shutdown().await;
    }

    #[tokio::test]
    async fn a_retry_while_the_call_runs_joins_it_and_gets_its_result() {
        let (engine, _dir) = engine().await;
        let release = Arc::new(Notify::new());
        let (runs, gate) = (Arc::new(AtomicUsize::new(0)), release.clone());
        let first = {
            let (engine, runs) = (engine.clone(), runs.clone());
            tokio::spawn(async move {
                engine
                    .idempotent(meta("r-1", "d"), "Test", KeyClaim::Before, move |_| async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        gate.notified().await;
                        Ok((json!({"value": 1}), 1u32))
                    })
                    .await
            })
        };
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let joined = {
            let (engine, runs) = (engine.clone(), runs.clone());
            tokio::spawn(async move { call(&engine, meta("r-1", "d"), &runs, 2).await })
        };
        tokio::task::yield_now().await;
        release.notify_one();
        assert!(matches!(first.await.unwrap().unwrap(), Outcome::Ran(1)));
        assert!(matches!(joined.await.unwrap().unwrap(), Outcome::Stored(ref v) if *v == json!({"value": 1})));
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the work ran once");
        engine.shutdown().await;
    }

    #[tokio::test]
    async fn the_same_request_id_with_another_body_is_refused() {
        let (engine, _dir) = engine().await;
        let runs = Arc::new(AtomicUsize::new(0));
        call(&engine, meta("r-1", "d"), &runs, 7).await.unwrap();
        let reused = call(&engine, meta("r-1", "other"), &runs, 7).await.err().unwrap();
        assert_eq!(reused.reason, Reason::RequestIdReused);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        engine.shutdown().await;
    }

    #[tokio::test]
    async fn a_refusal_leaves_the_request_id_free_for_a_corrected_request() {
        let (engine, _dir) = engine().await;
        let refused = engine
            .idempotent(meta("r-1", "d"), "Test", KeyClaim::Before, |_| async {
                Err::<(Value, u32), _>(EngineError::invalid(Reason::InvalidArgument, "bad"))
            })
            .await
            .err()
            .unwrap();
        assert_eq!(refused.reason, Reason::InvalidArgument);
        let runs = Arc::new(AtomicUsize::new(0));
        let corrected = call(&engine, meta("r-1", "d"), &runs, 3).await.unwrap();
        assert!(matches!(corrected, Outcome::Ran(3)));
        engine.shutdown().await;
    }

    #[tokio::test]
    async fn a_call_without_a_request_id_is_refused_before_anything_runs() {
        let (engine, _dir) = engine().await;
        let runs = Arc::new(AtomicUsize::new(0));
        let refused = call(&engine, meta("", "d"), &runs, 1).await.err().unwrap();
        assert_eq!(refused.reason, Reason::RequestIdRequired);
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        engine.shutdown().await;
    }

    /// Work that claims its key in its first commit and completes it in its last, as an
    /// answer does, yielding `value`; refused with `refusal` before any commit, if given.
    async fn keyed_call(
        engine: &Engine,
        meta: RequestMeta,
        value: u32,
        refusal: Option<EngineError>,
    ) -> Result<Outcome<u32>, EngineError> {
        let store = engine.store.clone();
        engine
            .idempotent(meta, "Test", KeyClaim::InFirstCommit, move |key| async move {
                if let Some(refusal) = refusal {
                    return Err(refusal);
                }
                let stored = json!({"value": value});
                for writes in [
                    key.claim_write().into_iter().collect::<Vec<_>>(),
                    vec![key.completion_write(stored.clone())],
                ] {
                    let batch = cursor_runner_store::Batch {
                        writes: writes.clone(),
                        events: Vec::new(),
                    };
                    store.commit(&batch).await?;
                    key.landed(&writes);
                }
                Ok((stored, value))
            })
            .await
    }

    #[tokio::test]
    async fn work_that_claims_and_completes_its_key_in_its_own_commits_is_stored_for_a_retry() {
        let (engine, _dir) = engine().await;
        let ran = keyed_call(&engine, meta("r-1", "d"), 7, None).await.unwrap();
        assert!(matches!(ran, Outcome::Ran(7)));
        let runs = Arc::new(AtomicUsize::new(0));
        let retried = call(&engine, meta("r-1", "d"), &runs, 8).await.unwrap();
        assert!(matches!(retried, Outcome::Stored(ref v) if *v == json!({"value": 7})));
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        engine.shutdown().await;
    }

    #[tokio::test]
    async fn a_retry_refused_because_its_first_call_changed_things_gets_the_first_call_s_outcome() {
        let (engine, _dir) = engine().await;
        keyed_call(&engine, meta("r-1", "d"), 7, None).await.unwrap();
        let not_pending = EngineError::precondition(Reason::InteractionNotPending, "answered already");
        let retried = keyed_call(&engine, meta("r-1", "d"), 8, Some(not_pending))
            .await
            .unwrap();
        assert!(matches!(retried, Outcome::Stored(ref v) if *v == json!({"value": 7})));
        // The same request id with another body is refused as reused, whatever the work said.
        let other = EngineError::precondition(Reason::InteractionNotPending, "answered already");
        let reused = keyed_call(&engine, meta("r-1", "other"), 9, Some(other))
            .await
            .err()
            .unwrap();
        assert_eq!(reused.reason, Reason::RequestIdReused);
        engine.shutdown().await;
    }

    #[tokio::test]
    async fn a_refusal_before_the_first_commit_leaves_the_request_id_free() {
        let (engine, _dir) = engine().await;
        let invalid = EngineError::invalid(Reason::AnswerInvalid, "no such option");
        let refused = keyed_call(&engine, meta("r-1", "d"), 1, Some(invalid))
            .await
            .err()
            .unwrap();
        assert_eq!(refused.reason, Reason::AnswerInvalid);
        let corrected = keyed_call(&engine, meta("r-1", "d"), 2, None).await.unwrap();
        assert!(matches!(corrected, Outcome::Ran(2)));
        engine.shutdown().await;
    }

    #[tokio::test]
    async fn a_first_commit_finding_its_key_taken_by_another_request_is_refused_as_reused() {
        let (engine, _dir) = engine().await;
        let runs = Arc::new(AtomicUsize::new(0));
        call(&engine, meta("r-1", "d"), &runs, 7).await.unwrap();
        let reused = keyed_call(&engine, meta("r-1", "other"), 8, None).await.err().unwrap();
        assert_eq!(reused.reason, Reason::RequestIdReused);
        engine.shutdown().await;
    }
}
