//! `Engine::idempotent`'s behaviour, on the in-memory store.

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
