//! What every store promises: the [`Store`] trait, its errors, and how long an
//! operation waits out an unavailable database ([`Patience`]).

use crate::batch::Batch;
use crate::records::*;
use crate::replica::*;
use crate::transient;
use cursor_runner_domain::placement::WarmKey;
use cursor_runner_domain::state::{ExecutionState, InteractionState};
use std::sync::Arc;

use async_trait::async_trait;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(String),
    /// A failure that says nothing about the request and may pass: the connection was
    /// refused or reset, the server is shutting down, the pool had no connection in time, or
    /// the database asked for the transaction to be retried. (A session the server says it
    /// ended is [`StoreError::SessionLost`].)
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// A transient failure of one pooled session: the server said it ended it (a restart, a
    /// terminated backend), rolling back what it ran. Another connection may serve at once.
    #[error("the store is unavailable: its database session was lost: {0}")]
    SessionLost(String),
    #[error("a row with this identity already exists")]
    Duplicate,
    /// The write carried a generation that is no longer the execution's: another
    /// lease (another process, or another replica) owns it now.
    #[error("the execution's generation moved on; this write was refused")]
    Fenced,
    /// This replica's ownership lease passed its local deadline without a renewal: it
    /// writes nothing more (the refusal is local, with no round trip).
    #[error("this replica lost its ownership lease: it writes nothing more and is exiting")]
    LeaseEnded,
    /// A batch's [`Write::ClaimIdempotency`](crate::Write::ClaimIdempotency) found its key
    /// taken: nothing of the batch landed.
    #[error("the request id was claimed already; nothing was written")]
    KeyTaken,
    #[error("migration failed: {0}")]
    Migration(String),
    #[error("invalid database URL `{0}`: expected postgres://… or sqlite:…")]
    UnsupportedUrl(String),
    /// Another service process holds this database alone: any other one on an embedded
    /// SQLite file, or on PostgreSQL one from before replicas could share a database.
    #[error(
        "another cursor-runner serves this database alone (on SQLite: any other service; on \
         PostgreSQL: one from before replicas could share a database, so stop it first: the \
         first upgrade to replicas is a Recreate)"
    )]
    AnotherService,
    /// A live process already serves under this replica name.
    #[error(
        "replica name `{0}` is in use by a live process on this database; give each replica its \
         own --replica-name (the pod name), or wait for the other one to exit"
    )]
    ReplicaNameInUse(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => Self::Duplicate,
            // sqlx 0.9's `try_from` loses the conversion's own message ("unprintable
            // error"), so say what is known: which column this version cannot read.
            sqlx::Error::ColumnDecode { index, .. } => Self::Database(format!(
                "column `{index}` holds a value this version does not know (written by a newer version?)"
            )),
            _ if transient::is_lost_session(&e) => Self::SessionLost(e.to_string()),
            _ if transient::is_transient(&e) => Self::Unavailable(e.to_string()),
            _ => Self::Database(e.to_string()),
        }
    }
}

impl StoreError {
    /// Whether the same operation may succeed if tried again later.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::SessionLost(_))
    }
}

/// How long a store operation keeps retrying transient failures ([`StoreError::Unavailable`])
/// before it reports one. Retries back off from `RETRY_FIRST_DELAY` to `RETRY_MAX_DELAY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patience {
    /// Report the first one: a caller is waiting and is better served by a fast, typed
    /// `UNAVAILABLE` it can retry.
    None,
    /// Retry for up to this long: an execution's own writes ride out a short outage
    /// (a database restart) instead of failing a healthy execution.
    For(std::time::Duration),
    /// Retry until the store answers: a settlement that must land once it is back.
    UntilBack,
}

/// The first pause before a transient failure is retried.
pub const RETRY_FIRST_DELAY: std::time::Duration = std::time::Duration::from_millis(50);
/// The longest pause between two attempts.
pub const RETRY_MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

pub type StoreResult<T> = Result<T, StoreError>;

/// The one execution and generation a group of events belongs to (`None`: no events);
/// refused when they mix executions or generations.
pub(crate) fn one_execution_and_generation(events: &[EventRecord]) -> StoreResult<Option<(&str, Generation)>> {
    let Some(first) = events.first() else {
        return Ok(None);
    };
    if events
        .iter()
        .any(|e| e.execution_id != first.execution_id || e.generation != first.generation)
    {
        return Err(StoreError::Database(
            "one append carries one execution's events of one generation".into(),
        ));
    }
    Ok(Some((&first.execution_id, first.generation)))
}

impl crate::replica::OwnerFence {
    /// [`StoreError::LeaseEnded`] once the lease's local deadline has passed (no round trip).
    pub(crate) fn owner_write_allowed(&self) -> StoreResult<()> {
        if self.held_now() {
            Ok(())
        } else {
            Err(StoreError::LeaseEnded)
        }
    }
}

/// Told about each store operation (for latency and error metrics).
pub trait StoreObserver: Send + Sync {
    /// `operation` is the `Store` method's name: a small closed set.
    fn observed(&self, operation: &'static str, took: std::time::Duration, ok: bool);
}

/// What a claim on an idempotency key found.
#[derive(Debug, Clone, PartialEq)]
pub enum IdempotencyClaim {
    /// The key is new and now belongs to the caller.
    Claimed,
    /// Another call with the same key and body is still running.
    InFlight,
    /// The key is held in flight, with the same body, by a claim of this store's own
    /// registered incarnation: a call of this process's, running or over (its claim
    /// committed, and the reply that would have told it so was lost). A caller that runs
    /// one call per key takes it on with [`Store::adopt_idempotency`].
    InFlightHere,
    /// The same key and body completed before; here is its stored response.
    Completed(serde_json::Value),
    /// The key was used with a different request body: `held` is the digest it holds (its
    /// caller may tell another body on the same subject from another request).
    DigestMismatch { held: String },
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// `postgres` or `sqlite`.
    fn backend(&self) -> &'static str;

    /// Reports every later operation (its method name, duration and success) to
    /// `observer`; the first observer set stays.
    fn observe_with(&self, observer: Arc<dyn StoreObserver>);

    /// The same store (same connections, observer and claim) whose operations retry
    /// transient failures as `patience` says. A fresh store has [`Patience::None`].
    fn with_patience(&self, patience: Patience) -> Arc<dyn Store>;

    /// Registers this process as replica `name`, with a new incarnation whose lease runs
    /// for `terms.length` on the database's clock, and ends its predecessors (see
    /// [`Registration::predecessors`]). It holds, for as long as it lives, a shared lock
    /// a pre-scale-out service's exclusive one excludes, and its name's lock (PostgreSQL
    /// advisory locks on a dedicated connection; an exclusive lock on a file beside the
    /// SQLite database). [`StoreError::AnotherService`] or [`StoreError::ReplicaNameInUse`]
    /// while another process holds them. Later inserts and new generations of executions,
    /// and idempotency claims, are this incarnation's. `address` is where other replicas
    /// forward calls for its executions (`None`: nowhere).
    async fn register_replica(&self, name: &str, address: Option<&str>, terms: LeaseTerms)
    -> StoreResult<Registration>;
    /// One heartbeat: extends the lease by its length from the database's now, only while
    /// it is live. A lease that ended stays ended ([`Renewal::Lost`]).
    async fn renew_replica_lease(&self) -> StoreResult<Renewal>;
    /// This replica's lease as its owner writes see it, updated by registering, each
    /// heartbeat and ending. Once registered, every owner write (inserts and updates of
    /// executions, turns and interactions, event appends, batches, new generations and
    /// claims) lands only while its execution is this incarnation's and the lease is live on
    /// the database's clock; past the local deadline it is refused with
    /// [`StoreError::Fenced`] without a round trip.
    fn lease(&self) -> tokio::sync::watch::Receiver<Lease>;
    /// Ends this incarnation (a clean exit): its lease ends now and its locks are let go.
    async fn end_replica(&self) -> StoreResult<()>;
    /// Marks this incarnation draining: it still serves (and renews its lease), but new
    /// executions are not placed on it ([`Store::placement_targets`]).
    async fn mark_replica_draining(&self) -> StoreResult<()>;
    /// Publishes the warm keys this replica holds an idle agent process for, replacing
    /// the ones it published last (placement prefers a replica that publishes the key a
    /// new execution wants). A no-op until this store registers.
    async fn publish_warm_keys(&self, warm: &[WarmKey]) -> StoreResult<()>;
    /// Up to `limit` other replicas a new execution may be placed on: serving (their lease
    /// live on the database's clock, not draining), taking forwarded calls (an address);
    /// those that published the `wanted` warm key first, then those owning the fewest live
    /// executions. Empty until this store registers.
    async fn placement_targets(&self, limit: usize, wanted: Option<&WarmKey>) -> StoreResult<Vec<ReplicaAddress>>;
    /// Who owns an execution of the tenant, where it takes forwarded calls and whether it
    /// serves now (`None`: no such execution).
    async fn execution_owner(&self, tenant_id: &str, execution_id: &ExecutionId)
    -> StoreResult<Option<ExecutionOwner>>;

    /// Claims a free key for the call holding `token`; else says what holds it.
    async fn claim_idempotency(
        &self,
        key: &IdempotencyKey,
        request_digest: &str,
        token: &ClaimToken,
    ) -> StoreResult<IdempotencyClaim>;
    /// Hands this incarnation's own claim of the key, in flight, to the call holding
    /// `token` ([`IdempotencyClaim::InFlightHere`]): the call that held it can no longer
    /// release it. False when there is no such claim (any more).
    async fn adopt_idempotency(&self, key: &IdempotencyKey, token: &ClaimToken) -> StoreResult<bool>;
    /// What [`Store::claim_idempotency`] would find, without claiming: `None` while the key
    /// is free.
    async fn find_idempotency(
        &self,
        key: &IdempotencyKey,
        request_digest: &str,
    ) -> StoreResult<Option<IdempotencyClaim>>;
    /// Only this incarnation's own `in_flight` claim, while its lease is live: past it, a
    /// survivor may have completed the key, and that outcome stands. False when nothing was
    /// completed (the key is not this incarnation's in flight any more, or its lease ended).
    async fn complete_idempotency(&self, key: &IdempotencyKey, response: &serde_json::Value) -> StoreResult<bool>;
    /// Drops the claim the call holding `token` has, its call having failed before it
    /// changed anything, so a retry may run; another's claim (another call's of this
    /// incarnation too), or a completed key, stays.
    async fn release_idempotency(&self, key: &IdempotencyKey, token: &ClaimToken) -> StoreResult<()>;
    /// Completes every claim `claimed_by` that incarnation still `in_flight` with
    /// `response`, unless its lease is live: the calls that made them died with it (a
    /// predecessor at start-up, a replica taken over). The number completed.
    async fn complete_abandoned_idempotency(&self, claimed_by: &str, response: &serde_json::Value) -> StoreResult<u64>;
    /// Deletes at most `limit` completed keys created before `created_before_ms` (never one
    /// in flight); the number deleted.
    async fn prune_idempotency(&self, created_before_ms: i64, limit: i64) -> StoreResult<u64>;

    async fn insert_execution(&self, execution: &ExecutionRecord) -> StoreResult<()>;
    /// Compare-and-sets the mutable columns: only while the row is at the execution's
    /// generation and in `expected_state`. `Ok(false)`: it was not (fenced, or another
    /// writer moved it on); nothing was written.
    async fn update_execution(&self, expected_state: ExecutionState, execution: &ExecutionRecord) -> StoreResult<bool>;
    /// Compare-and-set of the one fence: a new lease (another process for the
    /// execution) moves the generation from `expected` to `expected + 1`, and the
    /// execution to this replica's incarnation; every write still carrying `expected` is
    /// refused from then on. False if it had moved already.
    async fn advance_generation(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        expected: Generation,
    ) -> StoreResult<bool>;
    async fn get_execution(&self, tenant_id: &str, id: &ExecutionId) -> StoreResult<Option<ExecutionRecord>>;
    /// Ordered by id (UUIDv7, so by creation); `after_id` is the page cursor.
    async fn list_executions(
        &self,
        tenant_id: &str,
        after_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<ExecutionRecord>>;
    /// Moves a live execution at `generation` from incarnation `from`, whose lease has ended,
    /// to this one, leaving its generation (a successor settles what it left). False if it
    /// is not `from`'s at that generation, or `from`'s lease is live.
    async fn claim_execution(
        &self,
        execution_id: &ExecutionId,
        generation: Generation,
        from: &str,
    ) -> StoreResult<bool>;
    /// The live executions `owner_incarnation` owns (at start-up: those a predecessor left).
    async fn list_live_executions_of(&self, owner_incarnation: &str) -> StoreResult<Vec<ExecutionRecord>>;
    /// The incarnations other than this one (and the pre-scale-out one) whose lease has
    /// ended on the database's clock, no live process serves under their name (a restart
    /// under it settles them itself), and which still own a live execution or hold a call
    /// in flight: what a surviving replica takes over. Empty until this store registers.
    async fn abandoned_incarnations(&self) -> StoreResult<Vec<String>>;
    /// The tenant's execution that has the agent session `session_id` open (one that is
    /// not closed, failed or lost), else its newest one that ran it.
    async fn find_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<ExecutionRecord>>;
    /// Every execution (any tenant) whose lease's JSON text contains `text`, at most
    /// `limit`: candidates the caller checks by parsing each lease.
    async fn executions_leasing(&self, text: &str, limit: i64) -> StoreResult<Vec<ExecutionRecord>>;
    /// The tenant's recorded sessions: per session id, its newest execution; paged by
    /// session id.
    async fn list_sessions(
        &self,
        tenant_id: &str,
        after_session_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<ExecutionRecord>>;

    /// Stores a session's checkpoint behind the owner fence of its execution and
    /// generation. It replaces the stored one when that is of another execution (a later
    /// one of the session) or of the same execution at an earlier or equal (generation,
    /// turn count); `false`: fenced, or older than what is stored.
    async fn save_session_checkpoint(&self, checkpoint: &SessionCheckpoint) -> StoreResult<bool>;
    async fn session_checkpoint(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<SessionCheckpoint>>;
    /// Claims the tenant's `session_id` for one open (a load or a recovery) by this
    /// replica, as `claim_id`, for `hold` on the database's clock. `false` while another
    /// replica's claim is live: not released, its replica's lease live and its hold not
    /// over. A claim of this replica's own is always taken over (this process opens one
    /// session once at a time, so its own is a leftover).
    async fn claim_session_open(
        &self,
        tenant_id: &str,
        session_id: &str,
        claim_id: &str,
        hold: std::time::Duration,
    ) -> StoreResult<bool>;
    /// Extends the claim `claim_id` to `hold` from now; `false` when it is not held any more.
    async fn renew_session_open(
        &self,
        tenant_id: &str,
        session_id: &str,
        claim_id: &str,
        hold: std::time::Duration,
    ) -> StoreResult<bool>;
    /// Lets the claim `claim_id` go (nothing when another claim took its place).
    async fn release_session_open(&self, tenant_id: &str, session_id: &str, claim_id: &str) -> StoreResult<()>;

    async fn insert_turn(&self, turn: &TurnRecord) -> StoreResult<()>;
    /// Settles a turn; only a `running` turn can be settled (compare-and-set).
    async fn settle_turn(&self, turn: &TurnRecord) -> StoreResult<bool>;
    async fn get_turn(&self, tenant_id: &str, id: &TurnId) -> StoreResult<Option<TurnRecord>>;
    /// An execution's turns in order, after turn number `after_number`.
    async fn list_turns(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        after_number: i64,
        limit: i64,
    ) -> StoreResult<Vec<TurnRecord>>;

    async fn insert_interaction(&self, interaction: &InteractionRecord) -> StoreResult<()>;
    /// Compare-and-set: writes `next` only if the row is still in `expected_state` and its
    /// execution is still at the interaction's generation (the one fence).
    async fn transition_interaction(
        &self,
        expected_state: InteractionState,
        next: &InteractionRecord,
    ) -> StoreResult<bool>;
    async fn get_interaction(&self, tenant_id: &str, id: &InteractionId) -> StoreResult<Option<InteractionRecord>>;
    async fn list_interactions(&self, query: &InteractionQuery) -> StoreResult<Vec<InteractionRecord>>;

    /// Appends one execution's events of one generation in one statement; sequences
    /// are assigned by the caller (the execution's single writer) and the primary key
    /// refuses a duplicate. [`StoreError::Fenced`] if the execution's generation is no
    /// longer theirs: nothing is appended.
    async fn append_events(&self, events: Arc<[EventRecord]>) -> StoreResult<()>;
    /// Commits a [`Batch`] in one transaction. `Ok(false)`: a write found its row moved on
    /// (another state, another generation) or the events' generation is no longer the
    /// execution's; nothing was written.
    async fn commit(&self, batch: &Batch) -> StoreResult<bool>;
    async fn read_events(
        &self,
        execution_id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
    ) -> StoreResult<Vec<EventRecord>>;
    async fn head_sequence(&self, execution_id: &ExecutionId) -> StoreResult<i64>;
    /// A listener for the heads other processes' commits move ([`HeadListener`](crate::notify::HeadListener)).
    /// `Ok(None)`: every writer of this store is in this process (SQLite, memory), so its
    /// own writers move every head there is.
    async fn listen_for_heads(&self) -> StoreResult<Option<crate::notify::HeadListener>> {
        Ok(None)
    }
    /// The oldest event still kept (`None`: the execution has none).
    async fn oldest_sequence(&self, execution_id: &ExecutionId) -> StoreResult<Option<i64>>;
    /// Deletes at most `limit` of the oldest events with a sequence ≤ `through` emitted
    /// before `emitted_before_ms`; the number deleted.
    async fn prune_events(
        &self,
        execution_id: &ExecutionId,
        through: i64,
        emitted_before_ms: i64,
        limit: i64,
    ) -> StoreResult<u64>;
    /// (execution id, acked sequence) of executions the control plane acknowledged
    /// anything of, by id, after `after_id`.
    async fn acknowledged_executions(&self, after_id: Option<&str>, limit: i64)
    -> StoreResult<Vec<(ExecutionId, i64)>>;
    /// Records a cumulative acknowledgement.
    async fn set_acked_sequence(&self, tenant_id: &str, execution_id: &ExecutionId, through: i64) -> StoreResult<()>;
}
