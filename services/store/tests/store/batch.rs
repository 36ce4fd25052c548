//! Batches: row writes and their events committed in one transaction, all or nothing.

use std::sync::Arc;

use cursor_runner_store::*;

use crate::fixtures::*;

on_every_backend!(
    a_batch_lands_its_writes_and_events_together,
    a_batch_with_one_stale_write_writes_nothing,
    a_batch_of_a_superseded_generation_writes_nothing,
    a_batch_whose_event_is_already_there_writes_nothing,
    a_batch_starts_a_turn_with_its_execution_row_and_event,
    a_batch_inserting_a_taken_identity_writes_nothing,
    a_batch_insert_of_a_superseded_generation_writes_nothing,
    a_batch_claiming_a_free_key_lands_with_its_rows_and_completes_it_later,
    a_batch_claiming_a_taken_key_writes_nothing_and_says_the_key_is_taken,
    an_answer_and_its_delivery_each_land_their_transition_key_and_events_together,
    an_answer_to_an_interaction_that_moved_on_writes_nothing_and_leaves_the_key_free,
    a_delivery_completing_a_key_it_never_claimed_writes_nothing,
    an_answer_whose_events_are_fenced_writes_nothing_and_leaves_the_key_free,
    an_answer_of_a_superseded_generation_writes_nothing_and_leaves_the_key_free,
    an_answer_whose_event_is_already_there_writes_nothing_and_says_so,
    one_answer_sent_twice_at_once_lands_once,
    two_answers_claiming_one_key_at_once_land_one_and_leave_the_other_pending,
);

/// `e` taken over: its generation advanced past the one its batches carry.
async fn supersede(store: &dyn Store, e: &ExecutionRecord) {
    assert!(
        store
            .advance_generation(TENANT, &e.id, Generation::new(1))
            .await
            .unwrap()
    );
}

/// exec-1 `ready` with turn-1 `running` (its active turn) and a pending question on it.
async fn live_execution(store: &dyn Store) -> (ExecutionRecord, TurnRecord, InteractionRecord) {
    let (mut e, t) = execution_with_turn(store, "exec-1").await;
    e.active_turn_id = Some(t.id.clone());
    assert!(store.update_execution(ExecutionState::Ready, &e).await.unwrap());
    let i = interaction(&t, "question-1", "0");
    store.insert_interaction(&i).await.unwrap();
    (e, t, i)
}

/// Everything live settles as for a lost agent, with one event per row.
fn settlement(e: &ExecutionRecord, t: &TurnRecord, i: &InteractionRecord) -> Batch {
    Batch {
        writes: vec![
            Write::Interaction {
                expected_state: InteractionState::Pending,
                record: InteractionRecord {
                    state: InteractionState::Expired,
                    reason: Some(InteractionReason::ProviderProcessLost),
                    updated_at_ms: T0 + 1,
                    ..i.clone()
                },
            },
            Write::SettleTurn(TurnRecord {
                state: TurnState::Failed,
                failure_reason: Some("agent_exited".into()),
                ended_at_ms: Some(T0 + 1),
                ..t.clone()
            }),
            Write::Execution {
                expected_state: ExecutionState::Ready,
                record: ExecutionRecord {
                    state: ExecutionState::Lost,
                    active_turn_id: None,
                    updated_at_ms: T0 + 1,
                    ..e.clone()
                },
            },
        ],
        events: events(&e.id, e.generation, 1..=2),
    }
}

async fn rows_as_they_are(
    store: &dyn Store,
    e: &ExecutionRecord,
    t: &TurnRecord,
    i: &InteractionRecord,
) -> [&'static str; 3] {
    [
        store
            .get_execution(TENANT, &e.id)
            .await
            .unwrap()
            .unwrap()
            .state
            .as_str(),
        store.get_turn(TENANT, &t.id).await.unwrap().unwrap().state.as_str(),
        store
            .get_interaction(TENANT, &i.id)
            .await
            .unwrap()
            .unwrap()
            .state
            .as_str(),
    ]
}

async fn a_batch_lands_its_writes_and_events_together(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    assert!(store.commit(&settlement(&e, &t, &i)).await.unwrap());
    assert_eq!(
        rows_as_they_are(&*store, &e, &t, &i).await,
        ["lost", "failed", "expired"]
    );
    let execution = store.get_execution(TENANT, &e.id).await.unwrap().unwrap();
    assert_eq!(execution.active_turn_id, None);
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 2);
    assert_eq!(
        store.read_events(&e.id, 0, 9).await.unwrap(),
        events(&e.id, e.generation, 1..=2)
    );
}

async fn a_batch_with_one_stale_write_writes_nothing(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    let mut batch = settlement(&e, &t, &i);
    // The last write expects a state the row is not in: the earlier ones roll back too.
    let Write::Execution { expected_state, .. } = &mut batch.writes[2] else {
        unreachable!()
    };
    *expected_state = ExecutionState::Closing;
    assert!(!store.commit(&batch).await.unwrap());
    assert_eq!(
        rows_as_they_are(&*store, &e, &t, &i).await,
        ["ready", "running", "pending"]
    );
    assert_eq!(
        store.head_sequence(&e.id).await.unwrap(),
        0,
        "no event without its rows"
    );
}

async fn a_batch_of_a_superseded_generation_writes_nothing(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    supersede(&*store, &e).await;
    assert!(!store.commit(&settlement(&e, &t, &i)).await.unwrap());
    assert_eq!(
        rows_as_they_are(&*store, &e, &t, &i).await,
        ["ready", "running", "pending"]
    );
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 0);
}

async fn a_batch_whose_event_is_already_there_writes_nothing(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    store
        .append_events(events(&e.id, e.generation, 2..=2).into())
        .await
        .unwrap();
    assert!(matches!(
        store.commit(&settlement(&e, &t, &i)).await,
        Err(StoreError::Duplicate)
    ));
    assert_eq!(
        rows_as_they_are(&*store, &e, &t, &i).await,
        ["ready", "running", "pending"]
    );
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 2);
}

/// turn-2 of `e` inserted, the execution pointing at it, `turn.started` appended.
fn start_turn(e: &ExecutionRecord, head: i64) -> Batch {
    Batch {
        writes: vec![
            Write::InsertTurn(turn(e, "turn-2", 2)),
            Write::Execution {
                expected_state: ExecutionState::Ready,
                record: ExecutionRecord {
                    active_turn_id: Some("turn-2".into()),
                    turn_count: 2,
                    ..e.clone()
                },
            },
        ],
        events: events(&e.id, e.generation, head + 1..=head + 1),
    }
}

async fn a_batch_starts_a_turn_with_its_execution_row_and_event(store: Arc<dyn Store>) {
    let (e, _) = execution_with_turn(&*store, "exec-1").await;
    assert!(store.commit(&start_turn(&e, 0)).await.unwrap());
    assert_eq!(
        store.get_turn(TENANT, &"turn-2".into()).await.unwrap(),
        Some(turn(&e, "turn-2", 2))
    );
    let execution = store.get_execution(TENANT, &e.id).await.unwrap().unwrap();
    assert_eq!(
        (execution.active_turn_id.as_deref(), execution.turn_count),
        (Some("turn-2"), 2)
    );
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 1);
}

async fn a_batch_inserting_a_taken_identity_writes_nothing(store: Arc<dyn Store>) {
    let (e, t) = execution_with_turn(&*store, "exec-1").await;
    store
        .insert_interaction(&interaction(&t, "question-1", "0"))
        .await
        .unwrap();
    // The agent reused its request id: the second request is refused with its event.
    let reused = Batch {
        writes: vec![Write::InsertInteraction(interaction(&t, "question-2", "0"))],
        events: events(&e.id, e.generation, 1..=1),
    };
    assert!(matches!(store.commit(&reused).await, Err(StoreError::Duplicate)));
    assert_eq!(store.get_interaction(TENANT, &"question-2".into()).await.unwrap(), None);
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 0);
}

async fn a_batch_insert_of_a_superseded_generation_writes_nothing(store: Arc<dyn Store>) {
    let (e, _) = execution_with_turn(&*store, "exec-1").await;
    supersede(&*store, &e).await;
    assert!(!store.commit(&start_turn(&e, 0)).await.unwrap());
    assert_eq!(store.get_turn(TENANT, &"turn-2".into()).await.unwrap(), None);
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 0);
}

/// A key of `operation` for `request_id`, as the engine makes one.
fn call_key(operation: &str, request_id: &str) -> IdempotencyKey {
    IdempotencyKey {
        tenant_id: TENANT.into(),
        operation: operation.into(),
        request_id: request_id.into(),
    }
}

/// The pending question answered, as the `answered` commit writes it.
fn answered(i: &InteractionRecord) -> Write {
    Write::Interaction {
        expected_state: InteractionState::Pending,
        record: InteractionRecord {
            state: InteractionState::Answered,
            updated_at_ms: T0 + 1,
            ..i.clone()
        },
    }
}

async fn a_batch_claiming_a_free_key_lands_with_its_rows_and_completes_it_later(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    let key = call_key("AnswerInteraction", "r-1");
    let claim = Write::ClaimIdempotency {
        key: key.clone(),
        digest: "d".into(),
        token: ClaimToken::new(),
    };
    assert!(
        store
            .commit(&Batch {
                writes: vec![answered(&i), claim],
                events: vec![]
            })
            .await
            .unwrap()
    );
    assert_eq!(rows_as_they_are(&*store, &e, &t, &i).await[2], "answered");
    assert_eq!(
        store.claim_idempotency(&key, "d", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::InFlight,
        "claimed with the answer"
    );
    let complete = Write::CompleteIdempotency {
        key: key.clone(),
        response: serde_json::json!({"interactionId": i.id}),
    };
    assert!(commit_alone(&*store, complete).await);
    assert_eq!(
        store.claim_idempotency(&key, "d", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::Completed(serde_json::json!({"interactionId": i.id}))
    );
}

async fn a_batch_claiming_a_taken_key_writes_nothing_and_says_the_key_is_taken(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    // Taken by another operation: a request id is the tenant's, whatever the RPC.
    let taken = call_key("StartTurn", "r-1");
    assert_eq!(
        store.claim_idempotency(&taken, "d", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::Claimed
    );
    let key = call_key("AnswerInteraction", "r-1");
    for batch in [answer(&i, &key), answer_with_event(&e, &i, &key)] {
        assert!(matches!(store.commit(&batch).await, Err(StoreError::KeyTaken)));
    }
    assert_eq!(
        rows_as_they_are(&*store, &e, &t, &i).await,
        ["ready", "running", "pending"]
    );
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 0, "no event either");
}

/// `i` answered with `key` claimed, as the interaction machine commits it: without events.
fn answer(i: &InteractionRecord, key: &IdempotencyKey) -> Batch {
    Batch {
        writes: vec![
            answered(i),
            Write::ClaimIdempotency {
                key: key.clone(),
                digest: "d".into(),
                token: ClaimToken::new(),
            },
        ],
        events: vec![],
    }
}

/// [`answer`] with an event of `e` (sequence 1) beside it.
fn answer_with_event(e: &ExecutionRecord, i: &InteractionRecord, key: &IdempotencyKey) -> Batch {
    Batch {
        events: events(&e.id, e.generation, 1..=1),
        ..answer(i, key)
    }
}

/// Nothing of an answer to `i` landed: the rows as `live_execution` left them, the head still
/// at `head`, and `key` free (the claim made here is the first).
async fn nothing_of_the_answer_landed(
    store: &dyn Store,
    (e, t, i): (&ExecutionRecord, &TurnRecord, &InteractionRecord),
    key: &IdempotencyKey,
    head: i64,
) {
    assert_eq!(rows_as_they_are(store, e, t, i).await, ["ready", "running", "pending"]);
    assert_eq!(
        store.head_sequence(&e.id).await.unwrap(),
        head,
        "no event of the answer"
    );
    assert_eq!(
        store.claim_idempotency(key, "d", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::Claimed,
        "the key was free"
    );
}

/// `write` committed in a batch of its own, without events; whether it landed.
async fn commit_alone(store: &dyn Store, write: Write) -> bool {
    store
        .commit(&Batch {
            writes: vec![write],
            events: vec![],
        })
        .await
        .unwrap()
}

/// `i` moved on from `from` to `to` at `at`.
fn moved(i: &InteractionRecord, from: InteractionState, to: InteractionState, at: i64) -> Write {
    Write::Interaction {
        expected_state: from,
        record: InteractionRecord {
            state: to,
            updated_at_ms: at,
            ..i.clone()
        },
    }
}

// An answer's two batches (`answered` + claim, `delivered` + completion) are one statement
// each on PostgreSQL (`sql::one_statement`) and a transaction on SQLite: the same outcomes.
async fn an_answer_and_its_delivery_each_land_their_transition_key_and_events_together(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    let key = call_key("AnswerInteraction", "r-1");
    assert!(store.commit(&answer(&i, &key)).await.unwrap());
    assert_eq!(rows_as_they_are(&*store, &e, &t, &i).await[2], "answered");
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 0);
    assert_eq!(
        store.claim_idempotency(&key, "d", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::InFlight
    );
    let answered_row = InteractionRecord {
        state: InteractionState::Answered,
        updated_at_ms: T0 + 1,
        ..i.clone()
    };
    let delivered = Batch {
        writes: vec![
            moved(
                &answered_row,
                InteractionState::Answered,
                InteractionState::Delivered,
                T0 + 2,
            ),
            Write::CompleteIdempotency {
                key: key.clone(),
                response: serde_json::json!({"interactionId": i.id}),
            },
        ],
        events: events(&e.id, e.generation, 1..=2),
    };
    assert!(store.commit(&delivered).await.unwrap());
    assert_eq!(rows_as_they_are(&*store, &e, &t, &i).await[2], "delivered");
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 2);
    assert_eq!(
        store.claim_idempotency(&key, "d", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::Completed(serde_json::json!({"interactionId": i.id}))
    );
}

async fn an_answer_to_an_interaction_that_moved_on_writes_nothing_and_leaves_the_key_free(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    let expired = moved(&i, InteractionState::Pending, InteractionState::Expired, T0 + 1);
    assert!(commit_alone(&*store, expired).await);
    let key = call_key("AnswerInteraction", "r-1");
    for batch in [answer(&i, &key), answer_with_event(&e, &i, &key)] {
        assert!(!store.commit(&batch).await.unwrap(), "nothing landed");
    }
    assert_eq!(rows_as_they_are(&*store, &e, &t, &i).await[2], "expired");
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 0, "no event");
    assert_eq!(
        store.claim_idempotency(&key, "d", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::Claimed,
        "the key was free: this claim is the first"
    );
}

async fn a_delivery_completing_a_key_it_never_claimed_writes_nothing(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    let batch = Batch {
        writes: vec![
            answered(&i),
            Write::CompleteIdempotency {
                key: call_key("AnswerInteraction", "never-claimed"),
                response: serde_json::json!({}),
            },
        ],
        events: events(&e.id, e.generation, 1..=1),
    };
    assert!(!store.commit(&batch).await.unwrap(), "nothing landed");
    assert_eq!(
        rows_as_they_are(&*store, &e, &t, &i).await,
        ["ready", "running", "pending"]
    );
    assert_eq!(store.head_sequence(&e.id).await.unwrap(), 0, "no event");
}

// The transition and the claim would land; the events, of a generation the execution is not
// at, are fenced: nothing lands (on PostgreSQL the statement's third write is refused).
async fn an_answer_whose_events_are_fenced_writes_nothing_and_leaves_the_key_free(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    let key = call_key("AnswerInteraction", "r-1");
    let mut batch = answer(&i, &key);
    batch.events = events(&e.id, e.generation.next(), 1..=1);
    assert!(!store.commit(&batch).await.unwrap(), "nothing landed");
    nothing_of_the_answer_landed(&*store, (&e, &t, &i), &key, 0).await;
}

async fn an_answer_of_a_superseded_generation_writes_nothing_and_leaves_the_key_free(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    supersede(&*store, &e).await;
    let key = call_key("AnswerInteraction", "r-1");
    for batch in [answer(&i, &key), answer_with_event(&e, &i, &key)] {
        assert!(!store.commit(&batch).await.unwrap(), "nothing landed");
    }
    nothing_of_the_answer_landed(&*store, (&e, &t, &i), &key, 0).await;
}

async fn an_answer_whose_event_is_already_there_writes_nothing_and_says_so(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    store
        .append_events(events(&e.id, e.generation, 1..=1).into())
        .await
        .unwrap();
    let key = call_key("AnswerInteraction", "r-1");
    assert!(matches!(
        store.commit(&answer_with_event(&e, &i, &key)).await,
        Err(StoreError::Duplicate)
    ));
    nothing_of_the_answer_landed(&*store, (&e, &t, &i), &key, 1).await;
}

/// `one` and `another` committed at once; exactly one of them landed.
async fn committed_at_once(store: &dyn Store, one: &Batch, another: &Batch) -> [StoreResult<bool>; 2] {
    let (first, second) = tokio::join!(store.commit(one), store.commit(another));
    let outcomes = [first, second];
    assert_eq!(
        outcomes.iter().filter(|o| matches!(o, Ok(true))).count(),
        1,
        "one lands: {outcomes:?}"
    );
    outcomes
}

/// The same answer batch committed twice at once (a retry racing its original): it lands
/// once; the other attempt finds the interaction moved on (or the key taken) and writes
/// nothing.
async fn one_answer_sent_twice_at_once_lands_once(store: Arc<dyn Store>) {
    let (e, t, i) = live_execution(&*store).await;
    let key = call_key("AnswerInteraction", "r-1");
    let batch = answer(&i, &key);
    let outcomes = committed_at_once(&*store, &batch, &batch).await;
    assert!(
        outcomes.iter().all(|o| matches!(o, Ok(_) | Err(StoreError::KeyTaken))),
        "the other writes nothing: {outcomes:?}"
    );
    assert_eq!(rows_as_they_are(&*store, &e, &t, &i).await[2], "answered");
    assert_eq!(
        store.claim_idempotency(&key, "d", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::InFlight
    );
}

/// Two pending questions answered at once under one request id: the key is claimed once,
/// and the answer that lost the claim leaves its question pending.
async fn two_answers_claiming_one_key_at_once_land_one_and_leave_the_other_pending(store: Arc<dyn Store>) {
    let (_, t, i) = live_execution(&*store).await;
    let other = interaction(&t, "question-2", "1");
    store.insert_interaction(&other).await.unwrap();
    let key = call_key("AnswerInteraction", "r-1");
    let (one, another) = (answer(&i, &key), answer(&other, &key));
    let outcomes = committed_at_once(&*store, &one, &another).await;
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| matches!(o, Err(StoreError::KeyTaken)))
            .count(),
        1,
        "the other finds the key taken: {outcomes:?}"
    );
    let mut states = Vec::new();
    for id in [&i.id, &other.id] {
        states.push(store.get_interaction(TENANT, id).await.unwrap().unwrap().state);
    }
    states.sort_by_key(|s| s.as_str());
    assert_eq!(states, [InteractionState::Answered, InteractionState::Pending]);
}

/// An answer's one statement whose session the server ends while it waits (here on a row lock
/// another session holds) fails with the server's own error, so it surely did not commit; a
/// caller with patience retries it as the transaction, which lands once the lock is free.
/// (A connection lost without the server's word, which may have committed, is not staged
/// here: the transaction then first looks for the batch.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_answer_whose_session_is_ended_mid_statement_lands_through_the_transaction() {
    use sqlx::Connection;
    let (scratch, url) = crate::backends::Scratch::postgres().await;
    let store = SqlStore::connect(&url).await.unwrap();
    let (e, t, i) = live_execution(&store).await;
    let mut holder = holding_row(&url, "interactions", i.id.as_str()).await;
    let key = call_key("AnswerInteraction", "r-1");
    let patient = store.with_patience(Patience::For(std::time::Duration::from_secs(10)));
    let batch = answer(&i, &key);
    let committing = tokio::spawn(async move { patient.commit(&batch).await });
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let waiting = crate::link::wait_for_a_statement_waiting_on_a_lock(&mut admin, "WITH w0 AS%").await;
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(waiting)
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    assert!(committing.await.unwrap().unwrap(), "landed on the retry");
    assert_eq!(rows_as_they_are(&store, &e, &t, &i).await[2], "answered");
    assert_eq!(
        store.claim_idempotency(&key, "d", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::InFlight,
        "claimed once, by the answer"
    );
    drop((holder, admin, store));
    scratch.remove().await;
}

/// An answer's statement whose connection is lost in transit, without the server's word,
/// may have committed: here it did (the server ran it to its end once the held row was
/// free). The transaction tried next finds the interaction moved on, looks for the batch,
/// finds it, and reports the answer landed, so the answer reaches the agent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_answer_whose_connection_is_lost_after_it_was_sent_and_that_committed_is_reported_landed() {
    use sqlx::Connection;
    let (scratch, url) = crate::backends::Scratch::postgres().await;
    let link = crate::link::Link::to(&url).await;
    let store = SqlStore::connect(&link.url).await.unwrap();
    let (e, t, i) = live_execution(&store).await;
    let mut holder = holding_row(&url, "interactions", i.id.as_str()).await;
    let key = call_key("AnswerInteraction", "r-1");
    let batch = answer(&i, &key);
    // No patience: only a failure that may have committed is tried again.
    let impatient = store.with_patience(Patience::None);
    let committing = tokio::spawn(async move { impatient.commit(&batch).await });
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let waiting = crate::link::wait_for_a_statement_waiting_on_a_lock(&mut admin, "WITH w0 AS%").await;
    link.cut_the_session(&mut admin, waiting).await;
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    assert!(committing.await.unwrap().unwrap(), "reported landed");
    assert_eq!(rows_as_they_are(&store, &e, &t, &i).await[2], "answered");
    assert_eq!(
        store.claim_idempotency(&key, "d", &ClaimToken::new()).await.unwrap(),
        IdempotencyClaim::InFlight,
        "claimed once, by the answer"
    );
    drop((holder, admin, store, link));
    scratch.remove().await;
}

/// A session of its own holding the row of `table` whose id is `id` locked in an open
/// transaction.
async fn holding_row(url: &str, table: &str, id: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut holder = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT 1 FROM {table} WHERE id = $1 FOR UPDATE"
    )))
    .bind(id)
    .execute(&mut holder)
    .await
    .unwrap();
    holder
}

/// A generation advance (a takeover's fence) whose connection is lost in transit after it
/// committed is reported made: its retry finds the generation moved on, by this replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_generation_advance_lost_in_transit_after_it_committed_is_reported_made() {
    use sqlx::Connection;
    let (scratch, url) = crate::backends::Scratch::postgres().await;
    let link = crate::link::Link::to(&url).await;
    let store = SqlStore::connect(&link.url).await.unwrap();
    let (e, _, _) = live_execution(&store).await;
    let mut holder = holding_row(&url, "executions", e.id.as_str()).await;
    let patient = store.with_patience(Patience::For(std::time::Duration::from_secs(10)));
    let id = e.id.clone();
    let advancing = tokio::spawn(async move { patient.advance_generation(TENANT, &id, Generation::new(1)).await });
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let waiting =
        crate::link::wait_for_a_statement_waiting_on_a_lock(&mut admin, "UPDATE executions SET generation%").await;
    link.cut_the_session(&mut admin, waiting).await;
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    assert!(advancing.await.unwrap().unwrap(), "reported made");
    let now = store.get_execution(TENANT, &e.id).await.unwrap().unwrap();
    assert_eq!(now.generation, Generation::new(2), "advanced once");
    drop((holder, admin, store, link));
    scratch.remove().await;
}
