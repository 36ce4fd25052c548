//! This process as one replica of the service on its database (`docs/scale-out.md` §1):
//! what registering returns, what a heartbeat finds, and who owns an execution. Leases are
//! measured on the database's clock only; a caller passes lengths, never timestamps.

use std::time::Duration;

/// The incarnation that owns every row written before replicas existed (migration 0006).
pub const LEGACY_INCARNATION: &str = "";

/// Prefixed to a replica's name to make its advisory lock's key.
pub const REPLICA_NAME_LOCK_PREFIX: &str = "cursor-runner/replica/";

/// A lease's terms: how long each renewal extends it, how long one renewal may take
/// before it counts as failed (and its connection is re-opened), and how much earlier than
/// the database this process stops writing (its local deadline is `sent_at + length −
/// self_fence_margin`, always before the database's end of the lease).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    pub length: Duration,
    pub renew_timeout: Duration,
    pub self_fence_margin: Duration,
}

/// This process's lease as its owner writes see it (`docs/scale-out.md` §3), on the
/// local monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// Writes are this incarnation's until `until`; `None`: a lease that never ends (the
    /// embedded store, D12; or no replica registered, whose writes are fenced by
    /// generation only).
    Held { until: Option<tokio::time::Instant> },
    /// Ended: no owner write of this incarnation lands again.
    Lost,
}

impl Lease {
    /// Whether an owner write may be sent now.
    pub fn held_at(&self, now: tokio::time::Instant) -> bool {
        match self {
            Self::Held { until } => until.is_none_or(|until| now < until),
            Self::Lost => false,
        }
    }
}

/// The owner fence's local half, shared by every patience of one store: the lease watch
/// its heartbeat publishes, which every owner write checks before any I/O.
pub(crate) struct OwnerFence {
    lease: tokio::sync::watch::Sender<Lease>,
}

impl Default for OwnerFence {
    fn default() -> Self {
        Self {
            lease: tokio::sync::watch::Sender::new(Lease::Held { until: None }),
        }
    }
}

impl OwnerFence {
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<Lease> {
        self.lease.subscribe()
    }

    /// Whether an owner write may be sent now (false once the local deadline has passed:
    /// the write is refused without a round trip).
    pub(crate) fn held_now(&self) -> bool {
        self.lease.borrow().held_at(tokio::time::Instant::now())
    }

    /// A registration or renewal sent at `sent_at` held: the local deadline moves to
    /// `sent_at + length − margin` (`finite`: the database's lease ends at all). A lease
    /// already lost stays lost.
    pub(crate) fn renewed(&self, sent_at: tokio::time::Instant, terms: LeaseTerms, finite: bool) {
        let until = finite.then(|| sent_at + terms.length.saturating_sub(terms.self_fence_margin));
        self.lease.send_if_modified(|lease| {
            let renewed = *lease != Lease::Lost;
            if renewed {
                *lease = Lease::Held { until };
            }
            renewed
        });
    }

    pub(crate) fn lost(&self) {
        self.lease
            .send_if_modified(|lease| std::mem::replace(lease, Lease::Lost) != Lease::Lost);
    }
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

/// A serving replica that takes forwarded calls, where it takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaAddress {
    pub name: String,
    pub address: String,
}

/// The replica an execution belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionOwner {
    pub incarnation: String,
    /// The replica's name (`pre-scale-out` for legacy rows).
    pub name: String,
    /// Where the replica takes calls forwarded to it (`--advertise-address`); `None`: it
    /// takes none.
    pub address: Option<String>,
    /// Whether the replica's lease is live now, on the database's clock: it serves.
    pub serving: bool,
}
