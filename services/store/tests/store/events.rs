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
    appends_of_many_executions_at_once_land_each_behind_its_own_fence,
    a_duplicate_among_appends_made_at_once_refuses_only_its_own,
);

/// Appends of `executions` executions (`exec-0` …), three events each, made at once.
async fn appends_at_once(store: &Arc<dyn Store>, executions: usize) -> Vec<StoreResult<()>> {
    appends_sized_at_once(store, &vec![3; executions]).await
}

/// One append per entry of `sizes`, of execution `exec-N` (N its place) with that many
/// events, made at once: spawned in this order, each runs until it waits before the next
/// starts on a single-threaded runtime.
async fn appends_sized_at_once(store: &Arc<dyn Store>, sizes: &[i64]) -> Vec<StoreResult<()>> {
    let mut appends = tokio::task::JoinSet::new();
    for (n, size) in sizes.iter().copied().enumerate() {
        let store = store.clone();
        let events = events(&format!("exec-{n}"), 1, 1..=size);
        appends.spawn(async move { (n, store.append_events(events.into()).await) });
    }
    let mut outcomes: Vec<_> = appends.join_all().await;
    outcomes.sort_by_key(|(n, _)| *n);
    outcomes.into_iter().map(|(_, outcome)| outcome).collect()
}

async fn heads(store: &Arc<dyn Store>, executions: usize) -> Vec<i64> {
    let mut heads = Vec::new();
    for n in 0..executions {
        heads.push(store.head_sequence(&format!("exec-{n}").into()).await.unwrap());
    }
    heads
}

/// On PostgreSQL they go in one statement (`postgres_appends_made_at_once_go_in_one_statement`):
/// a fence that holds for one execution must not be taken for another's.
async fn appends_of_many_executions_at_once_land_each_behind_its_own_fence(store: Arc<dyn Store>) {
    for n in 0..8 {
        store.insert_execution(&execution(&format!("exec-{n}"))).await.unwrap();
    }
    for superseded in ["exec-2", "exec-5"] {
        assert!(
            store
                .advance_generation(TENANT, &superseded.into(), Generation::new(1))
                .await
                .unwrap()
        );
    }
    let outcomes = appends_at_once(&store, 8).await;
    for (n, outcome) in outcomes.iter().enumerate() {
        match n {
            2 | 5 => assert!(matches!(outcome, Err(StoreError::Fenced)), "exec-{n}: {outcome:?}"),
            _ => assert!(outcome.is_ok(), "exec-{n}: {outcome:?}"),
        }
    }
    assert_eq!(heads(&store, 8).await, [3, 3, 0, 3, 3, 0, 3, 3]);
    assert_eq!(
        store.read_events(&"exec-7".into(), 0, 10).await.unwrap(),
        events("exec-7", 1, 1..=3),
        "each execution's rows as written"
    );
}

/// On PostgreSQL the duplicate fails the statement they share; each is then made alone.
async fn a_duplicate_among_appends_made_at_once_refuses_only_its_own(store: Arc<dyn Store>) {
    for n in 0..8 {
        store.insert_execution(&execution(&format!("exec-{n}"))).await.unwrap();
    }
    let mut taken = event("exec-3", 1, 2);
    taken.event_id = "taken-before".into();
    store.append_events(vec![taken].into()).await.unwrap();
    let outcomes = appends_at_once(&store, 8).await;
    for (n, outcome) in outcomes.iter().enumerate() {
        match n {
            3 => assert!(matches!(outcome, Err(StoreError::Duplicate)), "exec-{n}: {outcome:?}"),
            _ => assert!(outcome.is_ok(), "exec-{n}: {outcome:?}"),
        }
    }
    assert_eq!(heads(&store, 8).await, [3, 3, 3, 2, 3, 3, 3, 3]);
}

/// Made on one thread, the first appends each take a free slot and commit alone; those
/// made while every slot is taken wait and go in one statement when the first slot frees.
#[tokio::test(flavor = "current_thread")]
async fn postgres_appends_made_while_every_group_slot_is_taken_go_in_one_statement() {
    crate::backends::run(crate::backends::Backend::Postgres, |store: Arc<dyn Store>| async move {
        for n in 0..16 {
            store.insert_execution(&execution(&format!("exec-{n}"))).await.unwrap();
        }
        let seen = Arc::new(Seen::default());
        store.observe_with(seen.clone());
        assert!(appends_at_once(&store, 16).await.iter().all(Result::is_ok));
        assert_eq!(seen.count("append_events"), GROUPS_IN_FLIGHT + 1);
        assert_eq!(heads(&store, 16).await, [3; 16]);
    })
    .await;
}

/// Two waiting appends that fill a group to exactly its bound go together; two that
/// would pass it by one row go apart.
#[tokio::test(flavor = "current_thread")]
async fn postgres_a_group_carries_up_to_its_bound_of_rows_and_not_one_more() {
    crate::backends::run(crate::backends::Backend::Postgres, |store: Arc<dyn Store>| async move {
        let half = (MAX_GROUP_EVENTS / 2) as i64;
        let mut sizes = vec![1; GROUPS_IN_FLIGHT];
        sizes.extend([half, half, half, half + 1]);
        for n in 0..sizes.len() {
            store.insert_execution(&execution(&format!("exec-{n}"))).await.unwrap();
        }
        let seen = Arc::new(Seen::default());
        store.observe_with(seen.clone());
        assert!(appends_sized_at_once(&store, &sizes).await.iter().all(Result::is_ok));
        // The first `half` with the second; the third alone; `half + 1` alone.
        assert_eq!(seen.count("append_events"), GROUPS_IN_FLIGHT + 3);
        assert_eq!(heads(&store, sizes.len()).await, sizes);
    })
    .await;
}

async fn appended_events_read_back_contiguous_in_pages(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.insert_execution(&execution("exec-2")).await.unwrap();
    store.append_events(Vec::new().into()).await.unwrap();
    store.append_events(events("exec-1", 1, 1..=3).into()).await.unwrap();
    store.append_events(events("exec-2", 1, 1..=2).into()).await.unwrap();
    store.append_events(events("exec-1", 1, 4..=6).into()).await.unwrap();
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
    store.append_events(events("exec-1", 1, 1..=2).into()).await.unwrap();
    let mut overlapping = events("exec-1", 1, 2..=4);
    overlapping[0].event_id = "fresh-id".into();
    assert!(matches!(
        store.append_events(overlapping.into()).await,
        Err(StoreError::Duplicate)
    ));
    let twice = [event("exec-1", 1, 5), event("exec-1", 1, 5)];
    assert!(matches!(
        store.append_events(twice.into()).await,
        Err(StoreError::Duplicate)
    ));
    assert_eq!(
        store.head_sequence(&"exec-1".into()).await.unwrap(),
        2,
        "nothing of either batch"
    );
}

async fn an_event_id_is_used_once(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.insert_execution(&execution("exec-2")).await.unwrap();
    store.append_events(events("exec-1", 1, 1..=1).into()).await.unwrap();
    let mut reused = event("exec-2", 1, 1);
    reused.event_id = event("exec-1", 1, 1).event_id;
    assert!(matches!(
        store.append_events(vec![reused].into()).await,
        Err(StoreError::Duplicate)
    ));
    assert_eq!(store.head_sequence(&"exec-2".into()).await.unwrap(), 0);
}

async fn an_append_from_a_superseded_generation_is_fenced(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.append_events(events("exec-1", 1, 1..=2).into()).await.unwrap();
    assert!(
        store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap()
    );
    assert!(matches!(
        store.append_events(events("exec-1", 1, 3..=4).into()).await,
        Err(StoreError::Fenced)
    ));
    store.append_events(events("exec-1", 2, 3..=4).into()).await.unwrap();
    assert!(matches!(
        store.append_events(events("no-such", 1, 1..=1).into()).await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(store.head_sequence(&"exec-1".into()).await.unwrap(), 4);
}

async fn an_append_mixing_generations_is_refused(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.insert_execution(&execution("exec-2")).await.unwrap();
    let generations = [event("exec-1", 1, 1), event("exec-1", 2, 2)];
    assert!(matches!(
        store.append_events(generations.into()).await,
        Err(StoreError::Database(_))
    ));
    let executions = [event("exec-1", 1, 1), event("exec-2", 1, 2)];
    assert!(matches!(
        store.append_events(executions.into()).await,
        Err(StoreError::Database(_))
    ));
    assert_eq!(store.head_sequence(&"exec-1".into()).await.unwrap(), 0);
}

async fn prune_deletes_the_oldest_old_enough_events_through_a_sequence_in_batches(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    store.insert_execution(&execution("exec-2")).await.unwrap();
    store.append_events(events("exec-1", 1, 1..=8).into()).await.unwrap();
    store.append_events(events("exec-2", 1, 1..=2).into()).await.unwrap();
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
    store.append_events(events("exec-1", 1, 1..=1).into()).await.unwrap();
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
