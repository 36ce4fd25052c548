//! A slot's bookkeeping, held by whoever holds its process: when the ticket drops, the
//! slot ends in the pool and its private home is removed.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use cursor_runner_supervisor::agent_users::AgentLease;

use crate::agent_profile::AgentProfile;
use crate::wire_capture::WireCapture;

/// Where a ticket reports that its slot ended (the pool).
pub(crate) trait SlotRegistry: Send + Sync {
    fn slot_ended(&self, slot_id: &str);
}

/// Keeps a slot's bookkeeping: when it drops, the slot is `stopped` and capacity freed,
/// and its private home is removed — unless a session was opened in it: Cursor keeps a
/// session's history in its home, so the home stays for `session/load` later.
pub struct SlotTicket {
    pool: Weak<dyn SlotRegistry>,
    pub slot_id: String,
    pub profile_id: String,
    pub home: PathBuf,
    keep_home: bool,
    /// A session that ended in this home is not stored elsewhere: the home stays for good.
    unstored_session: bool,
    /// The agent account this slot's process runs as, given back (and swept) when the
    /// slot ends; `None` when the service does not separate uids.
    pub identity: Option<AgentLease>,
    /// The capture of this slot's wire traffic from its first byte (`--wire-capture-dir`),
    /// handed to each execution that leases the process.
    pub capture: Option<Arc<WireCapture>>,
    /// The operator's agent profile this slot's process runs under, if any.
    pub agent: Option<Arc<AgentProfile>>,
}

impl SlotTicket {
    pub(crate) fn new(
        pool: Weak<dyn SlotRegistry>,
        slot_id: String,
        profile_id: String,
        home: PathBuf,
        identity: Option<AgentLease>,
    ) -> Self {
        Self {
            pool,
            slot_id,
            profile_id,
            home,
            keep_home: false,
            unstored_session: false,
            identity,
            capture: None,
            agent: None,
        }
    }

    /// A session lives in this home now: keep it when the process ends.
    pub fn keep_home(&mut self) {
        self.keep_home = true;
    }

    /// A session opened in this home ended, `stored` elsewhere (checkpointed at its end)
    /// or not. Once every session that ended here is stored, the home is removed when the
    /// process ends, unless another session opens in it; one that is not keeps it.
    pub fn session_ended(&mut self, stored: bool) {
        self.unstored_session |= !stored;
        self.keep_home = self.unstored_session;
    }
}

impl Drop for SlotTicket {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.slot_ended(&self.slot_id);
        }
        if self.keep_home {
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.home)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(slot_id = %self.slot_id, error = %e, "removing a private home failed");
        }
    }
}
