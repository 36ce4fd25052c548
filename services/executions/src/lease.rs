//! What an execution records about the lease of its agent process (`GetExecution`
//! shows it): which slot, warm or cold, and how long each step took — the agent's
//! own `session/new` time kept apart from the lease, never hidden in it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseInfo {
    pub slot_id: String,
    /// An idle slot was taken (else a process was started for this execution).
    pub warm: bool,
    /// From the pool reservation until the process was ready for `session/new`, in
    /// microseconds (a warm lease takes well under a millisecond).
    #[serde(default)]
    pub lease_us: u64,
    /// Launching the process (when it was started, warm or cold).
    #[serde(default)]
    pub spawn_us: u64,
    /// Its `initialize` round trip.
    #[serde(default)]
    pub initialize_us: u64,
    /// The agent's own `session/new` time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_new_us: Option<u64>,
    /// Sessions the process served before this one.
    pub sessions_served: u32,
    /// The process's private home, where its sessions' history lives (a recovery or
    /// a later load launches in it again).
    #[serde(default)]
    pub home: String,
    /// The operator's agent profile the process runs under (`None`: `--agent-command`);
    /// a load or recovery of the session runs under the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_profile: Option<String>,
}

/// A duration in whole microseconds, saturating.
pub fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl LeaseInfo {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a lease always serializes")
    }

    pub fn from_json(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}
