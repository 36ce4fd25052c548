//! `item.*`: text and reasoning items and their deltas.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ItemKind {
    AgentMessage,
    Reasoning,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    Progress,
    Summary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemBoundary {
    pub item_id: String,
    pub kind: ItemKind,
    pub channel: Channel,
    /// The child agent (its session id) whose transcript this item is; absent for the
    /// root session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemDelta {
    pub item_id: String,
    pub kind: ItemKind,
    pub channel: Channel,
    pub text: String,
    /// Set when the text was cut to [`crate::MAX_ITEM_TEXT_CHARS`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Set when terminal control sequences were neutralized (see [`crate::sanitize_display`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
    /// The child agent whose transcript this text is; absent for the root session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
}
