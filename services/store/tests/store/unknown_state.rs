//! A row whose state no state machine of this version knows (written by a newer version,
//! or by hand) fails to read with a typed error; it never travels on as a string.

use cursor_runner_store::{SqlStore, Store, StoreError};
use sqlx::Connection;

use crate::backends::Scratch;
use crate::fixtures::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_in_a_state_this_version_does_not_know_is_refused_when_read() {
    let (scratch, url) = Scratch::sqlite();
    let store = SqlStore::connect(&url).await.unwrap();
    store.insert_execution(&execution("exec-1")).await.unwrap();
    let mut raw = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE executions SET state = 'paused' WHERE id = 'exec-1'")
        .execute(&mut raw)
        .await
        .unwrap();
    match store.get_execution(TENANT, &"exec-1".into()).await {
        Err(StoreError::Database(message)) => assert!(message.contains("`state`"), "{message}"),
        other => panic!("expected a refused read, got {other:?}"),
    }
    scratch.remove().await;
}
