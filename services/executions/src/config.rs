//! The engine's configuration (`serve`'s flags), read by the engine, its actors and —
//! through [`LaunchSettings`] only — the pool.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cursor_runner_supervisor::agent_users::AgentUsers;
use cursor_runner_supervisor::workspace_policy::WorkspacePolicy;
use cursor_runner_supervisor::{AgentCommand, Guardian};

use crate::limits::TenantLimits;
use crate::retention::{self, Retention};
use cursor_runner_domain::mcp::McpAllowlist;
use cursor_runner_pool::agent_profile::AgentProfiles;
use cursor_runner_pool::{LaunchSettings, PoolConfig};

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub agent_command: AgentCommand,
    /// Private per-process homes live under `<state_dir>/homes/`.
    pub state_dir: PathBuf,
    /// Bound on `initialize` and on `session/new`.
    pub handshake_timeout: Duration,
    /// How long a cancelled turn may take to settle before its process is stopped
    /// (Cursor itself waits ~10 s for child agents).
    pub cancel_grace: Duration,
    /// SIGTERM → SIGKILL grace in the stop ladder.
    pub stop_grace: Duration,
    /// Idle time after which a stream gets a heartbeat.
    pub heartbeat_interval: Duration,
    /// What a workspace may not contain (checked at admission and before `session/new`).
    pub workspace_policy: WorkspacePolicy,
    /// What happens when refused configuration appears during a session.
    pub on_workspace_violation: ViolationAction,
    /// The binary whose hidden `agent-init` mode runs as PID 1 of each agent's own PID
    /// namespace (`serve` sets its own executable). `None`: no namespace, fallbacks only.
    pub agent_init: Option<PathBuf>,
    /// `false` turns the PID-namespace mechanism off even with `agent_init` set.
    pub pid_namespace: bool,
    /// Set by [`Engine::start`]: launches every agent (ledger swept, subreaper set).
    pub guardian: Option<Guardian>,
    /// Warm slots, limits, restart intensity.
    pub pool: PoolConfig,
    /// How long a drain lets running turns finish before it cancels them.
    pub drain_deadline: Duration,
    /// The runner-owned MCP servers an execution may name.
    pub mcp_allowlist: McpAllowlist,
    /// Per-tenant ceilings on every execution's limits.
    pub tenant_limits: TenantLimits,
    /// Pruning of acknowledged events past a period; `None` keeps every event.
    pub retention: Option<Retention>,
    /// The turn deadline of an execution whose request and tenant name none; `None`: none.
    pub default_turn_deadline: Option<Duration>,
    /// The idle-output watchdog of every turn (`agent_idle`); `None`: off.
    pub turn_idle_timeout: Option<Duration>,
    /// How long an execution's writes retry a store that does not answer (a database
    /// restart) before the execution fails `STORE_UNAVAILABLE`; meanwhile its agent's
    /// output waits in the pipe.
    pub store_outage_limit: Duration,
    /// How long completed calls answer retries of their `request_id`; `None` keeps them.
    pub idempotency_retention: Option<Retention>,
    /// Where each execution's raw wire traffic is captured (redacted, bounded); `None`: off.
    pub wire_capture_dir: Option<PathBuf>,
    /// The unprivileged accounts agents run as, one per process; `None`: agents run as
    /// the service's own uid (only when it cannot switch uids).
    pub agent_users: Option<AgentUsers>,
    /// The operator's agent profiles (`--agent-profiles`), named by `CreateExecution`.
    pub agent_profiles: Option<Arc<AgentProfiles>>,
    /// Who this process is among the replicas on its database, and its lease.
    pub replica: crate::ownership::ReplicaConfig,
}

/// The reaction to refused configuration appearing in a workspace mid-session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ViolationAction {
    /// Emit a warning notice and cancel the running turn.
    #[default]
    StopTurn,
    /// Emit a warning notice only.
    Warn,
}

impl EngineConfig {
    pub fn new(agent_command: AgentCommand, state_dir: PathBuf) -> Self {
        Self {
            agent_command,
            state_dir,
            handshake_timeout: Duration::from_secs(60),
            cancel_grace: Duration::from_secs(15),
            stop_grace: Duration::from_secs(5),
            heartbeat_interval: Duration::from_secs(15),
            workspace_policy: WorkspacePolicy::default(),
            on_workspace_violation: ViolationAction::default(),
            agent_init: None,
            pid_namespace: true,
            guardian: None,
            pool: PoolConfig::default(),
            drain_deadline: Duration::from_secs(30),
            mcp_allowlist: McpAllowlist::default(),
            tenant_limits: TenantLimits::default(),
            retention: None,
            default_turn_deadline: Some(crate::limits::DEFAULT_TURN_DEADLINE),
            turn_idle_timeout: Some(crate::limits::DEFAULT_TURN_IDLE_TIMEOUT),
            store_outage_limit: crate::limits::DEFAULT_STORE_OUTAGE_LIMIT,
            idempotency_retention: Some(Retention {
                keep: retention::DEFAULT_IDEMPOTENCY_RETENTION,
                sweep_every: retention::DEFAULT_SWEEP_INTERVAL,
            }),
            wire_capture_dir: None,
            agent_users: None,
            agent_profiles: None,
            replica: crate::ownership::ReplicaConfig::default(),
        }
    }

    /// What the pool takes from this configuration to launch a process.
    pub fn launch_settings(&self) -> LaunchSettings {
        LaunchSettings {
            agent_command: self.agent_command.clone(),
            state_dir: self.state_dir.clone(),
            handshake_timeout: self.handshake_timeout,
            stop_grace: self.stop_grace,
            guardian: self.guardian.clone(),
            wire_capture_dir: self.wire_capture_dir.clone(),
            agent_users: self.agent_users.clone(),
        }
    }
}
