//! Session checkpoints: stored behind the owner fence, read per tenant, and moved only
//! forward.

use std::sync::Arc;

use cursor_runner_store::*;

use crate::fixtures::*;

on_every_backend!(
    a_checkpoint_is_read_back_whole_by_its_tenant_only,
    a_later_checkpoint_of_the_execution_replaces_the_stored_one_and_an_earlier_one_does_not,
    a_checkpoint_of_a_later_execution_of_the_session_replaces_the_stored_one,
    a_checkpoint_of_a_superseded_generation_is_refused,
    executions_leasing_a_text_match_it_literally_across_tenants,
);

async fn executions_leasing_a_text_match_it_literally_across_tenants(store: Arc<dyn Store>) {
    let leased = |id: &str, tenant: &str, home: &str| ExecutionRecord {
        tenant_id: tenant.to_owned(),
        lease: Some(format!(r#"{{"slot_id":"s","home":"{home}"}}"#)),
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
    assert!(store.advance_generation(TENANT, "exec-1", 1).await.unwrap());
    assert!(!store.save_session_checkpoint(&checkpoint(&e, "s", 2)).await.unwrap());
    assert_eq!(read_turns(&*store).await, 1);
}

async fn read_turns(store: &dyn Store) -> i64 {
    store.session_checkpoint(TENANT, "s").await.unwrap().unwrap().turn_count
}
