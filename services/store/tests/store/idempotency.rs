//! Idempotency keys: claim, complete with a stored outcome, release, abandonment, prune.

use std::sync::Arc;

use cursor_runner_store::*;
use serde_json::json;

use crate::fixtures::*;

on_every_backend!(
    a_new_key_is_claimed_and_while_it_runs_is_in_flight,
    a_completed_key_answers_with_its_stored_outcome,
    a_key_reused_with_another_request_is_a_digest_mismatch,
    release_frees_a_call_s_own_claim_in_flight_never_another_s_or_a_completed_one,
    abandoned_claims_complete_with_the_given_outcome,
    prune_deletes_old_completed_keys_never_one_in_flight,
    a_claim_racing_the_prune_of_its_completed_key_is_never_told_in_flight,
    a_request_id_claimed_by_another_operation_is_a_digest_mismatch,
    finding_a_key_says_what_a_claim_would_find_and_claims_nothing,
);

/// Keys completed and then pruned while a retry claims them, one after another.
const PRUNE_RACES: usize = 300;

fn key(request_id: &str) -> IdempotencyKey {
    IdempotencyKey {
        tenant_id: TENANT.into(),
        operation: "CreateExecution".into(),
        request_id: request_id.into(),
    }
}

/// What claiming `request` of [`key`] with `digest` finds.
async fn claim(store: &dyn Store, request: &str, digest: &str) -> IdempotencyClaim {
    store
        .claim_idempotency(&key(request), digest, &ClaimToken::new())
        .await
        .unwrap()
}

async fn a_new_key_is_claimed_and_while_it_runs_is_in_flight(store: Arc<dyn Store>) {
    assert_eq!(claim(&*store, "r1", "d1").await, IdempotencyClaim::Claimed);
    assert_eq!(claim(&*store, "r1", "d1").await, IdempotencyClaim::InFlight);
    // The key is the tenant's and the request id's together.
    for k in [
        IdempotencyKey {
            tenant_id: OTHER_TENANT.into(),
            ..key("r1")
        },
        key("r2"),
    ] {
        assert_eq!(
            store.claim_idempotency(&k, "d1", &ClaimToken::new()).await.unwrap(),
            IdempotencyClaim::Claimed
        );
    }
}

/// A request id names one call of a tenant, whatever its operation: claimed by another
/// operation (running or done, with the same digest or not) it is another request.
async fn a_request_id_claimed_by_another_operation_is_a_digest_mismatch(store: Arc<dyn Store>) {
    let start_turn = IdempotencyKey {
        operation: "StartTurn".into(),
        ..key("r1")
    };
    claim(&*store, "r1", "d1").await;
    assert_eq!(
        store
            .claim_idempotency(&start_turn, "d1", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::DigestMismatch { held: "d1".into() }
    );
    store.complete_idempotency(&key("r1"), &json!({"n": 1})).await.unwrap();
    assert_eq!(
        store
            .claim_idempotency(&start_turn, "d1", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::DigestMismatch { held: "d1".into() }
    );
    assert_eq!(
        claim(&*store, "r1", "d1").await,
        IdempotencyClaim::Completed(json!({"n": 1}))
    );
}

async fn a_completed_key_answers_with_its_stored_outcome(store: Arc<dyn Store>) {
    let outcome = json!({"executionId": "exec-1", "state": "ready", "n": [1, 2]});
    claim(&*store, "r1", "d1").await;
    store.complete_idempotency(&key("r1"), &outcome).await.unwrap();
    assert_eq!(claim(&*store, "r1", "d1").await, IdempotencyClaim::Completed(outcome));
}

/// The mismatch names the digest the key holds, so the caller can tell what it collided with.
async fn a_key_reused_with_another_request_is_a_digest_mismatch(store: Arc<dyn Store>) {
    claim(&*store, "r1", "d1").await;
    assert_eq!(
        claim(&*store, "r1", "d2").await,
        IdempotencyClaim::DigestMismatch { held: "d1".into() }
    );
    store.complete_idempotency(&key("r1"), &json!(1)).await.unwrap();
    assert_eq!(
        claim(&*store, "r1", "d2").await,
        IdempotencyClaim::DigestMismatch { held: "d1".into() }
    );
}

async fn release_frees_a_call_s_own_claim_in_flight_never_another_s_or_a_completed_one(store: Arc<dyn Store>) {
    let first = ClaimToken::new();
    store.claim_idempotency(&key("r1"), "d1", &first).await.unwrap();
    store.release_idempotency(&key("r1"), &ClaimToken::new()).await.unwrap();
    assert_eq!(
        claim(&*store, "r1", "d1").await,
        IdempotencyClaim::InFlight,
        "another call's release leaves it"
    );
    store.release_idempotency(&key("r1"), &first).await.unwrap();
    let second = ClaimToken::new();
    assert_eq!(
        store.claim_idempotency(&key("r1"), "d2", &second).await.unwrap(),
        IdempotencyClaim::Claimed
    );
    store.complete_idempotency(&key("r1"), &json!("done")).await.unwrap();
    store.release_idempotency(&key("r1"), &second).await.unwrap();
    assert_eq!(
        claim(&*store, "r1", "d2").await,
        IdempotencyClaim::Completed(json!("done"))
    );
    store
        .release_idempotency(&key("never-claimed"), &ClaimToken::new())
        .await
        .unwrap();
}

async fn abandoned_claims_complete_with_the_given_outcome(store: Arc<dyn Store>) {
    for request in ["r1", "r2", "r3"] {
        claim(&*store, request, "d").await;
    }
    store.complete_idempotency(&key("r2"), &json!("ok")).await.unwrap();
    let abandoned = json!({"error": "UNAVAILABLE"});
    assert_eq!(
        store
            .complete_abandoned_idempotency(LEGACY_INCARNATION, &abandoned)
            .await
            .unwrap(),
        2
    );
    for (request, outcome) in [("r1", &abandoned), ("r2", &json!("ok")), ("r3", &abandoned)] {
        assert_eq!(
            claim(&*store, request, "d").await,
            IdempotencyClaim::Completed(outcome.clone())
        );
    }
    assert_eq!(
        store
            .complete_abandoned_idempotency(LEGACY_INCARNATION, &abandoned)
            .await
            .unwrap(),
        0
    );
}

async fn prune_deletes_old_completed_keys_never_one_in_flight(store: Arc<dyn Store>) {
    for request in ["r1", "r2", "r3", "running"] {
        claim(&*store, request, "d").await;
    }
    for request in ["r1", "r2", "r3"] {
        store
            .complete_idempotency(&key(request), &json!(request))
            .await
            .unwrap();
    }
    // Claims are stamped with the store's clock: none is older than a minute ago.
    assert_eq!(store.prune_idempotency(now_ms() - 60_000, 10).await.unwrap(), 0);
    let later = now_ms() + 60_000;
    assert_eq!(store.prune_idempotency(later, 2).await.unwrap(), 2);
    assert_eq!(store.prune_idempotency(later, 2).await.unwrap(), 1);
    assert_eq!(store.prune_idempotency(later, 2).await.unwrap(), 0);
    assert_eq!(claim(&*store, "running", "d").await, IdempotencyClaim::InFlight);
    assert_eq!(claim(&*store, "r1", "d").await, IdempotencyClaim::Claimed);
}

/// A retry that arrives as the retention sweep deletes its completed key either finds the
/// stored outcome or claims the key anew: nobody holds it, so "in flight" would make a
/// client back off from a call that nothing is running.
async fn a_claim_racing_the_prune_of_its_completed_key_is_never_told_in_flight(store: Arc<dyn Store>) {
    for n in 0..PRUNE_RACES {
        let request = format!("r{n}");
        claim(&*store, &request, "d").await;
        store
            .complete_idempotency(&key(&request), &json!({"n": n}))
            .await
            .unwrap();
        let (retried, token) = (key(&request), ClaimToken::new());
        let (claimed, pruned) = tokio::join!(
            store.claim_idempotency(&retried, "d", &token),
            store.prune_idempotency(i64::MAX, 1_000),
        );
        pruned.unwrap();
        let claimed = claimed.unwrap();
        assert_ne!(claimed, IdempotencyClaim::InFlight, "race {n}");
    }
}

async fn finding_a_key_says_what_a_claim_would_find_and_claims_nothing(store: Arc<dyn Store>) {
    let find = |request: &'static str, digest: &'static str| {
        let store = store.clone();
        async move { store.find_idempotency(&key(request), digest).await.unwrap() }
    };
    assert_eq!(find("r1", "d1").await, None);
    assert_eq!(
        claim(&*store, "r1", "d1").await,
        IdempotencyClaim::Claimed,
        "still free"
    );
    assert_eq!(find("r1", "d1").await, Some(IdempotencyClaim::InFlight));
    assert_eq!(
        find("r1", "other").await,
        Some(IdempotencyClaim::DigestMismatch { held: "d1".into() })
    );
    store
        .complete_idempotency(&key("r1"), &json!({"executionId": "e"}))
        .await
        .unwrap();
    assert_eq!(
        find("r1", "d1").await,
        Some(IdempotencyClaim::Completed(json!({"executionId": "e"})))
    );
    let other_rpc = IdempotencyKey {
        operation: "StartTurn".into(),
        ..key("r1")
    };
    assert_eq!(
        store.find_idempotency(&other_rpc, "d1").await.unwrap(),
        Some(IdempotencyClaim::DigestMismatch { held: "d1".into() })
    );
}
