//! One live execution per agent session (a process serves one session at a time): a load
//! or a recovery claims the session in this process before it checks that no live
//! execution has it, and holds the claim until its execution has the session or failed,
//! so two opens racing each other cannot both pass the check.

use cursor_runner_domain::error::{EngineError, Reason};

use super::data::*;

/// A session this process is opening; let go when dropped.
pub(super) struct SessionClaim {
    opening: OpeningSessions,
    key: (String, String),
}

impl Drop for SessionClaim {
    fn drop(&mut self) {
        self.opening.lock().remove(&self.key);
    }
}

impl Engine {
    /// Claims the tenant's `session_id` for an execution about to open it: refused
    /// `SESSION_IN_USE` while another call opens it or a live execution has it.
    pub(super) async fn claim_session(&self, tenant_id: &str, session_id: &str) -> Result<SessionClaim, EngineError> {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        if !self.opening_sessions.lock().insert(key.clone()) {
            return Err(in_use(
                session_id,
                format!("session `{session_id}` is being opened by another call"),
            ));
        }
        let claim = SessionClaim {
            opening: self.opening_sessions.clone(),
            key,
        };
        if let Some(newest) = self.store.find_session(tenant_id, session_id).await?
            && !newest.state.is_terminal()
        {
            return Err(in_use(
                session_id,
                format!("session `{session_id}` is open in execution `{}`", newest.id),
            )
            .with("execution_id", newest.id));
        }
        Ok(claim)
    }
}

fn in_use(session_id: &str, detail: String) -> EngineError {
    EngineError::precondition(Reason::SessionInUse, detail).with("session_id", session_id)
}
