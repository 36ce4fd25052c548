//! The event envelope: every canonical family as one enum, its type spellings and
//! priorities, and the one constructor that yields several families (`generated_image`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::artifact::*;
use super::delegation::*;
use super::item::*;
use super::notice::*;
use super::plan::*;
use super::process::*;
use super::request::*;
use super::session::*;
use super::tool::*;
use super::turn::*;
use super::usage::*;

/// Version of the payload schemas below; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// The closed set of canonical activity events. The adjacently tagged form
/// (`eventType` + `payload`) is exactly how an event is stored and streamed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "eventType", content = "payload")]
pub enum ActivityPayload {
    #[serde(rename = "turn.started")]
    TurnStarted(TurnStarted),
    #[serde(rename = "turn.completed")]
    TurnCompleted(TurnSettled),
    #[serde(rename = "turn.cancelled")]
    TurnCancelled(TurnSettled),
    #[serde(rename = "turn.interrupted")]
    TurnInterrupted(TurnSettled),
    #[serde(rename = "turn.failed")]
    TurnFailed(TurnSettled),
    #[serde(rename = "item.started")]
    ItemStarted(ItemBoundary),
    #[serde(rename = "item.delta")]
    ItemDelta(ItemDelta),
    #[serde(rename = "item.completed")]
    ItemCompleted(ItemBoundary),
    #[serde(rename = "tool.execution.started")]
    ToolStarted(ToolExecution),
    #[serde(rename = "tool.execution.progressed")]
    ToolProgressed(ToolExecution),
    #[serde(rename = "tool.execution.completed")]
    ToolCompleted(ToolExecution),
    #[serde(rename = "runtime_request.created")]
    RuntimeRequestCreated(RuntimeRequestCreated),
    #[serde(rename = "runtime_request.resolved")]
    RuntimeRequestResolved(RuntimeRequestResolved),
    #[serde(rename = "runtime_request.cancelled")]
    RuntimeRequestCancelled(RuntimeRequestEnded),
    #[serde(rename = "runtime_request.expired")]
    RuntimeRequestExpired(RuntimeRequestEnded),
    #[serde(rename = "process.spawned")]
    ProcessSpawned(ProcessSpawned),
    #[serde(rename = "process.exited")]
    ProcessExited(ProcessExited),
    /// The execution is done with its process, which goes back to the pool to serve
    /// another session of the same profile (instead of `process.exited`).
    #[serde(rename = "process.released")]
    ProcessReleased(ProcessReleased),
    #[serde(rename = "provider.notice.recorded")]
    ProviderNotice(ProviderNotice),
    #[serde(rename = "plan.updated")]
    PlanUpdated(PlanUpdated),
    #[serde(rename = "delegation.started")]
    DelegationStarted(Delegation),
    #[serde(rename = "delegation.updated")]
    DelegationUpdated(Delegation),
    #[serde(rename = "delegation.completed")]
    DelegationCompleted(Delegation),
    #[serde(rename = "review.mode.changed")]
    ReviewModeChanged(ReviewModeChanged),
    /// Extension family (the spec lists no member of PRP's `session.*`).
    #[serde(rename = "session.config.updated")]
    SessionConfigUpdated(SessionConfigUpdated),
    /// Extension family (the spec lists no member of PRP's `session.*`).
    #[serde(rename = "session.info.updated")]
    SessionInfoUpdated(SessionInfoUpdated),
    /// Extension family (the spec lists no member of PRP's `session.*`).
    #[serde(rename = "session.commands.updated")]
    SessionCommandsUpdated(SessionCommandsUpdated),
    /// Extension family: a recorded session was loaded (`session/load`) into this
    /// execution's process — at `CreateExecution`, or by a recovery under a new generation.
    #[serde(rename = "session.loaded")]
    SessionLoaded(SessionLoaded),
    #[serde(rename = "usage.reported")]
    UsageReported(UsageReported),
    #[serde(rename = "artifact.generated")]
    ArtifactGenerated(ArtifactGenerated),
    #[serde(rename = "artifact.viewed")]
    ArtifactViewed(ArtifactViewed),
}

/// Every `eventType` of the closed set, for documentation and mapping checks.
pub const EVENT_TYPES: &[&str] = &[
    "turn.started",
    "turn.completed",
    "turn.cancelled",
    "turn.interrupted",
    "turn.failed",
    "item.started",
    "item.delta",
    "item.completed",
    "tool.execution.started",
    "tool.execution.progressed",
    "tool.execution.completed",
    "runtime_request.created",
    "runtime_request.resolved",
    "runtime_request.cancelled",
    "runtime_request.expired",
    "process.spawned",
    "process.exited",
    "process.released",
    "provider.notice.recorded",
    "plan.updated",
    "delegation.started",
    "delegation.updated",
    "delegation.completed",
    "review.mode.changed",
    "session.config.updated",
    "session.info.updated",
    "session.commands.updated",
    "session.loaded",
    "usage.reported",
    "artifact.generated",
    "artifact.viewed",
];

/// The event types of [`EVENT_TYPES`] that are extensions: families PRP lacks.
pub const EXTENSION_EVENT_TYPES: &[&str] = &[
    "process.spawned",
    "process.exited",
    "process.released",
    "session.config.updated",
    "session.info.updated",
    "session.commands.updated",
    "session.loaded",
];

impl ActivityPayload {
    /// Splits the event into its PRP `eventType` and its JSON payload.
    pub fn into_parts(&self) -> (String, Value) {
        let mut value = serde_json::to_value(self).expect("payloads always serialize");
        let event_type = value["eventType"].as_str().unwrap_or_default().to_owned();
        let payload = value.get_mut("payload").map(Value::take).unwrap_or(Value::Null);
        (event_type, payload)
    }

    /// PRP priority: 0 lifecycle and interactions (never dropped or coalesced),
    /// 1 structure, 2 deltas.
    pub fn priority(&self) -> u8 {
        match self {
            Self::ItemDelta(_) => 2,
            Self::ItemStarted(_)
            | Self::ItemCompleted(_)
            | Self::ToolStarted(_)
            | Self::ToolProgressed(_)
            | Self::ToolCompleted(_)
            | Self::ProviderNotice(_)
            | Self::PlanUpdated(_)
            | Self::DelegationStarted(_)
            | Self::DelegationUpdated(_)
            | Self::DelegationCompleted(_)
            | Self::ReviewModeChanged(_)
            | Self::SessionConfigUpdated(_)
            | Self::SessionInfoUpdated(_)
            | Self::SessionCommandsUpdated(_)
            | Self::SessionLoaded(_)
            | Self::ArtifactGenerated(_)
            | Self::ArtifactViewed(_) => 1,
            _ => 0,
        }
    }

    /// The item id the envelope carries, where the family has one.
    pub fn item_id(&self) -> Option<&str> {
        match self {
            Self::ItemStarted(b) | Self::ItemCompleted(b) => Some(&b.item_id),
            Self::ItemDelta(d) => Some(&d.item_id),
            Self::ToolStarted(t) | Self::ToolProgressed(t) | Self::ToolCompleted(t) => {
                Some(t.item_id.as_deref().unwrap_or(&t.tool_call_id))
            }
            _ => None,
        }
    }

    /// The child agent this event belongs to; `None` for the root session's events
    /// and for families that carry no attribution.
    pub fn child_id(&self) -> Option<&str> {
        match self {
            Self::ItemStarted(b) | Self::ItemCompleted(b) => b.child_id.as_deref(),
            Self::ItemDelta(d) => d.child_id.as_deref(),
            Self::ToolStarted(t) | Self::ToolProgressed(t) | Self::ToolCompleted(t) => t.child_id.as_deref(),
            Self::PlanUpdated(p) => p.child_id.as_deref(),
            Self::ProviderNotice(n) => n.child_id.as_deref(),
            Self::DelegationStarted(d) | Self::DelegationUpdated(d) | Self::DelegationCompleted(d) => Some(&d.child_id),
            _ => None,
        }
    }
}
/// The events for one `cursor/generate_image`: `artifact.generated`, one
/// `artifact.viewed` per verified reference, and a warning notice when paths were
/// refused (never naming them: they may be private).
pub fn generated_image(
    tool_call_id: &str,
    description: &str,
    reference: Option<String>,
    viewed: Vec<String>,
    refused_paths: usize,
) -> Vec<ActivityPayload> {
    let clean = crate::sanitize::sanitize_display(
        &crate::bounds::bound_text(description, crate::bounds::MAX_METADATA_TEXT_CHARS).text,
    );
    let mut events = vec![ActivityPayload::ArtifactGenerated(ArtifactGenerated {
        artifact_id: tool_call_id.to_owned(),
        tool_call_id: tool_call_id.to_owned(),
        reference,
        description: clean.text,
        status: "completed".into(),
        registered: false,
        sanitized: clean.sanitized,
    })];
    events.extend(viewed.into_iter().enumerate().map(|(n, reference)| {
        ActivityPayload::ArtifactViewed(ArtifactViewed {
            artifact_id: format!("{tool_call_id}:ref-{}", n + 1),
            tool_call_id: tool_call_id.to_owned(),
            reference,
        })
    }));
    if refused_paths > 0 {
        events.push(ActivityPayload::ProviderNotice(ProviderNotice::warning(
            "artifact_path_refused",
            NoticeScope::Turn,
            format!(
                "{refused_paths} image path(s) of `{tool_call_id}` were omitted: outside the workspace, not a regular file, or a symlink"
            ),
        )));
    }
    events
}
