//! The interactions pending on this replica's actors, by id. An answer to one of them goes
//! straight to its actor: the interaction's row would only say which execution to route
//! to, and the actor holds the interaction itself. Each actor keeps its own entries (they
//! leave with the interaction, and all of them with the actor); an entry that is stale by
//! the time the answer arrives costs the read it saved, never a wrong answer: the actor
//! refuses what it no longer holds pending, from the store.

use std::collections::HashMap;
use std::sync::Arc;

use cursor_runner_store::{ExecutionId, InteractionId};
use parking_lot::Mutex;

#[derive(Debug, Clone, Default)]
pub(crate) struct Answerable(Arc<Mutex<HashMap<InteractionId, Entry>>>);

#[derive(Debug, Clone)]
struct Entry {
    tenant_id: String,
    execution_id: ExecutionId,
}

impl Answerable {
    pub(crate) fn insert(&self, interaction_id: &InteractionId, tenant_id: &str, execution_id: &ExecutionId) {
        let entry = Entry {
            tenant_id: tenant_id.to_owned(),
            execution_id: execution_id.clone(),
        };
        self.0.lock().insert(interaction_id.clone(), entry);
    }

    pub(crate) fn remove(&self, interaction_id: &str) {
        self.0.lock().remove(interaction_id);
    }

    /// The execution whose actor here holds the tenant's interaction pending.
    pub(crate) fn execution_of(&self, tenant_id: &str, interaction_id: &str) -> Option<ExecutionId> {
        self.0
            .lock()
            .get(interaction_id)
            .filter(|entry| entry.tenant_id == tenant_id)
            .map(|entry| entry.execution_id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interaction_is_found_for_its_own_tenant_only_until_it_leaves() {
        let answerable = Answerable::default();
        answerable.insert(&"i-1".into(), "tenant-a", &"exec-1".into());
        assert_eq!(answerable.execution_of("tenant-a", "i-1").as_deref(), Some("exec-1"));
        assert_eq!(answerable.execution_of("tenant-b", "i-1"), None);
        answerable.clone().remove("i-1");
        assert_eq!(answerable.execution_of("tenant-a", "i-1"), None);
    }
}
