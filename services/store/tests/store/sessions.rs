//! Session checkpoints: stored behind the owner fence, read per tenant, and moved only
//! forward. The claim of a session's open: one at a time across the fleet.

use std::sync::Arc;
use std::time::Duration;

use cursor_runner_store::*;

use crate::backends::Scratch;
use crate::fixtures::*;

on_every_backend!(
    a_checkpoint_is_read_back_whole_by_its_tenant_only,
    a_later_checkpoint_of_the_execution_replaces_the_stored_one_and_an_earlier_one_does_not,
    a_checkpoint_of_a_later_execution_of_the_session_replaces_the_stored_one,
    a_checkpoint_of_a_superseded_generation_is_refused,
    executions_leasing_a_text_match_it_literally_across_tenants,
    a_session_open_claim_is_renewed_and_let_go_by_its_id_only,
);

/// Long enough that no test here waits it out.
const HOLD: Duration = Duration::from_secs(600);

async fn a_session_open_claim_is_renewed_and_let_go_by_its_id_only(store: Arc<dyn Store>) {
    store.register_replica("replica-a", None, terms()).await.unwrap();
    assert!(store.claim_session_open(TENANT, "s", "claim-1", HOLD).await.unwrap());
    assert!(store.renew_session_open(TENANT, "s", "claim-1", HOLD).await.unwrap());
    assert!(
        !store
            .renew_session_open(OTHER_TENANT, "s", "claim-1", HOLD)
            .await
            .unwrap(),
        "another tenant's session is not claimed"
    );
    store.release_session_open(TENANT, "s", "claim-2").await.unwrap();
    assert!(
        store.renew_session_open(TENANT, "s", "claim-1", HOLD).await.unwrap(),
        "letting go of a claim that is not held lets nothing go"
    );
    assert!(
        store.claim_session_open(TENANT, "s", "claim-3", HOLD).await.unwrap(),
        "this replica's own claim is a leftover: taken over"
    );
    assert!(
        !store.renew_session_open(TENANT, "s", "claim-1", HOLD).await.unwrap(),
        "a claim taken over is no longer held"
    );
    store.release_session_open(TENANT, "s", "claim-3").await.unwrap();
    assert!(!store.renew_session_open(TENANT, "s", "claim-3", HOLD).await.unwrap());
}

/// Two replicas opening one session: the second is refused while the first's claim is
/// live, and takes it once the first replica's lease is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_session_open_claimed_by_one_replica_is_refused_to_another_until_its_lease_ends() {
    let (scratch, url) = Scratch::postgres().await;
    let a = SqlStore::connect(&url).await.unwrap();
    a.register_replica("replica-a", None, terms()).await.unwrap();
    let b = SqlStore::connect(&url).await.unwrap();
    b.register_replica("replica-b", None, terms()).await.unwrap();
    assert!(a.claim_session_open(TENANT, "s", "claim-a", HOLD).await.unwrap());
    assert!(
        !b.claim_session_open(TENANT, "s", "claim-b", HOLD).await.unwrap(),
        "A opens it"
    );
    a.end_replica().await.unwrap();
    assert!(
        b.claim_session_open(TENANT, "s", "claim-b", HOLD).await.unwrap(),
        "A is gone"
    );
    a.release_session_open(TENANT, "s", "claim-a").await.unwrap();
    assert!(
        !a.claim_session_open(TENANT, "s", "claim-a2", HOLD).await.unwrap(),
        "B's claim stands"
    );
    drop((a, b));
    scratch.remove().await;
}

/// A claim whose hold passed without a renewal is free for another replica, though its
/// own replica still serves; one renewed in time is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_session_open_claim_lapses_when_its_hold_passes_unrenewed() {
    let (scratch, url) = Scratch::postgres().await;
    let a = SqlStore::connect(&url).await.unwrap();
    a.register_replica("replica-a", None, terms()).await.unwrap();
    let b = SqlStore::connect(&url).await.unwrap();
    b.register_replica("replica-b", None, terms()).await.unwrap();
    assert!(
        a.claim_session_open(TENANT, "s", "claim-a", Duration::ZERO)
            .await
            .unwrap()
    );
    assert!(a.renew_session_open(TENANT, "s", "claim-a", HOLD).await.unwrap());
    assert!(
        !b.claim_session_open(TENANT, "s", "claim-b", HOLD).await.unwrap(),
        "renewed in time"
    );
    assert!(
        a.renew_session_open(TENANT, "s", "claim-a", Duration::ZERO)
            .await
            .unwrap()
    );
    assert!(
        b.claim_session_open(TENANT, "s", "claim-b", HOLD).await.unwrap(),
        "its hold passed"
    );
    assert!(
        !a.renew_session_open(TENANT, "s", "claim-a", HOLD).await.unwrap(),
        "a lapsed claim taken over is not renewed back"
    );
    drop((a, b));
    scratch.remove().await;
}

async fn executions_leasing_a_text_match_it_literally_across_tenants(store: Arc<dyn Store>) {
    let leased = |id: &str, tenant: &str, home: &str| ExecutionRecord {
        tenant_id: tenant.to_owned(),
        lease: Some(LeaseInfo {
            slot_id: "s".into(),
            home: home.into(),
            ..Default::default()
        }),
        ..execution(id)
    };
    for e in [
        leased("e1", TENANT, "/state/homes/slot_1%"),
        leased("e2", OTHER_TENANT, "/state/homes/slot_1%"),
        leased("e3", TENANT, "/state/homes/slotX1%"),
        leased("e4", TENANT, "/state/homes/slot_12"),
    ] {
        store.insert_execution(&e).await.unwrap();
    }
    let found = store.executions_leasing("homes/slot_1%\"", 10).await.unwrap();
    assert_eq!(ids(&found), ["e1", "e2"], "`_` and `%` are themselves, not wildcards");
    assert_eq!(
        store.executions_leasing("homes/", 1).await.unwrap().len(),
        1,
        "at most the limit"
    );
}

async fn a_checkpoint_is_read_back_whole_by_its_tenant_only(store: Arc<dyn Store>) {
    let e = execution("exec-1");
    store.insert_execution(&e).await.unwrap();
    let mut c = checkpoint(&e, "session-1", 1);
    c.body = (0..=255u8).cycle().take(70_000).collect();
    assert!(store.save_session_checkpoint(&c).await.unwrap());
    assert_eq!(store.session_checkpoint(TENANT, "session-1").await.unwrap(), Some(c));
    assert_eq!(store.session_checkpoint(OTHER_TENANT, "session-1").await.unwrap(), None);
    assert_eq!(store.session_checkpoint(TENANT, "session-2").await.unwrap(), None);
}

async fn a_later_checkpoint_of_the_execution_replaces_the_stored_one_and_an_earlier_one_does_not(
    store: Arc<dyn Store>,
) {
    let e = execution("exec-1");
    store.insert_execution(&e).await.unwrap();
    assert!(store.save_session_checkpoint(&checkpoint(&e, "s", 2)).await.unwrap());
    assert!(!store.save_session_checkpoint(&checkpoint(&e, "s", 1)).await.unwrap());
    assert_eq!(read_turns(&*store).await, 2);
    // The same turn count again (the checkpoint taken at close): the newer state wins.
    let mut at_close = checkpoint(&e, "s", 2);
    at_close.body = b"closed".to_vec();
    assert!(store.save_session_checkpoint(&at_close).await.unwrap());
    assert!(store.save_session_checkpoint(&checkpoint(&e, "s", 3)).await.unwrap());
    assert_eq!(read_turns(&*store).await, 3);
}

async fn a_checkpoint_of_a_later_execution_of_the_session_replaces_the_stored_one(store: Arc<dyn Store>) {
    let first = execution("exec-1");
    let loaded = execution("exec-2");
    store.insert_execution(&first).await.unwrap();
    store.insert_execution(&loaded).await.unwrap();
    assert!(
        store
            .save_session_checkpoint(&checkpoint(&first, "s", 5))
            .await
            .unwrap()
    );
    assert!(
        store
            .save_session_checkpoint(&checkpoint(&loaded, "s", 0))
            .await
            .unwrap()
    );
    let stored = store.session_checkpoint(TENANT, "s").await.unwrap().unwrap();
    assert_eq!((stored.execution_id.as_str(), stored.turn_count), ("exec-2", 0));
}

async fn a_checkpoint_of_a_superseded_generation_is_refused(store: Arc<dyn Store>) {
    let e = execution("exec-1");
    store.insert_execution(&e).await.unwrap();
    assert!(store.save_session_checkpoint(&checkpoint(&e, "s", 1)).await.unwrap());
    assert!(
        store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap()
    );
    assert!(!store.save_session_checkpoint(&checkpoint(&e, "s", 2)).await.unwrap());
    assert_eq!(read_turns(&*store).await, 1);
}

async fn read_turns(store: &dyn Store) -> i64 {
    store.session_checkpoint(TENANT, "s").await.unwrap().unwrap().turn_count
}
