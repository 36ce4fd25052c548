//! ACP `session/update` (and Cursor's fire-and-forget extension requests) → canonical
//! events, for one turn of one session and the child agents it spawns.
//!
//! Updates are decoded raw first (Cursor sends `sessionUpdate` tags the schema has no
//! variant for), then known tags are decoded with the ACP schema types or validated
//! field by field. Nothing here panics on agent input: what cannot be decoded becomes a
//! `provider.notice.recorded`.
//!
//! | native | canonical |
//! |---|---|
//! | `agent_message_chunk` / `agent_thought_chunk` | `item.started` / `item.delta` / `item.completed` |
//! | `tool_call` / `tool_call_update` | `tool.execution.started` / `progressed` / `completed` (field-wise merge) |
//! | `plan`, `cursor/update_todos` | `plan.updated` (one reducer per session, see `checklist`) |
//! | `subagent_spawned`, `subagent_state_update`, ACP `subagent_update` | `delegation.started` / `updated` / `completed`, and the child's own updates attributed to it (see `children`) |
//! | `cursor/task` | `delegation.updated` for a known child, else `delegation.completed` (`evidence: cursor_task_metadata`) |
//! | `current_mode_update` | `review.mode.changed` |
//! | `config_option_update` | `session.config.updated` (extension) |
//! | `session_info_update` | `session.info.updated` (extension) |
//! | `available_commands_update` | `session.commands.updated` (extension) |
//! | `usage_update` | kept, projected by `finish()` into the turn's one `usage.reported` |
//! | anything else | `provider.notice.recorded` `unclassified_acp_<type>` |

use std::path::PathBuf;

use cursor_runner_acp::cursor::{TaskParams, UpdateTodosParams};
use cursor_runner_acp::{AgentMessage, ChunkKind, SessionUpdate, TextChunk};
use serde_json::Value;

use crate::bounds::*;
use crate::children::{ChildRef, Children, Route, Suppression};
use crate::coalesce::push_coalesced;
use crate::event::*;
use crate::sanitize::display_text;
use crate::session_meta::{commands_update, config_update, info_update, unclassified};
use crate::transcript::{Transcript, or_malformed_notice};

/// `providerCostUnavailableReason` when Cursor (which never reports usage) reported none
/// during the turn.
pub const USAGE_UNAVAILABLE_REASON: &str = "cursor_reports_no_usage";
/// The same for any other agent: it reported no `usage_update` during the turn.
pub const AGENT_USAGE_UNAVAILABLE_REASON: &str = "agent_reported_no_usage";

/// How a turn settled, as far as what it leaves open is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnding {
    Completed,
    Cancelled,
    Interrupted,
    Failed,
}

impl TurnEnding {
    /// The terminal status of a tool the agent never reported an end for: `cancelled`
    /// when the turn was cancelled, `interrupted` otherwise — the agent will not report
    /// it any more, and a subscriber must not show it running forever.
    pub fn open_tool_status(self) -> ToolStatus {
        match self {
            Self::Cancelled => ToolStatus::Cancelled,
            Self::Completed | Self::Interrupted | Self::Failed => ToolStatus::Interrupted,
        }
    }
}

/// State the normalizer keeps for one turn: the root session's transcript, the child
/// agents, the last mode and the last reported usage.
#[derive(Debug)]
pub struct TurnNormalizer {
    turn_id: String,
    workspace: Option<PathBuf>,
    root: Transcript,
    children: Children,
    mode: Option<String>,
    usage: Option<UsageReported>,
    /// Why there is no usage when the agent reported none.
    no_usage_reason: &'static str,
    finished: bool,
}

impl TurnNormalizer {
    pub fn new(turn_id: impl Into<String>) -> Self {
        let turn_id = turn_id.into();
        Self {
            root: Transcript::new(turn_id.clone()),
            children: Children::new(turn_id.clone()),
            turn_id,
            workspace: None,
            mode: None,
            usage: None,
            no_usage_reason: USAGE_UNAVAILABLE_REASON,
            finished: false,
        }
    }

    /// The turn is not Cursor's: a turn without usage says the agent reported none,
    /// never that Cursor does not report it.
    pub fn for_another_agent(mut self) -> Self {
        self.no_usage_reason = AGENT_USAGE_UNAVAILABLE_REASON;
        self
    }

    /// The workspace root, already canonicalized by the caller. Paths the agent reports
    /// are emitted relative to it when (lexically) inside it; others are omitted,
    /// counted and warned about. Without a workspace every absolute path is omitted.
    pub fn with_workspace(mut self, root: impl Into<PathBuf>) -> Self {
        self.workspace = Some(root.into());
        self
    }

    /// The session the execution owns: the only authority for this turn. With it,
    /// [`Self::on_session_update`] routes by `sessionId` and child agents are tracked
    /// (the client opted in with `_meta.subagents`); without it, every routed update is
    /// refused and subagent updates stay unclassified.
    pub fn with_root_session(mut self, session_id: impl Into<String>) -> Self {
        self.children.set_root(session_id.into());
        self
    }

    /// For the normalizer that serves a session between turns: a child is known only
    /// under a running turn, so every spawn is refused.
    pub fn between_turns(mut self) -> Self {
        self.children.refuse_spawns();
        self
    }

    /// Normalizes the params of one `session/update` (`{sessionId, update}`): the root
    /// session's updates, a known child's (attributed to it), or — for any other
    /// session — an `unknown_session_update` notice, counted.
    pub fn on_session_update(&mut self, params: &Value) -> Vec<ActivityPayload> {
        let params = SessionUpdate::new(params);
        let (session, update) = (params.session_id(), params.update());
        match self.children.route(session) {
            Route::Root => self.on_update(update),
            Route::Child(child) => self.children.on_child_update(child, update, self.workspace.as_deref()),
            Route::Unknown => self.children.on_unknown_session(session, update),
        }
    }

    /// Normalizes one `session/update` that is a text chunk, as [`Self::on_session_update`]
    /// does its params: the root session's without a tree, anyone else's through it.
    pub fn on_text_chunk(&mut self, chunk: TextChunk) -> Vec<ActivityPayload> {
        let mut events = Vec::new();
        self.on_text_chunk_into(chunk, &mut events);
        events
    }

    /// [`Self::on_text_chunk`]'s events pushed onto `out` as [`push_coalesced`] would: a
    /// chunk that goes on with the delta before it is appended to that delta's text.
    pub fn on_text_chunk_into(&mut self, chunk: TextChunk, out: &mut Vec<ActivityPayload>) {
        match self.children.route(Some(&chunk.session_id)) {
            Route::Root => {
                let kind = match chunk.kind {
                    ChunkKind::AgentMessage => ItemKind::AgentMessage,
                    ChunkKind::AgentThought => ItemKind::Reasoning,
                };
                self.root.text_chunk_into(chunk.text, kind, out);
            }
            Route::Child(_) | Route::Unknown => push_coalesced(out, self.on_session_update(&chunk.into_params())),
        }
    }

    /// Normalizes the `update` object of one `session/update` of the root session.
    pub fn on_update(&mut self, update: &Value) -> Vec<ActivityPayload> {
        let tag = update.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        if let Some(root) = self.children.lifecycle_parent_for_root(tag) {
            return self.children.on_lifecycle(&root, tag, update);
        }
        let decoded = match self.root.project(tag, update, self.workspace.as_deref()) {
            Some(projected) => projected,
            None => match tag {
                "current_mode_update" => self.mode_update(update),
                "config_option_update" => config_update(update),
                "session_info_update" => Ok(info_update(update)),
                "available_commands_update" => commands_update(update),
                "usage_update" => self.usage_update(update),
                "" => Err("session/update without a sessionUpdate tag".to_owned()),
                other => Ok(vec![unclassified(other)]),
            },
        };
        or_malformed_notice(tag, decoded)
    }

    /// Normalizes one of Cursor's fire-and-forget extension requests (`cursor/update_todos`,
    /// `cursor/task`). The caller acknowledges it on the wire; this only yields events.
    /// Neither carries a session id: each is attributed by its `toolCallId` — todos to
    /// the session whose tool call it is, a task to the child its `Task` call spawned.
    /// Any other method yields an `unprojected_cursor_extension` notice.
    pub fn on_extension(&mut self, method: &str, params: &Value) -> Vec<ActivityPayload> {
        self.on_extension_message(&AgentMessage::classify(method, params))
    }

    /// Normalizes one classified agent message: a `session/update` as
    /// [`Self::on_session_update`], Cursor's extensions as [`Self::on_extension`].
    pub fn on_agent_message(&mut self, message: &AgentMessage<'_>) -> Vec<ActivityPayload> {
        match message {
            AgentMessage::SessionUpdate(update) => self.on_session_update(update.params),
            other => self.on_extension_message(other),
        }
    }

    /// `cursor/update_todos`: the checklist of the session whose tool call it names
    /// (the root's when it is the root's or nobody's).
    pub fn on_update_todos(&mut self, params: &UpdateTodosParams) -> Vec<ActivityPayload> {
        let owner = params
            .tool_call_id
            .as_deref()
            .filter(|id| !self.root.knows_tool(id))
            .and_then(|id| self.children.tool_owner(id));
        match owner {
            Some(child) => self.children.on_todos(child, params),
            None => self.root.apply_todos(params),
        }
    }

    /// `cursor/task`: enriches the child its `Task` tool call spawned, else is the
    /// metadata-only `delegation.completed`.
    pub fn on_cursor_task(&mut self, params: &TaskParams) -> Vec<ActivityPayload> {
        self.children.on_cursor_task(params)
    }

    fn on_extension_message(&mut self, message: &AgentMessage<'_>) -> Vec<ActivityPayload> {
        match message {
            AgentMessage::UpdateTodos(params) => self.on_update_todos(params),
            AgentMessage::Task(params) => self.on_cursor_task(params),
            other => vec![ActivityPayload::ProviderNotice(ProviderNotice::info(
                "unprojected_cursor_extension",
                NoticeScope::Turn,
                format!(
                    "extension request `{}` is not projected by the normalizer",
                    display_text(other.method(), MAX_NAME_CHARS).0
                ),
            ))],
        }
    }

    /// The child an interaction belongs to: the child whose session sent it, or — when
    /// it names the root session or none (Cursor's questions and plans) — the one child
    /// whose transcript has its tool call. `None` for the root's own, for an unknown
    /// session, and when the tool call id is ambiguous (never guessed).
    pub fn child_for(&self, session_id: Option<&str>, tool_call_id: Option<&str>) -> Option<ChildRef> {
        match self.children.route(session_id) {
            Route::Child(child) => Some(self.children.reference(child).clone()),
            Route::Unknown if session_id.is_some() => None,
            Route::Root | Route::Unknown => {
                let id = tool_call_id.filter(|id| !self.root.knows_tool(id))?;
                self.children
                    .tool_owner(id)
                    .map(|child| self.children.reference(child).clone())
            }
        }
    }

    /// Whether the root or a known child has reported this tool call id in this turn.
    pub fn knows_tool_call(&self, tool_call_id: &str) -> bool {
        self.root.knows_tool(tool_call_id) || self.children.any_knows_tool(tool_call_id)
    }

    /// How many updates were suppressed for `reason` so far.
    pub fn suppressed(&self, reason: Suppression) -> u32 {
        self.children.suppressed(reason)
    }

    /// Settles the turn: children that have not ended get a terminal `delegation.completed`
    /// (`interrupted`, or `closed` when idle), open text items close, tools still running
    /// get their `tool.execution.completed` (see [`TurnEnding::open_tool_status`]),
    /// suppressions beyond the noticed ones are totalled, and the turn's one
    /// `usage.reported` is emitted. Later spawns are refused. A second call yields nothing.
    pub fn finish(&mut self, ending: TurnEnding) -> Vec<ActivityPayload> {
        if self.finished {
            return Vec::new();
        }
        self.finished = true;
        let mut events = self.children.finish(ending.open_tool_status());
        events.extend(self.root.close_tools(ending.open_tool_status()));
        events.extend(self.root.close_items());
        events.extend(self.children.suppression_totals());
        let usage = self.usage.take().unwrap_or_else(|| UsageReported {
            turn_id: self.turn_id.clone(),
            request_count_source: "unavailable".into(),
            provider_cost_status: "unpriced".into(),
            provider_cost_unavailable_reason: Some(self.no_usage_reason.into()),
            usage_source: None,
            used: None,
            size: None,
            cost: None,
        });
        events.push(ActivityPayload::UsageReported(usage));
        events
    }

    fn mode_update(&mut self, update: &Value) -> Result<Vec<ActivityPayload>, String> {
        let mode = update
            .get("currentModeId")
            .and_then(Value::as_str)
            .ok_or("`currentModeId` is not a string")?;
        let (mode_id, sanitized) = display_text(mode, MAX_NAME_CHARS);
        let previous_mode_id = self.mode.replace(mode_id.clone());
        Ok(vec![ActivityPayload::ReviewModeChanged(ReviewModeChanged {
            mode_id,
            previous_mode_id,
            sanitized,
        })])
    }

    /// Keeps the last valid `usage_update` of the turn for `finish()`.
    fn usage_update(&mut self, update: &Value) -> Result<Vec<ActivityPayload>, String> {
        let used = update.get("used").and_then(Value::as_u64);
        let size = update.get("size").and_then(Value::as_u64);
        let cost = update.get("cost").and_then(|cost| {
            let amount = cost.get("amount").and_then(Value::as_f64).filter(|a| a.is_finite())?;
            let currency = cost.get("currency").and_then(Value::as_str)?;
            Some(ReportedCost {
                amount,
                currency: display_text(currency, 16).0,
            })
        });
        if used.is_none() && size.is_none() && cost.is_none() {
            return Err("no valid `used`, `size` or `cost`".into());
        }
        self.usage = Some(UsageReported {
            turn_id: self.turn_id.clone(),
            request_count_source: "unavailable".into(),
            provider_cost_status: if cost.is_some() { "reported" } else { "unpriced" }.into(),
            provider_cost_unavailable_reason: cost.is_none().then(|| "provider_reported_no_cost".into()),
            usage_source: Some("acp_usage_update".into()),
            used,
            size,
            cost,
        });
        Ok(Vec::new())
    }
}
#[cfg(test)]
#[path = "normalizer_tests.rs"]
mod tests;
