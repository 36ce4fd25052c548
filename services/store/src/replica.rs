//! This process as one replica of the service on its database (`docs/scale-out.md` §1):
//! what registering returns, what a heartbeat finds, and who owns an execution. Leases are
//! measured on the database's clock only; a caller passes lengths, never timestamps.

use std::time::Duration;

/// The incarnation that owns every row written before replicas existed (migration 0006).
pub const LEGACY_INCARNATION: &str = "";

/// Prefixed to a replica's name to make its advisory lock's key.
pub const REPLICA_NAME_LOCK_PREFIX: &str = "cursor-runner/replica/";

/// A lease's terms: how long each renewal extends it, and how long one renewal may take
/// before it counts as failed (and its connection is re-opened).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    pub length: Duration,
    pub renew_timeout: Duration,
}

/// What registering found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The new incarnation (UUIDv7): the owner token written on this process's rows.
    pub incarnation: String,
    pub name: String,
    /// On the database's clock (Unix ms); `i64::MAX` for the embedded store (D12).
    pub lease_until_ms: i64,
    /// The incarnations whose live executions and in-flight calls this replica settles at
    /// start-up, now ended: its same-name predecessors on PostgreSQL (the name lock proves
    /// they are gone), every earlier one on a store only one process can open, and always
    /// [`LEGACY_INCARNATION`] first.
    pub predecessors: Vec<String>,
}

/// What one heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Extended; now ends at this database time.
    Held { lease_until_ms: i64 },
    /// The lease had ended (or the replica was ended): it is never extended again.
    Lost,
}

/// The replica an execution belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionOwner {
    pub incarnation: String,
    /// The replica's name (`pre-scale-out` for legacy rows).
    pub name: String,
}
