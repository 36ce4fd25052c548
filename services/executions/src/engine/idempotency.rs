//! Idempotent calls: one outcome per `request_id`, a retry waiting for the first call's
//! outcome, transient failures releasing the key.

use std::future::Future;

use cursor_runner_store::{ExecutionRecord, IdempotencyClaim, IdempotencyKey, Patience, TurnRecord};

use serde_json::Value;
use tokio::sync::{oneshot, watch};

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};

use super::data::*;

impl Engine {
    /// Runs `run` once per (tenant, operation, request_id). A retry with the same body
    /// while the first call runs joins it; after it, gets its stored result; with
    /// another body, is refused. The work runs in its own task, so a client that
    /// disconnects cannot abandon it half-done.
    pub(super) async fn idempotent<T, F, Fut>(
        &self,
        meta: RequestMeta,
        operation: &str,
        run: F,
    ) -> Result<Outcome<T>, EngineError>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
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
        let reused = || {
            EngineError::new(
                ErrorKind::Aborted,
                Reason::RequestIdReused,
                "request_id was used with another request",
            )
        };
        // The call that runs the work hands its caller the fresh result; a retry that
        // joins it, or comes after it, gets the stored one.
        let (fresh_tx, fresh_rx) = oneshot::channel::<T>();
        let joined = {
            let mut in_flight = self.in_flight.lock();
            match in_flight.get(&key) {
                Some((digest, _)) if *digest != meta.request_digest => return Err(reused()),
                Some((_, rx)) => Some(rx.clone()),
                None => {
                    let (tx, rx) = watch::channel(None);
                    in_flight.insert(key.clone(), (meta.request_digest.clone(), rx));
                    drop(in_flight);
                    let store = self.store.clone();
                    // The outcome must be recorded, or the key would answer "in flight"
                    // until the next start: it waits for the store if need be.
                    let recorder = self.store.with_patience(Patience::UntilBack);
                    let digest = meta.request_digest.clone();
                    let owner_key = key.clone();
                    tokio::spawn(tracing::Instrument::in_current_span(async move {
                        let result = match store.claim_idempotency(&owner_key, &digest).await {
                            Err(e) => Err(e.into()),
                            Ok(IdempotencyClaim::Completed(stored)) => {
                                EngineError::from_json(&stored).map_or(Ok(stored), Err)
                            }
                            Ok(IdempotencyClaim::DigestMismatch) => Err(reused()),
                            Ok(IdempotencyClaim::InFlight) => Err(EngineError::new(
                                ErrorKind::Aborted,
                                Reason::RequestInFlight,
                                "a call with this request_id is in flight elsewhere; retry later",
                            )),
                            Ok(IdempotencyClaim::Claimed) => {
                                let result = run().await.map(|(stored, fresh)| {
                                    let _ = fresh_tx.send(fresh);
                                    stored
                                });
                                let recorded = match &result {
                                    Ok(value) => recorder.complete_idempotency(&owner_key, value).await,
                                    // A refusal changed nothing: the key stays free, so the
                                    // caller may fix the request and send it again. A store
                                    // outage is no outcome either: the same call may be
                                    // retried (each write it made is its own to find again).
                                    Err(e) if e.is_refusal() || e.is_transient() => {
                                        recorder.release_idempotency(&owner_key).await
                                    }
                                    Err(e) => recorder.complete_idempotency(&owner_key, &e.to_json()).await,
                                };
                                match recorded {
                                    Ok(()) => result,
                                    Err(e) => Err(e.into()),
                                }
                            }
                        };
                        tx.send_replace(Some(result));
                    }));
                    None
                }
            }
        };
        let ran_here = joined.is_none();
        let mut rx = match joined {
            Some(rx) => rx,
            None => self
                .in_flight
                .lock()
                .get(&key)
                .map(|(_, rx)| rx.clone())
                .ok_or_else(|| EngineError::internal("lost an in-flight call"))?,
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
        self.in_flight.lock().remove(&key);
        let stored = result?;
        if !ran_here {
            return Ok(Outcome::Stored(stored));
        }
        Ok(match fresh_rx.await {
            Ok(fresh) => Outcome::Ran(fresh),
            // The key held a completed outcome already: this call ran nothing.
            Err(_) => Outcome::Stored(stored),
        })
    }

    /// The execution an idempotent call resulted in: as the call returned it, or, for a
    /// retry, read back by the id it stored (tenant-scoped: stored results name
    /// resources of the caller's own tenant).
    pub(super) async fn execution_from_result(
        &self,
        tenant_id: &str,
        outcome: Outcome<ExecutionRecord>,
    ) -> Result<ExecutionRecord, EngineError> {
        let result = match outcome {
            Outcome::Ran(record) => return Ok(record),
            Outcome::Stored(result) => result,
        };
        let id = result["executionId"]
            .as_str()
            .ok_or_else(|| EngineError::internal("malformed stored result"))?;
        self.get_execution(tenant_id, id).await
    }

    /// The turn an idempotent call resulted in (see [`Self::execution_from_result`]).
    pub(super) async fn turn_from_result(
        &self,
        tenant_id: &str,
        outcome: Outcome<TurnRecord>,
    ) -> Result<TurnRecord, EngineError> {
        let result = match outcome {
            Outcome::Ran(record) => return Ok(record),
            Outcome::Stored(result) => result,
        };
        let id = result["turnId"]
            .as_str()
            .ok_or_else(|| EngineError::internal("malformed stored result"))?;
        self.store
            .get_turn(tenant_id, id)
            .await?
            .ok_or_else(|| EngineError::not_found(Reason::TurnNotFound, format!("turn `{id}` not found")))
    }
}

/// What an idempotent call gives its caller.
pub(super) enum Outcome<T> {
    /// This call ran the work: its result as the work returned it.
    Ran(T),
    /// The stored result of the call that ran it (this one joined or retried it).
    Stored(Value),
}
