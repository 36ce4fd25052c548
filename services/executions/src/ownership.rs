//! This process as one replica of the service (`docs/scale-out.md` §1–§3): its name, its
//! lease's terms, registering at start-up, the heartbeat that renews the lease on the
//! database's clock, and when the lease has ended (self-fencing: the store refuses every
//! owner write then, actors stop their agents, and `serve` exits). Takeover of other
//! replicas' executions comes later.

use std::sync::Weak;
use std::time::Duration;

use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_store::{Lease, LeaseTerms, Registration, Renewal, Store, StoreError};
use tokio::sync::watch;
use tokio::time::Instant;

/// How long each heartbeat extends the lease (`--ownership-lease-ms`): a lost node's
/// executions can be taken over about this long after its last renewal.
pub const LEASE_LENGTH: Duration = Duration::from_secs(15);
/// The shortest lease accepted: a renewal must fit in it several times over.
pub const MIN_LEASE_LENGTH: Duration = Duration::from_secs(1);
/// The longest lease accepted: past it a dead replica's executions wait too long.
pub const MAX_LEASE_LENGTH: Duration = Duration::from_secs(3600);
/// Renewals per lease length (`LEASE_RENEW_EVERY` = `LEASE_LENGTH / 5`): four can fail
/// before the lease ends.
pub const LEASE_RENEWALS_PER_LEASE: u32 = 5;
/// The longest one renewal may take (a hung renewal cannot eat the lease).
pub const LEASE_RENEW_TIMEOUT: Duration = Duration::from_secs(2);
/// How long before the database's end of its lease this process stops writing (its local
/// deadline), so that a write it sends in time reaches the database before the lease ends
/// there; at most one renewal period, so a short lease keeps a deadline to renew before.
pub const SELF_FENCE_MARGIN: Duration = Duration::from_secs(2);
/// How long start-up waits for a process still holding this replica's name (a pod still
/// stopping), or for a pre-scale-out service, to let go before it refuses to start.
pub const REPLICA_NAME_WAIT: Duration = Duration::from_secs(5);
/// The longest replica name, in bytes (a Kubernetes pod name, a DNS name).
pub const MAX_REPLICA_NAME_BYTES: usize = 253;
/// The name when the host has none to give.
const FALLBACK_REPLICA_NAME: &str = "cursor-runner";

/// Why a replica setting is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaSettingError {
    #[error("a replica name cannot be empty")]
    EmptyName,
    #[error("a replica name is at most {MAX_REPLICA_NAME_BYTES} bytes; this one is {0}")]
    NameTooLong(usize),
    #[error("a replica name holds no whitespace or control characters")]
    NameHasSpace,
    #[error("the ownership lease is at least {min} ms and at most {max} ms; got {0} ms", min = MIN_LEASE_LENGTH.as_millis(), max = MAX_LEASE_LENGTH.as_millis())]
    LeaseOutOfBounds(u64),
}

/// A replica's stable name (the pod name): a restarted process under the same name
/// settles its predecessor's executions at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaName(String);

impl ReplicaName {
    /// This host's name (`/proc/sys/kernel/hostname`; in Kubernetes, the pod's).
    pub fn of_host() -> Self {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .and_then(|name| name.trim().parse().ok())
            .unwrap_or_else(|| Self(FALLBACK_REPLICA_NAME.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for ReplicaName {
    type Err = ReplicaSettingError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        if name.is_empty() {
            return Err(ReplicaSettingError::EmptyName);
        }
        if name.len() > MAX_REPLICA_NAME_BYTES {
            return Err(ReplicaSettingError::NameTooLong(name.len()));
        }
        if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ReplicaSettingError::NameHasSpace);
        }
        Ok(Self(name.to_owned()))
    }
}

impl std::fmt::Display for ReplicaName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A lease length in milliseconds, within its bounds.
pub fn lease_length(ms: u64) -> Result<Duration, ReplicaSettingError> {
    let length = Duration::from_millis(ms);
    if (MIN_LEASE_LENGTH..=MAX_LEASE_LENGTH).contains(&length) {
        Ok(length)
    } else {
        Err(ReplicaSettingError::LeaseOutOfBounds(ms))
    }
}

/// Who this process is among the replicas, and its lease.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    pub name: ReplicaName,
    /// The operator named it (`--replica-name`): multi-replica mode, which the embedded
    /// SQLite store refuses (D12).
    pub name_given: bool,
    pub lease: Duration,
    /// Where other replicas forward calls for this replica's executions
    /// (`--advertise-address`, the internal listener); `None`: they refuse them instead,
    /// naming this replica.
    pub address: Option<String>,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        Self {
            name: ReplicaName::of_host(),
            name_given: false,
            lease: LEASE_LENGTH,
            address: None,
        }
    }
}

impl ReplicaConfig {
    /// How often the heartbeat renews the lease.
    pub fn renew_every(&self) -> Duration {
        self.lease / LEASE_RENEWALS_PER_LEASE
    }

    pub fn terms(&self) -> LeaseTerms {
        LeaseTerms {
            length: self.lease,
            renew_timeout: LEASE_RENEW_TIMEOUT.min(self.renew_every()),
            self_fence_margin: SELF_FENCE_MARGIN.min(self.renew_every()),
        }
    }
}

/// Registers this process as a replica, waiting up to [`REPLICA_NAME_WAIT`] for a
/// process still holding its name (or a pre-scale-out service) to let go.
pub(crate) async fn register(store: &dyn Store, replica: &ReplicaConfig) -> Result<Registration, EngineError> {
    if (replica.name_given || replica.address.is_some()) && store.backend() == "sqlite" {
        return Err(EngineError::precondition(
            Reason::MultiReplicaUnsupported,
            "the embedded SQLite store serves a single replica; multi-replica mode (--replica-name, \
             --advertise-address) needs PostgreSQL",
        ));
    }
    let deadline = tokio::time::Instant::now() + REPLICA_NAME_WAIT;
    loop {
        match store
            .register_replica(replica.name.as_str(), replica.address.as_deref(), replica.terms())
            .await
        {
            Err(StoreError::AnotherService | StoreError::ReplicaNameInUse(_))
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other.map_err(EngineError::from),
        }
    }
}

/// Renews the lease every `every` until the task is aborted (at shutdown), the store is
/// gone (it holds no reference that would keep the store, and its locks, alive), or the
/// lease is lost. Stage 1 only reports a loss: nothing takes an execution over yet.
pub(crate) fn heartbeat(store: Weak<dyn Store>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(store) = store.upgrade() else { return };
            match store.renew_replica_lease().await {
                Ok(Renewal::Held { .. }) => {}
                Ok(Renewal::Lost) => {
                    tracing::error!("this replica's ownership lease ended and cannot be renewed");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "renewing this replica's ownership lease failed; retrying"),
            }
        }
    })
}

/// Resolves once the lease has ended: lost, or its local deadline passed without a renewal.
/// A lease that never ends (the embedded store) never resolves.
pub async fn lease_ended(lease: &mut watch::Receiver<Lease>) {
    loop {
        let current = *lease.borrow_and_update();
        match current {
            Lease::Lost => return,
            Lease::Held { until: None } => {
                if lease.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
            Lease::Held { until: Some(until) } => {
                tokio::select! {
                    changed = lease.changed() => if changed.is_err() {
                        tokio::time::sleep_until(until).await;
                        return;
                    },
                    () = tokio::time::sleep_until(until) => {
                        // A renewal that landed at the deadline itself still counts.
                        if !lease.borrow().held_at(Instant::now()) {
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// The lease's local deadline as each agent's init enforces it (`agent-init --lease-fd`),
/// following the lease: none for one that never ends, now for a lost one.
pub(crate) fn agent_deadline(mut lease: watch::Receiver<Lease>) -> watch::Receiver<Option<std::time::Instant>> {
    let deadline = |lease: &Lease| match lease {
        Lease::Held { until } => until.map(Instant::into_std),
        Lease::Lost => Some(std::time::Instant::now()),
    };
    let (sender, receiver) = watch::channel(deadline(&lease.borrow_and_update()));
    tokio::spawn(async move {
        while lease.changed().await.is_ok() {
            if sender.send(deadline(&lease.borrow_and_update())).is_err() {
                return;
            }
        }
    });
    receiver
}

/// Whether the lease has ended by now.
pub fn lease_has_ended(lease: &watch::Receiver<Lease>) -> bool {
    !lease.borrow().held_at(Instant::now())
}

/// The refusal of a call this replica can no longer serve because its lease ended (the
/// store's own, so a call refused before or at the store reads the same).
pub fn fenced_refusal() -> EngineError {
    StoreError::LeaseEnded.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_name_is_one_to_max_bytes_without_spaces() {
        let longest = "n".repeat(MAX_REPLICA_NAME_BYTES);
        assert_eq!(longest.parse::<ReplicaName>().unwrap().as_str(), longest);
        assert_eq!(
            format!("{longest}n").parse::<ReplicaName>(),
            Err(ReplicaSettingError::NameTooLong(MAX_REPLICA_NAME_BYTES + 1))
        );
        assert_eq!("".parse::<ReplicaName>(), Err(ReplicaSettingError::EmptyName));
        assert_eq!("a b".parse::<ReplicaName>(), Err(ReplicaSettingError::NameHasSpace));
        assert!("cursor-runner-7d9f-x2".parse::<ReplicaName>().is_ok());
    }

    fn held_for(ms: u64) -> watch::Sender<Lease> {
        watch::Sender::new(Lease::Held {
            until: Some(Instant::now() + Duration::from_millis(ms)),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_ends_at_its_local_deadline_unless_renewed_before() {
        let lease = held_for(1_000);
        let mut watching = lease.subscribe();
        let ended = tokio::spawn(async move { lease_ended(&mut watching).await });
        tokio::time::sleep(Duration::from_millis(900)).await;
        lease.send_replace(Lease::Held {
            until: Some(Instant::now() + Duration::from_millis(1_000)),
        });
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(!ended.is_finished(), "renewed in time, it goes on");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(ended.is_finished(), "past its deadline unrenewed, it has ended");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_ends_at_once_and_an_endless_one_never() {
        let lease = held_for(60_000);
        let mut watching = lease.subscribe();
        let ended = tokio::spawn(async move { lease_ended(&mut watching).await });
        lease.send_replace(Lease::Lost);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(ended.is_finished());
        let endless = watch::Sender::new(Lease::Held { until: None });
        let mut watching = endless.subscribe();
        let never = tokio::spawn(async move { lease_ended(&mut watching).await });
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        assert!(!never.is_finished());
    }

    #[test]
    fn the_host_name_is_a_valid_replica_name() {
        assert!(!ReplicaName::of_host().as_str().is_empty());
    }

    #[test]
    fn a_lease_is_between_its_bounds_inclusive() {
        let ms = |d: Duration| d.as_millis() as u64;
        assert_eq!(lease_length(ms(MIN_LEASE_LENGTH)), Ok(MIN_LEASE_LENGTH));
        assert_eq!(lease_length(ms(MAX_LEASE_LENGTH)), Ok(MAX_LEASE_LENGTH));
        for out in [ms(MIN_LEASE_LENGTH) - 1, ms(MAX_LEASE_LENGTH) + 1] {
            assert_eq!(lease_length(out), Err(ReplicaSettingError::LeaseOutOfBounds(out)));
        }
    }

    #[test]
    fn renewals_fit_the_lease_several_times_and_never_outlast_their_timeout() {
        let default = ReplicaConfig::default();
        assert_eq!(default.renew_every(), Duration::from_secs(3));
        assert_eq!(default.terms().renew_timeout, LEASE_RENEW_TIMEOUT);
        assert_eq!(default.terms().self_fence_margin, SELF_FENCE_MARGIN);
        let shortest = ReplicaConfig {
            lease: MIN_LEASE_LENGTH,
            ..default
        };
        assert_eq!(shortest.renew_every(), Duration::from_millis(200));
        assert_eq!(shortest.terms().renew_timeout, Duration::from_millis(200));
        assert_eq!(shortest.terms().self_fence_margin, Duration::from_millis(200));
    }
}
