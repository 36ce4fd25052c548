//! What the pool is configured with: its limits and warm profiles (`serve --pool-*`), and
//! the few engine settings a launch needs — never the engine's whole configuration.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cursor_runner_supervisor::agent_users::AgentUsers;
use cursor_runner_supervisor::{AgentCommand, BoundCredential, Guardian};

use crate::agent_profile::ResolvedProfile;
use crate::intensity::RestartIntensity;

/// Pool settings (`serve --pool-*`).
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Idle slots kept per profile once the profile is known.
    pub min_idle: usize,
    /// Processes (warming, idle and leased) per profile.
    pub max_per_profile: usize,
    /// Processes (warming, idle and leased) on this node.
    pub max_processes: usize,
    /// An idle slot older than this is recycled (and replaced if `min_idle` asks).
    pub idle_ttl: Duration,
    /// A profile learned from a `CreateExecution` is forgotten — its idle slots
    /// stopped, its credential dropped from memory — after this long without a lease.
    pub profile_ttl: Duration,
    /// Sessions one process may serve; 1 recycles every process after its session.
    /// More lets a process that ended cleanly serve the same profile again.
    pub sessions_per_process: u32,
    pub intensity: RestartIntensity,
    /// How often an idle slot is probed (`None`: never).
    pub probe_interval: Option<Duration>,
    pub probe_timeout: Duration,
    /// Profiles an operator keeps warm from the start.
    pub warm_profiles: Vec<WarmProfile>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            min_idle: 0,
            max_per_profile: 16,
            max_processes: 64,
            idle_ttl: Duration::from_secs(10 * 60),
            profile_ttl: Duration::from_secs(30 * 60),
            sessions_per_process: 1,
            intensity: RestartIntensity::default(),
            probe_interval: Some(Duration::from_secs(30)),
            probe_timeout: Duration::from_secs(5),
            warm_profiles: Vec::new(),
        }
    }
}

/// A profile an operator keeps warm; its credential comes from a file read at start-up.
#[derive(Debug, Clone)]
pub struct WarmProfile {
    pub tenant_id: String,
    pub credential: Option<BoundCredential>,
    pub min_idle: usize,
}

/// What a profile's processes are launched with: its credential (held in memory only)
/// and, under an operator's agent profile, that profile's command, environment and
/// authentication.
#[derive(Debug, Clone, Default)]
pub struct LaunchAs {
    pub credential: Option<BoundCredential>,
    pub agent: Option<Arc<ResolvedProfile>>,
}

/// The secrets a launch hands the agent, by variable name: the bound credential and the
/// agent profile's secret-file values — what nothing derived from its output may carry.
pub fn launch_secrets(
    credential: Option<&BoundCredential>,
    agent: Option<&ResolvedProfile>,
) -> impl Iterator<Item = (String, String)> {
    credential
        .map(|c| (c.name.as_str().to_owned(), c.secret.expose().to_owned()))
        .into_iter()
        .chain(agent.into_iter().flat_map(|a| a.secrets.iter().cloned()))
}

/// What launching one agent process takes from the engine's configuration.
#[derive(Debug, Clone)]
pub struct LaunchSettings {
    pub agent_command: AgentCommand,
    /// Private per-process homes live under `<state_dir>/homes/`.
    pub state_dir: PathBuf,
    /// Bound on `initialize` (and the profile's `authenticate`).
    pub handshake_timeout: Duration,
    /// SIGTERM → SIGKILL grace in the stop ladder.
    pub stop_grace: Duration,
    /// Launches every agent (ledger swept, subreaper set) when the engine started one.
    pub guardian: Option<Guardian>,
    /// Where each slot's raw wire traffic is captured; `None`: off.
    pub wire_capture_dir: Option<PathBuf>,
    /// The unprivileged accounts agents run as; `None`: the service's own uid.
    pub agent_users: Option<AgentUsers>,
}
