//! ACP `session/update` → canonical events, for one turn of one session.
//!
//! Updates are decoded raw first (Cursor sends `sessionUpdate` tags the schema has no
//! variant for), then known tags are decoded with the ACP schema types.

use std::collections::HashMap;

use agent_client_protocol_schema::v1 as acp;
use serde_json::Value;

use crate::bounds::{MAX_ITEM_TEXT_CHARS, MAX_RAW_INPUT_BYTES, bound_output, bound_text};
use crate::event::*;

/// State the normalizer keeps for one turn: open text items and known tool calls.
#[derive(Debug)]
pub struct TurnNormalizer {
    turn_id: String,
    next_item: u32,
    open_message: Option<String>,
    open_reasoning: Option<String>,
    tools: HashMap<String, ToolExecution>,
}

impl TurnNormalizer {
    pub fn new(turn_id: impl Into<String>) -> Self {
        Self {
            turn_id: turn_id.into(),
            next_item: 0,
            open_message: None,
            open_reasoning: None,
            tools: HashMap::new(),
        }
    }

    /// Normalizes the `update` object of one `session/update`.
    pub fn on_update(&mut self, update: &Value) -> Vec<ActivityPayload> {
        let tag = update.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        let decoded = match tag {
            "agent_message_chunk" => self.chunk(update, ItemKind::AgentMessage),
            "agent_thought_chunk" => self.chunk(update, ItemKind::Reasoning),
            "tool_call" => serde_json::from_value::<acp::ToolCall>(update.clone())
                .map(|call| self.tool_call(call))
                .map_err(|e| e.to_string()),
            "tool_call_update" => serde_json::from_value::<acp::ToolCallUpdate>(update.clone())
                .map(|patch| self.tool_call_update(patch))
                .map_err(|e| e.to_string()),
            "" => Err("session/update without a sessionUpdate tag".to_owned()),
            other => Ok(vec![unclassified(other)]),
        };
        decoded.unwrap_or_else(|reason| {
            vec![ActivityPayload::ProviderNotice(ProviderNotice::warning(
                "malformed_acp_update",
                NoticeScope::Turn,
                format!("{tag}: {reason}"),
            ))]
        })
    }

    /// Closes what is still open when the turn settles.
    pub fn finish(&mut self) -> Vec<ActivityPayload> {
        self.close_items()
    }

    fn chunk(&mut self, update: &Value, kind: ItemKind) -> Result<Vec<ActivityPayload>, String> {
        let chunk: acp::ContentChunk = serde_json::from_value(update.clone()).map_err(|e| e.to_string())?;
        let acp::ContentBlock::Text(text) = chunk.content else {
            return Ok(vec![ActivityPayload::ProviderNotice(ProviderNotice::warning(
                "unprojected_content_block",
                NoticeScope::Turn,
                "a non-text content block in a message chunk is not projected yet",
            ))]);
        };
        let channel = match kind {
            ItemKind::AgentMessage => Channel::Progress,
            ItemKind::Reasoning => Channel::Summary,
        };
        let mut events = Vec::new();
        let slot_is_open = match kind {
            ItemKind::AgentMessage => self.open_message.is_some(),
            ItemKind::Reasoning => self.open_reasoning.is_some(),
        };
        if !slot_is_open {
            let item_id = self.new_item_id(kind);
            events.push(ActivityPayload::ItemStarted(ItemBoundary {
                item_id: item_id.clone(),
                kind,
                channel,
            }));
            match kind {
                ItemKind::AgentMessage => self.open_message = Some(item_id),
                ItemKind::Reasoning => self.open_reasoning = Some(item_id),
            }
        }
        let item_id = match kind {
            ItemKind::AgentMessage => self.open_message.clone(),
            ItemKind::Reasoning => self.open_reasoning.clone(),
        }
        .unwrap_or_default();
        let bounded = bound_text(&text.text, MAX_ITEM_TEXT_CHARS);
        events.push(ActivityPayload::ItemDelta(ItemDelta {
            item_id,
            kind,
            channel,
            text: bounded.text,
            truncated: bounded.truncated,
        }));
        Ok(events)
    }

    fn tool_call(&mut self, call: acp::ToolCall) -> Vec<ActivityPayload> {
        let mut events = self.close_items();
        let id = call.tool_call_id.0.to_string();
        let (raw_input, raw_input_truncated) = bound_raw_input(call.raw_input);
        let mut tool = ToolExecution {
            tool_call_id: id.clone(),
            transport: "builtin".into(),
            operation: operation(call.kind),
            name: call.title,
            status: ToolStatus::Running,
            raw_input,
            raw_input_truncated,
            exit_code: None,
            failure_source: None,
            output: None,
        };
        let known = self.tools.contains_key(&id);
        if let Some(raw_output) = call.raw_output.as_ref() {
            apply_raw_output(&mut tool, raw_output);
        }
        let terminal = apply_status(&mut tool, call.status, call.raw_output.as_ref());
        self.tools.insert(id, tool.clone());
        events.push(match (known, terminal) {
            (_, true) => ActivityPayload::ToolCompleted(tool),
            (false, false) => ActivityPayload::ToolStarted(tool),
            (true, false) => ActivityPayload::ToolProgressed(tool),
        });
        events
    }

    fn tool_call_update(&mut self, patch: acp::ToolCallUpdate) -> Vec<ActivityPayload> {
        let id = patch.tool_call_id.0.to_string();
        let fields = patch.fields;
        let mut events = Vec::new();
        let known = self.tools.contains_key(&id);
        let tool = self.tools.entry(id.clone()).or_insert_with(|| ToolExecution {
            tool_call_id: id,
            transport: "builtin".into(),
            operation: ToolOperation::Unknown,
            name: String::new(),
            status: ToolStatus::Running,
            raw_input: None,
            raw_input_truncated: false,
            exit_code: None,
            failure_source: None,
            output: None,
        });
        if let Some(kind) = fields.kind {
            tool.operation = operation(kind);
        }
        if let Some(title) = fields.title {
            tool.name = title;
        }
        if fields.raw_input.is_some() {
            (tool.raw_input, tool.raw_input_truncated) = bound_raw_input(fields.raw_input);
        }
        if let Some(raw_output) = fields.raw_output.as_ref() {
            apply_raw_output(tool, raw_output);
        }
        let terminal = match fields.status {
            Some(status) => apply_status(tool, status, fields.raw_output.as_ref()),
            None => false,
        };
        let snapshot = tool.clone();
        if !known {
            events.push(ActivityPayload::ToolStarted(snapshot.clone()));
        }
        events.push(if terminal {
            ActivityPayload::ToolCompleted(snapshot)
        } else {
            ActivityPayload::ToolProgressed(snapshot)
        });
        events
    }

    fn close_items(&mut self) -> Vec<ActivityPayload> {
        let mut events = Vec::new();
        if let Some(item_id) = self.open_reasoning.take() {
            events.push(ActivityPayload::ItemCompleted(ItemBoundary {
                item_id,
                kind: ItemKind::Reasoning,
                channel: Channel::Summary,
            }));
        }
        if let Some(item_id) = self.open_message.take() {
            events.push(ActivityPayload::ItemCompleted(ItemBoundary {
                item_id,
                kind: ItemKind::AgentMessage,
                channel: Channel::Progress,
            }));
        }
        events
    }

    fn new_item_id(&mut self, kind: ItemKind) -> String {
        self.next_item += 1;
        let prefix = match kind {
            ItemKind::AgentMessage => "msg",
            ItemKind::Reasoning => "reasoning",
        };
        format!("{}:{prefix}-{}", self.turn_id, self.next_item)
    }
}

fn unclassified(tag: &str) -> ActivityPayload {
    let safe: String = tag
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(64)
        .collect();
    ActivityPayload::ProviderNotice(ProviderNotice {
        severity: Severity::Info,
        category: format!("unclassified_acp_{safe}"),
        scope: NoticeScope::Session,
        recoverable: true,
        user_actionable: false,
        summary: format!("session update `{safe}` is not projected by this runner version"),
    })
}

fn operation(kind: acp::ToolKind) -> ToolOperation {
    match kind {
        acp::ToolKind::Read => ToolOperation::Read,
        acp::ToolKind::Edit | acp::ToolKind::Delete | acp::ToolKind::Move => ToolOperation::Edit,
        acp::ToolKind::Search | acp::ToolKind::Fetch => ToolOperation::Search,
        acp::ToolKind::Execute => ToolOperation::Execute,
        _ => ToolOperation::Unknown,
    }
}

fn bound_raw_input(raw: Option<Value>) -> (Option<Value>, bool) {
    match raw {
        None => (None, false),
        Some(value) => {
            let size = serde_json::to_vec(&value).map(|v| v.len()).unwrap_or(usize::MAX);
            if size <= MAX_RAW_INPUT_BYTES {
                (Some(value), false)
            } else {
                (None, true)
            }
        }
    }
}

/// Projects `rawOutput`: text from `stdout`/`stderr`/`output`, and an exit code only
/// when it is a validated integer.
fn apply_raw_output(tool: &mut ToolExecution, raw: &Value) {
    let text: String = ["stdout", "output", "stderr"]
        .iter()
        .filter_map(|key| raw.get(*key).and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("");
    if !text.is_empty() {
        tool.output = Some(bound_output(&text));
    }
    tool.exit_code = raw.get("exitCode").and_then(Value::as_i64).or(tool.exit_code);
}

/// Applies a native status; returns whether the tool reached a terminal state.
fn apply_status(tool: &mut ToolExecution, status: acp::ToolCallStatus, raw_output: Option<&Value>) -> bool {
    match status {
        acp::ToolCallStatus::Completed => {
            match failure_source(raw_output) {
                Some(source) => {
                    tool.status = ToolStatus::Failed;
                    tool.failure_source = Some(source);
                }
                None => tool.status = ToolStatus::Completed,
            }
            true
        }
        acp::ToolCallStatus::Failed => {
            tool.status = ToolStatus::Failed;
            tool.failure_source = Some("status".into());
            true
        }
        _ => {
            tool.status = ToolStatus::Running;
            false
        }
    }
}

/// Cursor never reports `failed`; failure shows only in validated `rawOutput` fields.
fn failure_source(raw_output: Option<&Value>) -> Option<String> {
    let raw = raw_output?;
    if raw.get("exitCode").and_then(Value::as_i64).is_some_and(|c| c != 0) {
        return Some("exitCode".into());
    }
    for key in ["rejected", "permissionDenied"] {
        if raw.get(key).and_then(Value::as_bool) == Some(true) {
            return Some(key.into());
        }
    }
    raw.get("error").filter(|e| !e.is_null()).map(|_| "error".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn types(events: &[ActivityPayload]) -> Vec<String> {
        events.iter().map(|e| e.into_parts().0).collect()
    }

    #[test]
    fn message_chunks_open_one_item_and_stream_deltas() {
        let mut n = TurnNormalizer::new("t1");
        let chunk = json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}});
        let first = n.on_update(&chunk);
        let second = n.on_update(&chunk);
        assert_eq!(types(&first), ["item.started", "item.delta"]);
        assert_eq!(types(&second), ["item.delta"]);
        assert_eq!(first[1].item_id(), second[0].item_id());
        assert_eq!(types(&n.finish()), ["item.completed"]);
    }

    #[test]
    fn thought_chunks_are_reasoning_on_the_summary_channel() {
        let mut n = TurnNormalizer::new("t1");
        let events = n.on_update(&json!({"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hm"}}));
        match &events[1] {
            ActivityPayload::ItemDelta(d) => {
                assert_eq!(d.kind, ItemKind::Reasoning);
                assert_eq!(d.channel, Channel::Summary);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tool_status_table() {
        let cases = vec![
            (json!({"exitCode":0,"stdout":"ok"}), ToolStatus::Completed, None),
            (json!({"exitCode":2,"stdout":""}), ToolStatus::Failed, Some("exitCode")),
            (json!({"error":"boom"}), ToolStatus::Failed, Some("error")),
            (json!({"rejected":true}), ToolStatus::Failed, Some("rejected")),
            (
                json!({"permissionDenied":true}),
                ToolStatus::Failed,
                Some("permissionDenied"),
            ),
            (json!({"exitCode":"0"}), ToolStatus::Completed, None),
        ];
        for (raw_output, status, source) in cases {
            let mut n = TurnNormalizer::new("t");
            n.on_update(
                &json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","kind":"execute","status":"pending"}),
            );
            let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"completed","rawOutput":raw_output}));
            let ActivityPayload::ToolCompleted(tool) = &events[0] else {
                panic!("{events:?}")
            };
            assert_eq!(tool.status, status, "{raw_output}");
            assert_eq!(tool.failure_source.as_deref(), source, "{raw_output}");
        }
    }

    #[test]
    fn a_resent_tool_call_updates_instead_of_duplicating() {
        let mut n = TurnNormalizer::new("t");
        let call = json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","kind":"read","status":"pending"});
        assert_eq!(types(&n.on_update(&call)), ["tool.execution.started"]);
        assert_eq!(types(&n.on_update(&call)), ["tool.execution.progressed"]);
    }

    #[test]
    fn unknown_update_tags_become_unclassified_notices() {
        let mut n = TurnNormalizer::new("t");
        let events = n.on_update(&json!({"sessionUpdate":"subagent_deleted"}));
        let ActivityPayload::ProviderNotice(notice) = &events[0] else {
            panic!()
        };
        assert_eq!(notice.category, "unclassified_acp_subagent_deleted");
    }

    #[test]
    fn a_malformed_known_update_is_a_notice_not_a_panic() {
        let mut n = TurnNormalizer::new("t");
        let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":5}));
        assert_eq!(types(&events), ["provider.notice.recorded"]);
    }
}
