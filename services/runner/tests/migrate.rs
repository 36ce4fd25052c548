//! `cursor-runner migrate` applies the schema to an empty database, and applying it again
//! changes nothing.

use std::process::Command;

use cursor_runner_e2e::{Backend, TestDatabase};

fn migrate(url: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
        .args(["migrate", "--database-url", url])
        .env("CURSOR_RUNNER_LOG", "warn")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_applies_the_schema_to_an_empty_postgres_database_and_is_repeatable() {
    let database = TestDatabase::create(Backend::Postgres).await;
    for attempt in 1..=2 {
        let out = migrate(&database.url);
        assert!(
            out.status.success(),
            "attempt {attempt}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "migrations applied");
    }
    let store = cursor_runner_store::connect(&database.url).await.unwrap();
    assert_eq!(
        store.list_executions("tenant-a", None, 10).await.unwrap().len(),
        0,
        "the schema answers queries"
    );
    drop(store);
    database.drop_database().await;
}

#[test]
fn migrate_refuses_an_unusable_database_url_with_a_message() {
    let out = migrate("postgres://nobody@127.0.0.1:1/none");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("migrating"), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("connection refused"),
        "the cause is named: {stderr}"
    );
}
