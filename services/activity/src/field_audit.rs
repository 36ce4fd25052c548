//! The trace audit's field check: which top-level fields of each `session/update` kind the
//! normalizer reads. Anything else a new Cursor build sends is reported (by the runner's
//! metrics), so extra fields are noticed rather than silently lost.

use serde_json::Value;

/// Per update kind, the fields projected (plus `_meta`, ACP's extension space, read where
/// it means something, e.g. a child's `agentId`).
const CONSUMED: &[(&str, &[&str])] = &[
    ("agent_message_chunk", &["sessionUpdate", "content", "_meta"]),
    ("agent_thought_chunk", &["sessionUpdate", "content", "_meta"]),
    (
        "tool_call",
        &[
            "sessionUpdate",
            "toolCallId",
            "title",
            "kind",
            "status",
            "content",
            "locations",
            "rawInput",
            "rawOutput",
            "_meta",
        ],
    ),
    (
        "tool_call_update",
        &[
            "sessionUpdate",
            "toolCallId",
            "title",
            "kind",
            "status",
            "content",
            "locations",
            "rawInput",
            "rawOutput",
            "_meta",
        ],
    ),
    ("plan", &["sessionUpdate", "entries", "_meta"]),
    ("current_mode_update", &["sessionUpdate", "currentModeId", "_meta"]),
    ("config_option_update", &["sessionUpdate", "configOptions", "_meta"]),
    ("session_info_update", &["sessionUpdate", "title", "updatedAt", "_meta"]),
    (
        "available_commands_update",
        &["sessionUpdate", "availableCommands", "_meta"],
    ),
    ("usage_update", &["sessionUpdate", "used", "size", "cost", "_meta"]),
];

/// The update kinds whose fields are audited (a closed set: the metrics' `update_kind`).
pub fn audited_update_kinds() -> impl Iterator<Item = &'static str> {
    CONSUMED.iter().map(|(kind, _)| *kind)
}

/// For an update of a known kind, that kind and the top-level fields the normalizer does
/// not read. `None` for other kinds: those become `unclassified_acp_*` notices whole.
pub fn unconsumed_fields(update: &Value) -> Option<(&'static str, Vec<&str>)> {
    let tag = update.get("sessionUpdate")?.as_str()?;
    let (kind, consumed) = CONSUMED.iter().find(|(kind, _)| *kind == tag)?;
    let extra = update
        .as_object()?
        .keys()
        .map(String::as_str)
        .filter(|field| !consumed.contains(field))
        .collect();
    Some((kind, extra))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_fields_the_normalizer_does_not_read_are_reported() {
        let cases = [
            (
                json!({"sessionUpdate": "agent_message_chunk", "content": {}}),
                Some(("agent_message_chunk", vec![])),
            ),
            (
                json!({"sessionUpdate": "tool_call", "toolCallId": "a", "cursorDurationMs": 5, "_meta": {}}),
                Some(("tool_call", vec!["cursorDurationMs"])),
            ),
            (
                json!({"sessionUpdate": "usage_update", "used": 1, "size": 2, "requests": 3}),
                Some(("usage_update", vec!["requests"])),
            ),
            (json!({"sessionUpdate": "subagent_spawned", "x": 1}), None),
            (json!({"content": {}}), None),
        ];
        for (update, expected) in cases {
            assert_eq!(unconsumed_fields(&update), expected, "{update}");
        }
    }
}
