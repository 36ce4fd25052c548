//! The workspace policy's refusals, in the domain's error catalog.

use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_supervisor::workspace_policy::WorkspaceRefusal;

/// The refusal of a workspace (or home) the workspace policy does not admit.
pub(crate) fn policy_refusal(refusal: WorkspaceRefusal) -> EngineError {
    EngineError::precondition(Reason::WorkspacePolicy, refusal.to_string())
        .with("path", refusal.path().display().to_string())
}
