//! Event heads announced to other replicas once their commit has returned, off the
//! commit's path. A transaction that notifies holds a database-wide lock from its
//! pre-commit until its commit record is flushed (PostgreSQL keeps the notification queue
//! in commit order), so notifying inside each append made every append of every execution
//! wait for the fsync of the one before it. Here a commit only leaves its executions'
//! heads behind ([`UnannouncedHeads`]); one task says every head left since its last
//! statement, in one statement that writes nothing durable (so flushes nothing). A head
//! lost to a crash or a failed statement costs a remote tail at most one heartbeat
//! (`executions::heads`).

use std::sync::{Arc, Weak};

use super::connection::{Pool, Shared, SqlStore};
use crate::contract::*;
use crate::notify::{EVENTS_CHANNEL, UnannouncedHeads};
use crate::records::EventRecord;

/// Announces what `heads` is left, for as long as the store lives.
async fn announce(heads: Arc<UnannouncedHeads>, store: Weak<Shared>) {
    loop {
        heads.changed().await;
        let Some(shared) = store.upgrade() else { return };
        let payloads = heads.take();
        if payloads.is_empty() {
            continue;
        }
        let store = SqlStore {
            shared,
            patience: Patience::None,
        };
        if let Err(e) = store.announce_heads(&payloads).await {
            tracing::warn!(error = %e, heads = payloads.len(), "could not announce event heads; remote streams read them at their next heartbeat");
        }
    }
}

impl SqlStore {
    /// `events` are committed: other replicas are to hear of their heads.
    pub(super) fn committed(&self, events: &[EventRecord]) {
        let Some(heads) = &self.shared.unannounced else {
            return;
        };
        heads.announce_with(|| {
            tokio::spawn(announce(heads.clone(), Arc::downgrade(&self.shared)));
        });
        heads.committed(events);
    }

    /// One statement, timed for the observer like every other.
    async fn announce_heads(&self, payloads: &[String]) -> StoreResult<()> {
        let Pool::Postgres(pool) = &self.shared.pool else {
            return Ok(());
        };
        let started = std::time::Instant::now();
        let outcome = sqlx::query("SELECT pg_notify($1, head) FROM UNNEST($2::text[]) AS head")
            .bind(EVENTS_CHANNEL)
            .bind(payloads)
            .execute(pool)
            .await;
        self.observe("announce_heads", started.elapsed(), outcome.is_ok());
        outcome?;
        Ok(())
    }
}
