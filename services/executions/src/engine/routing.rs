//! Where a call for one execution is answered: on this replica, or on the live replica
//! that owns it (`docs/scale-out.md` §4). The gRPC layer forwards a call the engine routes
//! elsewhere; the owner's own handler then answers it, so its outcome is a local call's.

use cursor_runner_store::ExecutionOwner;

use super::data::Engine;

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
    /// Where a call for the tenant's execution `execution_id` is answered. One read of the
    /// owner, and none for an execution this replica runs; a failed read answers here, whose
    /// own reads then report the store's state.
    pub async fn route(&self, tenant_id: &str, execution_id: &str) -> Route {
        if self.executions.lock().contains_key(execution_id) {
            return Route::Here;
        }
        match self.store.execution_owner(tenant_id, execution_id).await {
            Ok(Some(owner)) => route_to(owner, self.config.replica.name.as_str()),
            Ok(None) | Err(_) => Route::Here,
        }
    }
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
