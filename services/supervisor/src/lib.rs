//! Agent process supervision: a closed launch environment, one process group per
//! agent, a bounded stderr tail, and the stop ladder that always ends in a reaped
//! process with a recorded exit status; the lifetime guardian (PID namespace under
//! `agent-init`, parent-death signal, subreaper, launch ledger) so that no descendant
//! outlives its execution or the service.

pub mod agent_init;
pub mod agent_users;
mod guardian;
mod launch;
pub mod ledger;
mod process;
pub mod procfs;
mod spawner;
pub mod workspace_paths;
pub mod workspace_policy;
pub mod workspace_watch;

pub use guardian::{CENSUS_INTERVAL, Guardian, GuardianConfig, GuardianReport};
pub use launch::{
    AgentCommand, BoundCredential, CURSOR_ARGS, CredentialName, FIXED_PATH, LaunchError, LaunchSpec,
    PinnedDistribution, Secret,
};
pub use process::{AgentProcess, ExitProof, STDERR_TAIL_BYTES};
pub mod distribution;
