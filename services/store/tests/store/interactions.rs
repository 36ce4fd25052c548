//! Interactions: rows, the one-per-native-request rule, the fenced compare-and-set.

use std::sync::Arc;

use cursor_runner_store::*;

use crate::fixtures::*;

on_every_backend!(
    interactions_list_by_id_with_their_filters,
    a_native_request_is_recorded_once_per_execution_generation,
    a_superseded_lease_cannot_record_an_interaction,
    an_interaction_needs_its_execution_and_turn,
    transition_interaction_is_compare_and_set_on_state,
    transition_interaction_is_fenced_by_the_execution_generation,
);

async fn interactions_list_by_id_with_their_filters(store: Arc<dyn Store>) {
    let (_, t1) = execution_with_turn(&*store, "exec-1").await;
    let (_, t2) = execution_with_turn(&*store, "exec-2").await;
    let answered = InteractionRecord {
        state: InteractionState::Answered,
        ..interaction(&t1, "int-3", "2")
    };
    for i in [interaction(&t1, "int-2", "1"), answered, interaction(&t2, "int-1", "1")] {
        store.insert_interaction(&i).await.unwrap();
    }
    let list =
        |execution_id: Option<&str>, state: Option<InteractionState>, after_id: Option<&str>, limit| InteractionQuery {
            tenant_id: TENANT.into(),
            execution_id: execution_id.map(Into::into),
            state,
            after_id: after_id.map(Into::into),
            limit,
        };
    let found = |q: InteractionQuery| {
        let store = store.clone();
        async move {
            let rows = store.list_interactions(&q).await.unwrap();
            rows.into_iter().map(|i| i.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(found(list(None, None, None, 10)).await, ["int-1", "int-2", "int-3"]);
    assert_eq!(found(list(None, None, Some("int-1"), 1)).await, ["int-2"]);
    assert_eq!(found(list(Some("exec-1"), None, None, 10)).await, ["int-2", "int-3"]);
    assert_eq!(
        found(list(None, Some(InteractionState::Pending), None, 10)).await,
        ["int-1", "int-2"]
    );
    assert_eq!(
        found(list(Some("exec-1"), Some(InteractionState::Pending), None, 10)).await,
        ["int-2"]
    );
    // An empty execution filter filters nothing.
    assert_eq!(found(list(Some(""), None, None, 10)).await.len(), 3);
    let foreign = InteractionQuery {
        tenant_id: OTHER_TENANT.into(),
        ..list(None, None, None, 10)
    };
    assert!(found(foreign).await.is_empty());
    assert_eq!(
        store.get_interaction(TENANT, &"int-2".into()).await.unwrap(),
        Some(interaction(&t1, "int-2", "1"))
    );
    assert_eq!(
        store.get_interaction(OTHER_TENANT, &"int-2".into()).await.unwrap(),
        None
    );
}

async fn a_native_request_is_recorded_once_per_execution_generation(store: Arc<dyn Store>) {
    let (_, t) = execution_with_turn(&*store, "exec-1").await;
    store.insert_interaction(&interaction(&t, "int-1", "7")).await.unwrap();
    assert!(matches!(
        store.insert_interaction(&interaction(&t, "int-2", "7")).await,
        Err(StoreError::Duplicate)
    ));
    assert!(matches!(
        store.insert_interaction(&interaction(&t, "int-1", "8")).await,
        Err(StoreError::Duplicate)
    ));
    // The next lease's agent numbers its requests afresh.
    assert!(
        store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap()
    );
    let next_lease = InteractionRecord {
        generation: Generation::new(2),
        ..interaction(&t, "int-2", "7")
    };
    store.insert_interaction(&next_lease).await.unwrap();
}

async fn an_interaction_needs_its_execution_and_turn(store: Arc<dyn Store>) {
    let (e, _) = execution_with_turn(&*store, "exec-1").await;
    let no_turn = interaction(&turn(&e, "no-such-turn", 2), "int-1", "1");
    assert!(matches!(
        store.insert_interaction(&no_turn).await,
        Err(StoreError::Database(_))
    ));
    // No execution has that generation: fenced, as an append for it is.
    let no_execution = interaction(&turn(&execution("no-such"), "t", 1), "int-2", "1");
    assert!(matches!(
        store.insert_interaction(&no_execution).await,
        Err(StoreError::Fenced)
    ));
}

/// `i` moved to `state` at `T0 + at`.
fn moved(i: &InteractionRecord, state: &str, at: i64) -> InteractionRecord {
    InteractionRecord {
        state: InteractionState::parse(state).unwrap(),
        outcome: Some(serde_json::json!({"outcome": "selected"})),
        answer_request_id: Some("req-1".into()),
        answer_fingerprint: Some("fp".into()),
        delivery: (state == "delivered").then_some(Delivery::PipeWritten),
        replay_allowed: true,
        updated_at_ms: T0 + at,
        ..i.clone()
    }
}

async fn transition_interaction_is_compare_and_set_on_state(store: Arc<dyn Store>) {
    let (_, t) = execution_with_turn(&*store, "exec-1").await;
    let pending = interaction(&t, "int-1", "1");
    store.insert_interaction(&pending).await.unwrap();
    let answered = moved(&pending, "answered", 1);
    assert!(
        !store
            .transition_interaction(InteractionState::Answered, &answered)
            .await
            .unwrap()
    );
    assert!(
        store
            .transition_interaction(InteractionState::Pending, &answered)
            .await
            .unwrap()
    );
    assert!(
        !store
            .transition_interaction(InteractionState::Pending, &answered)
            .await
            .unwrap(),
        "moved on"
    );
    let delivered = moved(&answered, "delivered", 2);
    assert!(
        store
            .transition_interaction(InteractionState::Answered, &delivered)
            .await
            .unwrap()
    );
    assert_eq!(
        store.get_interaction(TENANT, &"int-1".into()).await.unwrap(),
        Some(delivered)
    );
}

async fn transition_interaction_is_fenced_by_the_execution_generation(store: Arc<dyn Store>) {
    let (_, t) = execution_with_turn(&*store, "exec-1").await;
    let pending = interaction(&t, "int-1", "1");
    store.insert_interaction(&pending).await.unwrap();
    assert!(
        store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap()
    );
    let expired = moved(&pending, "expired", 1);
    assert!(
        !store
            .transition_interaction(InteractionState::Pending, &expired)
            .await
            .unwrap()
    );
    let claimed_by_the_new_lease = InteractionRecord {
        generation: Generation::new(2),
        ..expired
    };
    assert!(
        !store
            .transition_interaction(InteractionState::Pending, &claimed_by_the_new_lease)
            .await
            .unwrap(),
        "the row is the old lease's"
    );
    assert_eq!(
        store.get_interaction(TENANT, &"int-1".into()).await.unwrap(),
        Some(pending)
    );
}

async fn a_superseded_lease_cannot_record_an_interaction(store: Arc<dyn Store>) {
    let (_, t) = execution_with_turn(&*store, "exec-1").await;
    assert!(
        store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap()
    );
    assert!(matches!(
        store.insert_interaction(&interaction(&t, "int-1", "1")).await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(store.get_interaction(TENANT, &"int-1".into()).await.unwrap(), None);
}
