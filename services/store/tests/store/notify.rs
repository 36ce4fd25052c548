//! Event heads announced to other processes (`store::HeadListener`): on PostgreSQL every
//! commit that appends events names each execution's new head, after it commits; stores
//! whose writers are all in one process announce nothing.

use std::sync::Arc;
use std::time::Duration;

use cursor_runner_store::*;
use sqlx::Connection;

use crate::backends::{Backend, Scratch, run};
use crate::fixtures::*;

/// Longer than any announcement takes on loopback; only a missing one waits it out.
const HEARD_WITHIN: Duration = Duration::from_secs(10);

async fn next_notice(listener: &mut HeadListener) -> HeadNotice {
    tokio::time::timeout(HEARD_WITHIN, listener.next())
        .await
        .expect("an announcement")
}

async fn a_store_whose_writers_are_all_in_this_process_announces_nothing(store: Arc<dyn Store>) {
    assert!(store.listen_for_heads().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_store_whose_writers_are_all_in_this_process_announces_nothing() {
    run(
        Backend::Memory,
        a_store_whose_writers_are_all_in_this_process_announces_nothing,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_store_whose_writers_are_all_in_this_process_announces_nothing() {
    run(
        Backend::Sqlite,
        a_store_whose_writers_are_all_in_this_process_announces_nothing,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_each_commit_that_appends_announces_its_executions_new_head() {
    run(Backend::Postgres, |store: Arc<dyn Store>| async move {
        let mut listener = store.listen_for_heads().await.unwrap().expect("PostgreSQL announces");
        store.insert_execution(&execution("exec-1")).await.unwrap();
        store.insert_execution(&execution("exec-2")).await.unwrap();
        store.append_events(events("exec-1", 1, 1..=3).into()).await.unwrap();
        assert_eq!(
            next_notice(&mut listener).await,
            HeadNotice::Advanced {
                execution_id: "exec-1".into(),
                head: 3
            }
        );
        let batch = Batch {
            writes: vec![],
            events: events("exec-2", 1, 1..=2),
        };
        assert!(store.commit(&batch).await.unwrap());
        assert_eq!(
            next_notice(&mut listener).await,
            HeadNotice::Advanced {
                execution_id: "exec-2".into(),
                head: 2
            },
            "the commit's last sequence"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_append_refused_by_the_fence_announces_nothing() {
    run(Backend::Postgres, |store: Arc<dyn Store>| async move {
        let mut listener = store.listen_for_heads().await.unwrap().expect("PostgreSQL announces");
        store.insert_execution(&execution("exec-1")).await.unwrap();
        assert!(store.append_events(events("exec-1", 0, 1..=1).into()).await.is_err());
        store.append_events(events("exec-1", 1, 1..=1).into()).await.unwrap();
        assert_eq!(
            next_notice(&mut listener).await,
            HeadNotice::Advanced {
                execution_id: "exec-1".into(),
                head: 1
            },
            "the first thing heard is the append that landed"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_listener_whose_connection_is_terminated_says_it_lost_the_feed() {
    let (scratch, url) = Scratch::postgres().await;
    let store = SqlStore::connect(&url).await.unwrap();
    let mut listener = store.listen_for_heads().await.unwrap().expect("PostgreSQL announces");
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let terminated: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert_eq!(terminated, [(true,)], "one listening connection");
    assert!(matches!(next_notice(&mut listener).await, HeadNotice::Lost(_)));
    admin.close().await.unwrap();
    drop(store);
    scratch.remove().await;
}
