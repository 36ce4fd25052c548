//! The event outbox: fenced all-or-nothing appends, paged reads, head and oldest,
//! retention's prune and the cumulative acknowledgement.

use std::sync::Arc;

use cursor_runner_store::*;

use crate::fixtures::*;

on_every_backend!(
    appended_events_read_back_contiguous_in_pages,
    an_execution_without_events_has_head_zero_and_no_oldest,
    a_duplicate_sequence_refuses_its_whole_batch,
    an_event_id_is_used_once,
    an_append_from_a_superseded_generation_is_fenced,
    an_append_mixing_generations_is_refused,
    prune_deletes_the_oldest_old_enough_events_through_a_sequence_in_batches,
    the_acked_sequence_only_moves_forward,
);

async fn appended_events_read_back_contiguous_in_pages(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.insert_execution(&execution("exec-2")).await.unwrap();
    store.append_events(&[]).await.unwrap();
    store.append_events(&events("exec-1", 1, 1..=3)).await.unwrap();
    store.append_events(&events("exec-2", 1, 1..=2)).await.unwrap();
    store.append_events(&events("exec-1", 1, 4..=6)).await.unwrap();
    let page = store.read_events(&"exec-1".into(), 0, 4).await.unwrap();
    assert_eq!(page, events("exec-1", 1, 1..=4), "rows read back as written");
    assert_eq!(
        sequences(&store.read_events(&"exec-1".into(), 4, 4).await.unwrap()),
        [5, 6]
    );
    assert!(store.read_events(&"exec-1".into(), 6, 4).await.unwrap().is_empty());
    assert_eq!(store.head_sequence(&"exec-1".into()).await.unwrap(), 6);
    assert_eq!(store.oldest_sequence(&"exec-1".into()).await.unwrap(), Some(1));
    assert_eq!(store.head_sequence(&"exec-2".into()).await.unwrap(), 2);
}

async fn an_execution_without_events_has_head_zero_and_no_oldest(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    assert_eq!(store.head_sequence(&"exec-1".into()).await.unwrap(), 0);
    assert_eq!(store.oldest_sequence(&"exec-1".into()).await.unwrap(), None);
    assert!(store.read_events(&"exec-1".into(), 0, 10).await.unwrap().is_empty());
}

async fn a_duplicate_sequence_refuses_its_whole_batch(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.append_events(&events("exec-1", 1, 1..=2)).await.unwrap();
    let mut overlapping = events("exec-1", 1, 2..=4);
    overlapping[0].event_id = "fresh-id".into();
    assert!(matches!(
        store.append_events(&overlapping).await,
        Err(StoreError::Duplicate)
    ));
    let twice = [event("exec-1", 1, 5), event("exec-1", 1, 5)];
    assert!(matches!(store.append_events(&twice).await, Err(StoreError::Duplicate)));
    assert_eq!(
        store.head_sequence(&"exec-1".into()).await.unwrap(),
        2,
        "nothing of either batch"
    );
}

async fn an_event_id_is_used_once(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.insert_execution(&execution("exec-2")).await.unwrap();
    store.append_events(&events("exec-1", 1, 1..=1)).await.unwrap();
    let mut reused = event("exec-2", 1, 1);
    reused.event_id = event("exec-1", 1, 1).event_id;
    assert!(matches!(
        store.append_events(&[reused]).await,
        Err(StoreError::Duplicate)
    ));
    assert_eq!(store.head_sequence(&"exec-2".into()).await.unwrap(), 0);
}

async fn an_append_from_a_superseded_generation_is_fenced(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.append_events(&events("exec-1", 1, 1..=2)).await.unwrap();
    assert!(
        store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap()
    );
    assert!(matches!(
        store.append_events(&events("exec-1", 1, 3..=4)).await,
        Err(StoreError::Fenced)
    ));
    store.append_events(&events("exec-1", 2, 3..=4)).await.unwrap();
    assert!(matches!(
        store.append_events(&events("no-such", 1, 1..=1)).await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(store.head_sequence(&"exec-1".into()).await.unwrap(), 4);
}

async fn an_append_mixing_generations_is_refused(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.insert_execution(&execution("exec-2")).await.unwrap();
    let generations = [event("exec-1", 1, 1), event("exec-1", 2, 2)];
    assert!(matches!(
        store.append_events(&generations).await,
        Err(StoreError::Database(_))
    ));
    let executions = [event("exec-1", 1, 1), event("exec-2", 1, 2)];
    assert!(matches!(
        store.append_events(&executions).await,
        Err(StoreError::Database(_))
    ));
    assert_eq!(store.head_sequence(&"exec-1".into()).await.unwrap(), 0);
}

async fn prune_deletes_the_oldest_old_enough_events_through_a_sequence_in_batches(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.insert_execution(&execution("exec-2")).await.unwrap();
    store.append_events(&events("exec-1", 1, 1..=8)).await.unwrap();
    store.append_events(&events("exec-2", 1, 1..=2)).await.unwrap();
    // Event n was emitted at T0 + n: those before T0 + 7 are 1..=6; through 5; two at a time.
    assert_eq!(store.prune_events(&"exec-1".into(), 5, T0 + 7, 2).await.unwrap(), 2);
    assert_eq!(store.oldest_sequence(&"exec-1".into()).await.unwrap(), Some(3));
    assert_eq!(store.prune_events(&"exec-1".into(), 5, T0 + 7, 10).await.unwrap(), 3);
    assert_eq!(store.oldest_sequence(&"exec-1".into()).await.unwrap(), Some(6));
    assert_eq!(
        store.prune_events(&"exec-1".into(), 8, T0 + 7, 10).await.unwrap(),
        1,
        "7 is too new"
    );
    assert_eq!(
        sequences(&store.read_events(&"exec-1".into(), 0, 10).await.unwrap()),
        [7, 8]
    );
    assert_eq!(store.head_sequence(&"exec-1".into()).await.unwrap(), 8);
    assert_eq!(
        store.oldest_sequence(&"exec-2".into()).await.unwrap(),
        Some(1),
        "another execution's stay"
    );
    // A pruned event's id may be used again.
    store.append_events(&events("exec-1", 1, 1..=1)).await.unwrap();
}

async fn the_acked_sequence_only_moves_forward(store: Arc<dyn Store>) {
    for id in ["exec-1", "exec-2", "exec-3"] {
        store.insert_execution(&execution(id)).await.unwrap();
    }
    store.set_acked_sequence(TENANT, &"exec-1".into(), 5).await.unwrap();
    store.set_acked_sequence(TENANT, &"exec-1".into(), 3).await.unwrap();
    store
        .set_acked_sequence(OTHER_TENANT, &"exec-3".into(), 9)
        .await
        .unwrap();
    store.set_acked_sequence(TENANT, &"exec-3".into(), 2).await.unwrap();
    store.set_acked_sequence(TENANT, &"no-such".into(), 2).await.unwrap();
    let acked = store.acknowledged_executions(None, 10).await.unwrap();
    assert_eq!(acked, [("exec-1".into(), 5), ("exec-3".into(), 2)]);
    let after = store.acknowledged_executions(Some("exec-1"), 1).await.unwrap();
    assert_eq!(after, [("exec-3".into(), 2)]);
    assert_eq!(store.acknowledged_executions(None, 1).await.unwrap().len(), 1);
}
