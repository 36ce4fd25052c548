//! This process's replica row (`docs/scale-out.md` §1): register under a name (ending
//! its predecessors), renew the lease, end it, and read an execution's owner. Every lease
//! time is the database's (`DB_NOW_MS`); the caller's clock is never used.

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use super::connection::{Pool, SqlStore, on_pool};
use super::identity::{Held, Registered, Target, lock_file, locked_connection};
use crate::contract::{StoreError, StoreResult};
use crate::replica::*;
use cursor_runner_domain::placement::WarmKey;

/// Runs one statement on the identity connection (PostgreSQL) or the pool (SQLite).
macro_rules! on_identity {
    ($self:ident, $connection:expr, |$executor:ident| $body:expr) => {{
        match (&$self.shared.pool, $connection) {
            (Pool::Postgres(_), Some($executor)) => $body,
            (Pool::Postgres($executor), None) => $body,
            (Pool::Sqlite($executor), _) => $body,
        }
    }};
}

impl SqlStore {
    fn now_ms_sql(&self) -> &'static str {
        self.shared.statements.dialect.now_ms
    }

    /// The lease length to add to the database's now; `None` on SQLite, whose lease never
    /// ends (one process per file: nobody to fence against).
    fn lease_ms(&self, terms: LeaseTerms) -> Option<i64> {
        match self.shared.pool {
            Pool::Postgres(_) => Some(i64::try_from(terms.length.as_millis()).unwrap_or(i64::MAX)),
            Pool::Sqlite(_) => None,
        }
    }

    pub(super) async fn register_replica(
        &self,
        name: &str,
        address: Option<&str>,
        terms: LeaseTerms,
    ) -> StoreResult<Registration> {
        let identity = &self.shared.identity;
        let mut held = identity.held.lock().await;
        if !matches!(*held, Held::Nothing) {
            return Err(StoreError::Database("this store registered its replica already".into()));
        }
        // Held only once registered: a registration that fails lets its locks go.
        let (mut connection, file) = match &identity.target {
            Target::Postgres(options) => (Some(locked_connection(options, name, terms.renew_timeout).await?), None),
            Target::SqliteFile(path) => (None, Some(lock_file(path)?)),
            Target::Unshared => (None, None),
        };
        let incarnation = uuid::Uuid::now_v7().to_string();
        let sent_at = tokio::time::Instant::now();
        let now = self.now_ms_sql();
        // On PostgreSQL only same-name predecessors are known dead (their name lock is ours);
        // on SQLite the file lock proves every earlier process is gone.
        let same_name = matches!(self.shared.pool, Pool::Postgres(_));
        let insert = format!(
            "INSERT INTO replicas (incarnation, name, address, state, capacity, started_at_ms, heartbeat_at_ms, lease_until_ms) \
             VALUES ($1, $2, $4, 'serving', '{{}}', {now}, {now}, COALESCE({now} + $3, {max})) RETURNING lease_until_ms",
            max = i64::MAX
        );
        // An ended one too, while it still owns live work: it exited with rows its closing
        // could not settle (and, under this name, nobody else takes them over).
        let predecessors_sql = "SELECT incarnation FROM replicas r \
             WHERE incarnation <> $1 AND incarnation <> '' AND (name = $2 OR NOT $3) \
             AND (state <> 'ended' \
                  OR EXISTS (SELECT 1 FROM executions e WHERE e.owner_incarnation = r.incarnation \
                             AND e.state IN ('starting', 'ready', 'closing')) \
                  OR EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.claimed_by = r.incarnation \
                             AND k.state = 'in_flight')) \
             ORDER BY incarnation";
        let end_sql = format!(
            "UPDATE replicas SET state = 'ended', \
             lease_until_ms = CASE WHEN lease_until_ms < {now} THEN lease_until_ms ELSE {now} END \
             WHERE incarnation = $1"
        );
        let lease_ms = self.lease_ms(terms);
        let (lease_until_ms,): (i64,) = on_identity!(self, connection.as_mut(), |executor| {
            sqlx::query_as(sqlx::AssertSqlSafe(insert.clone()))
                .bind(&incarnation)
                .bind(name)
                .bind(lease_ms)
                .bind(address)
                .fetch_one(executor)
                .await?
        });
        let found: Vec<(String,)> = on_identity!(self, connection.as_mut(), |executor| {
            sqlx::query_as(predecessors_sql)
                .bind(&incarnation)
                .bind(name)
                .bind(same_name)
                .fetch_all(executor)
                .await?
        });
        let mut predecessors = vec![LEGACY_INCARNATION.to_owned()];
        for (predecessor,) in found {
            on_identity!(self, connection.as_mut(), |executor| {
                sqlx::query(sqlx::AssertSqlSafe(end_sql.clone()))
                    .bind(&predecessor)
                    .execute(executor)
                    .await?
                    .rows_affected()
            });
            predecessors.push(predecessor);
        }
        *held = match (connection, file) {
            (Some(connection), _) => Held::Postgres(Some(connection)),
            (None, Some(file)) => Held::SqliteFile(file),
            (None, None) => Held::Unshared,
        };
        self.shared.fence.renewed(sent_at, terms, lease_ms.is_some());
        let _ = identity.registered.set(Registered {
            incarnation: incarnation.clone(),
            name: name.to_owned(),
            terms,
        });
        Ok(Registration {
            incarnation,
            name: name.to_owned(),
            lease_until_ms,
            predecessors,
        })
    }

    /// One heartbeat, published to the lease watch: held, the local deadline moves to when
    /// it was sent plus the lease less the margin; lost, every owner write is refused.
    pub(super) async fn renew_replica_lease(&self) -> StoreResult<Renewal> {
        let sent_at = tokio::time::Instant::now();
        let renewal = self.renew_lease().await?;
        match (renewal, self.shared.identity.registered.get()) {
            (Renewal::Held { .. }, Some(me)) => {
                self.shared
                    .fence
                    .renewed(sent_at, me.terms, self.lease_ms(me.terms).is_some())
            }
            _ => self.shared.fence.lost(),
        }
        Ok(renewal)
    }

    async fn renew_lease(&self) -> StoreResult<Renewal> {
        let identity = &self.shared.identity;
        let Some(me) = identity.registered.get() else {
            return Err(StoreError::Database("no replica registered to renew".into()));
        };
        let mut held = identity.held.lock().await;
        if matches!(*held, Held::Ended) {
            return Ok(Renewal::Lost);
        }
        let now = self.now_ms_sql();
        let renew = format!(
            "UPDATE replicas SET heartbeat_at_ms = {now}, lease_until_ms = COALESCE({now} + $2, lease_until_ms) \
             WHERE incarnation = $1 AND state <> 'ended' AND lease_until_ms > {now} RETURNING lease_until_ms"
        );
        let lease_ms = self.lease_ms(me.terms);
        let renewed: Option<(i64,)> = match (&identity.target, &mut *held) {
            (Target::Postgres(options), Held::Postgres(slot)) => {
                return self
                    .renew_on_identity_connection(options, slot, me, &renew, lease_ms)
                    .await;
            }
            _ => on_identity!(self, None::<&mut PgConnection>, |executor| {
                sqlx::query_as(sqlx::AssertSqlSafe(renew.clone()))
                    .bind(&me.incarnation)
                    .bind(lease_ms)
                    .fetch_optional(executor)
                    .await?
            }),
        };
        Ok(match renewed {
            Some((lease_until_ms,)) => Renewal::Held { lease_until_ms },
            None => Renewal::Lost,
        })
    }

    /// The PostgreSQL heartbeat on the identity connection. The server cancels a renewal
    /// that waits past `renew_timeout` (`statement_timeout`), which keeps the connection and
    /// its locks; a connection that does not answer at all (twice that) or is found
    /// broken is re-opened, its locks re-taken.
    async fn renew_on_identity_connection(
        &self,
        options: &PgConnectOptions,
        slot: &mut Option<PgConnection>,
        me: &Registered,
        renew: &str,
        lease_ms: Option<i64>,
    ) -> StoreResult<Renewal> {
        // A connection found broken is re-opened once, at once.
        for last_attempt in [false, true] {
            if slot.is_none() {
                match locked_connection(options, &me.name, me.terms.renew_timeout).await {
                    Ok(connection) => *slot = Some(connection),
                    Err(StoreError::AnotherService) => return Ok(Renewal::Lost),
                    // A successor under this name ended this incarnation when it registered;
                    // otherwise the name is still held by this incarnation's abandoned
                    // session, which the server has not noticed is gone yet.
                    Err(StoreError::ReplicaNameInUse(_)) => return self.lease_state(me).await,
                    Err(e) => return Err(e),
                }
            }
            let connection = slot.as_mut().expect("opened above");
            let attempt = sqlx::query_as(sqlx::AssertSqlSafe(renew.to_owned()))
                .bind(&me.incarnation)
                .bind(lease_ms)
                .fetch_optional(connection);
            match tokio::time::timeout(me.terms.renew_timeout * 2, attempt).await {
                Ok(Ok(row)) => {
                    return Ok(match row {
                        Some((lease_until_ms,)) => Renewal::Held { lease_until_ms },
                        None => Renewal::Lost,
                    });
                }
                Ok(Err(e)) if is_statement_timeout(&e) => {
                    return Err(StoreError::Unavailable(format!(
                        "the lease renewal took longer than {} ms",
                        me.terms.renew_timeout.as_millis()
                    )));
                }
                Ok(Err(e)) => {
                    *slot = None;
                    if last_attempt {
                        return Err(e.into());
                    }
                }
                Err(_) => {
                    *slot = None;
                    return Err(StoreError::Unavailable(
                        "the lease renewal got no answer; its connection is re-opened".into(),
                    ));
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Without the identity connection: [`Renewal::Lost`] if this incarnation's lease has
    /// ended, else unavailable for now (the heartbeat retries).
    async fn lease_state(&self, me: &Registered) -> StoreResult<Renewal> {
        let sql = format!(
            "SELECT lease_until_ms FROM replicas WHERE incarnation = $1 AND state <> 'ended' AND lease_until_ms > {}",
            self.now_ms_sql()
        );
        let live: Option<(i64,)> = on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(&me.incarnation)
            .fetch_optional(pool)
            .await?);
        match live {
            None => Ok(Renewal::Lost),
            Some(_) => Err(StoreError::Unavailable(
                "this replica's name is still locked by its previous identity session".into(),
            )),
        }
    }

    pub(super) async fn end_replica(&self) -> StoreResult<()> {
        let identity = &self.shared.identity;
        let Some(me) = identity.registered.get() else {
            return Ok(());
        };
        let mut held = identity.held.lock().await;
        // Nothing this incarnation writes as owner lands any more, even if the end fails.
        self.shared.fence.lost();
        let now = self.now_ms_sql();
        let end = format!(
            "UPDATE replicas SET state = 'ended', \
             lease_until_ms = CASE WHEN lease_until_ms < {now} THEN lease_until_ms ELSE {now} END \
             WHERE incarnation = $1"
        );
        let outcome = match &mut *held {
            Held::Postgres(Some(connection)) => sqlx::query(sqlx::AssertSqlSafe(end))
                .bind(&me.incarnation)
                .execute(connection)
                .await
                .map(drop),
            _ => match &self.shared.pool {
                Pool::Postgres(pool) => sqlx::query(sqlx::AssertSqlSafe(end))
                    .bind(&me.incarnation)
                    .execute(pool)
                    .await
                    .map(drop),
                Pool::Sqlite(pool) => sqlx::query(sqlx::AssertSqlSafe(end))
                    .bind(&me.incarnation)
                    .execute(pool)
                    .await
                    .map(drop),
            },
        };
        // The locks go with the connection (or file) either way: this process is done.
        if let Held::Postgres(Some(connection)) = std::mem::replace(&mut *held, Held::Ended) {
            let _ = connection.close().await;
        }
        Ok(outcome?)
    }

    pub(super) async fn mark_replica_draining(&self) -> StoreResult<()> {
        let Some(me) = self.shared.identity.registered.get().map(|r| r.incarnation.clone()) else {
            return Ok(());
        };
        on_pool!(self, |pool| sqlx::query(
            "UPDATE replicas SET state = 'draining' WHERE incarnation = $1 AND state = 'serving'"
        )
        .bind(&me)
        .execute(pool)
        .await
        .map(drop)?);
        Ok(())
    }

    /// The `capacity` column holds `{"warm": [keys]}`; keys are `warm-` and hex digits, so
    /// matching one with `LIKE` needs no escaping.
    pub(super) async fn publish_warm_keys(&self, warm: &[WarmKey]) -> StoreResult<()> {
        let Some(me) = self.shared.identity.registered.get().map(|r| r.incarnation.clone()) else {
            return Ok(());
        };
        let keys: Vec<&str> = warm.iter().map(WarmKey::as_str).collect();
        let capacity = serde_json::json!({ "warm": keys }).to_string();
        on_pool!(self, |pool| sqlx::query(
            "UPDATE replicas SET capacity = $2 WHERE incarnation = $1 AND state <> 'ended'"
        )
        .bind(&me)
        .bind(&capacity)
        .execute(pool)
        .await
        .map(drop)?);
        Ok(())
    }

    pub(super) async fn placement_targets(
        &self,
        limit: usize,
        wanted: Option<&WarmKey>,
    ) -> StoreResult<Vec<ReplicaAddress>> {
        let Some(me) = self.shared.identity.registered.get().map(|r| r.incarnation.clone()) else {
            return Ok(Vec::new());
        };
        let sql = format!(
            "SELECT r.name, r.address FROM replicas r \
             WHERE r.incarnation <> $1 AND r.state = 'serving' AND r.lease_until_ms > {now} AND r.address IS NOT NULL \
             ORDER BY CASE WHEN r.capacity LIKE $3 THEN 0 ELSE 1 END, \
                      (SELECT COUNT(*) FROM executions e WHERE e.owner_incarnation = r.incarnation \
                       AND e.state IN ('starting', 'ready', 'closing')), r.incarnation \
             LIMIT $2",
            now = self.now_ms_sql()
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let warm_pattern = wanted.map(|key| format!("%\"{key}\"%"));
        let found: Vec<(String, String)> = on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(&me)
            .bind(limit)
            .bind(warm_pattern.as_deref())
            .fetch_all(pool)
            .await?);
        Ok(found
            .into_iter()
            .map(|(name, address)| ReplicaAddress { name, address })
            .collect())
    }

    pub(super) async fn execution_owner(
        &self,
        tenant_id: &str,
        execution_id: &str,
    ) -> StoreResult<Option<ExecutionOwner>> {
        let sql = format!(
            "SELECT e.owner_incarnation, r.name, r.address, \
             CASE WHEN r.state <> 'ended' AND r.lease_until_ms > {now} THEN 1 ELSE 0 END \
             FROM executions e LEFT JOIN replicas r ON r.incarnation = e.owner_incarnation \
             WHERE e.tenant_id = $1 AND e.id = $2",
            now = self.now_ms_sql()
        );
        let row: Option<OwnerRow> = on_pool!(self, |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                .bind(tenant_id)
                .bind(execution_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row.map(|(incarnation, name, address, serving)| ExecutionOwner {
            incarnation,
            name: name.unwrap_or_default(),
            address,
            serving: serving == Some(1),
        }))
    }
}

/// An execution's owner as read: incarnation, then the replica's name, address and whether
/// it serves (1), each `NULL` when no replica row matches.
type OwnerRow = (String, Option<String>, Option<String>, Option<i32>);

/// The server cancelled the statement at `statement_timeout` (SQLSTATE 57014).
fn is_statement_timeout(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("57014"))
}
