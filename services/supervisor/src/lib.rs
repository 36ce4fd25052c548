//! Agent process supervision: a closed launch environment, one process group per
//! agent, a bounded stderr tail, and the stop ladder that always ends in a reaped
//! process with a recorded exit status; the lifetime guardian (PID namespace under
//! `agent-init`, with a `/proc` of its own where permitted; parent-death signal,
//! subreaper, launch ledger and launch marker) so that no descendant outlives its
//! execution or the service.

pub mod agent_callers;
pub mod agent_init;
pub mod agent_users;
pub mod checkpoint;
mod guardian;
pub mod isolation;
mod launch;
mod lease_feed;
pub mod ledger;
mod process;
pub mod procfs;
mod spawner;
pub mod workspace_paths;
pub mod workspace_policy;
pub mod workspace_watch;

pub use guardian::{CENSUS_INTERVAL, Guardian, GuardianConfig, GuardianReport, StateDirInUse};
pub use launch::{
    AgentCommand, BoundCredential, CURSOR_ARGS, CredentialName, FIXED_PATH, LaunchError, LaunchSpec,
    PinnedDistribution, Secret,
};
pub use lease_feed::{AgentDeadline, LEASE_FEED_SPREAD};
pub use process::{AgentProcess, ExitProof, STDERR_TAIL_BYTES};
pub mod distribution;

/// Whether agents can run as PID 1's children in PID namespaces of their own here (root,
/// or `CAP_SYS_ADMIN`): asked of the one spawner thread that would create them.
pub fn pid_namespaces_available() -> bool {
    spawner::Spawner::global()
        .run(|spawner| spawner.can_create_pid_namespaces())
        .unwrap_or(false)
}

/// Whether an agent in its own PID namespace can also get a `/proc` of its own (a
/// private mount namespace with a fresh procfs): probed on the spawner thread.
pub fn private_proc_available() -> bool {
    spawner::Spawner::global()
        .run(|spawner| spawner.can_mount_private_proc())
        .unwrap_or(false)
}
