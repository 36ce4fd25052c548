//! Turns: rows, numbering, settlement (compare-and-set from `running`), every write
//! fenced by the execution's current generation.

use std::sync::Arc;

use cursor_runner_store::*;

use crate::fixtures::*;

on_every_backend!(
    turns_list_in_number_order_after_a_cursor_per_tenant,
    a_turn_number_is_used_once_per_execution,
    a_turn_of_an_unknown_execution_is_refused,
    settle_turn_settles_a_running_turn_once,
    settle_turn_refuses_another_generation,
    a_superseded_lease_can_neither_settle_nor_start_a_turn,
);

async fn turns_list_in_number_order_after_a_cursor_per_tenant(store: Arc<dyn Store>) {
    let e = execution("exec-1");
    store.insert_execution(&e).await.unwrap();
    for (id, n) in [("turn-c", 3), ("turn-a", 1), ("turn-b", 2)] {
        store.insert_turn(&turn(&e, id, n)).await.unwrap();
    }
    let numbers = |turns: Vec<TurnRecord>| turns.iter().map(|t| t.turn_number).collect::<Vec<_>>();
    assert_eq!(
        numbers(store.list_turns(TENANT, &"exec-1".into(), 0, 2).await.unwrap()),
        [1, 2]
    );
    assert_eq!(
        numbers(store.list_turns(TENANT, &"exec-1".into(), 2, 2).await.unwrap()),
        [3]
    );
    assert!(
        store
            .list_turns(OTHER_TENANT, &"exec-1".into(), 0, 9)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.get_turn(TENANT, &"turn-b".into()).await.unwrap(),
        Some(turn(&e, "turn-b", 2))
    );
    assert_eq!(store.get_turn(OTHER_TENANT, &"turn-b".into()).await.unwrap(), None);
}

async fn a_turn_number_is_used_once_per_execution(store: Arc<dyn Store>) {
    let (e, first) = execution_with_turn(&*store, "exec-1").await;
    assert!(matches!(
        store.insert_turn(&turn(&e, "turn-other", 1)).await,
        Err(StoreError::Duplicate)
    ));
    assert!(matches!(
        store
            .insert_turn(&TurnRecord {
                turn_number: 2,
                ..first
            })
            .await,
        Err(StoreError::Duplicate)
    ));
    // Another execution numbers its own turns from 1.
    execution_with_turn(&*store, "exec-2").await;
}

async fn a_turn_of_an_unknown_execution_is_refused(store: Arc<dyn Store>) {
    // No execution has that generation: fenced, as an append for it is.
    let t = turn(&execution("no-such"), "turn-1", 1);
    assert!(matches!(store.insert_turn(&t).await, Err(StoreError::Fenced)));
}

/// `t` settled `completed` at `T0 + 10` with usage.
fn completed(t: &TurnRecord) -> TurnRecord {
    TurnRecord {
        state: TurnState::Completed,
        stop_reason: Some("end_turn".into()),
        ended_at_ms: Some(T0 + 10),
        usage: Some(UsageReported {
            turn_id: t.id.to_string(),
            request_count_source: "unavailable".into(),
            provider_cost_status: "unpriced".into(),
            provider_cost_unavailable_reason: None,
            usage_source: Some("acp_usage_update".into()),
            used: Some(1),
            size: Some(100),
            cost: None,
        }),
        ..t.clone()
    }
}

async fn settle_turn_settles_a_running_turn_once(store: Arc<dyn Store>) {
    let (_, t) = execution_with_turn(&*store, "exec-1").await;
    assert!(store.settle_turn(&completed(&t)).await.unwrap());
    let failed = TurnRecord {
        state: TurnState::Failed,
        failure_reason: Some("agent_exited".into()),
        ..t.clone()
    };
    assert!(!store.settle_turn(&failed).await.unwrap(), "already settled");
    assert_eq!(store.get_turn(TENANT, &t.id).await.unwrap(), Some(completed(&t)));
}

async fn settle_turn_refuses_another_generation(store: Arc<dyn Store>) {
    let (_, t) = execution_with_turn(&*store, "exec-1").await;
    let other = TurnRecord {
        generation: Generation::new(2),
        ..completed(&t)
    };
    assert!(!store.settle_turn(&other).await.unwrap());
    assert_eq!(
        store.get_turn(TENANT, &t.id).await.unwrap().unwrap().state.as_str(),
        "running"
    );
}

async fn a_superseded_lease_can_neither_settle_nor_start_a_turn(store: Arc<dyn Store>) {
    let (e, t) = execution_with_turn(&*store, "exec-1").await;
    assert!(
        store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap()
    );
    assert!(!store.settle_turn(&completed(&t)).await.unwrap());
    assert_eq!(
        store.get_turn(TENANT, &t.id).await.unwrap().unwrap().state.as_str(),
        "running"
    );
    assert!(matches!(
        store.insert_turn(&turn(&e, "turn-late", 2)).await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(store.get_turn(TENANT, &"turn-late".into()).await.unwrap(), None);
}
