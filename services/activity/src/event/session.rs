//! `review.mode.changed` and the `session.*` extensions: mode, config options, info,
//! commands, load.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::skip::is_zero;

/// `review.mode.changed` (PRP family) from ACP `current_mode_update`; the fields are
/// extensions (PRP's payload describes Codex review mode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewModeChanged {
    pub mode_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_mode_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

/// One selectable value of a config option.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigValue {
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One ACP `SessionConfigOption`, bounded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOptionSummary {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// `select`, `boolean`, or the type as sent.
    #[serde(rename = "type")]
    pub option_type: String,
    /// A string (select) or a boolean, as sent; absent when it was neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_value: Option<Value>,
    /// The selectable values, groups flattened, up to [`crate::MAX_CONFIG_OPTION_VALUES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<ConfigValue>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub values_omitted: u32,
}

/// Extension family `session.config.updated` from ACP `config_option_update`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionConfigUpdated {
    pub config_options: Vec<ConfigOptionSummary>,
    /// Options beyond [`crate::MAX_CONFIG_OPTIONS`] or without an id.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub options_omitted: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

/// Extension family `session.info.updated` from ACP `session_info_update`. It may
/// arrive after the prompt result (Cursor names sessions asynchronously). A field sent
/// as `null` clears it (`*Cleared`); an absent field is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfoUpdated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub title_cleared: bool,
    /// As sent (not parsed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub updated_at_cleared: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCommand {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_hint: Option<String>,
}

/// Extension family `session.loaded`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionLoaded {
    pub session_id: String,
    /// A recovery after the previous process died (else a load asked by `CreateExecution`).
    pub recovery: bool,
    /// The execution's generation the session now runs under.
    pub generation: i64,
    /// `session/load` replays the session's history as updates before it answers; they
    /// were shown when they happened and are not emitted again.
    pub replayed_updates_suppressed: u64,
}

/// Extension family `session.commands.updated` from ACP `available_commands_update`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCommandsUpdated {
    pub commands: Vec<SessionCommand>,
    /// Commands beyond [`crate::MAX_SESSION_COMMANDS`] or without a name.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub commands_omitted: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}
