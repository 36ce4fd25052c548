//! Session metadata updates: `config_option_update`, `session_info_update`,
//! `available_commands_update`, and the notice for a tag nobody projects.

use cursor_runner_acp::config_options::option_entries;
use serde_json::Value;

use crate::bounds::*;
use crate::event::*;
use crate::sanitize::{display_text, safe_tag};

pub(crate) fn config_update(update: &Value) -> Result<Vec<ActivityPayload>, String> {
    let options = update
        .get("configOptions")
        .and_then(Value::as_array)
        .ok_or("`configOptions` is not an array")?;
    let mut sanitized = false;
    let mut clean = |raw: &str, max: usize| {
        let (text, s) = display_text(raw, max);
        sanitized |= s;
        text
    };
    let mut config_options = Vec::new();
    let mut options_omitted = 0u32;
    let mut value_chars = 0usize;
    for option in options {
        let Some(id) = option.get("id").and_then(Value::as_str) else {
            options_omitted += 1;
            continue;
        };
        if config_options.len() >= MAX_CONFIG_OPTIONS {
            options_omitted += 1;
            continue;
        }
        let field = |key: &str| option.get(key).and_then(Value::as_str);
        let current_value = match option.get("currentValue") {
            Some(Value::String(v)) => Some(Value::String(clean(v, MAX_NAME_CHARS))),
            Some(Value::Bool(b)) => Some(Value::Bool(*b)),
            _ => None,
        };
        let mut values = Vec::new();
        let mut values_omitted = 0u32;
        for entry in option_entries(option) {
            let Some(value) = entry.get("value").and_then(Value::as_str) else {
                values_omitted += 1;
                continue;
            };
            if values.len() >= MAX_CONFIG_OPTION_VALUES {
                values_omitted += 1;
                continue;
            }
            let value = ConfigValue {
                value: clean(value, MAX_NAME_CHARS),
                name: entry
                    .get("name")
                    .and_then(Value::as_str)
                    .map(|n| clean(n, MAX_NAME_CHARS)),
            };
            let chars = value.value.chars().count() + value.name.as_deref().map_or(0, |n| n.chars().count());
            if value_chars + chars > MAX_CONFIG_UPDATE_VALUE_CHARS {
                values_omitted += 1;
                continue;
            }
            value_chars += chars;
            values.push(value);
        }
        config_options.push(ConfigOptionSummary {
            id: clean(id, MAX_NAME_CHARS),
            name: field("name").map(|n| clean(n, MAX_NAME_CHARS)),
            category: field("category").map(|c| clean(c, MAX_NAME_CHARS)),
            option_type: clean(field("type").unwrap_or("unknown"), 64),
            current_value,
            values,
            values_omitted,
        });
    }
    Ok(vec![ActivityPayload::SessionConfigUpdated(SessionConfigUpdated {
        config_options,
        options_omitted,
        sanitized,
    })])
}

/// `session_info_update`: a `null` field clears it, an absent one is unchanged. An
/// update with neither field (only `_meta`) yields nothing.
pub(crate) fn info_update(update: &Value) -> Vec<ActivityPayload> {
    let mut sanitized = false;
    let mut field = |key: &str| match update.get(key) {
        None => (None, false, false),
        Some(Value::Null) => (None, true, true),
        Some(Value::String(text)) => {
            let (text, s) = display_text(text, MAX_METADATA_TEXT_CHARS);
            sanitized |= s;
            (Some(text), false, true)
        }
        Some(_) => (None, false, false),
    };
    let (title, title_cleared, has_title) = field("title");
    let (updated_at, updated_at_cleared, has_updated_at) = field("updatedAt");
    if !has_title && !has_updated_at {
        return Vec::new();
    }
    vec![ActivityPayload::SessionInfoUpdated(SessionInfoUpdated {
        title,
        title_cleared,
        updated_at,
        updated_at_cleared,
        sanitized,
    })]
}

pub(crate) fn commands_update(update: &Value) -> Result<Vec<ActivityPayload>, String> {
    let list = update
        .get("availableCommands")
        .and_then(Value::as_array)
        .ok_or("`availableCommands` is not an array")?;
    let mut sanitized = false;
    let mut clean = |raw: &str, max: usize| {
        let (text, s) = display_text(raw, max);
        sanitized |= s;
        text
    };
    let mut commands = Vec::new();
    let mut commands_omitted = 0u32;
    for command in list {
        let Some(name) = command.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
            commands_omitted += 1;
            continue;
        };
        if commands.len() >= MAX_SESSION_COMMANDS {
            commands_omitted += 1;
            continue;
        }
        commands.push(SessionCommand {
            name: clean(name, MAX_NAME_CHARS),
            description: command
                .get("description")
                .and_then(Value::as_str)
                .map(|d| clean(d, MAX_METADATA_TEXT_CHARS)),
            input_hint: command
                .pointer("/input/hint")
                .and_then(Value::as_str)
                .map(|h| clean(h, MAX_METADATA_TEXT_CHARS)),
        });
    }
    Ok(vec![ActivityPayload::SessionCommandsUpdated(SessionCommandsUpdated {
        commands,
        commands_omitted,
        sanitized,
    })])
}

pub(crate) fn unclassified(tag: &str) -> ActivityPayload {
    let safe = safe_tag(tag);
    ActivityPayload::ProviderNotice(ProviderNotice::info(
        format!("unclassified_acp_{safe}"),
        NoticeScope::Session,
        format!("session update `{safe}` is not projected by this runner version"),
    ))
}
