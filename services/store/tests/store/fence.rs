//! The owner fence (`docs/scale-out.md` §2): every owner write lands only while its
//! execution is this incarnation's at the write's generation and the lease is live on the
//! database's clock; past the lease's local deadline it is refused without a round trip.

use std::sync::Arc;
use std::time::Duration;

use cursor_runner_domain::{EngineError, ErrorKind, Reason};
use cursor_runner_store::*;
use sqlx::Connection;

use crate::backends::{Backend, Scratch, run};
use crate::fixtures::*;

/// An execution `e` of the registered replica, with a running turn and a pending question.
struct Owned {
    execution: ExecutionRecord,
    turn: TurnRecord,
    question: InteractionRecord,
}

async fn owned(store: &dyn Store) -> Owned {
    let (execution, turn) = execution_with_turn(store, "e").await;
    let question = interaction(&turn, "e-question-1", "native-1");
    store.insert_interaction(&question).await.unwrap();
    Owned {
        execution,
        turn,
        question,
    }
}

/// Whether a write landed: a refusal is `Ok(false)` from a compare-and-set,
/// [`StoreError::Fenced`], or [`StoreError::LeaseEnded`]; any other error fails the test.
fn landed<T>(what: &str, outcome: StoreResult<T>, written: impl FnOnce(T) -> bool) -> bool {
    match outcome {
        Ok(value) => written(value),
        Err(StoreError::Fenced | StoreError::LeaseEnded) => false,
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Every owner write of §2's table, each as the owner of `o` would send it next, and whether
/// it landed.
async fn every_owner_write(store: &dyn Store, o: &Owned) -> Vec<(&'static str, bool)> {
    let cas = |written: bool| written;
    let mut outcomes = vec![
        (
            "insert_execution",
            landed(
                "insert_execution",
                store.insert_execution(&execution("e2")).await,
                |()| true,
            ),
        ),
        (
            "advance_generation",
            landed(
                "advance_generation",
                store.advance_generation(TENANT, &"e".into(), Generation::new(1)).await,
                cas,
            ),
        ),
    ];
    outcomes.extend(every_write_at_the_generation(store, o).await);
    outcomes
}

/// The owner writes that carry `o`'s generation, and whether each landed.
async fn every_write_at_the_generation(store: &dyn Store, o: &Owned) -> Vec<(&'static str, bool)> {
    let mut closing = o.execution.clone();
    closing.state = ExecutionState::Closing;
    let mut settled = o.turn.clone();
    settled.state = TurnState::Completed;
    let mut answered = o.question.clone();
    answered.state = InteractionState::Answered;
    let next_turn = turn(&o.execution, "e-turn-2", 2);
    let next_question = interaction(&o.turn, "e-question-2", "native-2");
    let batch = Batch {
        writes: vec![Write::SettleTurn(settled.clone())],
        events: vec![event("e", 1, 1)],
    };
    // An answer's batch: one statement on PostgreSQL (`sql::one_statement`).
    let answer = Batch {
        writes: vec![
            Write::Interaction {
                expected_state: InteractionState::Pending,
                record: answered.clone(),
            },
            Write::ClaimIdempotency {
                key: IdempotencyKey {
                    tenant_id: TENANT.into(),
                    operation: "AnswerInteraction".into(),
                    request_id: "answer-1".into(),
                },
                digest: "d".into(),
                token: ClaimToken::new(),
            },
        ],
        events: vec![event("e", 1, 1)],
    };
    // As the interaction machine writes `answered`: without events.
    let answer_without_events = Batch {
        events: vec![],
        ..answer.clone()
    };
    let unit = |()| true;
    let cas = |written: bool| written;
    vec![
        (
            "update_execution",
            landed(
                "update_execution",
                store.update_execution(ExecutionState::Ready, &closing).await,
                cas,
            ),
        ),
        (
            "insert_turn",
            landed("insert_turn", store.insert_turn(&next_turn).await, unit),
        ),
        (
            "settle_turn",
            landed("settle_turn", store.settle_turn(&settled).await, cas),
        ),
        (
            "insert_interaction",
            landed(
                "insert_interaction",
                store.insert_interaction(&next_question).await,
                unit,
            ),
        ),
        (
            "transition_interaction",
            landed(
                "transition_interaction",
                store.transition_interaction(InteractionState::Pending, &answered).await,
                cas,
            ),
        ),
        (
            "append_events",
            landed(
                "append_events",
                store.append_events(vec![event("e", 1, 1)].into()).await,
                unit,
            ),
        ),
        ("commit", landed("commit", store.commit(&batch).await, cas)),
        (
            "commit an answer",
            landed("commit an answer", store.commit(&answer).await, cas),
        ),
        (
            "commit an answer without events",
            landed(
                "commit an answer without events",
                store.commit(&answer_without_events).await,
                cas,
            ),
        ),
        (
            "save_session_checkpoint",
            landed(
                "save_session_checkpoint",
                store.save_session_checkpoint(&checkpoint(&o.execution, "s", 1)).await,
                cas,
            ),
        ),
    ]
}

/// Nothing of `o` moved: the writes that were refused left no trace.
async fn nothing_moved(store: &dyn Store, o: &Owned) {
    let execution = store.get_execution(TENANT, &"e".into()).await.unwrap().unwrap();
    assert_eq!(
        (execution.state, execution.generation),
        (ExecutionState::Ready, Generation::FIRST)
    );
    assert_eq!(store.get_execution(TENANT, &"e2".into()).await.unwrap(), None);
    assert_eq!(
        store.get_turn(TENANT, &o.turn.id).await.unwrap().unwrap().state,
        TurnState::Running
    );
    assert_eq!(store.get_turn(TENANT, &"e-turn-2".into()).await.unwrap(), None);
    assert_eq!(
        store
            .get_interaction(TENANT, &o.question.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        InteractionState::Pending
    );
    assert_eq!(
        store.get_interaction(TENANT, &"e-question-2".into()).await.unwrap(),
        None
    );
    assert_eq!(store.head_sequence(&"e".into()).await.unwrap(), 0);
    assert_eq!(store.session_checkpoint(TENANT, "s").await.unwrap(), None);
}

fn assert_all_refused(outcomes: &[(&'static str, bool)]) {
    let landed: Vec<&str> = outcomes
        .iter()
        .filter(|(_, landed)| *landed)
        .map(|(what, _)| *what)
        .collect();
    assert!(landed.is_empty(), "owner writes that landed: {landed:?}");
}

/// Ends `incarnation`'s lease on the database's clock only, as a freeze past it would:
/// this process's local deadline is still ahead, so every write reaches the database.
pub(crate) async fn end_lease_in_database(url: &str, incarnation: &str) {
    let mut connection = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query(
        "UPDATE replicas SET lease_until_ms = FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT - 1 \
         WHERE incarnation = $1",
    )
    .bind(incarnation)
    .execute(&mut connection)
    .await
    .unwrap();
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_every_owner_write_of_an_incarnation_whose_lease_ended_is_refused_before_anyone_takes_over() {
    let (scratch, url) = Scratch::postgres().await;
    let store = SqlStore::connect(&url).await.unwrap();
    let me = store.register_replica("replica-a", None, terms()).await.unwrap();
    let o = owned(&store).await;
    end_lease_in_database(&url, &me.incarnation).await;
    assert!(
        store.lease().borrow().held_at(tokio::time::Instant::now()),
        "the local deadline is still ahead"
    );
    assert_all_refused(&every_owner_write(&store, &o).await);
    nothing_moved(&store, &o).await;
    drop(store);
    scratch.remove().await;
}

/// A lease of `length` whose local deadline is `margin` before the database's end.
fn short(length: Duration, margin: Duration) -> LeaseTerms {
    LeaseTerms {
        length,
        renew_timeout: Duration::from_secs(2),
        self_fence_margin: margin,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_every_owner_write_of_an_incarnation_whose_lease_ended_is_refused_before_anyone_takes_over() {
    run(Backend::Memory, |store: Arc<dyn Store>| async move {
        let length = Duration::from_millis(300);
        store
            .register_replica("replica-a", None, short(length, Duration::ZERO))
            .await
            .unwrap();
        let o = owned(&*store).await;
        tokio::time::sleep(length * 2).await;
        assert_all_refused(&every_owner_write(&*store, &o).await);
        nothing_moved(&*store, &o).await;
    })
    .await;
}

/// The local deadline passes while the database's lease is still live: refused all the
/// same, with no round trip (what a process that cannot renew does before the database
/// would refuse it).
async fn a_write_past_the_local_deadline_is_refused_though_the_database_lease_is_live(store: Arc<dyn Store>) {
    let length = Duration::from_secs(60);
    let margin = length - Duration::from_millis(200);
    store
        .register_replica("replica-a", None, short(length, margin))
        .await
        .unwrap();
    let o = owned(&*store).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!store.lease().borrow().held_at(tokio::time::Instant::now()));
    assert_all_refused(&every_owner_write(&*store, &o).await);
    nothing_moved(&*store, &o).await;
    // A caller learns the replica is going away (retry elsewhere, later), not that its
    // execution was handed on.
    let refused = EngineError::from(store.insert_turn(&turn(&o.execution, "e-turn-9", 9)).await.unwrap_err());
    assert_eq!(
        (refused.kind, refused.reason),
        (ErrorKind::Unavailable, Reason::ReplicaFenced)
    );
    assert!(refused.retry_after.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_write_past_the_local_deadline_is_refused_though_the_database_lease_is_live() {
    run(
        Backend::Memory,
        a_write_past_the_local_deadline_is_refused_though_the_database_lease_is_live,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_write_past_the_local_deadline_is_refused_though_the_database_lease_is_live() {
    run(
        Backend::Postgres,
        a_write_past_the_local_deadline_is_refused_though_the_database_lease_is_live,
    )
    .await;
}

async fn execute(url: &str, statement: &str, incarnation: &str) {
    let mut connection = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
        .bind(incarnation)
        .execute(&mut connection)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_write_of_a_replaced_owner_is_refused_at_the_same_generation() {
    let (scratch, url) = Scratch::postgres().await;
    let a = SqlStore::connect(&url).await.unwrap();
    a.register_replica("replica-a", None, terms()).await.unwrap();
    let b = SqlStore::connect(&url).await.unwrap();
    let replacement = b.register_replica("replica-b", None, terms()).await.unwrap();
    let o = owned(&a).await;
    // Another live replica owns the execution now, at the same generation (a takeover's
    // claim): both leases are live, only the owner tells them apart.
    execute(
        &url,
        "UPDATE executions SET owner_incarnation = $1 WHERE id = 'e'",
        &replacement.incarnation,
    )
    .await;
    assert_all_refused(&every_write_at_the_generation(&a, &o).await);
    nothing_moved(&a, &o).await;
    let mut failed = o.turn.clone();
    failed.state = TurnState::Failed;
    assert!(
        b.settle_turn(&failed).await.unwrap(),
        "the new owner writes at that generation"
    );
    drop((a, b));
    scratch.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_claim_waits_for_an_owner_transaction_in_flight_and_then_reads_its_rows() {
    let (scratch, url) = Scratch::postgres().await;
    let owner = Arc::new(SqlStore::connect(&url).await.unwrap());
    let dead = owner.register_replica("replica-a", None, terms()).await.unwrap();
    let survivor = Arc::new(SqlStore::connect(&url).await.unwrap());
    survivor.register_replica("replica-b", None, terms()).await.unwrap();
    let (_, turn) = execution_with_turn(&*owner, "e").await;
    // Another session holds event 1's key uncommitted: the owner's batch passes its fence
    // (and, on PostgreSQL, locks the execution row) and then waits at its append.
    let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(
        "INSERT INTO events (execution_id, sequence, event_id, generation, event_type, priority, schema_version, emitted_at_ms, payload) \
         VALUES ('e', 1, 'held', 1, 'item.delta', 0, 1, 0, '{}')",
    )
    .execute(&mut holder)
    .await
    .unwrap();
    let question = interaction(&turn, "e-question-1", "native-1");
    let in_flight = tokio::spawn({
        let owner = owner.clone();
        let batch = Batch {
            writes: vec![Write::InsertInteraction(question.clone())],
            events: vec![event("e", 1, 1)],
        };
        async move { owner.commit(&batch).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The owner's lease ends (it froze): a survivor may claim what it owned.
    end_lease_in_database(&url, &dead.incarnation).await;
    let claim = tokio::spawn({
        let survivor = survivor.clone();
        let dead = dead.incarnation.clone();
        async move { survivor.claim_execution(&"e".into(), Generation::new(1), &dead).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !claim.is_finished(),
        "the claim went ahead of an owner transaction that had passed its fence"
    );
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    assert!(in_flight.await.unwrap().unwrap(), "the owner's transaction commits");
    assert!(claim.await.unwrap().unwrap(), "then the claim takes the execution");
    assert_eq!(
        survivor
            .get_interaction(TENANT, &question.id)
            .await
            .unwrap()
            .map(|i| i.state),
        Some(InteractionState::Pending),
        "the claimant reads what the owner committed"
    );
    holder.close().await.unwrap();
    drop((owner, survivor));
    scratch.remove().await;
}
