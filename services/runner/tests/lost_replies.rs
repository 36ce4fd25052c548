//! Statements the database committed whose reply the link lost, through the real binary and
//! the gRPC API: the service reaches PostgreSQL through a link the test cuts while a
//! statement waits on a row the test holds; the server runs the statement to its end once
//! the row is free, and the service never hears that it did. What the client retries must
//! find what the lost statement did, as the service's own.

use std::path::Path;
use std::time::Duration;

use cursor_runner_e2e::pg_link::{Link, wait_for_a_statement_waiting_on_a_lock};
use cursor_runner_e2e::*;
use sqlx::Connection;

/// How long the client retries a call the service answers as retryable.
const CALL_PATIENCE: Duration = Duration::from_secs(30);
/// The replicas' ownership lease.
const LEASE_MS: u64 = 5_000;
/// The request id of each test's one `CreateExecution`.
const REQUEST_ID: &str = "create-1";

/// The service on `database_url`, with `env` beside its own.
fn serve(database_url: &str, dirs: &ServiceDirs, env: Vec<(String, String)>) -> ServiceProcess {
    let scenario = scenario("demo.json");
    ServiceProcess::start(ServiceSettings {
        binary: Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url,
        state_dir: dirs.root.path(),
        scenario: scenario.to_str().unwrap(),
        record: &dirs.record,
        env,
        args: Vec::new(),
    })
}

/// A session of its own holding, in an open transaction, an uncommitted claim of the
/// tenant's `request_id` for `operation`: a claim of the same key waits for it.
async fn holding_a_claim(url: &str, operation: &str, request_id: &str) -> sqlx::PgConnection {
    let mut holder = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(
        "INSERT INTO idempotency_keys (tenant_id, operation, request_id, request_digest, state, created_at_ms, claimed_by) \
         VALUES ($1, $2, $3, 'held by the test', 'in_flight', 0, 'the test')",
    )
    .bind(TENANT)
    .bind(operation)
    .bind(request_id)
    .execute(&mut holder)
    .await
    .unwrap();
    holder
}

/// `CreateExecution` under the request id every test here uses, in `workspace`.
async fn create(
    client: &Client,
    workspace: &Path,
) -> Result<tonic::Response<proto::CreateExecutionResponse>, tonic::Status> {
    client
        .clone()
        .create_execution(proto::CreateExecutionRequest {
            request_id: REQUEST_ID.into(),
            workspace: workspace.display().to_string(),
            ..Default::default()
        })
        .await
}

/// Spawns `CreateExecution` through `link` with the test holding its key's claim, and has
/// the claim commit while the server's reply is dropped. `admin` is the test's own session;
/// the backend that ran the claim is returned with the call, the link not yet cut.
async fn create_whose_claim_reply_is_lost(
    client: &Client,
    workspace: &Path,
    link: &Link,
    database_url: &str,
    admin: &mut sqlx::PgConnection,
) -> (
    tokio::task::JoinHandle<Result<tonic::Response<proto::CreateExecutionResponse>, tonic::Status>>,
    i32,
) {
    let mut holder = holding_a_claim(database_url, "CreateExecution", REQUEST_ID).await;
    let (client, workspace) = (client.clone(), workspace.to_owned());
    let call = tokio::spawn(async move { create(&client, &workspace).await });
    let claiming = wait_for_a_statement_waiting_on_a_lock(admin, "INSERT INTO idempotency_keys%").await;
    link.swallow_replies(admin, claiming).await;
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    wait_for_the_claim(admin, REQUEST_ID).await;
    (call, claiming)
}

/// `call` until it returns anything but a retryable refusal (`UNAVAILABLE`, or `ABORTED`
/// while another call holds the request id), within `CALL_PATIENCE`.
async fn retrying<T, F, Fut>(what: &str, call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    retrying_while(
        &[tonic::Code::Unavailable, tonic::Code::Aborted],
        CALL_PATIENCE,
        what,
        call,
    )
    .await
}

/// A `CreateExecution` whose key's claim committed while its reply was lost: the call and
/// the client's retries under its request id create the execution, once, rather than find
/// the key held "in flight" by nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_claim_committed_with_its_reply_lost_is_created_once_on_retry() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let link = Link::to(&database.url).await;
    let dirs = ServiceDirs::new();
    let service = serve(&link.url, &dirs, Vec::new());
    let client = service.client().await;

    // Cut while the claim still waits: the server runs it to its end once the row is free.
    let mut holder = holding_a_claim(&database.url, "CreateExecution", REQUEST_ID).await;
    let first = tokio::spawn({
        let (client, workspace) = (client.clone(), dirs.workspace.clone());
        async move { create(&client, &workspace).await }
    });
    let mut admin = sqlx::PgConnection::connect(&database.url).await.unwrap();
    let waiting = wait_for_a_statement_waiting_on_a_lock(&mut admin, "INSERT INTO idempotency_keys%").await;
    link.cut_the_session(&mut admin, waiting).await;
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();

    let created = match first.await.unwrap() {
        Ok(created) => created,
        Err(_) => retrying("CreateExecution retried", || create(&client, &dirs.workspace)).await,
    }
    .into_inner()
    .execution
    .expect("execution");
    assert_eq!(executions(&mut admin).await, [created.execution_id], "created once");
    service.kill();
    drop((holder, admin, link));
    database.drop_database().await;
}

/// A claim that committed and whose reply was then lost on one replica, the client's retry
/// through another (both on one PostgreSQL): the first replica lets the key go as it
/// reports the failure, so the other creates the execution, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_claim_reply_was_lost_on_one_replica_is_created_once_through_another() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let link = Link::to(&database.url).await;
    let (dirs_a, dirs_b) = (ServiceDirs::new(), ServiceDirs::new());
    let a = serve(&link.url, &dirs_a, replica_env("replica-a", LEASE_MS));
    let b = serve(&database.url, &dirs_b, replica_env("replica-b", LEASE_MS));
    // One request, whichever replica it goes to: one workspace both may use.
    let workspace = &dirs_a.workspace;
    let (client_a, client_b) = (a.client().await, b.client().await);

    let mut admin = sqlx::PgConnection::connect(&database.url).await.unwrap();
    let (first, claiming) =
        create_whose_claim_reply_is_lost(&client_a, workspace, &link, &database.url, &mut admin).await;
    link.cut_the_session(&mut admin, claiming).await;
    let refused = first.await.unwrap().expect_err("the claim's reply was lost");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");

    let created = retrying("CreateExecution through the other replica", || {
        create(&client_b, workspace)
    })
    .await
    .into_inner()
    .execution
    .expect("execution");
    assert_eq!(executions(&mut admin).await, [created.execution_id], "created once");
    a.kill();
    b.kill();
    drop((admin, link));
    database.drop_database().await;
}

/// Until the tenant's `request_id` is claimed, committed.
async fn wait_for_the_claim(admin: &mut sqlx::PgConnection, request_id: &str) {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (claims,): (i64,) =
            sqlx::query_as("SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1 AND request_id = $2")
                .bind(TENANT)
                .bind(request_id)
                .fetch_one(&mut *admin)
                .await
                .unwrap();
        if claims == 1 {
            return;
        }
        assert!(tokio::time::Instant::now() < give_up, "{request_id} was never claimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The failing call's release of a claim whose reply was lost, held up on the server until
/// after the client's retry on the same replica took the claim on: it lets go of nothing
/// the retry holds, so the retry's execution is the only one, and what every later retry
/// gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_by_the_call_whose_claim_reply_was_lost_never_frees_the_retry_s_claim() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let link = Link::to(&database.url).await;
    let dirs = ServiceDirs::new();
    let service = serve(&link.url, &dirs, Vec::new());
    let client = service.client().await;

    let mut admin = sqlx::PgConnection::connect(&database.url).await.unwrap();
    let (first, claiming) =
        create_whose_claim_reply_is_lost(&client, &dirs.workspace, &link, &database.url, &mut admin).await;
    // The claim's row, locked: the failing call's release waits for it.
    let mut holder = sqlx::PgConnection::connect(&database.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM idempotency_keys WHERE request_id = $1 FOR UPDATE")
        .bind(REQUEST_ID)
        .execute(&mut holder)
        .await
        .unwrap();
    link.cut_the_session(&mut admin, claiming).await;
    let releasing = wait_for_a_statement_waiting_on_a_lock(&mut admin, "DELETE FROM idempotency_keys%").await;
    link.cut_the_session(&mut admin, releasing).await;
    let refused = first.await.unwrap().expect_err("the claim's reply was lost");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");

    let retry = tokio::spawn({
        let (client, workspace) = (client.clone(), dirs.workspace.clone());
        async move { create(&client, &workspace).await }
    });
    wait_for_a_statement_waiting_on_a_lock(&mut admin, "UPDATE idempotency_keys%").await;
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    let created = retry
        .await
        .unwrap()
        .expect("the retry")
        .into_inner()
        .execution
        .expect("execution");
    let again = retrying("CreateExecution retried again", || create(&client, &dirs.workspace))
        .await
        .into_inner()
        .execution
        .expect("execution");
    assert_eq!(
        again.execution_id, created.execution_id,
        "every retry gets the one execution"
    );
    assert_eq!(executions(&mut admin).await, [created.execution_id], "created once");
    service.kill();
    drop((holder, admin, link));
    database.drop_database().await;
}

/// The ids of every execution in the database.
async fn executions(admin: &mut sqlx::PgConnection) -> Vec<String> {
    sqlx::query_scalar("SELECT id FROM executions ORDER BY id")
        .fetch_all(admin)
        .await
        .unwrap()
}
