//! Why an interaction ended without a human's answer reaching the agent, or what answered
//! it when no human did: recorded on its row and on its ending event, in Paperclip's
//! spelling (`docs/prp-mapping.md`).

use cursor_runner_activity::TurnFailureReason;

use super::permission::ApprovalPolicy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InteractionReason {
    /// The caller cancelled the turn.
    TurnCancelled,
    /// The turn settled with the interaction still pending.
    TurnSettled,
    /// It waited past the execution's limit for a human and was handed off durably.
    DurableHandoff,
    /// Configuration that would load code appeared in the workspace, and the turn stopped.
    WorkspacePolicy,
    /// The service interrupted the turn (its deadline, an idle agent, a drain, a
    /// replacement turn, …).
    Interrupted(TurnFailureReason),
    /// The agent process is gone (it died, or the replica that ran it did).
    ProviderProcessLost,
    /// The service restarted, and the agent process with it.
    ServiceRestarted,
    /// The execution's approval policy answered it, no human.
    ApprovalPolicy(ApprovalPolicy),
}

/// Every reason that is not an interruption nor a policy's, with its spelling.
const FIXED: [(InteractionReason, &str); 5] = [
    (InteractionReason::TurnCancelled, "turn_cancelled"),
    (InteractionReason::TurnSettled, "turn_settled"),
    (InteractionReason::DurableHandoff, "durable_handoff"),
    (InteractionReason::WorkspacePolicy, "workspace_policy"),
    (InteractionReason::ProviderProcessLost, "provider_process_lost"),
];
const SERVICE_RESTARTED: &str = "service_restarted";
const POLICY_PREFIX: &str = "approval_policy_";

impl InteractionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interrupted(reason) => reason.as_str(),
            Self::ServiceRestarted => SERVICE_RESTARTED,
            Self::ApprovalPolicy(ApprovalPolicy::Ask) => "approval_policy_ask",
            Self::ApprovalPolicy(ApprovalPolicy::AllowSessionScope) => "approval_policy_allow_session_scope",
            Self::ApprovalPolicy(ApprovalPolicy::DenyAll) => "approval_policy_deny_all",
            fixed => FIXED
                .iter()
                .find(|(reason, _)| *reason == fixed)
                .map_or("", |(_, text)| text),
        }
    }

    /// A stored reason; `None` for one this version does not know.
    pub fn parse(text: &str) -> Option<Self> {
        if let Some((reason, _)) = FIXED.iter().find(|(_, spelled)| *spelled == text) {
            return Some(*reason);
        }
        if text == SERVICE_RESTARTED {
            return Some(Self::ServiceRestarted);
        }
        if let Some(policy) = text.strip_prefix(POLICY_PREFIX) {
            return ApprovalPolicy::parse(policy).map(Self::ApprovalPolicy);
        }
        serde_json::from_value(serde_json::Value::String(text.to_owned()))
            .ok()
            .map(Self::Interrupted)
    }
}

impl std::fmt::Display for InteractionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_reads_back_as_itself_and_an_unknown_one_reads_as_none() {
        let mut every: Vec<InteractionReason> = FIXED.iter().map(|(reason, _)| *reason).collect();
        every.push(InteractionReason::ServiceRestarted);
        every.extend(
            [
                ApprovalPolicy::Ask,
                ApprovalPolicy::AllowSessionScope,
                ApprovalPolicy::DenyAll,
            ]
            .map(InteractionReason::ApprovalPolicy),
        );
        every.extend(
            [
                TurnFailureReason::DeadlineExceeded,
                TurnFailureReason::AgentIdle,
                TurnFailureReason::ServiceDraining,
                TurnFailureReason::ReplacedByNewTurn,
            ]
            .map(InteractionReason::Interrupted),
        );
        for reason in every {
            assert!(!reason.as_str().is_empty(), "{reason:?}");
            assert_eq!(InteractionReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(
            InteractionReason::parse("approval_policy_ask").map(InteractionReason::as_str),
            Some("approval_policy_ask")
        );
        assert_eq!(InteractionReason::parse("a_reason_from_a_newer_version"), None);
        assert_eq!(InteractionReason::parse("approval_policy_maybe"), None);
    }
}
