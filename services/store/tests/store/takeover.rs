//! What a surviving replica takes over (`docs/scale-out.md` stage 3): the incarnations
//! whose lease ended on the database's clock, never a live one, and never one whose name a
//! live process serves (that restart settles its predecessor itself); the claim of each
//! execution has exactly one winner; a dead replica's calls in flight end once, and its own
//! late completion cannot overwrite that ending.

use std::sync::Arc;

use cursor_runner_store::*;
use serde_json::json;
use sqlx::Connection;

use crate::backends::Scratch;
use crate::fence::end_lease_in_database;
use crate::fixtures::*;

fn key(request_id: &str) -> IdempotencyKey {
    IdempotencyKey {
        tenant_id: TENANT.into(),
        operation: "StartTurn".into(),
        request_id: request_id.into(),
    }
}

/// A replica `name` registered on `url`.
async fn replica(url: &str, name: &str) -> (SqlStore, Registration) {
    let store = SqlStore::connect(url).await.unwrap();
    let registration = store.register_replica(name, None, terms()).await.unwrap();
    (store, registration)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_replica_is_abandoned_once_its_lease_ended_and_only_while_it_owns_live_work() {
    let (scratch, url) = Scratch::postgres().await;
    let (a, a_me) = replica(&url, "replica-a").await;
    let (e, _) = execution_with_turn(&a, "e").await;
    let (b, _) = replica(&url, "replica-b").await;
    assert_eq!(
        b.abandoned_incarnations().await.unwrap(),
        Vec::<String>::new(),
        "a live lease"
    );

    end_lease_in_database(&url, &a_me.incarnation).await;
    assert_eq!(
        b.abandoned_incarnations().await.unwrap(),
        vec![a_me.incarnation.clone()]
    );
    assert!(b.claim_execution(&e.id, e.generation, &a_me.incarnation).await.unwrap());
    assert_eq!(
        b.abandoned_incarnations().await.unwrap(),
        Vec::<String>::new(),
        "nothing live is left to it"
    );
    drop((a, b));
    scratch.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_dead_replica_whose_name_a_live_process_serves_is_left_to_that_process() {
    let (scratch, url) = Scratch::postgres().await;
    let (a, a_me) = replica(&url, "replica-a").await;
    execution_with_turn(&a, "e").await;
    let (b, _) = replica(&url, "replica-b").await;
    // The pod restarted in place: its session (and name lock) died, its successor is up.
    drop(a);
    end_lease_in_database(&url, &a_me.incarnation).await;
    let (successor, registration) = replica(&url, "replica-a").await;
    assert!(registration.predecessors.contains(&a_me.incarnation));
    assert_eq!(
        b.abandoned_incarnations().await.unwrap(),
        Vec::<String>::new(),
        "the successor settles its predecessor at once; nobody else does"
    );
    end_lease_in_database(&url, &registration.incarnation).await;
    assert_eq!(
        b.abandoned_incarnations().await.unwrap(),
        vec![a_me.incarnation.clone()],
        "once the name is served by nobody alive, its executions are anybody's"
    );
    drop((b, successor));
    scratch.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_of_eight_survivors_racing_to_claim_an_execution_exactly_one_wins() {
    let (scratch, url) = Scratch::postgres().await;
    let (a, a_me) = replica(&url, "replica-a").await;
    let (e, _) = execution_with_turn(&a, "e").await;
    let mut survivors = Vec::new();
    for n in 0..8 {
        survivors.push(Arc::new(replica(&url, &format!("survivor-{n}")).await.0));
    }
    end_lease_in_database(&url, &a_me.incarnation).await;
    let mut claims = tokio::task::JoinSet::new();
    for survivor in &survivors {
        let (survivor, id, dead) = (survivor.clone(), e.id.clone(), a_me.incarnation.clone());
        claims.spawn(async move { survivor.claim_execution(&id, Generation::new(1), &dead).await.unwrap() });
    }
    let won = claims.join_all().await.into_iter().filter(|claimed| *claimed).count();
    assert_eq!(won, 1);
    drop((a, survivors));
    scratch.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_dead_replicas_call_in_flight_ends_once_and_its_late_completion_does_not_overwrite_it() {
    let (scratch, url) = Scratch::postgres().await;
    let (a, a_me) = replica(&url, "replica-a").await;
    assert!(matches!(
        a.claim_idempotency(&key("r1"), "digest", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::Claimed
    ));
    let (b, _) = replica(&url, "replica-b").await;
    let interrupted = json!({"error": "interrupted"});
    assert_eq!(
        b.complete_abandoned_idempotency(&a_me.incarnation, &interrupted)
            .await
            .unwrap(),
        0,
        "a live replica's calls are still running"
    );

    end_lease_in_database(&url, &a_me.incarnation).await;
    assert_eq!(
        b.abandoned_incarnations().await.unwrap(),
        vec![a_me.incarnation.clone()]
    );
    assert_eq!(
        b.complete_abandoned_idempotency(&a_me.incarnation, &interrupted)
            .await
            .unwrap(),
        1
    );
    assert!(
        !a.complete_idempotency(&key("r1"), &json!({"ok": "late"}))
            .await
            .unwrap(),
        "the late completion says it completed nothing"
    );
    assert!(matches!(
        b.claim_idempotency(&key("r1"), "digest", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::Completed(response) if response == interrupted
    ));
    assert_eq!(b.abandoned_incarnations().await.unwrap(), Vec::<String>::new());
    drop((a, b));
    scratch.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_claim_held_up_by_a_lock_gives_up_and_the_next_claim_goes_ahead() {
    let (scratch, url) = Scratch::postgres().await;
    let (a, a_me) = replica(&url, "replica-a").await;
    let (held, _) = execution_with_turn(&a, "held").await;
    let (free, _) = execution_with_turn(&a, "free").await;
    let (b, _) = replica(&url, "replica-b").await;
    end_lease_in_database(&url, &a_me.incarnation).await;
    // Something keeps one execution's row locked (not a store session: nothing ends it).
    let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM executions WHERE id = 'held' FOR UPDATE")
        .execute(&mut holder)
        .await
        .unwrap();

    let started = std::time::Instant::now();
    assert!(
        !b.claim_execution(&held.id, Generation::new(1), &a_me.incarnation)
            .await
            .unwrap(),
        "busy: left for the next scan"
    );
    assert!(started.elapsed() < CLAIM_LOCK_WAIT * 3, "{:?}", started.elapsed());
    assert!(
        b.claim_execution(&free.id, Generation::new(1), &a_me.incarnation)
            .await
            .unwrap()
    );
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    assert!(
        b.claim_execution(&held.id, Generation::new(1), &a_me.incarnation)
            .await
            .unwrap(),
        "claimed once the lock is gone"
    );
    drop((a, b));
    scratch.remove().await;
}
