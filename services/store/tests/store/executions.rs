//! Executions: rows, the compare-and-set update, the generation fence, listings, sessions.

use std::sync::Arc;
use std::time::Duration;

use cursor_runner_store::*;

use crate::fixtures::*;

on_every_backend!(
    an_update_without_a_lease_or_a_configuration_keeps_the_recorded_ones,
    an_inserted_execution_reads_back_as_written_to_its_tenant_only,
    an_execution_id_is_used_once,
    executions_list_by_id_per_tenant_after_a_cursor,
    update_execution_writes_the_mutable_columns_only,
    update_execution_refuses_a_stale_generation,
    update_execution_refuses_a_wrong_expected_state,
    advance_generation_is_compare_and_set,
    live_executions_of_an_owner_are_its_starting_ready_or_closing_ones,
    a_session_is_found_at_its_newest_execution,
    a_session_is_found_where_it_is_open_before_a_newer_ended_execution,
    sessions_list_one_newest_execution_each_by_session_id,
    operations_are_observed_by_their_method_name,
);

async fn an_inserted_execution_reads_back_as_written_to_its_tenant_only(store: Arc<dyn Store>) {
    let e = ExecutionRecord {
        session_id: Some("s-1".into()),
        pid: Some(4242),
        lease: Some(LeaseInfo {
            slot_id: "3".into(),
            ..Default::default()
        }),
        limits: ExecutionLimits {
            turn_deadline: Some(Duration::from_secs(60)),
            max_turns: Some(5),
            max_active: None,
        },
        ..execution("exec-1")
    };
    store.insert_execution(&e).await.unwrap();
    assert_eq!(store.get_execution(TENANT, &"exec-1".into()).await.unwrap(), Some(e));
    assert_eq!(store.get_execution(OTHER_TENANT, &"exec-1".into()).await.unwrap(), None);
    assert_eq!(store.get_execution(TENANT, &"exec-2".into()).await.unwrap(), None);
}

async fn an_execution_id_is_used_once(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    let again = ExecutionRecord {
        tenant_id: OTHER_TENANT.into(),
        ..execution("exec-1")
    };
    assert!(matches!(
        store.insert_execution(&again).await,
        Err(StoreError::Duplicate)
    ));
}

async fn executions_list_by_id_per_tenant_after_a_cursor(store: Arc<dyn Store>) {
    for id in ["exec-3", "exec-1", "exec-4", "exec-2"] {
        store.insert_execution(&execution(id)).await.unwrap();
    }
    let foreign = ExecutionRecord {
        tenant_id: OTHER_TENANT.into(),
        ..execution("exec-0")
    };
    store.insert_execution(&foreign).await.unwrap();
    let first = store.list_executions(TENANT, None, 3).await.unwrap();
    assert_eq!(ids(&first), ["exec-1", "exec-2", "exec-3"]);
    let rest = store.list_executions(TENANT, Some("exec-3"), 3).await.unwrap();
    assert_eq!(ids(&rest), ["exec-4"]);
    assert_eq!(
        ids(&store.list_executions(OTHER_TENANT, None, 10).await.unwrap()),
        ["exec-0"]
    );
}

async fn update_execution_writes_the_mutable_columns_only(store: Arc<dyn Store>) {
    let e = execution("exec-1");
    store.insert_execution(&e).await.unwrap();
    store.set_acked_sequence(TENANT, &"exec-1".into(), 7).await.unwrap();
    let next = ExecutionRecord {
        state: ExecutionState::Closed,
        session_id: Some("s-1".into()),
        active_turn_id: Some("turn-9".into()),
        turn_count: 2,
        pid: Some(1),
        exit_code: Some(0),
        exit_signal: Some(9),
        failure_reason: Some("agent_exited".into()),
        failure_message: Some("gone".into()),
        updated_at_ms: T0 + 5,
        lease: Some(LeaseInfo::default()),
        session_config: Some(SessionConfig {
            mode: Some("agent".into()),
            ..Default::default()
        }),
        credential_name: Some("CURSOR_AUTH_TOKEN".into()),
        active_ms: 1234,
        // Not the update's to change:
        tenant_id: OTHER_TENANT.into(),
        workspace: "/elsewhere".into(),
        acked_sequence: 0,
        created_at_ms: T0 + 99,
        approval_policy: cursor_runner_domain::interaction::ApprovalPolicy::DenyAll,
        interaction_wait_limit_ms: 1,
        limits: ExecutionLimits {
            turn_deadline: Some(Duration::from_millis(1)),
            max_turns: Some(1),
            max_active: Some(Duration::from_millis(1)),
        },
        ..e.clone()
    };
    assert!(store.update_execution(ExecutionState::Ready, &next).await.unwrap());
    let expected = ExecutionRecord {
        tenant_id: e.tenant_id.clone(),
        workspace: e.workspace.clone(),
        acked_sequence: 7,
        created_at_ms: e.created_at_ms,
        approval_policy: e.approval_policy,
        interaction_wait_limit_ms: e.interaction_wait_limit_ms,
        limits: e.limits,
        ..next
    };
    assert_eq!(
        store.get_execution(TENANT, &"exec-1".into()).await.unwrap(),
        Some(expected)
    );
}

async fn update_execution_refuses_a_stale_generation(store: Arc<dyn Store>) {
    let e = execution("exec-1");
    store.insert_execution(&e).await.unwrap();
    assert!(
        store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap()
    );
    let stale = ExecutionRecord {
        state: ExecutionState::Lost,
        ..e.clone()
    };
    assert!(!store.update_execution(ExecutionState::Ready, &stale).await.unwrap());
    let now = store.get_execution(TENANT, &"exec-1".into()).await.unwrap().unwrap();
    assert_eq!((now.state.as_str(), now.generation.get()), ("ready", 2));
}

async fn update_execution_refuses_a_wrong_expected_state(store: Arc<dyn Store>) {
    let e = execution("exec-1");
    store.insert_execution(&e).await.unwrap();
    let closing = ExecutionRecord {
        state: ExecutionState::Closing,
        ..e.clone()
    };
    assert!(
        !store
            .update_execution(ExecutionState::Starting, &closing)
            .await
            .unwrap()
    );
    assert!(store.update_execution(ExecutionState::Ready, &closing).await.unwrap());
    // The same compare-and-set again: the row has moved on.
    assert!(!store.update_execution(ExecutionState::Ready, &closing).await.unwrap());
    let now = store.get_execution(TENANT, &"exec-1".into()).await.unwrap().unwrap();
    assert_eq!(now.state.as_str(), "closing");
}

async fn advance_generation_is_compare_and_set(store: Arc<dyn Store>) {
    store.insert_execution(&execution("exec-1")).await.unwrap();
    assert!(
        !store
            .advance_generation(OTHER_TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap()
    );
    assert!(
        !store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(2))
            .await
            .unwrap()
    );
    assert!(
        store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap()
    );
    assert!(
        !store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(1))
            .await
            .unwrap(),
        "already moved"
    );
    assert!(
        store
            .advance_generation(TENANT, &"exec-1".into(), Generation::new(2))
            .await
            .unwrap()
    );
    assert!(
        !store
            .advance_generation(TENANT, &"no-such".into(), Generation::new(1))
            .await
            .unwrap()
    );
    let now = store.get_execution(TENANT, &"exec-1".into()).await.unwrap().unwrap();
    assert_eq!(now.generation, Generation::new(3));
}

async fn live_executions_of_an_owner_are_its_starting_ready_or_closing_ones(store: Arc<dyn Store>) {
    for (id, state) in [
        ("exec-1", "starting"),
        ("exec-2", "closed"),
        ("exec-3", "closing"),
        ("exec-4", "lost"),
        ("exec-5", "failed"),
        ("exec-6", "ready"),
    ] {
        let e = ExecutionRecord {
            state: ExecutionState::parse(state).unwrap(),
            // Live executions of every tenant.
            tenant_id: if id == "exec-6" { OTHER_TENANT } else { TENANT }.into(),
            ..execution(id)
        };
        store.insert_execution(&e).await.unwrap();
    }
    // Inserted before any replica registered: the legacy owner's.
    let live = store.list_live_executions_of(LEGACY_INCARNATION).await.unwrap();
    assert_eq!(ids(&live), ["exec-1", "exec-3", "exec-6"]);
    let me = store
        .register_replica("replica-a", None, terms())
        .await
        .unwrap()
        .incarnation;
    store.insert_execution(&execution("exec-7")).await.unwrap();
    assert_eq!(ids(&store.list_live_executions_of(&me).await.unwrap()), ["exec-7"]);
    assert_eq!(
        ids(&store.list_live_executions_of(LEGACY_INCARNATION).await.unwrap()).len(),
        3
    );
}

/// `exec-N` of [`TENANT`] with `session`.
fn of_session(id: &str, session: &str) -> ExecutionRecord {
    ExecutionRecord {
        session_id: Some(session.into()),
        ..execution(id)
    }
}

async fn a_session_is_found_where_it_is_open_before_a_newer_ended_execution(store: Arc<dyn Store>) {
    let ended = |id: &str, session: &str, state: ExecutionState| ExecutionRecord {
        state,
        ..of_session(id, session)
    };
    for e in [
        of_session("exec-1", "s-a"),
        ended("exec-2", "s-a", ExecutionState::Closed),
        ended("exec-3", "s-b", ExecutionState::Lost),
        ended("exec-4", "s-b", ExecutionState::Closed),
    ] {
        store.insert_execution(&e).await.unwrap();
    }
    assert_eq!(store.find_session(TENANT, "s-a").await.unwrap().unwrap().id, "exec-1");
    assert_eq!(store.find_session(TENANT, "s-b").await.unwrap().unwrap().id, "exec-4");
}

async fn a_session_is_found_at_its_newest_execution(store: Arc<dyn Store>) {
    for e in [
        of_session("exec-1", "s-a"),
        of_session("exec-2", "s-b"),
        of_session("exec-3", "s-a"),
        execution("exec-4"),
    ] {
        store.insert_execution(&e).await.unwrap();
    }
    let found = store.find_session(TENANT, "s-a").await.unwrap().unwrap();
    assert_eq!(found.id, "exec-3");
    assert_eq!(store.find_session(OTHER_TENANT, "s-a").await.unwrap(), None);
    assert_eq!(store.find_session(TENANT, "s-x").await.unwrap(), None);
}

async fn sessions_list_one_newest_execution_each_by_session_id(store: Arc<dyn Store>) {
    for e in [
        of_session("exec-1", "s-c"),
        of_session("exec-2", "s-a"),
        of_session("exec-3", "s-c"),
        of_session("exec-4", "s-b"),
        execution("exec-5"),
        ExecutionRecord {
            tenant_id: OTHER_TENANT.into(),
            ..of_session("exec-6", "s-a")
        },
    ] {
        store.insert_execution(&e).await.unwrap();
    }
    let first = store.list_sessions(TENANT, None, 2).await.unwrap();
    assert_eq!(ids(&first), ["exec-2", "exec-4"]);
    let rest = store.list_sessions(TENANT, Some("s-b"), 2).await.unwrap();
    assert_eq!(ids(&rest), ["exec-3"]);
}

async fn operations_are_observed_by_their_method_name(store: Arc<dyn Store>) {
    let seen = Arc::new(Seen::default());
    store.observe_with(seen.clone());
    // A patience of the store is the same store: same rows, same observer.
    let patient = store.with_patience(Patience::For(std::time::Duration::from_secs(1)));
    patient.insert_execution(&execution("exec-1")).await.unwrap();
    assert!(store.insert_execution(&execution("exec-1")).await.is_err());
    assert!(store.get_execution(TENANT, &"exec-1".into()).await.unwrap().is_some());
    assert_eq!(
        *seen.0.lock().unwrap(),
        [
            ("insert_execution", true),
            ("insert_execution", false),
            ("get_execution", true)
        ]
    );
}

/// A record whose JSON this version could not read carries no lease or configuration; its
/// next update must not erase what was recorded.
async fn an_update_without_a_lease_or_a_configuration_keeps_the_recorded_ones(store: Arc<dyn Store>) {
    let leased = ExecutionRecord {
        lease: Some(LeaseInfo {
            slot_id: "slot-1".into(),
            ..Default::default()
        }),
        session_config: Some(SessionConfig {
            mode: Some("agent".into()),
            ..Default::default()
        }),
        ..execution("exec-1")
    };
    store.insert_execution(&leased).await.unwrap();
    let bare = ExecutionRecord {
        lease: None,
        session_config: None,
        updated_at_ms: T0 + 1,
        ..leased.clone()
    };
    assert!(store.update_execution(ExecutionState::Ready, &bare).await.unwrap());
    let read = store.get_execution(TENANT, &"exec-1".into()).await.unwrap().unwrap();
    assert_eq!((read.lease, read.session_config), (leased.lease, leased.session_config));
}

/// A pooled connection is handed out without a ping while it is busy; one that idled
/// [`PING_AFTER_IDLE`] is pinged first, so a session the server ended meanwhile (a restart,
/// a terminated backend) is replaced before a caller without patience uses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_pooled_session_the_server_ended_while_it_idled_is_replaced_before_use() {
    use sqlx::Connection;
    let (scratch, url) = crate::backends::Scratch::postgres().await;
    let store = SqlStore::connect(&url).await.unwrap();
    store.insert_execution(&execution("exec-1")).await.unwrap();
    let admin = ending_every_other_session(&url).await;
    tokio::time::sleep(PING_AFTER_IDLE + Duration::from_millis(100)).await;
    assert!(
        store.get_execution(TENANT, &"exec-1".into()).await.unwrap().is_some(),
        "read on a fresh connection"
    );
    admin.close().await.unwrap();
    drop(store);
    scratch.remove().await;
}

/// A session the server ended less than [`PING_AFTER_IDLE`] after its last use is handed out
/// unpinged and fails; the read is tried again at once on the next connection, so a caller
/// without patience gets its row and not `UNAVAILABLE`, however many of the pool's sessions
/// were ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_read_on_sessions_the_server_just_ended_is_answered_from_a_fresh_one() {
    use sqlx::Connection;
    let (scratch, url) = crate::backends::Scratch::postgres().await;
    let store = SqlStore::connect(&url).await.unwrap();
    store.insert_execution(&execution("exec-1")).await.unwrap();
    // Several pooled sessions, each used a moment ago.
    let id = "exec-1".into();
    let (a, b, c, d) = tokio::join!(
        store.get_execution(TENANT, &id),
        store.get_execution(TENANT, &id),
        store.get_execution(TENANT, &id),
        store.get_execution(TENANT, &id),
    );
    for read in [a, b, c, d] {
        assert!(read.unwrap().is_some());
    }
    let admin = ending_every_other_session(&url).await;
    for n in 0..4 {
        let read = store.get_execution(TENANT, &id).await;
        assert!(matches!(read, Ok(Some(_))), "read {n}: {read:?}");
    }
    admin.close().await.unwrap();
    drop(store);
    scratch.remove().await;
}

/// Ends every session of the database but its own, as a restart or an operator would, and
/// returns itself, still open.
async fn ending_every_other_session(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(url).await.unwrap();
    let ended: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(!ended.is_empty(), "the store's pooled sessions were ended");
    admin
}
