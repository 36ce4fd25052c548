//! Where a call for one execution is answered: on this replica, or on the live replica
//! that owns it (`docs/scale-out.md` §4). The gRPC layer forwards a call the engine routes
//! elsewhere; the owner's own handler then answers it, so its outcome is a local call's.

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::placement::WarmKey;
use std::sync::Weak;
use std::time::Duration;

use cursor_runner_store::{ExecutionId, ExecutionOwner, ReplicaAddress};

use super::data::Engine;

/// Other replicas tried, at most, for one `CreateExecution` this replica had no room for.
pub const PLACEMENT_ATTEMPTS: usize = 3;

/// Where a call for one execution is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// On this replica: it runs the execution, or no other serving replica that takes
    /// forwarded calls owns it (this replica's own answer then says why: not found,
    /// not ready, owned by a replica that takes no forwarded calls).
    Here,
    /// On the serving replica that owns the execution, at the address it advertised.
    Owner { name: String, address: String },
}

impl Engine {
    /// This replica's name (`--replica-name`): what calls forwarded to it name.
    pub fn replica_name(&self) -> &str {
        self.config.replica.name.as_str()
    }

    /// Where a call for the tenant's execution `execution_id` is answered. One read of the
    /// owner, and none for an execution this replica runs; a failed read answers here, whose
    /// own reads then report the store's state.
    pub async fn route(&self, tenant_id: &str, execution_id: &ExecutionId) -> Route {
        if self.executions.lock().contains_key(execution_id) {
            return Route::Here;
        }
        match self.store.execution_owner(tenant_id, execution_id).await {
            Ok(Some(owner)) => route_to(owner, self.config.replica.name.as_str()),
            Ok(None) | Err(_) => Route::Here,
        }
    }
}

impl Engine {
    /// Where a `CreateExecution` that loads the tenant's `session_id` runs: on the replica
    /// that ran the session last while it serves (the session's history is in a home on
    /// its node), else here.
    pub async fn session_route(&self, tenant_id: &str, session_id: &str) -> Route {
        match self.store.find_session(tenant_id, session_id).await {
            Ok(Some(recorded)) => self.route(tenant_id, &recorded.id).await,
            Ok(None) | Err(_) => Route::Here,
        }
    }

    /// Where a `CreateExecution` this replica refused with `refusal` may be placed instead:
    /// up to [`PLACEMENT_ATTEMPTS`] other serving replicas that take forwarded calls, those
    /// holding a warm process of the `wanted` key first, then the least loaded; none when
    /// the refusal is not for want of room here.
    pub async fn placement_targets(&self, refusal: &EngineError, wanted: &WarmKey) -> Vec<ReplicaAddress> {
        if !for_want_of_room(refusal.reason) {
            return Vec::new();
        }
        self.store
            .placement_targets(PLACEMENT_ATTEMPTS, Some(wanted))
            .await
            .unwrap_or_default()
    }
}

/// How often a replica that takes forwarded calls looks at its pool's idle processes and
/// publishes their warm keys, when they changed.
pub const WARM_KEYS_PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// Publishes the warm keys of this replica's idle processes each time they change (one
/// row update; none while they stay the same), until the engine is gone. A replica that
/// takes no forwarded calls never publishes: nothing is placed on it.
pub(super) async fn publish_warm_keys_every(engine: Weak<Engine>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Registering published none.
    let mut published: Vec<WarmKey> = Vec::new();
    loop {
        ticks.tick().await;
        let Some(engine) = engine.upgrade() else { return };
        if engine.config.replica.address.is_none() {
            return;
        }
        let warm = engine.pool.warm_keys();
        if warm == published {
            continue;
        }
        match engine.store.publish_warm_keys(&warm).await {
            Ok(()) => published = warm,
            Err(e) => tracing::debug!(error = %e, "publishing this replica's warm keys failed; retrying"),
        }
    }
}

/// Whether a replica refused a new execution for want of room of its own, which another
/// replica may have: its pool is full, or it is draining. Not a quarantined profile: its
/// agents failed (often for its credential), and placing it would spread the failures, and
/// the quarantine, over the fleet.
pub fn for_want_of_room(reason: Reason) -> bool {
    matches!(reason, Reason::PoolExhausted | Reason::Draining)
}

/// The refusal of a `CreateExecution` once this replica and the `tried` others it was
/// placed on had no room: the fleet is full for now.
pub fn fleet_full(tried: usize) -> EngineError {
    EngineError::new(
        ErrorKind::ResourceExhausted,
        Reason::PoolExhausted,
        format!("no replica of the fleet has room for a new execution now: this one and {tried} more were tried"),
    )
    .with("scope", "fleet")
    .with("replicas_tried", (tried + 1).to_string())
    .retry_after(cursor_runner_pool::POOL_RETRY_HINT)
}

/// The route to an execution's `owner`, from the replica named `me`.
fn route_to(owner: ExecutionOwner, me: &str) -> Route {
    match owner.address {
        Some(address) if owner.serving && owner.name != me => Route::Owner {
            name: owner.name,
            address,
        },
        _ => Route::Here,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_for_want_of_room_here_is_placed_elsewhere() {
        for reason in Reason::ALL {
            let expected = matches!(reason, Reason::PoolExhausted | Reason::Draining);
            assert_eq!(for_want_of_room(*reason), expected, "{reason:?}");
        }
        let full = fleet_full(2);
        assert_eq!(
            (full.kind, full.reason),
            (ErrorKind::ResourceExhausted, Reason::PoolExhausted)
        );
        assert!(full.retry_after.is_some());
        assert!(full.metadata.contains(&("scope".into(), "fleet".into())));
        assert!(full.metadata.contains(&("replicas_tried".into(), "3".into())));
    }

    fn owner(name: &str, address: Option<&str>, serving: bool) -> ExecutionOwner {
        ExecutionOwner {
            incarnation: format!("{name}-incarnation"),
            name: name.into(),
            address: address.map(str::to_owned),
            serving,
        }
    }

    #[test]
    fn a_call_goes_to_the_owner_only_when_it_serves_elsewhere_and_takes_forwarded_calls() {
        let elsewhere = Route::Owner {
            name: "replica-b".into(),
            address: "10.0.0.2:50052".into(),
        };
        let cases = [
            (owner("replica-b", Some("10.0.0.2:50052"), true), elsewhere),
            // Its lease ended: a takeover (or its restart) settles the execution, and until
            // then this replica's answer says the execution is not ready.
            (owner("replica-b", Some("10.0.0.2:50052"), false), Route::Here),
            // It takes no forwarded calls: this replica refuses, naming it.
            (owner("replica-b", None, true), Route::Here),
            // This replica's own, e.g. one it is still launching.
            (owner("replica-a", Some("10.0.0.1:50052"), true), Route::Here),
            (owner("pre-scale-out", None, false), Route::Here),
        ];
        for (owner, expected) in cases {
            let described = format!("{owner:?}");
            assert_eq!(route_to(owner, "replica-a"), expected, "{described}");
        }
    }
}
