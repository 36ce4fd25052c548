//! One session's transcript — the root's or a child's — and the notice for an update
//! that does not decode. Shared by the turn's normalizer and each child agent.

use std::collections::HashMap;
use std::path::Path;

use agent_client_protocol_schema::v1 as acp;
use cursor_runner_acp::cursor::UpdateTodosParams;
use serde::Deserialize;
use serde_json::Value;

use crate::bounds::*;
use crate::checklist::Checklist;
use crate::coalesce::{NextDelta, push_delta};
use crate::event::*;
use crate::sanitize::{display_text, is_identifier, sanitize_display_owned};
use crate::tool::{ToolState, operation};

/// The events of a decoded update, or a `malformed_acp_update` notice saying why not.
pub(crate) fn or_malformed_notice(tag: &str, decoded: Result<Vec<ActivityPayload>, String>) -> Vec<ActivityPayload> {
    decoded.unwrap_or_else(|reason| {
        let summary = if tag.is_empty() {
            reason
        } else {
            format!("{tag}: {reason}")
        };
        vec![ActivityPayload::ProviderNotice(ProviderNotice::warning(
            "malformed_acp_update",
            NoticeScope::Turn,
            summary,
        ))]
    })
}

/// The text of a message chunk whose content is a text block, read in place: exactly
/// what `acp::ContentChunk` decodes to `ContentBlock::Text` (its other fields —
/// `messageId`, `_meta`, `annotations` — default on error, so they never fail it), without
/// copying the whole update into the schema types first. `None` for any other content:
/// the schema decode then says what it is, or why it is malformed.
pub(crate) fn text_block(update: &Value) -> Option<&str> {
    let content = update.get("content")?;
    if content.get("type")?.as_str()? != "text" {
        return None;
    }
    content.get("text")?.as_str()
}

/// One session's transcript — the root's or a child's: its open text items, its tool
/// calls (ids are session-local: the same id in two sessions is two tools) and its
/// checklist. Item ids are unique per turn: `<prefix>:msg-<n>`, where the prefix is the
/// turn id, plus `:child-<n>` for a child.
#[derive(Debug)]
pub(crate) struct Transcript {
    item_prefix: String,
    next_item: u32,
    open_message: Option<String>,
    open_reasoning: Option<String>,
    tools: HashMap<String, ToolState>,
    checklist: Checklist,
}

impl Transcript {
    pub(crate) fn new(item_prefix: String) -> Self {
        Self {
            checklist: Checklist::new(format!("{item_prefix}:checklist")),
            item_prefix,
            next_item: 0,
            open_message: None,
            open_reasoning: None,
            tools: HashMap::new(),
        }
    }

    pub(crate) fn item_prefix(&self) -> &str {
        &self.item_prefix
    }

    /// The projections every session shares: text and reasoning items, tool calls and
    /// the ACP plan. `None` for any other tag.
    pub(crate) fn project(
        &mut self,
        tag: &str,
        update: &Value,
        workspace: Option<&Path>,
    ) -> Option<Result<Vec<ActivityPayload>, String>> {
        Some(match tag {
            "agent_message_chunk" => self.chunk(update, ItemKind::AgentMessage),
            "agent_thought_chunk" => self.chunk(update, ItemKind::Reasoning),
            "tool_call" => self.tool(update, true, workspace),
            "tool_call_update" => self.tool(update, false, workspace),
            "plan" => Ok(self.checklist.apply_acp_plan(update)),
            _ => return None,
        })
    }

    pub(crate) fn apply_todos(&mut self, params: &UpdateTodosParams) -> Vec<ActivityPayload> {
        self.checklist.apply_todos(params)
    }

    pub(crate) fn knows_tool(&self, tool_call_id: &str) -> bool {
        self.tools.contains_key(tool_call_id)
    }

    fn chunk(&mut self, update: &Value, kind: ItemKind) -> Result<Vec<ActivityPayload>, String> {
        let text = match text_block(update) {
            Some(text) => text.to_owned(),
            None => {
                let chunk = acp::ContentChunk::deserialize(update).map_err(|e| e.to_string())?;
                let acp::ContentBlock::Text(text) = chunk.content else {
                    return Ok(vec![ActivityPayload::ProviderNotice(ProviderNotice::warning(
                        "unprojected_content_block",
                        NoticeScope::Turn,
                        "a non-text content block in a message chunk is not projected yet",
                    ))]);
                };
                text.text
            }
        };
        Ok(self.text_chunk(text, kind))
    }

    /// The events of one chunk of text of an item of `kind`: the item's start when none of
    /// that kind is open, then the delta.
    pub(crate) fn text_chunk(&mut self, text: String, kind: ItemKind) -> Vec<ActivityPayload> {
        let mut events = Vec::new();
        self.text_chunk_into(text, kind, &mut events);
        events
    }

    /// [`Self::text_chunk`]'s events pushed onto `out`, the delta joined to the one before
    /// it where they merge ([`crate::coalesce`]).
    pub(crate) fn text_chunk_into(&mut self, text: String, kind: ItemKind, out: &mut Vec<ActivityPayload>) {
        let channel = match kind {
            ItemKind::AgentMessage => Channel::Progress,
            ItemKind::Reasoning => Channel::Summary,
        };
        if self.open_item(kind).is_none() {
            let item_id = self.new_item_id(kind);
            out.push(ActivityPayload::ItemStarted(ItemBoundary {
                item_id: item_id.clone(),
                kind,
                channel,
                child_id: None,
            }));
            *self.open_item(kind) = Some(item_id);
        }
        let item_id = self.open_item(kind).as_deref().expect("an item of this kind is open");
        let clean = sanitize_display_owned(text);
        let bounded = bound_owned_text(clean.text, MAX_ITEM_TEXT_CHARS);
        push_delta(
            out,
            NextDelta {
                item_id,
                kind,
                channel,
                child_id: None,
                text: bounded.text,
                truncated: bounded.truncated,
                sanitized: clean.sanitized,
            },
        );
    }

    /// `tool_call` and `tool_call_update` share one field-wise merge: a field present in
    /// the update replaces the known value (a `content`/`locations` array replaces the
    /// old one), an absent field keeps it. A re-sent `tool_call` therefore updates.
    fn tool(
        &mut self,
        update: &Value,
        is_call: bool,
        workspace: Option<&Path>,
    ) -> Result<Vec<ActivityPayload>, String> {
        let patch = acp::ToolCallUpdate::deserialize(update).map_err(|e| e.to_string())?;
        let id = patch.tool_call_id.0.to_string();
        if !is_identifier(&id) {
            // Taken whole or not at all: a cut or rewritten id could merge two tools.
            // Refused before anything changes, so open items stay open.
            return Err(format!(
                "`toolCallId` is not an identifier (empty, over {MAX_NAME_CHARS} characters, or with control characters)"
            ));
        }
        let mut events = if is_call { self.close_items() } else { Vec::new() };
        let fields = patch.fields;
        let known = self.tools.contains_key(&id);
        // Tools are never forgotten within a turn, so the count is the next start order.
        let order = self.tools.len();
        let state = self
            .tools
            .entry(id.clone())
            .or_insert_with(|| ToolState::new(&id, order));
        if let Some(title) = fields.title.as_deref() {
            let (name, sanitized) = display_text(title, MAX_NAME_CHARS);
            state.tool.name = name;
            state.title_sanitized = sanitized;
        }
        if let Some(kind) = fields.kind {
            state.tool.operation = operation(kind);
        }
        if let Some(raw_input) = fields.raw_input {
            state.set_input(raw_input, known, workspace);
        }
        if let Some(locations) = update.get("locations").and_then(Value::as_array) {
            state.set_locations(locations, workspace);
        }
        if let Some(content) = update.get("content").and_then(Value::as_array) {
            state.set_content(content, workspace);
        }
        if let Some(raw_output) = fields.raw_output.as_ref() {
            state.set_raw_output(raw_output, workspace);
        }
        let became_terminal = fields.status.is_some_and(|status| state.set_status(status));
        state.refresh();
        let snapshot = state.tool.clone();
        if !known {
            // A tool first seen already settled still starts as `running`; its terminal
            // status is the `completed` event that follows.
            let mut started = snapshot.clone();
            if became_terminal {
                started.status = ToolStatus::Running;
                started.failure_source = None;
            }
            events.push(ActivityPayload::ToolStarted(started));
        }
        if became_terminal {
            events.push(ActivityPayload::ToolCompleted(snapshot));
        } else if known {
            events.push(ActivityPayload::ToolProgressed(snapshot));
        }
        let outside = state.outside;
        if outside > 0 && !state.warned_outside {
            state.warned_outside = true;
            let why = if workspace.is_none() {
                " (no workspace is configured)"
            } else {
                ""
            };
            events.push(ActivityPayload::ProviderNotice(ProviderNotice::warning(
                "tool_path_outside_workspace",
                NoticeScope::Turn,
                format!("tool call {id}: {outside} path(s) not inside the workspace were omitted{why}"),
            )));
        }
        Ok(events)
    }

    /// Every tool still running, in start order, settled as `status` by its terminal event.
    pub(crate) fn close_tools(&mut self, status: ToolStatus) -> Vec<ActivityPayload> {
        let mut open: Vec<&mut ToolState> = self.tools.values_mut().filter(|state| !state.terminal).collect();
        open.sort_by_key(|state| state.order);
        open.into_iter()
            .map(|state| {
                state.terminal = true;
                state.tool.status = status;
                ActivityPayload::ToolCompleted(state.tool.clone())
            })
            .collect()
    }

    pub(crate) fn close_items(&mut self) -> Vec<ActivityPayload> {
        let mut events = Vec::new();
        if let Some(item_id) = self.open_reasoning.take() {
            events.push(ActivityPayload::ItemCompleted(ItemBoundary {
                item_id,
                kind: ItemKind::Reasoning,
                channel: Channel::Summary,
                child_id: None,
            }));
        }
        if let Some(item_id) = self.open_message.take() {
            events.push(ActivityPayload::ItemCompleted(ItemBoundary {
                item_id,
                kind: ItemKind::AgentMessage,
                channel: Channel::Progress,
                child_id: None,
            }));
        }
        events
    }

    /// The id of the open item of `kind`, if one is.
    fn open_item(&mut self, kind: ItemKind) -> &mut Option<String> {
        match kind {
            ItemKind::AgentMessage => &mut self.open_message,
            ItemKind::Reasoning => &mut self.open_reasoning,
        }
    }

    fn new_item_id(&mut self, kind: ItemKind) -> String {
        self.next_item += 1;
        let prefix = match kind {
            ItemKind::AgentMessage => "msg",
            ItemKind::Reasoning => "reasoning",
        };
        format!("{}:{prefix}-{}", self.item_prefix, self.next_item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the schema decode makes of an update's content: its text, or `None`.
    fn schema_text(update: &Value) -> Option<String> {
        match acp::ContentChunk::deserialize(update).ok()?.content {
            acp::ContentBlock::Text(text) => Some(text.text),
            _ => None,
        }
    }

    #[test]
    fn a_text_block_read_in_place_is_what_the_schema_decodes_whenever_it_reads_one() {
        let updates = [
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}),
            json!({"content": {"text": "first", "type": "text"}}),
            json!({"content": {"type": "text", "text": ""}, "messageId": 7, "_meta": "not an object"}),
            json!({"content": {"type": "text", "text": "a", "annotations": 5, "_meta": [1]}}),
            json!({"content": {"type": "text", "text": "a", "annotations": {"priority": "high"}}}),
            json!({"content": {"type": "text", "text": "\u{1b}[31m", "extra": {"deep": [1, 2]}}}),
        ];
        for update in &updates {
            let fast = text_block(update).map(str::to_owned);
            assert!(fast.is_some(), "{update}");
            assert_eq!(fast, schema_text(update), "{update}");
        }
    }

    #[test]
    fn anything_but_a_text_block_with_string_text_is_left_to_the_schema_decode() {
        let updates = [
            json!({"sessionUpdate": "agent_message_chunk"}),
            json!({"content": null}),
            json!({"content": "text"}),
            json!({"content": {"type": "text"}}),
            json!({"content": {"type": "text", "text": 5}}),
            json!({"content": {"type": "text", "text": null}}),
            json!({"content": {"type": "image", "data": "", "mimeType": "image/png"}}),
            json!({"content": {"type": "TEXT", "text": "a"}}),
            json!({"content": {"text": "a"}}),
            json!([{"content": {"type": "text", "text": "a"}}]),
            json!("agent_message_chunk"),
        ];
        for update in &updates {
            assert_eq!(text_block(update), None, "{update}");
        }
    }
}
