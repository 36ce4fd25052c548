//! Replicas (`docs/scale-out.md` §1): registration, the heartbeat's lease on the
//! database's clock, the name lock, what a replica owns, and what its start-up settles.

use std::sync::Arc;
use std::time::Duration;

use cursor_runner_domain::placement::WarmKey;
use cursor_runner_store::*;
use serde_json::json;
use sqlx::Connection;

use crate::backends::{Backend, Scratch, run};
use crate::fixtures::*;

on_every_backend!(
    an_execution_belongs_to_the_replica_that_inserted_it_or_gave_it_a_new_generation,
    in_flight_calls_are_completed_only_for_the_incarnation_that_claimed_them,
    a_key_this_incarnation_holds_is_found_in_flight_here_and_another_s_in_flight,
    a_claim_taken_on_by_another_call_of_this_incarnation_is_released_by_that_call_only,
    a_release_lets_go_of_this_incarnation_s_claim_only,
    an_ended_replica_renews_its_lease_no_more,
    an_owner_is_read_with_its_advertised_address_and_whether_it_serves,
);

/// The pre-scale-out sole-service lock's key (`sql/replica.rs`).
const SOLE_SERVICE_LOCK_KEY: i64 = 0x6375_7273_6f72_2d72;

fn lease(length: Duration) -> LeaseTerms {
    LeaseTerms {
        length,
        renew_timeout: Duration::from_secs(2),
        self_fence_margin: Duration::ZERO,
    }
}

async fn an_execution_belongs_to_the_replica_that_inserted_it_or_gave_it_a_new_generation(store: Arc<dyn Store>) {
    store.insert_execution(&execution("legacy")).await.unwrap();
    assert_eq!(
        store.execution_owner(TENANT, &"legacy".into()).await.unwrap(),
        Some(ExecutionOwner {
            incarnation: LEGACY_INCARNATION.into(),
            name: "pre-scale-out".into(),
            address: None,
            serving: false,
        })
    );
    let me = store.register_replica("replica-a", None, terms()).await.unwrap();
    store.insert_execution(&execution("mine")).await.unwrap();
    let mine = ExecutionOwner {
        incarnation: me.incarnation.clone(),
        name: "replica-a".into(),
        address: None,
        serving: true,
    };
    assert_eq!(
        store.execution_owner(TENANT, &"mine".into()).await.unwrap(),
        Some(mine.clone())
    );
    // A new lease (recovery on this replica) moves the execution to it.
    assert!(
        store
            .advance_generation(TENANT, &"legacy".into(), Generation::new(1))
            .await
            .unwrap()
    );
    assert_eq!(
        store.execution_owner(TENANT, &"legacy".into()).await.unwrap(),
        Some(mine)
    );
    assert_eq!(store.execution_owner(OTHER_TENANT, &"mine".into()).await.unwrap(), None);
    assert_eq!(store.execution_owner(TENANT, &"unknown".into()).await.unwrap(), None);
}

/// Where forwarded calls go is the owner's advertised address, read with whether its
/// lease is live: an ended owner is named but no longer serves.
async fn an_owner_is_read_with_its_advertised_address_and_whether_it_serves(store: Arc<dyn Store>) {
    store
        .register_replica("replica-a", Some("10.0.0.7:50052"), terms())
        .await
        .unwrap();
    store.insert_execution(&execution("mine")).await.unwrap();
    let owner = store.execution_owner(TENANT, &"mine".into()).await.unwrap().unwrap();
    assert_eq!(
        (owner.address.as_deref(), owner.serving),
        (Some("10.0.0.7:50052"), true)
    );
    store.end_replica().await.unwrap();
    let owner = store.execution_owner(TENANT, &"mine".into()).await.unwrap().unwrap();
    assert_eq!(
        (owner.name.as_str(), owner.address.as_deref(), owner.serving),
        ("replica-a", Some("10.0.0.7:50052"), false)
    );
}

fn key(request_id: &str) -> IdempotencyKey {
    IdempotencyKey {
        tenant_id: TENANT.into(),
        operation: "StartTurn".into(),
        request_id: request_id.into(),
    }
}

/// A call that cannot tell whether its first commit (which claims its key) landed lets the
/// key go: only its own claim, never another incarnation's call in flight.
async fn a_release_lets_go_of_this_incarnation_s_claim_only(store: Arc<dyn Store>) {
    let (legacy, mine) = (ClaimToken::new(), ClaimToken::new());
    store.claim_idempotency(&key("legacy"), "d", &legacy).await.unwrap();
    store.register_replica("replica-a", None, terms()).await.unwrap();
    store.claim_idempotency(&key("mine"), "d", &mine).await.unwrap();
    store.release_idempotency(&key("legacy"), &legacy).await.unwrap();
    store.release_idempotency(&key("mine"), &mine).await.unwrap();
    assert_eq!(
        store.find_idempotency(&key("legacy"), "d").await.unwrap(),
        Some(IdempotencyClaim::InFlight),
        "another incarnation's claim stays"
    );
    assert_eq!(store.find_idempotency(&key("mine"), "d").await.unwrap(), None);
}

/// A key held in flight by this registered incarnation is found held here (its call may be
/// one whose claim committed as its reply was lost); held by any other, even the legacy
/// incarnation every unregistered process writes as, it is in flight elsewhere.
async fn a_key_this_incarnation_holds_is_found_in_flight_here_and_another_s_in_flight(store: Arc<dyn Store>) {
    assert_eq!(
        store
            .claim_idempotency(&key("legacy"), "d", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::Claimed
    );
    assert_eq!(
        store
            .claim_idempotency(&key("legacy"), "d", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::InFlight,
        "unregistered, a store is no incarnation of its own"
    );
    store.register_replica("replica-a", None, terms()).await.unwrap();
    assert_eq!(
        store
            .claim_idempotency(&key("mine"), "d", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::Claimed
    );
    assert_eq!(
        store
            .claim_idempotency(&key("mine"), "d", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::InFlightHere
    );
    assert_eq!(
        store.find_idempotency(&key("mine"), "d").await.unwrap(),
        Some(IdempotencyClaim::InFlightHere)
    );
    assert_eq!(
        store
            .claim_idempotency(&key("mine"), "another body", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::DigestMismatch { held: "d".into() }
    );
    assert_eq!(
        store
            .claim_idempotency(&key("legacy"), "d", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::InFlight
    );
}

/// A call of this incarnation takes on its own claim of the key another call of it left:
/// the claim is the taker's from then on, so the call that left it can no longer let it
/// go. An unregistered store has no claim of its own to take on.
async fn a_claim_taken_on_by_another_call_of_this_incarnation_is_released_by_that_call_only(store: Arc<dyn Store>) {
    let (left, taker) = (ClaimToken::new(), ClaimToken::new());
    store.claim_idempotency(&key("legacy"), "d", &left).await.unwrap();
    assert!(!store.adopt_idempotency(&key("legacy"), &taker).await.unwrap());
    store.register_replica("replica-a", None, terms()).await.unwrap();
    store.claim_idempotency(&key("mine"), "d", &left).await.unwrap();
    assert_eq!(
        store.claim_idempotency(&key("mine"), "d", &taker).await.unwrap(),
        IdempotencyClaim::InFlightHere
    );
    assert!(store.adopt_idempotency(&key("mine"), &taker).await.unwrap());
    store.release_idempotency(&key("mine"), &left).await.unwrap();
    assert_eq!(
        store.find_idempotency(&key("mine"), "d").await.unwrap(),
        Some(IdempotencyClaim::InFlightHere),
        "the call that left it lets go of it no more"
    );
    assert!(
        !store.adopt_idempotency(&key("legacy"), &taker).await.unwrap(),
        "not this incarnation's"
    );
    store.release_idempotency(&key("mine"), &taker).await.unwrap();
    assert_eq!(store.find_idempotency(&key("mine"), "d").await.unwrap(), None);
    assert!(
        !store.adopt_idempotency(&key("mine"), &taker).await.unwrap(),
        "none left"
    );
}

async fn in_flight_calls_are_completed_only_for_the_incarnation_that_claimed_them(store: Arc<dyn Store>) {
    store
        .claim_idempotency(&key("legacy"), "d", &ClaimToken::new())
        .await
        .unwrap();
    let me = store.register_replica("replica-a", None, terms()).await.unwrap();
    assert_eq!(me.predecessors.first().map(String::as_str), Some(LEGACY_INCARNATION));
    store
        .claim_idempotency(&key("mine"), "d", &ClaimToken::new())
        .await
        .unwrap();
    let interrupted = json!({"error": "REQUEST_INTERRUPTED"});
    assert_eq!(
        store
            .complete_abandoned_idempotency(LEGACY_INCARNATION, &interrupted)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .claim_idempotency(&key("legacy"), "d", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::Completed(interrupted.clone())
    );
    assert_eq!(
        store
            .claim_idempotency(&key("mine"), "d", &ClaimToken::new())
            .await
            .unwrap(),
        IdempotencyClaim::InFlightHere,
        "a live replica's call is never completed for it"
    );
    assert_eq!(
        store
            .complete_abandoned_idempotency("another-incarnation", &interrupted)
            .await
            .unwrap(),
        0
    );
}

async fn an_ended_replica_renews_its_lease_no_more(store: Arc<dyn Store>) {
    let registered = store.register_replica("replica-a", None, terms()).await.unwrap();
    let Renewal::Held { lease_until_ms } = store.renew_replica_lease().await.unwrap() else {
        panic!("a live lease is renewed");
    };
    assert!(lease_until_ms >= registered.lease_until_ms);
    store.end_replica().await.unwrap();
    assert_eq!(store.renew_replica_lease().await.unwrap(), Renewal::Lost);
}

/// Renews every `every` for `for_`, asserting each renewal held and extended the lease.
async fn renew_for(store: &dyn Store, every: Duration, for_: Duration) -> i64 {
    let until = tokio::time::Instant::now() + for_;
    let mut last = 0;
    while tokio::time::Instant::now() < until {
        match store.renew_replica_lease().await.unwrap() {
            Renewal::Held { lease_until_ms } => {
                assert!(lease_until_ms >= last, "a renewal never shortens the lease");
                last = lease_until_ms;
            }
            Renewal::Lost => panic!("a lease renewed well within its length was lost"),
        }
        tokio::time::sleep(every).await;
    }
    last
}

async fn a_heartbeat_extends_only_a_live_lease_and_never_revives_an_expired_one(store: Arc<dyn Store>) {
    let length = Duration::from_millis(600);
    let registered = store.register_replica("replica-a", None, lease(length)).await.unwrap();
    // Renewed for three lease lengths: it outlives its first end only by being extended.
    let extended = renew_for(&*store, length / 4, length * 3).await;
    assert!(extended >= registered.lease_until_ms + 2 * 600);
    // A freeze past the lease: it ended, and no later heartbeat brings it back.
    tokio::time::sleep(length * 2).await;
    for _ in 0..3 {
        assert_eq!(store.renew_replica_lease().await.unwrap(), Renewal::Lost);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_heartbeat_extends_only_a_live_lease_and_never_revives_an_expired_one() {
    run(
        Backend::Memory,
        a_heartbeat_extends_only_a_live_lease_and_never_revives_an_expired_one,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_heartbeat_extends_only_a_live_lease_and_never_revives_an_expired_one() {
    run(
        Backend::Postgres,
        a_heartbeat_extends_only_a_live_lease_and_never_revives_an_expired_one,
    )
    .await;
}

async fn execute(url: &str, statement: &str) {
    let mut connection = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
        .execute(&mut connection)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    connection.close().await.unwrap();
}

/// The database's clock an hour ahead of this process's: `clock_timestamp()` shadowed in
/// `public`, which the database's search path puts before `pg_catalog`.
async fn skew_database_clock(url: &str, database: &str) {
    execute(
        url,
        "CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE sql \
         AS $$ SELECT pg_catalog.clock_timestamp() + interval '1 hour' $$",
    )
    .await;
    execute(
        url,
        &format!("ALTER DATABASE {database} SET search_path = public, pg_catalog"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_lease_is_measured_on_the_database_clock() {
    let (scratch, url) = Scratch::postgres().await;
    let database = url.rsplit('/').next().unwrap().to_owned();
    skew_database_clock(&url, &database).await;
    let store = SqlStore::connect(&url).await.unwrap();
    let hour = 3_600_000;
    let length = Duration::from_secs(10);
    let before = now_ms();
    let registered = store.register_replica("replica-a", None, lease(length)).await.unwrap();
    let Renewal::Held { lease_until_ms } = store.renew_replica_lease().await.unwrap() else {
        panic!("a live lease is renewed");
    };
    let after = now_ms();
    for until in [registered.lease_until_ms, lease_until_ms] {
        assert!(
            until >= before + hour + 10_000 && until <= after + hour + 10_000,
            "the lease ends {} ms after this process's now, not an hour and 10 s (the database's)",
            until - before
        );
    }
    drop(store);
    scratch.remove().await;
}

async fn register_when_free(store: &SqlStore, name: &str) -> Registration {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match store.register_replica(name, None, terms()).await {
            Err(StoreError::ReplicaNameInUse(_)) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other.unwrap(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_replica_name_is_held_by_one_live_process_and_its_successor_ends_the_predecessor() {
    let (scratch, url) = Scratch::postgres().await;
    let first = SqlStore::connect(&url).await.unwrap();
    let a = first.register_replica("a", None, terms()).await.unwrap();
    assert_eq!(a.predecessors, [LEGACY_INCARNATION]);
    let second = SqlStore::connect(&url).await.unwrap();
    assert!(matches!(
        second.register_replica("a", None, terms()).await,
        Err(StoreError::ReplicaNameInUse(name)) if name == "a"
    ));
    let b = second.register_replica("b", None, terms()).await.unwrap();
    assert_eq!(
        b.predecessors,
        [LEGACY_INCARNATION],
        "another name's replica is no predecessor"
    );
    // The first one's session dies (a SIGKILL, a partition): its name is free again.
    terminate_identity_session(&url, "a").await;
    let third = SqlStore::connect(&url).await.unwrap();
    let successor = register_when_free(&third, "a").await;
    assert_eq!(successor.predecessors, [LEGACY_INCARNATION.to_owned(), a.incarnation]);
    assert_eq!(
        first.renew_replica_lease().await.unwrap(),
        Renewal::Lost,
        "an ended predecessor never gets its lease back"
    );
    assert!(matches!(
        third.renew_replica_lease().await.unwrap(),
        Renewal::Held { .. }
    ));
    assert!(matches!(
        second.renew_replica_lease().await.unwrap(),
        Renewal::Held { .. }
    ));
    drop((first, second, third));
    scratch.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replicas_share_a_database_with_each_other_but_never_with_a_pre_scale_out_service() {
    let (scratch, url) = Scratch::postgres().await;
    // A pre-scale-out service holds the sole-service lock exclusively.
    let mut old = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(SOLE_SERVICE_LOCK_KEY)
        .execute(&mut old)
        .await
        .unwrap();
    let store = SqlStore::connect(&url).await.unwrap();
    assert!(matches!(
        store.register_replica("a", None, terms()).await,
        Err(StoreError::AnotherService)
    ));
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(SOLE_SERVICE_LOCK_KEY)
        .execute(&mut old)
        .await
        .unwrap();
    store.register_replica("a", None, terms()).await.unwrap();
    let other = SqlStore::connect(&url).await.unwrap();
    other.register_replica("b", None, terms()).await.unwrap();
    // And an old binary starting beside them is refused.
    let (locked,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
        .bind(SOLE_SERVICE_LOCK_KEY)
        .fetch_one(&mut old)
        .await
        .unwrap();
    assert!(!locked, "a pre-scale-out service would settle the replicas' work");
    old.close().await.unwrap();
    drop((store, other));
    scratch.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_one_process_serves_a_file_with_a_lease_that_never_ends_and_settles_every_predecessor() {
    let (_scratch, url) = Scratch::sqlite();
    let first = SqlStore::connect(&url).await.unwrap();
    let a = first
        .register_replica("a", None, lease(Duration::from_millis(1)))
        .await
        .unwrap();
    assert_eq!(a.lease_until_ms, i64::MAX);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        first.renew_replica_lease().await.unwrap(),
        Renewal::Held {
            lease_until_ms: i64::MAX
        }
    );
    let second = SqlStore::connect(&url).await.unwrap();
    assert!(matches!(
        second.register_replica("b", None, terms()).await,
        Err(StoreError::AnotherService)
    ));
    drop(second);
    // The first one dies without ending: whatever its name, the next one settles its work.
    drop(first);
    let third = SqlStore::connect(&url).await.unwrap();
    let next = third.register_replica("b", None, terms()).await.unwrap();
    assert_eq!(next.predecessors, [LEGACY_INCARNATION.to_owned(), a.incarnation]);
}

/// Terminates the session holding replica `name`'s advisory lock.
async fn terminate_identity_session(url: &str, name: &str) {
    execute(
        url,
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' \
             AND mode = 'ExclusiveLock' AND granted AND objsubid = 1 AND objid::text::bigint = \
             (hashtextextended('cursor-runner/replica/{name}', 0) & 4294967295) \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ),
    )
    .await;
}

/// Renews until a renewal holds (failures meanwhile are fine; a lost lease is not).
async fn renewed_within(store: &SqlStore, limit: Duration) -> i64 {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match store.renew_replica_lease().await {
            Ok(Renewal::Held { lease_until_ms }) => return lease_until_ms,
            Ok(Renewal::Lost) => panic!("a live lease was lost"),
            Err(e) if tokio::time::Instant::now() < deadline => {
                assert!(e.is_transient(), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("never renewed: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_renewal_held_up_past_its_timeout_fails_and_neither_it_nor_a_lost_connection_loses_the_lease() {
    let (scratch, url) = Scratch::postgres().await;
    let store = SqlStore::connect(&url).await.unwrap();
    let renew_timeout = Duration::from_millis(300);
    let terms = LeaseTerms {
        length: Duration::from_secs(60),
        renew_timeout,
        self_fence_margin: Duration::from_secs(2),
    };
    let registered = store.register_replica("a", None, terms).await.unwrap();
    // Another session holds the replica's row: the heartbeat's UPDATE waits on it.
    let mut blocker = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("SELECT 1 FROM replicas WHERE incarnation = $1 FOR UPDATE")
        .bind(&registered.incarnation)
        .execute(&mut blocker)
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let held_up = store.renew_replica_lease().await;
    let took = started.elapsed();
    assert!(matches!(held_up, Err(StoreError::Unavailable(_))), "{held_up:?}");
    // The server times the statement on its own clock (`statement_timeout`, which can end a
    // fraction of a millisecond before this process's monotonic clock says it should: seen at
    // 299.76 ms of 300), so the lower bound allows a tenth.
    assert!(
        took >= renew_timeout * 9 / 10 && took < renew_timeout * 2,
        "gave up after {took:?}, not at its timeout"
    );
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    blocker.close().await.unwrap();
    // The connection and its locks were kept: the next renewal holds at once.
    assert!(matches!(
        store.renew_replica_lease().await.unwrap(),
        Renewal::Held { .. }
    ));
    // The identity session dies (a database restart, a dropped connection): re-opened,
    // its locks re-taken, the lease renewed.
    terminate_identity_session(&url, "a").await;
    let until = renewed_within(&store, Duration::from_secs(10)).await;
    assert!(until >= registered.lease_until_ms);
    let other = SqlStore::connect(&url).await.unwrap();
    assert!(
        matches!(
            other.register_replica("a", None, terms).await,
            Err(StoreError::ReplicaNameInUse(_))
        ),
        "the re-opened connection holds the name again"
    );
    drop((store, other));
    scratch.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_predecessor_that_ended_while_it_still_owned_live_work_is_a_predecessor_of_its_successor() {
    let (scratch, url) = Scratch::postgres().await;
    let first = SqlStore::connect(&url).await.unwrap();
    let ended = first.register_replica("a", None, terms()).await.unwrap();
    execution_with_turn(&first, "e").await;
    // Its clean exit ends it, though closing its execution was refused.
    first.end_replica().await.unwrap();
    drop(first);
    let successor = register_when_free(&SqlStore::connect(&url).await.unwrap(), "a").await;
    assert!(
        successor.predecessors.contains(&ended.incarnation),
        "its successor settles what it left: {:?}",
        successor.predecessors
    );
    scratch.remove().await;
}

/// A new execution goes to a replica that serves and takes forwarded calls, the one owning
/// the fewest live executions first; never to this one, an ended or draining one, or one
/// without an address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_placement_targets_serving_replicas_with_an_address_least_loaded_first() {
    let (scratch, url) = Scratch::postgres().await;
    let me = SqlStore::connect(&url).await.unwrap();
    me.register_replica("replica-me", Some("10.0.0.1:50052"), terms())
        .await
        .unwrap();
    assert_eq!(
        me.placement_targets(3, None).await.unwrap(),
        Vec::new(),
        "no other replica yet"
    );
    let busy = SqlStore::connect(&url).await.unwrap();
    busy.register_replica("replica-busy", Some("10.0.0.2:50052"), terms())
        .await
        .unwrap();
    busy.insert_execution(&execution("busy-1")).await.unwrap();
    let idle = SqlStore::connect(&url).await.unwrap();
    idle.register_replica("replica-idle", Some("10.0.0.3:50052"), terms())
        .await
        .unwrap();
    let unaddressed = SqlStore::connect(&url).await.unwrap();
    unaddressed
        .register_replica("replica-unaddressed", None, terms())
        .await
        .unwrap();
    let ended = SqlStore::connect(&url).await.unwrap();
    ended
        .register_replica("replica-ended", Some("10.0.0.5:50052"), terms())
        .await
        .unwrap();
    ended.end_replica().await.unwrap();
    let target = |name: &str, address: &str| ReplicaAddress {
        name: name.into(),
        address: address.into(),
    };
    assert_eq!(
        me.placement_targets(3, None).await.unwrap(),
        vec![
            target("replica-idle", "10.0.0.3:50052"),
            target("replica-busy", "10.0.0.2:50052")
        ]
    );
    assert_eq!(
        me.placement_targets(1, None).await.unwrap(),
        vec![target("replica-idle", "10.0.0.3:50052")],
        "at most the limit"
    );
    idle.mark_replica_draining().await.unwrap();
    assert_eq!(
        me.placement_targets(3, None).await.unwrap(),
        vec![target("replica-busy", "10.0.0.2:50052")],
        "a draining replica takes no new execution"
    );
    assert!(
        me.execution_owner(TENANT, &"busy-1".into())
            .await
            .unwrap()
            .unwrap()
            .serving,
        "a draining replica still serves what it owns"
    );
    drop((me, busy, idle, unaddressed, ended));
    scratch.remove().await;
}

/// A replica that published the warm key a new execution wants is tried first, however
/// loaded; one that published other keys, or took its key back, is ranked by load alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_placement_targets_a_replica_holding_the_wanted_warm_key_first() {
    let (scratch, url) = Scratch::postgres().await;
    let me = SqlStore::connect(&url).await.unwrap();
    me.register_replica("replica-me", Some("10.0.0.1:50052"), terms())
        .await
        .unwrap();
    let warm = SqlStore::connect(&url).await.unwrap();
    warm.register_replica("replica-warm", Some("10.0.0.2:50052"), terms())
        .await
        .unwrap();
    warm.insert_execution(&execution("warm-1")).await.unwrap();
    let other = SqlStore::connect(&url).await.unwrap();
    other
        .register_replica("replica-other", Some("10.0.0.3:50052"), terms())
        .await
        .unwrap();
    let wanted = WarmKey::of(TENANT, None, None);
    let elsewhere = WarmKey::of("another-tenant", None, None);
    warm.publish_warm_keys(&[elsewhere.clone(), wanted.clone()])
        .await
        .unwrap();
    other.publish_warm_keys(std::slice::from_ref(&elsewhere)).await.unwrap();
    let names = |targets: Vec<ReplicaAddress>| targets.into_iter().map(|t| t.name).collect::<Vec<_>>();

    assert_eq!(
        names(me.placement_targets(3, Some(&wanted)).await.unwrap()),
        ["replica-warm", "replica-other"],
        "the warm one first, though it owns more"
    );
    assert_eq!(
        names(me.placement_targets(3, None).await.unwrap()),
        ["replica-other", "replica-warm"],
        "no key wanted: the least loaded first"
    );
    warm.publish_warm_keys(&[]).await.unwrap();
    assert_eq!(
        names(me.placement_targets(3, Some(&wanted)).await.unwrap()),
        ["replica-other", "replica-warm"],
        "a key taken back no longer counts"
    );
    drop((me, warm, other));
    scratch.remove().await;
}
