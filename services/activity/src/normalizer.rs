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

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1 as acp;
use cursor_runner_acp::cursor::{TaskParams, UpdateTodosParams};
use cursor_runner_acp::{AgentMessage, SessionUpdate};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::bounds::*;
use crate::checklist::Checklist;
use crate::children::{ChildRef, Children, Route, Suppression};
use crate::event::*;
use crate::paths::{file_uri_path, workspace_relative};
use crate::raw_paths::{PathRewrites, rewrite_paths};
use crate::sanitize::{display_text, is_identifier, safe_tag, sanitize_display};

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
        let chunk = acp::ContentChunk::deserialize(update).map_err(|e| e.to_string())?;
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
        let slot = match kind {
            ItemKind::AgentMessage => &self.open_message,
            ItemKind::Reasoning => &self.open_reasoning,
        };
        let item_id = match slot {
            Some(item_id) => item_id.clone(),
            None => {
                let item_id = self.new_item_id(kind);
                events.push(ActivityPayload::ItemStarted(ItemBoundary {
                    item_id: item_id.clone(),
                    kind,
                    channel,
                    child_id: None,
                }));
                match kind {
                    ItemKind::AgentMessage => self.open_message = Some(item_id.clone()),
                    ItemKind::Reasoning => self.open_reasoning = Some(item_id.clone()),
                }
                item_id
            }
        };
        let clean = sanitize_display(&text.text);
        let bounded = bound_text(&clean.text, MAX_ITEM_TEXT_CHARS);
        events.push(ActivityPayload::ItemDelta(ItemDelta {
            item_id,
            kind,
            channel,
            text: bounded.text,
            truncated: bounded.truncated,
            sanitized: clean.sanitized,
            child_id: None,
        }));
        Ok(events)
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

    fn new_item_id(&mut self, kind: ItemKind) -> String {
        self.next_item += 1;
        let prefix = match kind {
            ItemKind::AgentMessage => "msg",
            ItemKind::Reasoning => "reasoning",
        };
        format!("{}:{prefix}-{}", self.item_prefix, self.next_item)
    }
}

/// What the normalizer knows about one tool call beyond its last snapshot.
#[derive(Debug)]
struct ToolState {
    tool: ToolExecution,
    /// Its place among the transcript's tools, by first report (closing order).
    order: usize,
    input_digest: Option<[u8; 32]>,
    raw_text: Option<BoundedOutput>,
    content_text: Option<BoundedOutput>,
    /// The failure the last `rawOutput` shows, applied when the tool completes.
    raw_failure: Option<String>,
    terminal: bool,
    title_sanitized: bool,
    paths_sanitized: bool,
    /// Path-only strings changed in the kept raw input / the kept raw output text.
    raw_input_paths: PathRewrites,
    raw_output_paths: PathRewrites,
    /// Paths omitted as not inside the workspace, in the current locations, content,
    /// raw input and raw output text.
    outside: u32,
    outside_locations: u32,
    outside_content: u32,
    warned_outside: bool,
}

impl ToolState {
    fn new(id: &str, order: usize) -> Self {
        Self {
            tool: ToolExecution::new(id),
            order,
            input_digest: None,
            raw_text: None,
            content_text: None,
            raw_failure: None,
            terminal: false,
            title_sanitized: false,
            paths_sanitized: false,
            raw_input_paths: PathRewrites::default(),
            raw_output_paths: PathRewrites::default(),
            outside: 0,
            outside_locations: 0,
            outside_content: 0,
            warned_outside: false,
        }
    }

    /// Records raw input; a change after the tool was first reported sets `input_updated`
    /// (judged on the input as sent, before its paths are rewritten).
    fn set_input(&mut self, raw: Value, after_start: bool, workspace: Option<&Path>) {
        let digest: [u8; 32] = Sha256::digest(serde_json::to_vec(&raw).unwrap_or_default()).into();
        if after_start && self.input_digest != Some(digest) {
            self.tool.input_updated = true;
        }
        self.input_digest = Some(digest);
        let kept = bound_raw_input(raw, workspace);
        self.tool.raw_input_truncated = kept.is_none();
        (self.tool.raw_input, self.raw_input_paths) =
            kept.map_or((None, PathRewrites::default()), |(input, paths)| (Some(input), paths));
    }

    fn set_locations(&mut self, locations: &[Value], workspace: Option<&Path>) {
        let mut kept: Vec<ToolLocation> = Vec::new();
        let mut omitted = 0u32;
        let mut truncated = false;
        for location in locations {
            let line = location
                .get("line")
                .and_then(Value::as_u64)
                .and_then(|l| u32::try_from(l).ok());
            let Some(path) = location
                .get("path")
                .and_then(Value::as_str)
                .and_then(|p| self.relative(workspace, p))
            else {
                omitted += 1;
                continue;
            };
            let entry = ToolLocation { path, line };
            if kept.contains(&entry) {
                continue;
            }
            if kept.len() >= MAX_TOOL_LOCATIONS {
                truncated = true;
                continue;
            }
            kept.push(entry);
        }
        self.tool.target = kept.first().map(|l| l.path.clone());
        self.tool.locations = kept;
        self.tool.locations_omitted = omitted;
        self.tool.locations_truncated = truncated;
        self.outside_locations = omitted;
    }

    /// Projects `content[]`: diff blocks, text blocks (output when `rawOutput` has none)
    /// and media/resource blocks (references only).
    fn set_content(&mut self, content: &[Value], workspace: Option<&Path>) {
        let mut diffs = Vec::new();
        let mut diffs_omitted = 0u32;
        let mut artifacts = Vec::new();
        let mut artifacts_omitted = 0u32;
        let mut outside = 0u32;
        let mut texts: Vec<&str> = Vec::new();
        let mut budget = MAX_DIFF_TEXT_BYTES;
        for block in content {
            match block.get("type").and_then(Value::as_str) {
                Some("diff") => {
                    let Some(path) = block.get("path").and_then(Value::as_str) else {
                        diffs_omitted += 1;
                        continue;
                    };
                    let Some(path) = self.relative(workspace, path) else {
                        diffs_omitted += 1;
                        outside += 1;
                        continue;
                    };
                    if diffs.len() >= MAX_TOOL_DIFFS {
                        diffs_omitted += 1;
                        continue;
                    }
                    match provider_diff(block, path, &mut budget) {
                        Some(diff) => diffs.push(diff),
                        None => diffs_omitted += 1,
                    }
                }
                Some("content") => {
                    let inner = block.get("content").unwrap_or(&Value::Null);
                    if inner.get("type").and_then(Value::as_str) == Some("text") {
                        if let Some(text) = inner.get("text").and_then(Value::as_str) {
                            texts.push(text);
                        }
                        continue;
                    }
                    match self.artifact_ref(inner, workspace) {
                        ArtifactVerdict::Kept(reference) if artifacts.len() < MAX_TOOL_ARTIFACTS => {
                            artifacts.push(reference);
                        }
                        ArtifactVerdict::Kept(_) | ArtifactVerdict::Refused => artifacts_omitted += 1,
                        ArtifactVerdict::Outside => {
                            artifacts_omitted += 1;
                            outside += 1;
                        }
                        ArtifactVerdict::NotMedia => {}
                    }
                }
                _ => {}
            }
        }
        self.tool.diffs = diffs;
        self.tool.diffs_omitted = diffs_omitted;
        self.tool.artifacts = artifacts;
        self.tool.artifacts_omitted = artifacts_omitted;
        self.outside_content = outside;
        let joined = texts.join("\n");
        self.content_text = (!joined.is_empty()).then(|| bound_output(&joined));
    }

    /// A media or resource block as a reference; its inline bytes are dropped.
    fn artifact_ref(&mut self, block: &Value, workspace: Option<&Path>) -> ArtifactVerdict {
        let kind = match block.get("type").and_then(Value::as_str) {
            Some("image") => ArtifactRefKind::Image,
            Some("audio") => ArtifactRefKind::Audio,
            Some("resource_link") => ArtifactRefKind::ResourceLink,
            Some("resource") => ArtifactRefKind::Resource,
            _ => return ArtifactVerdict::NotMedia,
        };
        let source = if kind == ArtifactRefKind::Resource {
            block.get("resource").unwrap_or(&Value::Null)
        } else {
            block
        };
        let inline_data_omitted = ["data", "blob", "text"].iter().any(|key| source.get(*key).is_some());
        let (mut reference, mut uri) = (None, None);
        if let Some(raw) = source.get("uri").and_then(Value::as_str) {
            if let Some(path) = file_uri_path(raw) {
                match self.relative(workspace, &path) {
                    Some(rel) => reference = Some(rel),
                    None => return ArtifactVerdict::Outside,
                }
            } else if raw.starts_with("https://") || raw.starts_with("http://") {
                if raw.chars().any(char::is_control) || raw.chars().count() > MAX_URI_CHARS {
                    return ArtifactVerdict::Refused;
                }
                uri = Some(raw.to_owned());
            } else if !raw.contains(':') {
                match self.relative(workspace, raw) {
                    Some(rel) => reference = Some(rel),
                    None => return ArtifactVerdict::Outside,
                }
            } else {
                return ArtifactVerdict::Refused;
            }
        } else if kind == ArtifactRefKind::ResourceLink || kind == ArtifactRefKind::Resource {
            return ArtifactVerdict::Refused;
        }
        let mut sanitized = false;
        let mut text = |key: &str, max: usize| {
            let value = source.get(key).or_else(|| block.get(key)).and_then(Value::as_str)?;
            let (text, clean) = display_text(value, max);
            sanitized |= clean;
            Some(text)
        };
        let media_type = text("mimeType", MAX_NAME_CHARS);
        let title = text("title", MAX_METADATA_TEXT_CHARS).or_else(|| text("name", MAX_METADATA_TEXT_CHARS));
        self.paths_sanitized |= sanitized;
        ArtifactVerdict::Kept(ToolArtifactRef {
            kind,
            reference,
            uri,
            media_type,
            title,
            registered: false,
            inline_data_omitted,
        })
    }

    /// A workspace-relative display path, or `None` when not provably inside.
    fn relative(&mut self, workspace: Option<&Path>, raw: &str) -> Option<String> {
        let rel = workspace_relative(workspace, raw)?;
        if rel.chars().count() > MAX_PATH_CHARS {
            return None;
        }
        let clean = sanitize_display(&rel);
        self.paths_sanitized |= clean.sanitized;
        Some(clean.text)
    }

    /// Text from `stdout`/`output`/`stderr` (each path-only one rewritten: only this text
    /// of `rawOutput` reaches an event), a validated exit code, and the failure the
    /// output shows.
    fn set_raw_output(&mut self, raw: &Value, workspace: Option<&Path>) {
        let mut paths = PathRewrites::default();
        let text: String = ["stdout", "output", "stderr"]
            .iter()
            .filter_map(|key| raw.get(*key).and_then(Value::as_str))
            .map(|text| {
                let mut text = text.to_owned();
                paths.apply(&mut text, workspace);
                text
            })
            .collect();
        if !text.is_empty() {
            self.raw_text = Some(bound_output(&text));
            self.raw_output_paths = paths;
        }
        if let Some(code) = validated_exit_code(raw) {
            self.tool.exit_code = Some(code);
        }
        self.raw_failure = failure_source(raw);
    }

    /// Applies a native status; returns whether the tool reached a terminal state now.
    /// Once terminal, a later non-terminal status is ignored.
    fn set_status(&mut self, status: acp::ToolCallStatus) -> bool {
        let status = match status {
            acp::ToolCallStatus::Completed => match self.raw_failure.clone() {
                Some(source) => {
                    self.tool.failure_source = Some(source);
                    ToolStatus::Failed
                }
                None => {
                    self.tool.failure_source = None;
                    ToolStatus::Completed
                }
            },
            acp::ToolCallStatus::Failed => {
                self.tool.failure_source = Some("status".into());
                ToolStatus::Failed
            }
            _ if self.terminal => return false,
            _ => ToolStatus::Running,
        };
        self.tool.status = status;
        let became_terminal = status != ToolStatus::Running && !self.terminal;
        self.terminal |= became_terminal;
        became_terminal
    }

    /// Recomputes the derived fields of the snapshot.
    fn refresh(&mut self) {
        let (output, source) = match (&self.raw_text, &self.content_text) {
            (Some(raw), _) => (Some(raw.clone()), Some(OutputSource::RawOutput)),
            (None, Some(content)) => (Some(content.clone()), Some(OutputSource::Content)),
            (None, None) => (None, None),
        };
        self.tool.output = output;
        self.tool.output_source = source;
        self.tool.sanitized = self.title_sanitized || self.paths_sanitized;
        let (input, output) = (self.raw_input_paths, self.raw_output_paths);
        self.tool.raw_paths_rewritten = input.rewritten + output.rewritten;
        self.tool.raw_paths_omitted = input.omitted + output.omitted;
        self.outside = self.outside_locations + self.outside_content + self.tool.raw_paths_omitted;
    }
}

enum ArtifactVerdict {
    Kept(ToolArtifactRef),
    Outside,
    Refused,
    NotMedia,
}

/// One `{type:"diff", path, oldText?, newText}` block: `oldText` null/absent is a new
/// file, an empty `newText` a delete. Texts take their head from the shared budget.
fn provider_diff(block: &Value, path: String, budget: &mut usize) -> Option<ProviderDiff> {
    let new_text = block.get("newText")?.as_str()?;
    let old_text = match block.get("oldText") {
        None | Some(Value::Null) => None,
        Some(Value::String(old)) => Some(old.as_str()),
        Some(_) => return None,
    };
    let change = match (old_text, new_text.is_empty()) {
        (None, _) => DiffChange::Create,
        (Some(_), true) => DiffChange::Delete,
        (Some(_), false) => DiffChange::Modify,
    };
    let mut truncated = false;
    let mut take = |text: &str| {
        let head = head_bytes(text, *budget);
        *budget -= head.len();
        truncated |= head.len() < text.len();
        (Some(head.to_owned()), Some(text.len() as u64))
    };
    let (old_text, old_text_bytes) = old_text.map_or((None, None), &mut take);
    let (new_text, new_text_bytes) = if change == DiffChange::Delete {
        (None, None)
    } else {
        take(new_text)
    };
    Some(ProviderDiff {
        path,
        change,
        old_text,
        old_text_bytes,
        new_text,
        new_text_bytes,
        truncated,
    })
}

fn config_update(update: &Value) -> Result<Vec<ActivityPayload>, String> {
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
        let flat = option
            .get("options")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|entry| match entry.get("options").and_then(Value::as_array) {
                Some(group) => group.iter().collect::<Vec<_>>(),
                None => vec![entry],
            });
        for entry in flat {
            let Some(value) = entry.get("value").and_then(Value::as_str) else {
                values_omitted += 1;
                continue;
            };
            if values.len() >= MAX_CONFIG_OPTION_VALUES {
                values_omitted += 1;
                continue;
            }
            values.push(ConfigValue {
                value: clean(value, MAX_NAME_CHARS),
                name: entry
                    .get("name")
                    .and_then(Value::as_str)
                    .map(|n| clean(n, MAX_NAME_CHARS)),
            });
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
fn info_update(update: &Value) -> Vec<ActivityPayload> {
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

fn commands_update(update: &Value) -> Result<Vec<ActivityPayload>, String> {
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

fn unclassified(tag: &str) -> ActivityPayload {
    let safe = safe_tag(tag);
    ActivityPayload::ProviderNotice(ProviderNotice::info(
        format!("unclassified_acp_{safe}"),
        NoticeScope::Session,
        format!("session update `{safe}` is not projected by this runner version"),
    ))
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

/// Raw input with its path-only strings rewritten, and what changed; `None` when it is
/// dropped: past the walk's bounds, or over [`MAX_RAW_INPUT_BYTES`] once rewritten (the
/// marker can be longer than the path it replaces).
fn bound_raw_input(mut value: Value, workspace: Option<&Path>) -> Option<(Value, PathRewrites)> {
    let paths = rewrite_paths(&mut value, workspace).ok()?;
    let size = serde_json::to_vec(&value).map(|v| v.len()).unwrap_or(usize::MAX);
    (size <= MAX_RAW_INPUT_BYTES).then_some((value, paths))
}

/// An exit code only when `rawOutput.exitCode` (Cursor's spelling) or, without it,
/// `rawOutput.exit_code` (codex-acp's) is a JSON integer in the `i32` range.
fn validated_exit_code(raw: &Value) -> Option<i64> {
    raw.get("exitCode")
        .or_else(|| raw.get("exit_code"))
        .and_then(Value::as_i64)
        .filter(|code| i32::try_from(*code).is_ok())
}

/// Cursor never reports `failed`; failure shows only in validated `rawOutput` fields:
/// a non-zero validated `exitCode`, `rejected: true`, `permissionDenied: true`, or an
/// `error` that is a non-empty string, an object, or `true`.
fn failure_source(raw: &Value) -> Option<String> {
    if validated_exit_code(raw).is_some_and(|c| c != 0) {
        return Some("exitCode".into());
    }
    for key in ["rejected", "permissionDenied"] {
        if raw.get(key).and_then(Value::as_bool) == Some(true) {
            return Some(key.into());
        }
    }
    match raw.get("error") {
        Some(Value::String(e)) if !e.is_empty() => Some("error".into()),
        Some(Value::Object(_)) | Some(Value::Bool(true)) => Some("error".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_events::{last_tool, notices};
    use crate::test_rng::Rng;
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
        assert_eq!(
            types(&n.finish(TurnEnding::Completed)),
            ["item.completed", "usage.reported"]
        );
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
    fn a_tool_call_id_of_exactly_max_name_chars_is_kept_and_one_more_is_a_notice() {
        let longest = "t".repeat(MAX_NAME_CHARS);
        let mut n = TurnNormalizer::new("t");
        let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":longest,"title":"x"}));
        assert_eq!(last_tool(&events).tool_call_id, longest);
        for refused in [format!("{longest}t"), String::new(), "id\u{1b}[2J".to_owned()] {
            let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":refused,"title":"x"}));
            assert_eq!(types(&events), ["provider.notice.recorded"], "{refused:?}");
        }
        assert!(n.knows_tool_call(&longest));
    }

    #[test]
    fn a_refused_tool_call_id_leaves_the_open_message_open() {
        let mut n = TurnNormalizer::new("t");
        n.on_update(&json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hi"}}));
        let refused = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"","title":"x"}));
        assert_eq!(types(&refused), ["provider.notice.recorded"]);
        let more = n.on_update(&json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"!"}}));
        assert_eq!(types(&more), ["item.delta"], "the same item goes on");
    }

    #[test]
    fn a_malformed_known_update_is_a_notice_not_a_panic() {
        let mut n = TurnNormalizer::new("t");
        let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":5}));
        assert_eq!(types(&events), ["provider.notice.recorded"]);
    }

    fn ws() -> TurnNormalizer {
        TurnNormalizer::new("t1").with_workspace("/work/repo")
    }

    #[test]
    fn a_resent_tool_call_merges_field_wise_and_keeps_what_it_does_not_repeat() {
        let mut n = ws();
        n.on_update(
            &json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"Read","kind":"read",
            "locations":[{"path":"/work/repo/src/lib.rs","line":3}],"rawInput":{"path":"src/lib.rs"}}),
        );
        let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"Read lib.rs"}));
        assert_eq!(types(&events), ["tool.execution.progressed"]);
        let tool = last_tool(&events);
        assert_eq!(tool.name, "Read lib.rs");
        assert_eq!(tool.operation, ToolOperation::Read);
        assert_eq!(tool.target.as_deref(), Some("src/lib.rs"));
        assert_eq!(tool.locations[0].line, Some(3));
        assert!(!tool.input_updated, "the input was not re-sent");
    }

    #[test]
    fn input_updated_is_set_only_when_the_raw_input_changes_after_start() {
        let cases = [
            (json!({"command":"ls"}), json!({"command":"ls"}), false),
            (json!({"command":"ls"}), json!({"command":"ls -la"}), true),
            (json!({}), json!({"command":"ls"}), true),
        ];
        for (first, second, updated) in cases {
            let mut n = ws();
            let started =
                n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","rawInput":first}));
            assert!(!last_tool(&started).input_updated);
            let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","rawInput":second}));
            assert_eq!(last_tool(&events).input_updated, updated, "{first} -> {second}");
        }
    }

    #[test]
    fn locations_outside_the_workspace_are_omitted_counted_and_warned_once() {
        let mut n = ws();
        let update = json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","locations":[
            {"path":"/work/repo/a.rs"},{"path":"/home/agent/.cursor/secret"},{"path":"/work/repo2/b.rs"},{"path":"rel/c.rs"}]});
        let events = n.on_update(&update);
        let tool = last_tool(&events);
        let paths: Vec<_> = tool.locations.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(paths, ["a.rs", "rel/c.rs"]);
        assert_eq!(tool.locations_omitted, 2);
        let warned = notices(&events);
        assert_eq!(warned.len(), 1);
        assert_eq!(warned[0].category, "tool_path_outside_workspace");
        assert!(!warned[0].summary.contains("/home"), "{}", warned[0].summary);
        assert!(notices(&n.on_update(&update)).is_empty(), "warned once per tool call");
    }

    #[test]
    fn without_a_workspace_absolute_locations_are_omitted() {
        let mut n = TurnNormalizer::new("t1");
        let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x",
            "locations":[{"path":"/work/repo/a.rs"}]}));
        assert_eq!(last_tool(&events).locations_omitted, 1);
        assert!(notices(&events)[0].summary.contains("no workspace"));
    }

    #[test]
    fn the_location_bound_is_exact() {
        let locations = |n: usize| -> Vec<Value> { (0..n).map(|i| json!({"path": format!("f{i}.rs")})).collect() };
        for (count, truncated) in [(MAX_TOOL_LOCATIONS, false), (MAX_TOOL_LOCATIONS + 1, true)] {
            let mut n = ws();
            let events = n.on_update(
                &json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","locations":locations(count)}),
            );
            let tool = last_tool(&events);
            assert_eq!(tool.locations.len(), MAX_TOOL_LOCATIONS);
            assert_eq!(tool.locations_truncated, truncated);
        }
    }

    #[test]
    fn diff_blocks_are_projected_as_create_modify_and_delete() {
        let mut n = ws();
        let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"e","content":[
            {"type":"diff","path":"/work/repo/new.rs","oldText":null,"newText":"fn a() {}\n"},
            {"type":"diff","path":"/work/repo/old.rs","oldText":"x","newText":"y"},
            {"type":"diff","path":"/work/repo/gone.rs","oldText":"bye","newText":""},
            {"type":"diff","path":"/work/repo/absent_old.rs","newText":"z"},
            {"type":"diff","path":"/etc/passwd","oldText":"root","newText":"evil"},
            {"type":"diff","path":"/work/repo/bad.rs","oldText":"x"}
        ]}));
        let tool = last_tool(&events);
        let view: Vec<_> = tool
            .diffs
            .iter()
            .map(|d| (d.path.as_str(), d.change, d.old_text.as_deref(), d.new_text.as_deref()))
            .collect();
        assert_eq!(
            view,
            [
                ("new.rs", DiffChange::Create, None, Some("fn a() {}\n")),
                ("old.rs", DiffChange::Modify, Some("x"), Some("y")),
                ("gone.rs", DiffChange::Delete, Some("bye"), None),
                ("absent_old.rs", DiffChange::Create, None, Some("z")),
            ]
        );
        assert_eq!(tool.diffs_omitted, 2);
        assert_eq!(notices(&events).len(), 1, "only the outside path warns");
    }

    #[test]
    fn diff_text_shares_one_byte_budget_and_keeps_full_byte_counts() {
        let big = "a".repeat(MAX_DIFF_TEXT_BYTES - 10);
        let mut n = ws();
        let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"e","content":[
            {"type":"diff","path":"a.rs","oldText":null,"newText":big},
            {"type":"diff","path":"b.rs","oldText":"0123456789abcdef","newText":"new"}
        ]}));
        let tool = last_tool(&events);
        assert!(!tool.diffs[0].truncated);
        let second = &tool.diffs[1];
        assert!(second.truncated);
        assert_eq!(second.old_text.as_deref(), Some("0123456789"));
        assert_eq!(second.old_text_bytes, Some(16));
        assert_eq!(second.new_text.as_deref(), Some(""));
        assert_eq!(second.new_text_bytes, Some(3));
        let kept: usize = tool
            .diffs
            .iter()
            .flat_map(|d| [d.old_text.as_deref(), d.new_text.as_deref()])
            .flatten()
            .map(str::len)
            .sum();
        assert_eq!(kept, MAX_DIFF_TEXT_BYTES);
    }

    #[test]
    fn the_diff_and_artifact_bounds_are_exact() {
        let diffs = |n: usize| -> Vec<Value> {
            (0..n)
                .map(|i| json!({"type":"diff","path":format!("f{i}.rs"),"oldText":"a","newText":"b"}))
                .collect()
        };
        let images = |n: usize| -> Vec<Value> {
            (0..n)
                .map(|i| json!({"type":"content","content":{"type":"image","data":"AA","mimeType":"image/png","uri":format!("file:///work/repo/{i}.png")}}))
                .collect()
        };
        for (extra, omitted) in [(0, 0), (1, 1)] {
            let content: Vec<Value> = diffs(MAX_TOOL_DIFFS + extra)
                .into_iter()
                .chain(images(MAX_TOOL_ARTIFACTS + extra))
                .collect();
            let events =
                ws().on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","content":content}));
            let tool = last_tool(&events);
            assert_eq!((tool.diffs.len(), tool.diffs_omitted), (MAX_TOOL_DIFFS, omitted));
            assert_eq!(
                (tool.artifacts.len(), tool.artifacts_omitted),
                (MAX_TOOL_ARTIFACTS, omitted)
            );
            assert!(notices(&events).is_empty(), "a bound is not an outside path");
        }
    }

    #[test]
    fn a_path_longer_than_its_bound_is_omitted() {
        let long = format!("/work/repo/{}", "d".repeat(MAX_PATH_CHARS + 1));
        let at = format!("/work/repo/{}", "d".repeat(MAX_PATH_CHARS));
        let events = ws().on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x",
            "locations":[{"path":long},{"path":at}]}));
        let tool = last_tool(&events);
        assert_eq!(tool.locations.len(), 1);
        assert_eq!(tool.locations[0].path.chars().count(), MAX_PATH_CHARS);
        assert_eq!(tool.locations_omitted, 1);
    }

    #[test]
    fn the_config_option_bound_is_exact() {
        for (count, omitted) in [(MAX_CONFIG_OPTIONS, 0), (MAX_CONFIG_OPTIONS + 1, 1)] {
            let options: Vec<_> = (0..count)
                .map(|i| json!({"id": format!("o{i}"), "type":"boolean","currentValue":true}))
                .collect();
            let events = ws().on_update(&json!({"sessionUpdate":"config_option_update","configOptions":options}));
            let ActivityPayload::SessionConfigUpdated(c) = &events[0] else {
                panic!()
            };
            assert_eq!(
                (c.config_options.len(), c.options_omitted),
                (MAX_CONFIG_OPTIONS, omitted)
            );
        }
    }

    #[test]
    fn text_content_is_the_output_only_until_raw_output_has_text() {
        let mut n = ws();
        let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x",
            "content":[{"type":"content","content":{"type":"text","text":"found 3 files"}}]}));
        let tool = last_tool(&events);
        assert_eq!(tool.output.as_ref().unwrap().output, "found 3 files");
        assert_eq!(tool.output_source, Some(OutputSource::Content));
        let events = n.on_update(
            &json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"completed",
            "rawOutput":{"stdout":"a\nb\nc\n"}}),
        );
        let tool = last_tool(&events);
        assert_eq!(tool.output.as_ref().unwrap().output, "a\nb\nc\n");
        assert_eq!(tool.output_source, Some(OutputSource::RawOutput));
    }

    #[test]
    fn media_and_resource_blocks_become_references_without_their_bytes() {
        let mut n = ws();
        let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","content":[
            {"type":"content","content":{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png","uri":"file:///work/repo/shot.png"}},
            {"type":"content","content":{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}},
            {"type":"content","content":{"type":"resource_link","uri":"https://example.com/doc","name":"doc"}},
            {"type":"content","content":{"type":"resource","resource":{"uri":"file:///work/repo/notes.md","text":"secret body"}}},
            {"type":"content","content":{"type":"resource_link","uri":"file:///home/agent/x.png","name":"x"}},
            {"type":"content","content":{"type":"resource_link","uri":"data:text/plain,hi","name":"d"}}
        ]}));
        let tool = last_tool(&events);
        let view: Vec<_> = tool
            .artifacts
            .iter()
            .map(|a| {
                (
                    a.kind,
                    a.reference.as_deref(),
                    a.uri.as_deref(),
                    a.inline_data_omitted,
                    a.registered,
                )
            })
            .collect();
        assert_eq!(
            view,
            [
                (ArtifactRefKind::Image, Some("shot.png"), None, true, false),
                (ArtifactRefKind::Image, None, None, true, false),
                (
                    ArtifactRefKind::ResourceLink,
                    None,
                    Some("https://example.com/doc"),
                    false,
                    false
                ),
                (ArtifactRefKind::Resource, Some("notes.md"), None, true, false),
            ]
        );
        assert_eq!(tool.artifacts_omitted, 2);
        let serialized = serde_json::to_string(tool).unwrap();
        assert!(!serialized.contains("iVBOR") && !serialized.contains("secret body"));
        assert_eq!(notices(&events).len(), 1);
    }

    #[test]
    fn exit_codes_are_kept_only_when_validated_integers() {
        let cases = [
            (json!({"exitCode":0}), Some(0)),
            (json!({"exitCode":-1}), Some(-1)),
            (json!({"exitCode":1.0}), None),
            (json!({"exitCode":"1"}), None),
            (json!({"exitCode":4_294_967_296u64}), None),
            (json!({"exitCode":null}), None),
            (json!({"exit_code":3}), Some(3)),
            (json!({"exit_code":"3"}), None),
            (json!({"exitCode":0,"exit_code":3}), Some(0)),
        ];
        for (raw, code) in cases {
            let mut n = ws();
            let events = n.on_update(
                &json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","status":"completed","rawOutput":raw}),
            );
            assert_eq!(last_tool(&events).exit_code, code, "{raw}");
        }
    }

    #[test]
    fn failure_is_derived_from_the_last_raw_output_even_when_status_comes_later() {
        let mut n = ws();
        n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","kind":"execute"}));
        n.on_update(
            &json!({"sessionUpdate":"tool_call_update","toolCallId":"a","rawOutput":{"exitCode":1,"stderr":"boom"}}),
        );
        let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"completed"}));
        assert_eq!(types(&events), ["tool.execution.completed"]);
        let tool = last_tool(&events);
        assert_eq!(tool.status, ToolStatus::Failed);
        assert_eq!(tool.failure_source.as_deref(), Some("exitCode"));
        assert_eq!(tool.exit_code, Some(1));
    }

    #[test]
    fn a_tool_completes_once_and_later_updates_only_progress() {
        let mut n = ws();
        let first =
            n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","status":"completed"}));
        assert_eq!(types(&first), ["tool.execution.started", "tool.execution.completed"]);
        let ActivityPayload::ToolStarted(started) = &first[0] else {
            panic!()
        };
        assert_eq!(
            started.status,
            ToolStatus::Running,
            "a started event never claims a terminal status"
        );
        let later = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"in_progress"}));
        assert_eq!(types(&later), ["tool.execution.progressed"]);
        assert_eq!(last_tool(&later).status, ToolStatus::Completed);
        let again = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"completed"}));
        assert_eq!(types(&again), ["tool.execution.progressed"]);
    }

    #[test]
    fn a_first_update_for_an_unknown_tool_starts_it() {
        let mut n = ws();
        let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"z","status":"in_progress"}));
        assert_eq!(types(&events), ["tool.execution.started"]);
    }

    #[test]
    fn agent_text_with_terminal_escapes_is_neutralized_and_flagged() {
        let mut n = ws();
        let events = n.on_update(
            &json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"ok\u{1b}]0;pwned\u{7}\u{1b}[2J"}}),
        );
        let ActivityPayload::ItemDelta(delta) = &events[1] else {
            panic!("{events:?}")
        };
        assert_eq!(delta.text, "ok␛]0;pwned␇␛[2J");
        assert!(delta.sanitized);
        let clean =
            n.on_update(&json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"fine"}}));
        let (_, payload) = clean[0].into_parts();
        assert!(
            payload.get("sanitized").is_none(),
            "the flag is absent when nothing was replaced"
        );
        let tool = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"run \u{9b}31m"}));
        let tool = last_tool(&tool);
        assert_eq!(tool.name, "run \u{fffd}31m");
        assert!(tool.sanitized);
    }

    #[test]
    fn tool_titles_are_bounded_with_a_marker() {
        let mut n = ws();
        let title = "t".repeat(MAX_NAME_CHARS + 1);
        let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":title}));
        let name = &last_tool(&events).name;
        assert_eq!(name.chars().count(), MAX_NAME_CHARS);
        assert!(name.ends_with('…'));
    }

    #[test]
    fn todos_and_acp_plans_feed_one_checklist_with_increasing_revisions() {
        let mut n = ws();
        let a = n.on_update(
            &json!({"sessionUpdate":"plan","entries":[{"content":"A","priority":"high","status":"pending"}]}),
        );
        let b = n.on_extension(
            "cursor/update_todos",
            &json!({"toolCallId":"t","merge":true,"todos":[{"id":"x","content":"X","status":"cancelled"}]}),
        );
        let revisions: Vec<_> = a
            .iter()
            .chain(b.iter())
            .filter_map(|e| match e {
                ActivityPayload::PlanUpdated(p) => Some((p.plan_id.clone(), p.revision, p.steps.len())),
                _ => None,
            })
            .collect();
        assert_eq!(
            revisions,
            [("t1:checklist".to_owned(), 1, 1), ("t1:checklist".to_owned(), 2, 2)]
        );
    }

    #[test]
    fn cursor_task_is_delegation_metadata_not_proof_of_success() {
        let cases = [
            (
                json!({"toolCallId":"task-1","agentId":"ag-1","description":"Find auth","prompt":"Look for auth code",
                    "subagentType":"explore","model":"m-small","durationMs":1234}),
                ("ag-1", "explore", None, Some(1234)),
            ),
            (
                json!({"toolCallId":"task-2","description":"d","subagentType":{"custom":"reviewer"},"durationMs":12.6}),
                ("task-2", "custom", Some("reviewer"), Some(13)),
            ),
            (
                json!({"toolCallId":"task-3","subagentType":42,"durationMs":"5"}),
                ("task-3", "unknown", None, None),
            ),
        ];
        for (params, (child, role, name, duration)) in cases {
            let events = ws().on_extension("cursor/task", &params);
            let ActivityPayload::DelegationCompleted(d) = &events[0] else {
                panic!("{events:?}")
            };
            assert_eq!(
                (d.child_id.as_str(), d.role.as_str(), d.name.as_deref(), d.duration_ms),
                (child, role, name, duration),
                "{params}"
            );
            assert_eq!(d.status, DelegationStatus::Completed);
            assert_eq!(d.evidence, "cursor_task_metadata");
        }
        let events = ws().on_extension("cursor/task", &json!({"description":"orphan"}));
        assert_eq!(notices(&events)[0].category, "malformed_cursor_extension");
    }

    #[test]
    fn a_long_task_description_is_bounded_and_marked() {
        let description = "d".repeat(MAX_DELEGATION_TASK_CHARS + 1);
        let events = ws().on_extension("cursor/task", &json!({"toolCallId":"t","description":description}));
        let ActivityPayload::DelegationCompleted(d) = &events[0] else {
            panic!()
        };
        assert_eq!(d.task.as_ref().unwrap().chars().count(), MAX_DELEGATION_TASK_CHARS);
        assert!(d.task_truncated);
    }

    #[test]
    fn other_extension_methods_are_notices() {
        let events = ws().on_extension("cursor/generate_image", &json!({}));
        assert_eq!(notices(&events)[0].category, "unprojected_cursor_extension");
    }

    #[test]
    fn session_metadata_updates_become_their_families() {
        let mut n = ws();
        let cases = [
            (
                json!({"sessionUpdate":"current_mode_update","currentModeId":"plan"}),
                "review.mode.changed",
            ),
            (
                json!({"sessionUpdate":"config_option_update","configOptions":[{"id":"model","name":"Model","category":"model",
                    "type":"select","currentValue":"gpt[effort=high]","options":[{"value":"gpt[effort=high]","name":"GPT"},
                    {"group":"more","name":"More","options":[{"value":"m2","name":"M2"}]}]}]}),
                "session.config.updated",
            ),
            (
                json!({"sessionUpdate":"session_info_update","title":"Fix the build"}),
                "session.info.updated",
            ),
            (
                json!({"sessionUpdate":"available_commands_update","availableCommands":[{"name":"review","description":"Review","input":{"hint":"path"}}]}),
                "session.commands.updated",
            ),
        ];
        for (update, family) in cases {
            let events = n.on_update(&update);
            assert_eq!(types(&events), [family], "{update}");
        }
        let events = n.on_update(&json!({"sessionUpdate":"current_mode_update","currentModeId":"agent"}));
        let ActivityPayload::ReviewModeChanged(mode) = &events[0] else {
            panic!()
        };
        assert_eq!(mode.previous_mode_id.as_deref(), Some("plan"));
    }

    #[test]
    fn config_values_are_flattened_from_groups() {
        let events = ws().on_update(&json!({"sessionUpdate":"config_option_update","configOptions":[{"id":"m","type":"select",
            "currentValue":"a","options":[{"value":"a"},{"group":"g","name":"G","options":[{"value":"b"},{"value":"c"}]},{"name":"no value"}]},
            {"name":"no id"}, {"id":"fast","type":"boolean","currentValue":true}]}));
        let ActivityPayload::SessionConfigUpdated(config) = &events[0] else {
            panic!()
        };
        let values: Vec<_> = config.config_options[0]
            .values
            .iter()
            .map(|v| v.value.as_str())
            .collect();
        assert_eq!(values, ["a", "b", "c"]);
        assert_eq!(config.config_options[0].values_omitted, 1);
        assert_eq!(config.options_omitted, 1);
        assert_eq!(config.config_options[1].current_value, Some(json!(true)));
    }

    #[test]
    fn session_info_distinguishes_a_cleared_title_from_an_absent_one() {
        let mut n = ws();
        let cleared = n
            .on_update(&json!({"sessionUpdate":"session_info_update","title":null,"updatedAt":"2026-09-28T10:00:00Z"}));
        let ActivityPayload::SessionInfoUpdated(info) = &cleared[0] else {
            panic!()
        };
        assert!(info.title_cleared && info.title.is_none());
        assert_eq!(info.updated_at.as_deref(), Some("2026-09-28T10:00:00Z"));
        assert!(!info.updated_at_cleared);
        assert!(
            n.on_update(&json!({"sessionUpdate":"session_info_update","_meta":{"cursor":{"requestId":"r"}}}))
                .is_empty()
        );
    }

    #[test]
    fn the_command_bound_is_exact() {
        for (count, omitted) in [(MAX_SESSION_COMMANDS, 0), (MAX_SESSION_COMMANDS + 1, 1)] {
            let list: Vec<_> = (0..count).map(|i| json!({"name": format!("c{i}")})).collect();
            let events = ws().on_update(&json!({"sessionUpdate":"available_commands_update","availableCommands":list}));
            let ActivityPayload::SessionCommandsUpdated(c) = &events[0] else {
                panic!()
            };
            assert_eq!((c.commands.len(), c.commands_omitted), (MAX_SESSION_COMMANDS, omitted));
        }
    }

    #[test]
    fn usage_is_unavailable_without_token_fields_when_nothing_was_reported() {
        let mut n = ws();
        let events = n.finish(TurnEnding::Completed);
        let (event_type, payload) = events.last().unwrap().into_parts();
        assert_eq!(event_type, "usage.reported");
        assert_eq!(
            payload,
            json!({"turnId":"t1","requestCountSource":"unavailable","providerCostStatus":"unpriced",
                "providerCostUnavailableReason":"cursor_reports_no_usage"})
        );
        assert!(
            n.finish(TurnEnding::Completed).is_empty(),
            "exactly one usage.reported per turn"
        );
    }

    #[test]
    fn a_usage_update_is_projected_faithfully_once_at_settlement() {
        let mut n = ws();
        assert!(
            n.on_update(&json!({"sessionUpdate":"usage_update","used":100,"size":200000}))
                .is_empty()
        );
        assert!(
            n.on_update(&json!({"sessionUpdate":"usage_update","used":1500,"size":200000,"cost":{"amount":0.25,"currency":"USD"}}))
                .is_empty()
        );
        let events = n.finish(TurnEnding::Completed);
        assert_eq!(types(&events), ["usage.reported"]);
        let (_, payload) = events[0].into_parts();
        assert_eq!(
            payload,
            json!({"turnId":"t1","requestCountSource":"unavailable","providerCostStatus":"reported",
                "usageSource":"acp_usage_update","used":1500,"size":200000,"cost":{"amount":0.25,"currency":"USD"}})
        );
        let bad = n.on_update(&json!({"sessionUpdate":"usage_update","used":"lots"}));
        assert_eq!(notices(&bad)[0].category, "malformed_acp_update");
    }

    /// Arbitrary JSON, biased towards the keys and values the normalizer looks at.
    fn arbitrary_value(rng: &mut Rng, depth: u32) -> Value {
        let pick = if depth == 0 { rng.below(5) } else { rng.below(7) };
        match pick {
            0 => Value::Null,
            1 => Value::Bool(rng.below(2) == 0),
            2 => json!(rng.next() as i64 >> rng.below(64)),
            3 => json!((rng.next() as f64) / 7.0 - 1e18),
            4 => {
                let words = [
                    "",
                    "a",
                    "\u{1b}[31m",
                    "/work/repo/x",
                    "/etc/passwd",
                    "../x",
                    "cancelled",
                    "completed",
                    "diff",
                    "text",
                    "image",
                    "file:///work/repo/i.png",
                    "custom",
                    "é🎉",
                ];
                json!(words[rng.below(words.len() as u64) as usize])
            }
            5 => Value::Array((0..rng.below(4)).map(|_| arbitrary_value(rng, depth - 1)).collect()),
            _ => {
                let keys = [
                    "sessionUpdate",
                    "toolCallId",
                    "title",
                    "kind",
                    "status",
                    "content",
                    "locations",
                    "rawInput",
                    "rawOutput",
                    "entries",
                    "todos",
                    "merge",
                    "id",
                    "path",
                    "oldText",
                    "newText",
                    "type",
                    "uri",
                    "exitCode",
                    "error",
                    "configOptions",
                    "availableCommands",
                    "currentModeId",
                    "used",
                    "cost",
                ];
                let mut map = serde_json::Map::new();
                for _ in 0..rng.below(6) {
                    let key = keys[rng.below(keys.len() as u64) as usize];
                    map.insert(key.to_owned(), arbitrary_value(rng, depth - 1));
                }
                Value::Object(map)
            }
        }
    }

    #[test]
    fn random_todo_sequences_keep_revisions_increasing_and_within_the_step_bound() {
        let statuses = ["pending", "in_progress", "completed", "cancelled", "weird"];
        for seed in 1..=40u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut n = ws();
            let mut last_revision = 0;
            for _ in 0..60 {
                let count = rng.below(MAX_PLAN_STEPS as u64 + 40);
                let todos: Vec<Value> = (0..count)
                    .map(|_| {
                        json!({"id": format!("t{}", rng.below(400)), "content": "step",
                            "status": statuses[rng.below(statuses.len() as u64) as usize]})
                    })
                    .collect();
                let events = if rng.below(5) == 0 {
                    let entries: Vec<Value> = todos
                        .iter()
                        .map(|t| json!({"content": t["content"], "status": t["status"], "priority":"low"}))
                        .collect();
                    n.on_update(&json!({"sessionUpdate":"plan","entries":entries}))
                } else {
                    n.on_extension(
                        "cursor/update_todos",
                        &json!({"todos": todos, "merge": rng.below(2) == 0}),
                    )
                };
                for event in events {
                    if let ActivityPayload::PlanUpdated(plan) = event {
                        assert!(plan.revision > last_revision, "seed {seed}");
                        last_revision = plan.revision;
                        assert!(plan.steps.len() <= MAX_PLAN_STEPS, "seed {seed}");
                    }
                }
            }
        }
    }

    #[test]
    fn arbitrary_json_never_panics_the_normalizer() {
        let tags = [
            "agent_message_chunk",
            "agent_thought_chunk",
            "tool_call",
            "tool_call_update",
            "plan",
            "current_mode_update",
            "config_option_update",
            "session_info_update",
            "available_commands_update",
            "usage_update",
            "subagent_spawned",
            "subagent_state_update",
            "subagent_update",
        ];
        let sessions = ["root", "c0", "c1", "elsewhere"];
        for seed in 1..=300u64 {
            let mut rng = Rng(seed.wrapping_mul(0xd1b5_4a32_d192_ed03));
            let mut n = ws().with_root_session("root");
            for _ in 0..30 {
                let mut value = arbitrary_value(&mut rng, 4);
                if let (Some(map), true) = (value.as_object_mut(), rng.below(3) > 0) {
                    map.insert(
                        "sessionUpdate".into(),
                        json!(tags[rng.below(tags.len() as u64) as usize]),
                    );
                    map.insert("toolCallId".into(), json!(format!("tc{}", rng.below(3))));
                    map.insert("subagentSessionId".into(), json!(format!("c{}", rng.below(2))));
                    map.insert("_meta".into(), json!({"cursor": {"toolCallId": "tc0", "agentId": "a"}}));
                }
                let events = if rng.below(2) == 0 {
                    n.on_update(&value)
                } else {
                    let session = sessions[rng.below(sessions.len() as u64) as usize];
                    n.on_session_update(&json!({"sessionId": session, "update": value}))
                };
                for event in events {
                    let _ = event.into_parts();
                }
                let method = ["cursor/update_todos", "cursor/task", "cursor/x"][rng.below(3) as usize];
                for event in n.on_extension(method, &value) {
                    let _ = event.into_parts();
                }
            }
            let _ = n.finish(TurnEnding::Completed);
        }
    }
}
