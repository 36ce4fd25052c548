//! Opening a recorded session again. One live execution per agent session (a process
//! serves one session at a time): a load or a recovery claims the session — in this
//! process, then in the store for the fleet (`docs/scale-out.md` R8b) — before it checks
//! that no live execution has it, and holds the claim until its execution has the session
//! or failed, so two opens racing each other, on one replica or on two, cannot both pass
//! the check. The session's agent-side state is its home on this replica's disk when it
//! ran here, else its checkpoint restored into a new home (`docs/scale-out.md` §6).

use std::path::PathBuf;

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_store::ExecutionRecord;
use cursor_runner_supervisor::checkpoint::{self, CheckpointError};

use super::data::*;
use super::open_claim::FleetClaim;
use crate::policy::policy_refusal;

/// A session this process is opening; let go by [`SessionClaim::release`], or when
/// dropped (an open whose call went away), its fleet-wide part in the background.
pub(super) struct SessionClaim {
    opening: OpeningSessions,
    key: (String, String),
    /// The store's claim, once granted.
    fleet: Option<FleetClaim>,
}

impl SessionClaim {
    /// Lets the claim go: in the store first, then in this process.
    pub(super) async fn release(mut self) {
        if let Some(fleet) = self.fleet.take() {
            fleet.release().await;
        }
    }
}

impl Drop for SessionClaim {
    fn drop(&mut self) {
        self.opening.lock().remove(&self.key);
    }
}

impl Engine {
    /// Claims the tenant's `session_id` for an execution about to open it: refused
    /// `SESSION_IN_USE` while another call opens it, here or on another replica, or a live
    /// execution has it.
    pub(super) async fn claim_session(&self, tenant_id: &str, session_id: &str) -> Result<SessionClaim, EngineError> {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        if !self.opening_sessions.lock().insert(key.clone()) {
            return Err(in_use(
                session_id,
                format!("session `{session_id}` is being opened by another call"),
            ));
        }
        let mut claim = SessionClaim {
            opening: self.opening_sessions.clone(),
            key,
            fleet: None,
        };
        let Some(fleet) = FleetClaim::take(&self.store, tenant_id, session_id).await? else {
            return Err(in_use(
                session_id,
                format!("session `{session_id}` is being opened on another replica"),
            ));
        };
        claim.fleet = Some(fleet);
        match self.store.find_session(tenant_id, session_id).await {
            Ok(Some(newest)) if !newest.state.is_terminal() => {
                claim.release().await;
                Err(in_use(
                    session_id,
                    format!("session `{session_id}` is open in execution `{}`", newest.id),
                )
                .with("execution_id", newest.id))
            }
            Ok(_) => Ok(claim),
            Err(e) => {
                claim.release().await;
                Err(e.into())
            }
        }
    }
}

impl Engine {
    /// The home the recorded session's agent state is in here, checked like a workspace
    /// before it is reused (its previous agent could have planted user-level config
    /// there). A home another replica ran the session in is never used, even on a shared
    /// disk: a process of that replica may still run in it.
    pub(super) async fn session_home(
        &self,
        recorded: &ExecutionRecord,
        session_id: &str,
    ) -> Result<PathBuf, EngineError> {
        let local = recorded
            .lease
            .clone()
            .filter(|lease| lease.replica.as_deref().is_none_or(|r| r == self.replica_name()))
            .map(|lease| PathBuf::from(lease.home))
            .filter(|home| home.is_dir());
        let (home, restored) = match local {
            Some(home) => (home, false),
            None => (self.restored_home(&recorded.tenant_id, session_id).await?, true),
        };
        if let Err(refusal) = self.config.workspace_policy.check_home(&home) {
            // A home restored for nothing is not left behind.
            if restored && let Err(e) = std::fs::remove_dir_all(&home) {
                tracing::warn!(home = %home.display(), error = %e, "removing a refused restored home failed");
            }
            return Err(policy_refusal(refusal));
        }
        Ok(home)
    }

    /// A new home under this replica's state directory holding the session's checkpoint.
    async fn restored_home(&self, tenant_id: &str, session_id: &str) -> Result<PathBuf, EngineError> {
        let not_found =
            |detail: String| EngineError::precondition(Reason::SessionNotFound, detail).with("session_id", session_id);
        let Some(stored) = self.store.session_checkpoint(tenant_id, session_id).await? else {
            return Err(not_found(format!(
                "the history of session `{session_id}` is not on this replica and no checkpoint of it is stored"
            )));
        };
        let home = (self.config.state_dir.join("homes")).join(format!("restored-{}", uuid::Uuid::now_v7()));
        let into = home.clone();
        let unpacked = tokio::task::spawn_blocking(move || {
            checkpoint::unpack(&stored.format, &stored.body, &stored.sha256, &into)
        })
        .await
        .map_err(|e| EngineError::internal(format!("restoring a checkpoint panicked: {e}")))?;
        match unpacked {
            Ok(_) => Ok(home),
            // This replica's disk, not the checkpoint: the agent's home could not be made
            // here; worth a retry, here or elsewhere.
            Err(CheckpointError::Io { path, source }) => Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::AgentLaunchFailed,
                format!("restoring session `{session_id}` into {}: {source}", path.display()),
            )),
            Err(refused) => Err(not_found(format!(
                "the checkpoint of session `{session_id}` cannot be restored: {refused}"
            ))
            .with("checkpoint", refused.reason())),
        }
    }
}

fn in_use(session_id: &str, detail: String) -> EngineError {
    EngineError::precondition(Reason::SessionInUse, detail).with("session_id", session_id)
}
