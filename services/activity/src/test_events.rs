//! Picking events out of a normalizer's output, for the unit tests of several modules.

use crate::{ActivityPayload, ProviderNotice, ToolExecution};

/// The last tool event's tool.
pub fn last_tool(events: &[ActivityPayload]) -> &ToolExecution {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            ActivityPayload::ToolStarted(t)
            | ActivityPayload::ToolProgressed(t)
            | ActivityPayload::ToolCompleted(t) => Some(t),
            _ => None,
        })
        .expect("a tool event")
}

/// Every provider notice, in order.
pub fn notices(events: &[ActivityPayload]) -> Vec<&ProviderNotice> {
    events
        .iter()
        .filter_map(|e| match e {
            ActivityPayload::ProviderNotice(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// An agent-message text delta of `item` saying `text`.
pub fn message_delta(item: &str, text: &str) -> ActivityPayload {
    ActivityPayload::ItemDelta(crate::ItemDelta {
        item_id: item.into(),
        kind: crate::ItemKind::AgentMessage,
        channel: crate::Channel::Progress,
        text: text.into(),
        truncated: false,
        sanitized: false,
        child_id: None,
    })
}
