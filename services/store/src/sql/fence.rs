//! The owner fence's SQL (`docs/scale-out.md` §2): every owner write lands only while its
//! execution is at the write's generation, owned by this incarnation (`$me`), whose lease
//! is live on the database's clock; on PostgreSQL the check also takes `FOR SHARE` on the
//! execution row, so a claim of that row waits for every owner transaction in flight and
//! then sees its rows. `$me` is NULL for a store with no replica registered: its writes are
//! fenced by generation only. The clock and the lock are the only SQL text the backends do
//! not share; the statements are built once per store.

use cursor_runner_domain::ids::Generation;

/// `DB_NOW_MS`, the one lease clock, per backend. Truncated to the millisecond, as the
/// store's `now_ms` is: a cast to `BIGINT` would round, putting the database up to half a
/// millisecond ahead of a process reading the same clock.
pub(super) const PG_NOW_MS: &str = "FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";
pub(super) const SQLITE_NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

/// `FOR SHARE`, not `FOR KEY SHARE`: only it blocks the `FOR NO KEY UPDATE` a plain
/// `UPDATE` of the execution row (a claim) takes.
const PG_OWNER_LOCK: &str = " FOR SHARE OF e";

/// How long a takeover claim waits for a lock on the execution row (an owner transaction in
/// flight takes milliseconds) before it leaves the row for the next scan, so one row held
/// by something else never stops a scan.
pub const CLAIM_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// SQLSTATE `lock_not_available`: a `lock_timeout` passed.
pub(super) const LOCK_NOT_AVAILABLE: &str = "55P03";

/// One backend's spelling of the fence's clock and lock.
#[derive(Clone, Copy)]
pub(super) struct Dialect {
    pub(super) now_ms: &'static str,
    lock: &'static str,
}

impl Dialect {
    pub(super) const POSTGRES: Self = Self {
        now_ms: PG_NOW_MS,
        lock: PG_OWNER_LOCK,
    };
    pub(super) const SQLITE: Self = Self {
        now_ms: SQLITE_NOW_MS,
        lock: "",
    };

    /// Whether `me`'s lease is live now.
    pub(super) fn live_lease(&self, me: &str) -> String {
        format!(
            "EXISTS (SELECT 1 FROM replicas r WHERE r.incarnation = {me} AND r.lease_until_ms > {now})",
            now = self.now_ms
        )
    }

    /// The owner predicate on an execution row's own columns (no row lock: an `UPDATE` of
    /// the row locks it itself).
    pub(super) fn owner_is(&self, me: &str) -> String {
        format!(
            "({me} IS NULL OR (owner_incarnation = {me} AND {live}))",
            live = self.live_lease(me)
        )
    }

    /// The execution rows (`id`, `generation`) among `pairs` (a relation of execution ids
    /// and generations) that are `OWNED` now, each locked on PostgreSQL: the fence of many
    /// executions' writes in one statement, checked once per execution.
    pub(super) fn owned_rows(&self, pairs: &str, me: &str) -> String {
        format!(
            "SELECT e.id, e.generation FROM executions e WHERE (e.id, e.generation) IN ({pairs}) AND {owner}{lock}",
            owner = self.owner_is(me),
            lock = self.lock
        )
    }

    /// `OWNED(execution, generation)`, locking the execution row on PostgreSQL.
    pub(super) fn owned(&self, execution: &str, generation: &str, me: &str) -> String {
        format!(
            "EXISTS (SELECT 1 FROM executions e WHERE e.id = {execution} AND e.generation = {generation} \
             AND ({me} IS NULL OR (e.owner_incarnation = {me} AND {live})){lock})",
            live = self.live_lease(me),
            lock = self.lock
        )
    }
}

/// The fenced owner writes' statements, as one backend spells them.
pub(super) struct Statements {
    pub(super) dialect: Dialect,
    pub(super) insert_turn: String,
    pub(super) settle_turn: String,
    pub(super) insert_interaction: String,
    pub(super) transition_interaction: String,
    pub(super) update_execution: String,
    pub(super) insert_execution: String,
    pub(super) advance_generation: String,
    pub(super) claim_execution: String,
    pub(super) save_session_checkpoint: String,
    pub(super) claim_idempotency: String,
    pub(super) complete_idempotency: String,
    /// Bounds a claim's wait for the row's lock to [`CLAIM_LOCK_WAIT`], where rows are locked
    /// (PostgreSQL: SQLite has one writer at a time).
    pub(super) claim_lock_wait: Option<String>,
}

impl Statements {
    pub(super) fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            insert_turn: format!(
                "INSERT INTO turns (id, execution_id, tenant_id, generation, turn_number, state, stop_reason, failure_reason, failure_message, started_at_ms, ended_at_ms, credential_name, session_config, usage) \
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14 WHERE {}",
                dialect.owned("$2", "$4", "$15")
            ),
            settle_turn: format!(
                "UPDATE turns SET state = $1, stop_reason = $2, failure_reason = $3, failure_message = $4, ended_at_ms = $5, usage = $6 \
                 WHERE id = $7 AND generation = $8 AND state = 'running' AND {}",
                dialect.owned("turns.execution_id", "$8", "$9")
            ),
            insert_interaction: format!(
                "INSERT INTO interactions (id, execution_id, tenant_id, generation, turn_id, native_request_id, kind, state, etag, request, outcome, answer_request_id, answer_fingerprint, reason, delivery, replay_allowed, created_at_ms, updated_at_ms) \
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18 WHERE {}",
                dialect.owned("$2", "$4", "$19")
            ),
            transition_interaction: format!(
                "UPDATE interactions SET state = $1, outcome = $2, answer_request_id = $3, answer_fingerprint = $4, \
                 reason = $5, delivery = $6, replay_allowed = $7, updated_at_ms = $8 \
                 WHERE id = $9 AND generation = $10 AND state = $11 AND {}",
                dialect.owned("interactions.execution_id", "$10", "$12")
            ),
            // An update never clears the lease or the configuration: a record whose JSON this
            // version could not read carries none, and must not erase what another wrote.
            update_execution: format!(
                "UPDATE executions SET state = $1, session_id = $2, active_turn_id = $3, turn_count = $4, pid = $5, \
                 exit_code = $6, exit_signal = $7, failure_reason = $8, failure_message = $9, updated_at_ms = $10, \
                 lease = COALESCE($11, lease), session_config = COALESCE($12, session_config), \
                 credential_name = $13, active_ms = $14 \
                 WHERE id = $15 AND generation = $16 AND state = $17 AND {}",
                dialect.owner_is("$18")
            ),
            // `$26` is the owner written, `$27` the fence's `$me` (NULL: no replica registered).
            insert_execution: format!(
                "INSERT INTO executions (id, tenant_id, state, generation, workspace, session_id, active_turn_id, turn_count, pid, exit_code, exit_signal, failure_reason, failure_message, acked_sequence, created_at_ms, updated_at_ms, approval_policy, interaction_wait_limit_ms, lease, session_config, credential_name, turn_deadline_ms, max_turns, max_active_ms, active_ms, owner_incarnation) \
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26 \
                 WHERE $27 IS NULL OR {}",
                dialect.live_lease("$27")
            ),
            advance_generation: format!(
                "UPDATE executions SET generation = generation + 1, owner_incarnation = $4 \
                 WHERE tenant_id = $1 AND id = $2 AND generation = $3 AND ($5 IS NULL OR {})",
                dialect.live_lease("$5")
            ),
            save_session_checkpoint: format!(
                "INSERT INTO session_checkpoints (tenant_id, session_id, execution_id, generation, turn_count, format, raw_bytes, stored_bytes, sha256, body, taken_at_ms) \
                 SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 WHERE {} \
                 ON CONFLICT (tenant_id, session_id) DO UPDATE SET execution_id = excluded.execution_id, \
                 generation = excluded.generation, turn_count = excluded.turn_count, format = excluded.format, \
                 raw_bytes = excluded.raw_bytes, stored_bytes = excluded.stored_bytes, sha256 = excluded.sha256, \
                 body = excluded.body, taken_at_ms = excluded.taken_at_ms \
                 WHERE session_checkpoints.execution_id <> excluded.execution_id \
                 OR (session_checkpoints.generation, session_checkpoints.turn_count) <= (excluded.generation, excluded.turn_count)",
                dialect.owned("$3", "$4", "$12")
            ),
            claim_idempotency: "INSERT INTO idempotency_keys (tenant_id, operation, request_id, request_digest, state, created_at_ms, claimed_by, claim_token) \
                 VALUES ($1, $2, $3, $4, 'in_flight', $5, $6, $7) ON CONFLICT DO NOTHING"
                .into(),
            // Only this incarnation's own claim, while its lease is live: once it has ended, a
            // survivor may have completed the key as interrupted, and that outcome stands.
            complete_idempotency: format!(
                "UPDATE idempotency_keys SET state = 'done', response = $4 \
                 WHERE tenant_id = $1 AND operation = $2 AND request_id = $3 AND state = 'in_flight' \
                 AND claimed_by = $5 AND ($5 = '' OR {})",
                dialect.live_lease("$5")
            ),
            claim_lock_wait: (!dialect.lock.is_empty())
                .then(|| format!("SET LOCAL lock_timeout = '{}ms'", CLAIM_LOCK_WAIT.as_millis())),
            claim_execution: format!(
                "UPDATE executions SET owner_incarnation = $3 \
                 WHERE id = $1 AND generation = $2 AND owner_incarnation = $4 AND state IN ('starting', 'ready', 'closing') \
                 AND NOT {dead} AND {live}",
                dead = dialect.live_lease("$4"),
                live = dialect.live_lease("$3")
            ),
        }
    }
}

impl Statements {
    /// Pushes `OWNED(execution, generation)` onto a statement being built (the event
    /// append, whose parameters are numbered as they are pushed).
    pub(super) fn push_owned<'t, DB: sqlx::Database>(
        &self,
        builder: &mut sqlx::QueryBuilder<DB>,
        execution_id: &'t str,
        generation: Generation,
        me: Option<&'t str>,
    ) where
        &'t str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
        i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
        Option<&'t str>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    {
        let Dialect { now_ms, lock } = self.dialect;
        builder
            .push("EXISTS (SELECT 1 FROM executions e WHERE e.id = ")
            .push_bind(execution_id)
            .push(" AND e.generation = ")
            .push_bind(generation.get())
            .push(" AND (")
            .push_bind(me)
            .push(" IS NULL OR (e.owner_incarnation = ")
            .push_bind(me)
            .push(" AND EXISTS (SELECT 1 FROM replicas r WHERE r.incarnation = ")
            .push_bind(me)
            .push(format!(" AND r.lease_until_ms > {now_ms}))){lock})"));
    }
}
