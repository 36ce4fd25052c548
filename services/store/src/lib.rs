//! Persistence: executions, turns, interactions, the event outbox and idempotency
//! digests, behind one [`Store`] trait. PostgreSQL is the reference backend; SQLite is
//! the embedded single-node default. Both run the same SQL text (positional `$N`
//! parameters, TEXT JSON, millisecond timestamps), so they cannot drift apart. The
//! in-memory [`MemoryStore`] keeps the same rules without I/O, for unit tests elsewhere.

mod batch;
mod catalog;
mod contract;
pub mod failpoint;
mod memory;
mod notify;
mod records;
mod replica;
mod retry;
mod sql;
mod transient;

pub use batch::{Batch, Write};
pub use contract::*;
pub use memory::MemoryStore;
pub use notify::{EVENTS_CHANNEL, HeadListener, HeadNotice};
pub use records::*;
pub use replica::*;
pub use sql::{
    CLAIM_LOCK_WAIT, GROUPS_IN_FLIGHT, IDLE_IN_TRANSACTION_LIMIT, MAX_GROUP_EVENTS, PING_AFTER_IDLE, SqlStore,
};

/// Opens the store a URL names and runs its migrations.
pub async fn connect(url: &str) -> StoreResult<std::sync::Arc<dyn Store>> {
    Ok(std::sync::Arc::new(SqlStore::connect(url).await?))
}
