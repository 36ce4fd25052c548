//! Agent process supervision: a closed launch environment, one process group per
//! agent, a bounded stderr tail, and the stop ladder that always ends in a reaped
//! process with a recorded exit status.

mod launch;
mod process;
pub mod workspace_paths;
pub mod workspace_policy;
pub mod workspace_watch;

pub use launch::{
    AgentCommand, BoundCredential, CURSOR_ARGS, CredentialName, FIXED_PATH, LaunchError, LaunchSpec,
    PinnedDistribution, Secret,
};
pub use process::{AgentProcess, ExitProof, STDERR_TAIL_BYTES};
pub mod distribution;
