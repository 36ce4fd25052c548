//! `runtime_request.*`: interactions the agent asked a human for.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InteractionKind {
    Question,
    Plan,
    Permission,
}

impl InteractionKind {
    pub const ALL: [Self; 3] = [Self::Question, Self::Plan, Self::Permission];

    /// Its spelling in events and rows.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Question => "question",
            Self::Plan => "plan",
            Self::Permission => "permission",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

impl std::fmt::Display for InteractionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the store reads a row's kind back.
impl TryFrom<String> for InteractionKind {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        Self::parse(&text).ok_or_else(|| format!("`{text}` is not an interaction kind"))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRequestCreated {
    pub interaction_id: String,
    pub kind: InteractionKind,
    pub etag: String,
    pub turn_id: String,
    /// The full persisted request, as `GetInteraction` returns it.
    pub request: Value,
    /// Whether the request's `toolCallId` names a tool call seen in this turn. Cursor's
    /// questions and plans carry no session id, so an unknown one is still accepted and
    /// attributed to the running turn, never guessed elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_known: Option<bool>,
    /// The child agent the request came from, when it is a child's (its session id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRequestResolved {
    pub interaction_id: String,
    pub kind: InteractionKind,
    pub turn_id: String,
    pub outcome: Value,
    /// `pipe_written`: the response was written and flushed to the agent's stdin. This
    /// proves transport hand-off, not that the agent acted on it.
    pub delivery: String,
    /// `human` (through `AnswerInteraction`) or `policy` (the approval policy decided).
    pub answered_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRequestEnded {
    pub interaction_id: String,
    pub kind: InteractionKind,
    pub turn_id: String,
    pub reason: String,
    pub replay_allowed: bool,
    /// What happened on the wire: `pipe_written` (the agent got `cancelled`),
    /// `not_sent` (the process was gone), or `unknown`.
    pub delivery: String,
    /// The full request, so the control plane can ask the human durably.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::InteractionKind;

    #[test]
    fn a_kind_is_spelled_the_same_in_rows_and_events() {
        for kind in InteractionKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
            assert_eq!(InteractionKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(InteractionKind::parse("poll"), None);
    }
}
