//! Child agents — Cursor's subagents (`subagent_spawned` / `subagent_state_update`,
//! sent when the client opts in with `clientCapabilities._meta.subagents`) and ACP
//! 1.20's `subagent_update` — as `delegation.*` records, and their transcripts,
//! attributed to them and never flattened into the parent's.
//!
//! | native | canonical |
//! |---|---|
//! | `subagent_spawned` on the parent's session | `delegation.started`, `running`, `action: spawn` (`resume` for an id `<agentId>.<n>`, linked to the turn's first incarnation of that agent) |
//! | `subagent_state_update` `completed` / `failed` | `delegation.completed` `completed` / `failed` |
//! | `subagent_state_update` `cancelled` | `delegation.completed` `interrupted`, with an explanation |
//! | `subagent_state_update` `disconnected` | `delegation.completed` `failed`, with an explanation — never a success |
//! | ACP `subagent_update`, first for a child / later | `delegation.started` / `delegation.updated` (`running`; `idle` and `requires_action` are `waiting`) |
//! | `cursor/task` naming a known child's `Task` tool call | `delegation.updated` (role, model, duration, prompt size): the child still completes exactly once |
//! | `cursor/task` for no known child | `delegation.completed`, `evidence: cursor_task_metadata` (the opt-out path) |
//! | a child's text, reasoning, plan and tool updates | the root's projections, with `childId`, the child's own item ids and its own tool-call namespace |
//! | a child's other updates | an `unprojected_child_update` notice, attributed |
//! | a child still open when the turn settles | `delegation.completed` `interrupted` (`closed` when it was idle), `evidence: turn_settled` |
//!
//! **Authority.** The turn's root session is the only authority. A child is known only
//! after a valid spawn on its parent's session — the root or an already known child
//! (so grandchildren keep the tree) — while the turn runs. Everything else is
//! suppressed: counted per [`Suppression`] and reported by a warning notice (once per
//! kind and session, at most [`MAX_SUPPRESSION_NOTICES`] per normalizer; `finish()`
//! totals the rest). The origin fixed at the spawn — the parent, `_meta.cursor.agentId`
//! and the spawning tool call id — is checked on every later lifecycle update, and the
//! agent id on every child update that carries one.
//!
//! **What it cannot see.** `session/load` replays spawns and terminal states but not
//! child transcripts; Cursor reports terminal states only, so a Cursor child is
//! `running` from its spawn until it ends; no duration is measured here (no clock),
//! only the one `cursor/task` reports.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use agent_client_protocol_schema::MaybeUndefined;
use agent_client_protocol_schema::v1 as acp;
use cursor_runner_acp::cursor::{SubagentType, TaskParams, UpdateTodosParams};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bounds::*;
use crate::event::*;
use crate::normalizer::{Transcript, or_malformed_notice};
use crate::sanitize::{display_text, is_identifier, safe_tag, sanitize_display};

/// `evidence` of records from Cursor's `subagent_spawned` / `subagent_state_update`.
const EVIDENCE_LIFECYCLE: &str = "cursor_subagent_lifecycle";
/// `evidence` of records from ACP 1.20's `subagent_update`.
const EVIDENCE_ACP: &str = "acp_subagent_update";
/// `evidence` of records from `cursor/task`: metadata, not proof of success.
const EVIDENCE_TASK: &str = "cursor_task_metadata";
/// `evidence` of the terminal record `finish()` writes for a child still open.
const EVIDENCE_SETTLED: &str = "turn_settled";

/// A child agent the turn knows, for attributing interactions to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildRef {
    /// The child's session id (the `childId` of its events).
    pub child_id: String,
    /// Its immediate parent's session id: the root's or another child's.
    pub parent_id: String,
    /// The parent's `Task` tool call that spawned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// Why an update was dropped instead of projected. Each has its notice category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suppression {
    /// A `session/update` for a session that is neither the root nor a known child
    /// (or names none).
    UnknownSession,
    /// A spawn on a session that is neither the root nor a known child, or on none.
    SpawnFromUnknownParent,
    /// A spawn while no turn runs (before it started, after it settled).
    SpawnOutsideTurn,
    /// A lifecycle update without a valid child id, spawning tool call id or state.
    MalformedLifecycle,
    /// A spawn whose child id is its parent's own session id.
    SpawnOfItself,
    /// A spawn of a session already known (the root or a child): the first wins.
    DuplicateSpawn,
    /// A spawn beyond [`MAX_CHILDREN_PER_TURN`].
    ChildLimit,
    /// A state update for a child its session did not spawn.
    UnknownChild,
    /// A later update whose agent id, tool call id or parent differs from the spawn's.
    OriginMismatch,
    /// A state update for a child that has already ended: it ends exactly once.
    AfterEnd,
    /// A `cursor/task` whose `Task` tool call spawned more than one known child.
    AmbiguousTask,
}

impl Suppression {
    /// Every reason, in declaration order.
    pub const ALL: [Self; 11] = [
        Self::UnknownSession,
        Self::SpawnFromUnknownParent,
        Self::SpawnOutsideTurn,
        Self::MalformedLifecycle,
        Self::SpawnOfItself,
        Self::DuplicateSpawn,
        Self::ChildLimit,
        Self::UnknownChild,
        Self::OriginMismatch,
        Self::AfterEnd,
        Self::AmbiguousTask,
    ];

    /// The `provider.notice.recorded` category that reports it.
    pub fn category(self) -> &'static str {
        match self {
            Self::UnknownSession => "unknown_session_update",
            Self::SpawnFromUnknownParent => "child_spawn_unknown_parent",
            Self::SpawnOutsideTurn => "child_spawn_outside_turn",
            Self::MalformedLifecycle => "child_lifecycle_malformed",
            Self::SpawnOfItself => "child_spawn_of_itself",
            Self::DuplicateSpawn => "child_spawn_duplicate",
            Self::ChildLimit => "child_limit_reached",
            Self::UnknownChild => "child_state_unknown_child",
            Self::OriginMismatch => "child_origin_mismatch",
            Self::AfterEnd => "child_state_after_end",
            Self::AmbiguousTask => "cursor_task_ambiguous",
        }
    }

    /// Its position in [`Self::ALL`] (declaration order).
    fn index(self) -> usize {
        self as usize
    }
}

/// How a `session/update` is routed by its `sessionId`.
pub(crate) enum Route {
    Root,
    Child(usize),
    Unknown,
}

/// The tags intercepted on the closed lifecycle path; every other tag keeps the
/// standard projections.
fn is_lifecycle(tag: &str) -> bool {
    matches!(tag, "subagent_spawned" | "subagent_state_update" | "subagent_update")
}

#[derive(Debug)]
struct Child {
    reference: ChildRef,
    transcript: Transcript,
    /// The last record, re-emitted whole with each `delegation.*`.
    record: Delegation,
    summary: SummaryTail,
}

impl Child {
    /// Feeds the child's summary and marks each event as the child's: `childId`, and
    /// for tool calls an envelope item id scoped by the child.
    fn attribute(&mut self, events: &mut [ActivityPayload]) {
        let child_id = &self.reference.child_id;
        for event in events.iter_mut() {
            self.summary.observe(event);
            match event {
                ActivityPayload::ItemStarted(b) | ActivityPayload::ItemCompleted(b) => {
                    b.child_id = Some(child_id.clone());
                }
                ActivityPayload::ItemDelta(d) => d.child_id = Some(child_id.clone()),
                ActivityPayload::ToolStarted(t)
                | ActivityPayload::ToolProgressed(t)
                | ActivityPayload::ToolCompleted(t) => {
                    t.child_id = Some(child_id.clone());
                    t.item_id = Some(format!("{}:{}", self.transcript.item_prefix(), t.tool_call_id));
                }
                ActivityPayload::PlanUpdated(p) => p.child_id = Some(child_id.clone()),
                ActivityPayload::ProviderNotice(n) => n.child_id = Some(child_id.clone()),
                _ => {}
            }
        }
    }

    fn snapshot(&self, action: Option<DelegationAction>, evidence: &str, with_summary: bool) -> Delegation {
        let mut record = self.record.clone();
        record.action = action;
        record.evidence = evidence.to_owned();
        record.activity_summary = with_summary.then(|| self.summary.snapshot());
        record
    }
}

/// The child agents of one turn, their transcripts and what was suppressed.
#[derive(Debug)]
pub(crate) struct Children {
    turn_id: String,
    root: Option<String>,
    accepting_spawns: bool,
    list: Vec<Child>,
    by_session: HashMap<String, usize>,
    suppressed: [u32; Suppression::ALL.len()],
    /// (reason, session) pairs already noticed; its size is the number of notices.
    noticed: HashSet<(Suppression, String)>,
}

impl Children {
    pub(crate) fn new(turn_id: String) -> Self {
        Self {
            turn_id,
            root: None,
            accepting_spawns: true,
            list: Vec::new(),
            by_session: HashMap::new(),
            suppressed: [0; Suppression::ALL.len()],
            noticed: HashSet::new(),
        }
    }

    pub(crate) fn set_root(&mut self, session_id: String) {
        self.root = Some(session_id);
    }

    pub(crate) fn refuse_spawns(&mut self) {
        self.accepting_spawns = false;
    }

    pub(crate) fn route(&self, session: Option<&str>) -> Route {
        let (Some(root), Some(session)) = (self.root.as_deref(), session) else {
            return Route::Unknown;
        };
        if session == root {
            return Route::Root;
        }
        match self.by_session.get(session) {
            Some(index) => Route::Child(*index),
            None => Route::Unknown,
        }
    }

    /// The root session, when `tag` is a lifecycle update and children are tracked.
    pub(crate) fn lifecycle_parent_for_root(&self, tag: &str) -> Option<String> {
        self.root.clone().filter(|_| is_lifecycle(tag))
    }

    pub(crate) fn reference(&self, child: usize) -> &ChildRef {
        &self.list[child].reference
    }

    /// The one child whose transcript has this tool call id; `None` when none or several do.
    pub(crate) fn tool_owner(&self, tool_call_id: &str) -> Option<usize> {
        let mut owners = (0..self.list.len()).filter(|i| self.list[*i].transcript.knows_tool(tool_call_id));
        match (owners.next(), owners.next()) {
            (Some(owner), None) => Some(owner),
            _ => None,
        }
    }

    pub(crate) fn any_knows_tool(&self, tool_call_id: &str) -> bool {
        self.list.iter().any(|c| c.transcript.knows_tool(tool_call_id))
    }

    pub(crate) fn suppressed(&self, reason: Suppression) -> u32 {
        self.suppressed[reason.index()]
    }

    /// A lifecycle update on `parent`'s session (the root or a known child).
    pub(crate) fn on_lifecycle(&mut self, parent: &str, tag: &str, update: &Value) -> Vec<ActivityPayload> {
        match tag {
            "subagent_spawned" => self.on_spawned(parent, update),
            "subagent_state_update" => self.on_state(parent, update),
            _ => self.on_acp_subagent(parent, update),
        }
    }

    /// An update on a known child's session: its own lifecycle updates spawn and end
    /// grandchildren; the rest is its transcript.
    pub(crate) fn on_child_update(
        &mut self,
        index: usize,
        update: &Value,
        workspace: Option<&Path>,
    ) -> Vec<ActivityPayload> {
        let tag = update.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        let child_id = self.list[index].reference.child_id.clone();
        if is_lifecycle(tag) {
            return self.on_lifecycle(&child_id, tag, update);
        }
        let sent_agent = update.pointer("/_meta/cursor/agentId").and_then(Value::as_str);
        if let (Some(sent), Some(spawned)) = (sent_agent, self.list[index].reference.agent_id.as_deref())
            && sent != spawned
        {
            let summary = format!(
                "dropped an update of child `{}`: it names agent `{}`, but agent `{}` spawned it",
                shown(&child_id),
                shown(sent),
                shown(spawned)
            );
            return self.suppress(Suppression::OriginMismatch, &child_id, Some(&child_id), summary);
        }
        let child = &mut self.list[index];
        let mut events = match child.transcript.project(tag, update, workspace) {
            Some(projected) => or_malformed_notice(tag, projected),
            None if tag.is_empty() => {
                or_malformed_notice(tag, Err("session/update without a sessionUpdate tag".to_owned()))
            }
            None => vec![ActivityPayload::ProviderNotice(ProviderNotice::info(
                "unprojected_child_update",
                NoticeScope::Turn,
                format!(
                    "child session update `{}` is not projected: only a child's text, reasoning, plan and tool updates are",
                    safe_tag(tag)
                ),
            ))],
        };
        child.attribute(&mut events);
        events
    }

    /// An update for a session that is neither the root nor a known child.
    pub(crate) fn on_unknown_session(&mut self, session: Option<&str>, update: &Value) -> Vec<ActivityPayload> {
        let tag = update.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        let key = session.unwrap_or("<none>");
        if self.root.is_some() && matches!(tag, "subagent_spawned" | "subagent_update") {
            let on = match session {
                Some(session) => format!("on session `{}`", shown(session)),
                None => "naming no session".to_owned(),
            };
            let summary = format!(
                "dropped a `{}` {on}: the parent must be this execution's session or a known child",
                safe_tag(tag)
            );
            return self.suppress(Suppression::SpawnFromUnknownParent, key, None, summary);
        }
        let summary = match session {
            Some(session) => format!(
                "dropped a session/update for a session this execution does not own (`{}`: neither its session nor a known child)",
                shown(session)
            ),
            None => {
                "dropped a session/update for a session this execution does not own (it names no session)".to_owned()
            }
        };
        self.suppress(Suppression::UnknownSession, key, None, summary)
    }

    /// `cursor/task`: enriches the child its `Task` tool call spawned, or — when no
    /// known child has that tool call — is the metadata-only `delegation.completed`.
    pub(crate) fn on_cursor_task(&mut self, params: &TaskParams) -> Vec<ActivityPayload> {
        let Some(task) = CursorTask::parse(params) else {
            return vec![ActivityPayload::ProviderNotice(ProviderNotice::warning(
                "malformed_cursor_extension",
                NoticeScope::Turn,
                "cursor/task without an agentId or a toolCallId",
            ))];
        };
        let spawned: Vec<usize> = (0..self.list.len())
            .filter(|i| {
                task.tool_call_id.is_some()
                    && self.list[*i].reference.parent_tool_call_id.as_deref() == task.tool_call_id.as_deref()
            })
            .collect();
        if spawned.is_empty() {
            return vec![ActivityPayload::DelegationCompleted(task.into_delegation())];
        }
        let agent_of = |i: usize| self.list[i].reference.agent_id.as_deref();
        let exact: Vec<usize> = spawned
            .iter()
            .copied()
            .filter(|i| task.agent_id.is_some() && agent_of(*i) == task.agent_id.as_deref())
            .collect();
        let compatible: Vec<usize> = spawned
            .iter()
            .copied()
            .filter(|i| task.agent_id.is_none() || agent_of(*i).is_none() || agent_of(*i) == task.agent_id.as_deref())
            .collect();
        let tool_call = task.tool_call_id.clone().unwrap_or_default();
        match (exact.as_slice(), compatible.as_slice()) {
            ([one], _) | ([], [one]) => self.enrich(*one, task),
            (_, []) => {
                let first = spawned[0];
                let child_id = self.list[first].reference.child_id.clone();
                let summary = format!(
                    "dropped a cursor/task for `{}`: it names agent `{}`, but agent `{}` spawned child `{}`",
                    shown(&tool_call),
                    shown(task.agent_id.as_deref().unwrap_or_default()),
                    shown(agent_of(first).unwrap_or_default()),
                    shown(&child_id)
                );
                self.suppress(Suppression::OriginMismatch, &tool_call, Some(&child_id), summary)
            }
            _ => {
                let summary = format!(
                    "dropped a cursor/task for `{}`: that tool call id spawned {} known children and it names none of them alone",
                    shown(&tool_call),
                    compatible.len()
                );
                self.suppress(Suppression::AmbiguousTask, &tool_call, None, summary)
            }
        }
    }

    /// `cursor/update_todos` for a child's tool call: that child's checklist.
    pub(crate) fn on_todos(&mut self, child: usize, params: &UpdateTodosParams) -> Vec<ActivityPayload> {
        let child = &mut self.list[child];
        let mut events = child.transcript.apply_todos(params);
        child.attribute(&mut events);
        events
    }

    /// Ends the turn for its children: open tools settle as `open_tools`, open items
    /// close, a child that has not ended gets its terminal record, and later spawns are
    /// refused. Children end in reverse spawn order, so a grandchild ends before the
    /// child that spawned it.
    pub(crate) fn finish(&mut self, open_tools: ToolStatus) -> Vec<ActivityPayload> {
        self.accepting_spawns = false;
        let mut events = Vec::new();
        for child in self.list.iter_mut().rev() {
            let mut closing = child.transcript.close_tools(open_tools);
            closing.extend(child.transcript.close_items());
            child.attribute(&mut closing);
            events.extend(closing);
            if child.record.status.is_terminal() {
                continue;
            }
            let (status, explanation) = match child.record.status {
                DelegationStatus::Waiting => (
                    DelegationStatus::Closed,
                    "the turn settled while the child was idle; it is no longer followed",
                ),
                _ => (
                    DelegationStatus::Interrupted,
                    "the turn settled before the child reported an end; its outcome is unknown",
                ),
            };
            child.record.status = status;
            child.record.explanation = Some(explanation.to_owned());
            events.push(ActivityPayload::DelegationCompleted(child.snapshot(
                Some(DelegationAction::Close),
                EVIDENCE_SETTLED,
                true,
            )));
        }
        events
    }

    /// A notice totalling the suppressions, when some of them were not noticed.
    pub(crate) fn suppression_totals(&self) -> Option<ActivityPayload> {
        let total: u32 = self.suppressed.iter().sum();
        if total as usize <= self.noticed.len() {
            return None;
        }
        let counts: Vec<String> = Suppression::ALL
            .iter()
            .filter(|reason| self.suppressed(**reason) > 0)
            .map(|reason| format!("{} ×{}", reason.category(), self.suppressed(*reason)))
            .collect();
        Some(ActivityPayload::ProviderNotice(ProviderNotice::warning(
            "session_updates_suppressed",
            NoticeScope::Turn,
            format!(
                "suppressed in this turn: {} (only the first of each kind per session is noticed)",
                counts.join(", ")
            ),
        )))
    }

    fn on_spawned(&mut self, parent: &str, update: &Value) -> Vec<ActivityPayload> {
        let cursor = update.pointer("/_meta/cursor").unwrap_or(&Value::Null);
        let ids = (
            identifier(update.get("subagentSessionId")),
            identifier(cursor.get("toolCallId")),
            identifier(cursor.get("agentId")),
        );
        let (Ok(Some(child_id)), Ok(Some(tool_call_id)), Ok(agent_id)) = ids else {
            let summary = format!(
                "dropped a subagent_spawned on session `{}`: it needs a subagentSessionId and a _meta.cursor.toolCallId, \
                 each a short id (a valid agentId when sent)",
                shown(parent)
            );
            return self.suppress(Suppression::MalformedLifecycle, parent, None, summary);
        };
        if let Some(refused) = self.refuse_spawn(parent, child_id) {
            return refused;
        }
        let mut record = Delegation::new(child_id, "unknown", DelegationStatus::Running, EVIDENCE_LIFECYCLE);
        record.parent_tool_call_id = Some(tool_call_id.to_owned());
        record.agent_id = agent_id.map(str::to_owned);
        record.name = display(
            update.get("name").and_then(Value::as_str),
            MAX_NAME_CHARS,
            &mut record.sanitized,
        );
        record.model = display(
            cursor.get("model").and_then(Value::as_str),
            MAX_NAME_CHARS,
            &mut record.sanitized,
        );
        let task_truncated = set_task(&mut record, update.get("task").and_then(Value::as_str));
        if let Some(agent) = agent_id {
            record.incarnation = child_id
                .strip_prefix(agent)
                .and_then(|rest| rest.strip_prefix('.'))
                .and_then(|n| n.parse::<u32>().ok());
            if record.incarnation.is_some() {
                record.resumed_from = self
                    .list
                    .iter()
                    .find(|c| c.reference.agent_id.as_deref() == Some(agent))
                    .map(|c| c.reference.child_id.clone());
            }
        }
        let action = if record.incarnation.is_some() {
            DelegationAction::Resume
        } else {
            DelegationAction::Spawn
        };
        self.admit(parent, record, action, task_truncated)
    }

    fn on_state(&mut self, parent: &str, update: &Value) -> Vec<ActivityPayload> {
        let Ok(Some(child_id)) = identifier(update.get("subagentSessionId")) else {
            let summary = format!(
                "dropped a subagent_state_update on session `{}` without a valid subagentSessionId",
                shown(parent)
            );
            return self.suppress(Suppression::MalformedLifecycle, parent, None, summary);
        };
        let Some(index) = self.spawned_by(parent, child_id) else {
            let summary = format!(
                "dropped a subagent_state_update for `{}`: it is not a known child of session `{}`",
                shown(child_id),
                shown(parent)
            );
            return self.suppress(Suppression::UnknownChild, child_id, None, summary);
        };
        let child_id = child_id.to_owned();
        if let Some(refused) = self.check_origin(index, update) {
            return refused;
        }
        if self.list[index].record.status.is_terminal() {
            let summary = format!(
                "dropped a subagent_state_update for `{}`: the child has already ended",
                shown(&child_id)
            );
            return self.suppress(Suppression::AfterEnd, &child_id, Some(&child_id), summary);
        }
        let state = update.get("state").and_then(Value::as_str).unwrap_or_default();
        let (status, explanation) = match state {
            "completed" => (DelegationStatus::Completed, None),
            "failed" => (DelegationStatus::Failed, None),
            "cancelled" => (
                DelegationStatus::Interrupted,
                Some("Cursor cancelled the child before it finished"),
            ),
            "disconnected" => (
                DelegationStatus::Failed,
                Some("Cursor lost the child (`disconnected`): it did not finish, and no result is claimed"),
            ),
            _ => {
                let summary = format!(
                    "dropped a subagent_state_update for `{}`: state `{}` is not one of completed, failed, cancelled, disconnected",
                    shown(&child_id),
                    display_text(state, MAX_NAME_CHARS).0
                );
                return self.suppress(Suppression::MalformedLifecycle, &child_id, Some(&child_id), summary);
            }
        };
        let child = &mut self.list[index];
        let mut events = child.transcript.close_items();
        child.attribute(&mut events);
        child.record.status = status;
        child.record.native_state = Some(state.to_owned());
        child.record.explanation = explanation.map(str::to_owned);
        events.push(ActivityPayload::DelegationCompleted(child.snapshot(
            Some(DelegationAction::Close),
            EVIDENCE_LIFECYCLE,
            true,
        )));
        events
    }

    /// ACP 1.20 `subagent_update`: the first for a child announces it; later ones patch
    /// its title, description and state (omitted keeps, `null` clears). Idle does not
    /// end an ACP child: only the turn's settlement does.
    fn on_acp_subagent(&mut self, parent: &str, update: &Value) -> Vec<ActivityPayload> {
        let parsed = serde_json::from_value::<acp::SubagentUpdate>(update.clone());
        let child_id = parsed.as_ref().ok().map(|p| p.session_id.0.to_string());
        let (Ok(parsed), Some(child_id)) = (parsed, child_id.filter(|id| is_identifier(id))) else {
            let summary = format!(
                "dropped a subagent_update on session `{}` without a valid sessionId",
                shown(parent)
            );
            return self.suppress(Suppression::MalformedLifecycle, parent, None, summary);
        };
        let known = self.by_session.get(&child_id).copied().filter(|_| child_id != parent);
        let Some(index) = known else {
            if let Some(refused) = self.refuse_spawn(parent, &child_id) {
                return refused;
            }
            let cursor = update.pointer("/_meta/cursor").unwrap_or(&Value::Null);
            let mut record = Delegation::new(&child_id, "unknown", DelegationStatus::Running, EVIDENCE_ACP);
            record.parent_tool_call_id = identifier(cursor.get("toolCallId")).ok().flatten().map(str::to_owned);
            record.agent_id = identifier(cursor.get("agentId")).ok().flatten().map(str::to_owned);
            apply_acp_patch(&mut record, &parsed);
            let task_truncated = record.task_truncated;
            return self.admit(parent, record, DelegationAction::Spawn, task_truncated);
        };
        if self.list[index].reference.parent_id != parent {
            let summary = format!(
                "dropped a subagent_update for `{}` on session `{}`: it was spawned by `{}`, and a child's parent never changes",
                shown(&child_id),
                shown(parent),
                shown(&self.list[index].reference.parent_id)
            );
            return self.suppress(Suppression::OriginMismatch, &child_id, Some(&child_id), summary);
        }
        if self.list[index].record.status.is_terminal() {
            let summary = format!(
                "dropped a subagent_update for `{}`: the child has already ended",
                shown(&child_id)
            );
            return self.suppress(Suppression::AfterEnd, &child_id, Some(&child_id), summary);
        }
        let child = &mut self.list[index];
        let before = child.record.clone();
        apply_acp_patch(&mut child.record, &parsed);
        if child.record == before {
            return Vec::new();
        }
        let started_waiting =
            before.status != DelegationStatus::Waiting && child.record.status == DelegationStatus::Waiting;
        let action = started_waiting.then_some(DelegationAction::Wait);
        let evidence = child.record.evidence.clone();
        vec![ActivityPayload::DelegationUpdated(
            child.snapshot(action, &evidence, false),
        )]
    }

    /// The spawn fences shared by Cursor's and ACP's spawns; `None` admits it.
    fn refuse_spawn(&mut self, parent: &str, child_id: &str) -> Option<Vec<ActivityPayload>> {
        let (reason, why) = if !self.accepting_spawns {
            (Suppression::SpawnOutsideTurn, "no turn is running")
        } else if child_id == parent {
            (Suppression::SpawnOfItself, "a session cannot spawn itself")
        } else if self.root.as_deref() == Some(child_id) || self.by_session.contains_key(child_id) {
            (
                Suppression::DuplicateSpawn,
                "that session is already known; the first spawn wins",
            )
        } else if self.list.len() >= MAX_CHILDREN_PER_TURN {
            (
                Suppression::ChildLimit,
                "the turn already has the most children it follows",
            )
        } else {
            return None;
        };
        let summary = format!(
            "refused the spawn of `{}` on session `{}`: {why}",
            shown(child_id),
            shown(parent)
        );
        Some(self.suppress(reason, child_id, None, summary))
    }

    fn admit(
        &mut self,
        parent: &str,
        mut record: Delegation,
        action: DelegationAction,
        task_truncated: bool,
    ) -> Vec<ActivityPayload> {
        record.parent_id = Some(parent.to_owned());
        let child_id = record.child_id.clone();
        let reference = ChildRef {
            child_id: child_id.clone(),
            parent_id: parent.to_owned(),
            parent_tool_call_id: record.parent_tool_call_id.clone(),
            agent_id: record.agent_id.clone(),
        };
        let child = Child {
            reference,
            transcript: Transcript::new(format!("{}:child-{}", self.turn_id, self.list.len() + 1)),
            record,
            summary: SummaryTail::default(),
        };
        let mut events = vec![ActivityPayload::DelegationStarted(child.snapshot(
            Some(action),
            &child.record.evidence,
            false,
        ))];
        if task_truncated {
            let mut notice = ProviderNotice::info(
                "delegation_task_truncated",
                NoticeScope::Turn,
                format!(
                    "the task of child `{}` was cut to {MAX_DELEGATION_TASK_CHARS} characters",
                    shown(&child_id)
                ),
            );
            notice.child_id = Some(child_id.clone());
            events.push(ActivityPayload::ProviderNotice(notice));
        }
        self.by_session.insert(child_id, self.list.len());
        self.list.push(child);
        events
    }

    fn enrich(&mut self, index: usize, task: CursorTask) -> Vec<ActivityPayload> {
        let child = &mut self.list[index];
        let record = &mut child.record;
        record.role = task.role;
        record.name = task.name.or(record.name.take());
        record.subagent_type_raw = task.subagent_type_raw;
        record.model = task.model.or(record.model.take());
        if record.task.is_none() {
            record.task = task.task;
            record.task_truncated = task.task_truncated;
        }
        record.prompt_chars = task.prompt_chars.or(record.prompt_chars);
        record.duration_ms = task.duration_ms.or(record.duration_ms);
        record.sanitized |= task.sanitized;
        vec![ActivityPayload::DelegationUpdated(child.snapshot(
            None,
            EVIDENCE_TASK,
            true,
        ))]
    }

    fn spawned_by(&self, parent: &str, child_id: &str) -> Option<usize> {
        self.by_session
            .get(child_id)
            .copied()
            .filter(|index| self.list[*index].reference.parent_id == parent)
    }

    /// The spawn's agent id and tool call id, when a lifecycle update repeats them.
    fn check_origin(&mut self, index: usize, update: &Value) -> Option<Vec<ActivityPayload>> {
        let cursor = update.pointer("/_meta/cursor")?;
        let reference = &self.list[index].reference;
        let differs = |key: &str, spawned: Option<&str>| {
            cursor
                .get(key)
                .and_then(Value::as_str)
                .is_some_and(|sent| spawned != Some(sent))
        };
        if !differs("agentId", reference.agent_id.as_deref())
            && !differs("toolCallId", reference.parent_tool_call_id.as_deref())
        {
            return None;
        }
        let child_id = reference.child_id.clone();
        let summary = format!(
            "dropped a lifecycle update for `{}`: its agent or tool call id differs from the spawn's",
            shown(&child_id)
        );
        Some(self.suppress(Suppression::OriginMismatch, &child_id, Some(&child_id), summary))
    }

    /// Counts the suppression; the first per (reason, session) gets a notice, up to
    /// [`MAX_SUPPRESSION_NOTICES`].
    fn suppress(
        &mut self,
        reason: Suppression,
        key: &str,
        child_id: Option<&str>,
        summary: String,
    ) -> Vec<ActivityPayload> {
        self.suppressed[reason.index()] += 1;
        if self.noticed.len() >= MAX_SUPPRESSION_NOTICES || !self.noticed.insert((reason, shown(key))) {
            return Vec::new();
        }
        let mut notice = ProviderNotice::warning(reason.category(), NoticeScope::Turn, summary);
        notice.child_id = child_id.map(str::to_owned);
        vec![ActivityPayload::ProviderNotice(notice)]
    }
}

/// `Ok(None)` when absent or `null`, `Err` when present but not a valid id.
fn identifier(value: Option<&Value>) -> Result<Option<&str>, ()> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if is_identifier(id) => Ok(Some(id)),
        Some(_) => Err(()),
    }
}

/// An id for a notice summary (ids in notices come from the agent).
fn shown(id: &str) -> String {
    display_text(id, MAX_NAME_CHARS).0
}

fn display(text: Option<&str>, max_chars: usize, sanitized: &mut bool) -> Option<String> {
    let (text, clean) = display_text(text.filter(|s| !s.is_empty())?, max_chars);
    *sanitized |= clean;
    Some(text)
}

/// Sets the record's task, sanitized and bounded; returns whether it was cut.
fn set_task(record: &mut Delegation, task: Option<&str>) -> bool {
    let Some(task) = task.filter(|t| !t.is_empty()) else {
        record.task = None;
        record.task_truncated = false;
        return false;
    };
    let clean = sanitize_display(task);
    let bounded = bound_text(&clean.text, MAX_DELEGATION_TASK_CHARS);
    record.sanitized |= clean.sanitized;
    record.task = Some(bounded.text);
    record.task_truncated = bounded.truncated;
    bounded.truncated
}

/// Applies an ACP `subagent_update` patch: `title` is the name, `description` the task,
/// `state` the status (`running`; `idle` and `requires_action` wait; `unknown` and
/// custom states keep the status and record the native state).
fn apply_acp_patch(record: &mut Delegation, update: &acp::SubagentUpdate) {
    match &update.title {
        MaybeUndefined::Value(title) => {
            record.name = display(Some(title), MAX_NAME_CHARS, &mut record.sanitized);
        }
        MaybeUndefined::Null => record.name = None,
        MaybeUndefined::Undefined => {}
    }
    match &update.description {
        MaybeUndefined::Value(description) => {
            set_task(record, Some(description));
        }
        MaybeUndefined::Null => {
            set_task(record, None);
        }
        MaybeUndefined::Undefined => {}
    }
    match &update.state {
        MaybeUndefined::Value(state) => {
            let (status, native) = match state {
                acp::StateUpdate::Running(_) => (Some(DelegationStatus::Running), "running".to_owned()),
                acp::StateUpdate::Idle(_) => (Some(DelegationStatus::Waiting), "idle".to_owned()),
                acp::StateUpdate::RequiresAction(_) => (Some(DelegationStatus::Waiting), "requires_action".to_owned()),
                acp::StateUpdate::Other(other) => (None, display_text(&other.state, MAX_NAME_CHARS).0),
                _ => (None, "unknown".to_owned()),
            };
            if let Some(status) = status {
                record.status = status;
            }
            record.native_state = Some(native);
        }
        MaybeUndefined::Null => record.native_state = None,
        MaybeUndefined::Undefined => {}
    }
}

/// `cursor/task` params, validated: sent when the `Task` tool call ends, also for a
/// failed task, so it is metadata, not proof of success.
struct CursorTask {
    /// As sent, to match the spawn's tool call id.
    tool_call_id: Option<String>,
    agent_id: Option<String>,
    /// `agentId`, else the tool call id, for display.
    child_id: String,
    parent_tool_call_id: Option<String>,
    role: String,
    name: Option<String>,
    subagent_type_raw: Option<String>,
    model: Option<String>,
    task: Option<String>,
    task_truncated: bool,
    prompt_chars: Option<u64>,
    duration_ms: Option<u64>,
    sanitized: bool,
}

impl CursorTask {
    /// `None` without an `agentId` or a `toolCallId`.
    fn parse(params: &TaskParams) -> Option<Self> {
        fn text(field: &Option<String>) -> Option<&str> {
            field.as_deref().filter(|s| !s.is_empty())
        }
        let tool_call_id = text(&params.tool_call_id);
        let agent_id = text(&params.agent_id);
        let child = agent_id.or(tool_call_id)?;
        let mut sanitized = false;
        let mut clean = |raw: &str, max: usize| {
            let (text, s) = display_text(raw, max);
            sanitized |= s;
            text
        };
        let child_id = clean(child, MAX_NAME_CHARS);
        let parent_tool_call_id = tool_call_id.map(|id| clean(id, MAX_NAME_CHARS));
        let (role, name, subagent_type_raw) = match &params.subagent_type {
            None => ("unspecified".to_owned(), None, None),
            Some(SubagentType::Named(kind)) => (clean(kind, MAX_NAME_CHARS), None, None),
            Some(SubagentType::Custom(custom)) => ("custom".to_owned(), Some(clean(custom, MAX_NAME_CHARS)), None),
            Some(SubagentType::Other(other)) => (
                "unknown".to_owned(),
                None,
                Some(clean(&other.to_string(), MAX_NAME_CHARS)),
            ),
        };
        let model = text(&params.model).map(|m| clean(m, MAX_NAME_CHARS));
        let (task, task_truncated) = match text(&params.description) {
            Some(description) => {
                let sane = sanitize_display(description);
                sanitized |= sane.sanitized;
                let bounded = bound_text(&sane.text, MAX_DELEGATION_TASK_CHARS);
                (Some(bounded.text), bounded.truncated)
            }
            None => (None, false),
        };
        let prompt_chars = params.prompt.as_deref().map(|p| p.chars().count() as u64);
        let duration_ms = params.duration_ms.as_ref().and_then(|d| {
            d.as_u64().or_else(|| {
                d.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0 && *f < u64::MAX as f64)
                    .map(|f| f.round() as u64)
            })
        });
        Some(Self {
            tool_call_id: tool_call_id.map(str::to_owned),
            agent_id: agent_id.map(str::to_owned),
            child_id,
            parent_tool_call_id,
            role,
            name,
            subagent_type_raw,
            model,
            task,
            task_truncated,
            prompt_chars,
            duration_ms,
            sanitized,
        })
    }

    /// The record of a task whose child was never seen (the client did not opt in, or
    /// the child belongs to another turn).
    fn into_delegation(self) -> Delegation {
        let mut record = Delegation::new(self.child_id, self.role, DelegationStatus::Completed, EVIDENCE_TASK);
        record.parent_tool_call_id = self.parent_tool_call_id;
        record.name = self.name;
        record.subagent_type_raw = self.subagent_type_raw;
        record.model = self.model;
        record.task = self.task;
        record.task_truncated = self.task_truncated;
        record.prompt_chars = self.prompt_chars;
        record.duration_ms = self.duration_ms;
        record.sanitized = self.sanitized;
        record
    }
}

/// A child's activity as short lines — its text, reasoning, tool and plan events —
/// keeping the tail within [`MAX_ACTIVITY_SUMMARY_CHARS`].
#[derive(Debug, Default)]
struct SummaryTail {
    text: String,
    chars: usize,
    /// The head was dropped (the buffer keeps up to twice the bound between trims).
    dropped: bool,
    tool_calls: u32,
    tools_failed: u32,
}

impl SummaryTail {
    fn observe(&mut self, event: &ActivityPayload) {
        match event {
            ActivityPayload::ItemStarted(item) => {
                self.new_line();
                if item.kind == ItemKind::Reasoning {
                    self.push("(reasoning) ");
                }
            }
            ActivityPayload::ItemDelta(delta) => self.push(&delta.text),
            ActivityPayload::ToolStarted(tool) => {
                self.tool_calls += 1;
                self.line(&format!("[tool] {}", tool_label(tool)));
            }
            ActivityPayload::ToolCompleted(tool) => {
                let status = match tool.status {
                    ToolStatus::Failed => {
                        self.tools_failed += 1;
                        "failed"
                    }
                    ToolStatus::Completed => "completed",
                    ToolStatus::Cancelled => "cancelled",
                    ToolStatus::Interrupted => "interrupted",
                    ToolStatus::Running => "running",
                };
                self.line(&format!("[tool] {}: {status}", tool_label(tool)));
            }
            ActivityPayload::PlanUpdated(plan) => {
                let done = plan.steps.iter().filter(|s| s.status == StepStatus::Completed).count();
                self.line(&format!("[plan] {done}/{} steps completed", plan.steps.len()));
            }
            _ => {}
        }
    }

    fn new_line(&mut self) {
        if !self.text.is_empty() && !self.text.ends_with('\n') {
            self.push("\n");
        }
    }

    fn line(&mut self, line: &str) {
        self.new_line();
        self.push(line);
        self.push("\n");
    }

    fn push(&mut self, text: &str) {
        self.text.push_str(text);
        self.chars += text.chars().count();
        if self.chars > 2 * MAX_ACTIVITY_SUMMARY_CHARS {
            let cut = self.chars - MAX_ACTIVITY_SUMMARY_CHARS;
            let at = self.text.char_indices().nth(cut).map_or(self.text.len(), |(i, _)| i);
            self.text.drain(..at);
            self.chars = MAX_ACTIVITY_SUMMARY_CHARS;
            self.dropped = true;
        }
    }

    fn snapshot(&self) -> ActivitySummary {
        let (text, truncated) = if self.chars <= MAX_ACTIVITY_SUMMARY_CHARS && !self.dropped {
            (self.text.clone(), false)
        } else {
            let skip = self.chars - (MAX_ACTIVITY_SUMMARY_CHARS - 1).min(self.chars);
            let at = self.text.char_indices().nth(skip).map_or(self.text.len(), |(i, _)| i);
            (format!("…{}", &self.text[at..]), true)
        };
        ActivitySummary {
            text,
            truncated,
            tool_calls: self.tool_calls,
            tools_failed: self.tools_failed,
        }
    }
}

/// The tool's title (already display-safe), else its id made display-safe.
fn tool_label(tool: &ToolExecution) -> String {
    if tool.name.is_empty() {
        shown(&tool.tool_call_id)
    } else {
        tool.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::test_rng::Rng;
    use crate::{TurnEnding, TurnNormalizer};

    const ROOT: &str = "root";

    fn normalizer() -> TurnNormalizer {
        TurnNormalizer::new("t1")
            .with_workspace("/work/repo")
            .with_root_session(ROOT)
    }

    fn on(session: &str, update: Value) -> Value {
        json!({"sessionId": session, "update": update})
    }

    fn spawn(parent: &str, child: &str, tool_call_id: &str, agent_id: &str) -> Value {
        on(
            parent,
            json!({"sessionUpdate":"subagent_spawned","subagentSessionId":child,"name":"Explore","task":"look",
                "capabilities":{},"_meta":{"cursor":{"toolCallId":tool_call_id,"agentId":agent_id}}}),
        )
    }

    fn state(parent: &str, child: &str, state: &str) -> Value {
        on(
            parent,
            json!({"sessionUpdate":"subagent_state_update","subagentSessionId":child,"state":state}),
        )
    }

    fn text(session: &str, text: &str) -> Value {
        on(
            session,
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":text}}),
        )
    }

    fn tool(session: &str, tool_call_id: &str, title: &str) -> Value {
        on(
            session,
            json!({"sessionUpdate":"tool_call","toolCallId":tool_call_id,"title":title,"kind":"read","status":"pending"}),
        )
    }

    fn types(events: &[ActivityPayload]) -> Vec<String> {
        events.iter().map(|e| e.into_parts().0).collect()
    }

    fn delegations(events: &[ActivityPayload]) -> Vec<(&str, &Delegation)> {
        events
            .iter()
            .filter_map(|e| match e {
                ActivityPayload::DelegationStarted(d) => Some(("started", d)),
                ActivityPayload::DelegationUpdated(d) => Some(("updated", d)),
                ActivityPayload::DelegationCompleted(d) => Some(("completed", d)),
                _ => None,
            })
            .collect()
    }

    fn only_notice(events: &[ActivityPayload]) -> &ProviderNotice {
        match events {
            [ActivityPayload::ProviderNotice(notice)] => notice,
            other => panic!("expected one notice, got {other:?}"),
        }
    }

    /// A turn with child `c1` (spawned by the root through `task-1`, agent `ag-1`).
    fn with_child() -> TurnNormalizer {
        let mut n = normalizer();
        let started = n.on_session_update(&spawn(ROOT, "c1", "task-1", "ag-1"));
        assert_eq!(types(&started), ["delegation.started"]);
        n
    }

    #[test]
    fn each_suppression_is_counted_and_noticed_once_per_session() {
        let long_id = "c".repeat(MAX_NAME_CHARS + 1);
        let cases: Vec<(&str, Vec<Value>, Value, Suppression)> = vec![
            (
                "an update for a foreign session",
                vec![],
                text("elsewhere", "hi"),
                Suppression::UnknownSession,
            ),
            (
                "an update naming no session",
                vec![],
                json!({"update": {"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}),
                Suppression::UnknownSession,
            ),
            (
                "a spawn on a foreign parent",
                vec![],
                spawn("elsewhere", "c9", "task-9", "ag-9"),
                Suppression::SpawnFromUnknownParent,
            ),
            (
                "a spawn naming no parent",
                vec![],
                json!({"update": spawn(ROOT, "c9", "task-9", "ag-9")["update"]}),
                Suppression::SpawnFromUnknownParent,
            ),
            (
                "an ACP announcement on a foreign parent",
                vec![],
                on("elsewhere", json!({"sessionUpdate":"subagent_update","sessionId":"c9"})),
                Suppression::SpawnFromUnknownParent,
            ),
            (
                "a spawn without the Task tool call id",
                vec![],
                on(
                    ROOT,
                    json!({"sessionUpdate":"subagent_spawned","subagentSessionId":"c9","_meta":{"cursor":{"agentId":"a"}}}),
                ),
                Suppression::MalformedLifecycle,
            ),
            (
                "a spawn with a child id over the id bound",
                vec![],
                spawn(ROOT, &long_id, "task-9", "ag-9"),
                Suppression::MalformedLifecycle,
            ),
            (
                "a spawn with control characters in the child id",
                vec![],
                spawn(ROOT, "c\u{1b}[2J", "task-9", "ag-9"),
                Suppression::MalformedLifecycle,
            ),
            (
                "a state update without a child id",
                vec![],
                on(
                    ROOT,
                    json!({"sessionUpdate":"subagent_state_update","state":"completed"}),
                ),
                Suppression::MalformedLifecycle,
            ),
            (
                "a state outside the native set",
                vec![],
                state(ROOT, "c1", "paused"),
                Suppression::MalformedLifecycle,
            ),
            (
                "an ACP update without a session id",
                vec![],
                on(ROOT, json!({"sessionUpdate":"subagent_update","title":"x"})),
                Suppression::MalformedLifecycle,
            ),
            (
                "a child spawning itself",
                vec![],
                spawn("c1", "c1", "task-2", "ag-2"),
                Suppression::SpawnOfItself,
            ),
            (
                "the root spawning itself",
                vec![],
                spawn(ROOT, ROOT, "task-2", "ag-2"),
                Suppression::SpawnOfItself,
            ),
            (
                "a second spawn of a known child",
                vec![],
                spawn(ROOT, "c1", "task-2", "ag-2"),
                Suppression::DuplicateSpawn,
            ),
            (
                "a child spawning the root",
                vec![],
                spawn("c1", ROOT, "task-2", "ag-2"),
                Suppression::DuplicateSpawn,
            ),
            (
                "a state update for a child never spawned",
                vec![],
                state(ROOT, "c9", "completed"),
                Suppression::UnknownChild,
            ),
            (
                "a state update on a session that is not the child's parent",
                vec![],
                state("c1", "c1", "completed"),
                Suppression::UnknownChild,
            ),
            (
                "a state update naming another agent",
                vec![],
                on(
                    ROOT,
                    json!({"sessionUpdate":"subagent_state_update","subagentSessionId":"c1","state":"completed",
                        "_meta":{"cursor":{"agentId":"ag-other"}}}),
                ),
                Suppression::OriginMismatch,
            ),
            (
                "a state update naming another spawning tool call",
                vec![],
                on(
                    ROOT,
                    json!({"sessionUpdate":"subagent_state_update","subagentSessionId":"c1","state":"completed",
                        "_meta":{"cursor":{"toolCallId":"task-other"}}}),
                ),
                Suppression::OriginMismatch,
            ),
            (
                "a child update naming another agent",
                vec![],
                on(
                    "c1",
                    json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"forged"},
                        "_meta":{"cursor":{"agentId":"ag-other"}}}),
                ),
                Suppression::OriginMismatch,
            ),
            (
                "an ACP update for a child from another parent",
                vec![spawn(ROOT, "c2", "task-2", "ag-2")],
                on(
                    "c2",
                    json!({"sessionUpdate":"subagent_update","sessionId":"c1","title":"mine now"}),
                ),
                Suppression::OriginMismatch,
            ),
            (
                "a cursor/task naming another agent for the child's Task call",
                vec![],
                json!({"extension": {"toolCallId":"task-1","agentId":"ag-other","durationMs":5}}),
                Suppression::OriginMismatch,
            ),
            (
                "a second terminal state",
                vec![state(ROOT, "c1", "completed")],
                state(ROOT, "c1", "failed"),
                Suppression::AfterEnd,
            ),
            (
                "an ACP update for an ended child",
                vec![state(ROOT, "c1", "completed")],
                on(
                    ROOT,
                    json!({"sessionUpdate":"subagent_update","sessionId":"c1","title":"again"}),
                ),
                Suppression::AfterEnd,
            ),
            (
                "a cursor/task whose Task call id spawned two children",
                vec![spawn("c1", "g1", "task-1", "ag-g")],
                json!({"extension": {"toolCallId":"task-1","durationMs":5}}),
                Suppression::AmbiguousTask,
            ),
        ];
        for (name, setup, offending, reason) in cases {
            let mut n = with_child();
            for params in &setup {
                n.on_session_update(params);
            }
            let send = |n: &mut TurnNormalizer| match offending.get("extension") {
                Some(params) => n.on_extension("cursor/task", params),
                None => n.on_session_update(&offending),
            };
            let first = send(&mut n);
            let notice = only_notice(&first);
            assert_eq!(notice.category, reason.category(), "{name}");
            assert_eq!(notice.severity, Severity::Warning, "{name}");
            assert_eq!(n.suppressed(reason), 1, "{name}");
            assert!(send(&mut n).is_empty(), "{name}: the same suppression is noticed once");
            assert_eq!(n.suppressed(reason), 2, "{name}: and counted every time");
            let settled = n.finish(TurnEnding::Completed);
            let totals = settled
                .iter()
                .find_map(|e| match e {
                    ActivityPayload::ProviderNotice(n) if n.category == "session_updates_suppressed" => Some(n),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{name}: finish totals the unnoticed suppression"));
            assert!(totals.summary.contains(&format!("{} ×2", reason.category())), "{name}");
            let completed = delegations(&settled).iter().filter(|(k, _)| *k == "completed").count();
            assert!(completed <= 2, "{name}: nothing of the suppression became a record");
        }
    }

    #[test]
    fn a_routed_root_update_is_projected_as_the_roots_own() {
        let chunk = json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}});
        let routed = normalizer().on_session_update(&on(ROOT, chunk.clone()));
        assert_eq!(routed, normalizer().on_update(&chunk));
        assert!(routed.iter().all(|e| e.child_id().is_none()));
        assert_eq!(routed[0].item_id(), Some("t1:msg-1"));
    }

    #[test]
    fn spawns_are_refused_while_no_turn_runs() {
        let mut between = normalizer().between_turns();
        let refused = between.on_session_update(&spawn(ROOT, "c1", "task-1", "ag-1"));
        assert_eq!(only_notice(&refused).category, "child_spawn_outside_turn");
        let announced =
            between.on_session_update(&on(ROOT, json!({"sessionUpdate":"subagent_update","sessionId":"c2"})));
        assert_eq!(only_notice(&announced).category, "child_spawn_outside_turn");
        assert_eq!(between.suppressed(Suppression::SpawnOutsideTurn), 2);
        assert_eq!(
            only_notice(&between.on_session_update(&text("c1", "hi"))).category,
            "unknown_session_update",
            "a refused child stays unknown"
        );

        let mut settled = with_child();
        settled.finish(TurnEnding::Completed);
        let late = settled.on_session_update(&spawn(ROOT, "c2", "task-2", "ag-2"));
        assert_eq!(only_notice(&late).category, "child_spawn_outside_turn");
    }

    #[test]
    fn without_a_root_session_every_routed_update_is_refused_and_subagent_tags_stay_unclassified() {
        let mut n = TurnNormalizer::new("t1");
        let routed = n.on_session_update(&text(ROOT, "hi"));
        assert_eq!(only_notice(&routed).category, "unknown_session_update");
        let spawned = n.on_update(&spawn(ROOT, "c1", "task-1", "ag-1")["update"]);
        assert_eq!(only_notice(&spawned).category, "unclassified_acp_subagent_spawned");
    }

    #[test]
    fn native_states_map_to_canonical_statuses_and_end_a_child_once() {
        let cases = [
            ("completed", DelegationStatus::Completed, false),
            ("failed", DelegationStatus::Failed, false),
            ("cancelled", DelegationStatus::Interrupted, true),
            ("disconnected", DelegationStatus::Failed, true),
        ];
        for (native, status, explained) in cases {
            let mut n = with_child();
            n.on_session_update(&text("c1", "partial"));
            let events = n.on_session_update(&state(ROOT, "c1", native));
            assert_eq!(types(&events), ["item.completed", "delegation.completed"], "{native}");
            let [("completed", record)] = delegations(&events)[..] else {
                panic!("{events:?}")
            };
            assert_eq!(record.status, status, "{native}");
            assert_eq!(record.native_state.as_deref(), Some(native));
            assert_eq!(record.explanation.is_some(), explained, "{native}");
            assert_eq!(record.action, Some(DelegationAction::Close));
            assert!(
                delegations(&n.finish(TurnEnding::Completed)).is_empty(),
                "{native}: settlement does not end it again"
            );
        }
    }

    #[test]
    fn cursor_task_enriches_a_known_child_which_completes_exactly_once_in_either_order() {
        let task = json!({"toolCallId":"task-1","agentId":"ag-1","description":"Find auth","prompt":"Look",
            "subagentType":"explore","model":"m-small","durationMs":4210});
        for task_first in [true, false] {
            let mut n = with_child();
            let mut events = Vec::new();
            if task_first {
                events.extend(n.on_extension("cursor/task", &task));
                events.extend(n.on_session_update(&state(ROOT, "c1", "completed")));
            } else {
                events.extend(n.on_session_update(&state(ROOT, "c1", "completed")));
                events.extend(n.on_extension("cursor/task", &task));
            }
            events.extend(n.finish(TurnEnding::Completed));
            let records = delegations(&events);
            let kinds: Vec<&str> = records.iter().map(|(kind, _)| *kind).collect();
            let expected = if task_first {
                ["updated", "completed"]
            } else {
                ["completed", "updated"]
            };
            assert_eq!(kinds, expected);
            let (_, updated) = records.iter().find(|(kind, _)| *kind == "updated").unwrap();
            assert_eq!(updated.child_id, "c1");
            assert_eq!((updated.role.as_str(), updated.duration_ms), ("explore", Some(4210)));
            assert_eq!(updated.evidence, "cursor_task_metadata");
            let (_, completed) = records.iter().find(|(kind, _)| *kind == "completed").unwrap();
            assert_eq!(completed.status, DelegationStatus::Completed);
            assert_eq!(completed.duration_ms, task_first.then_some(4210));
        }
    }

    #[test]
    fn cursor_task_for_no_known_child_is_the_metadata_completion() {
        let mut n = with_child();
        let events = n.on_extension("cursor/task", &json!({"toolCallId":"task-9","agentId":"ag-9"}));
        let [("completed", record)] = delegations(&events)[..] else {
            panic!("{events:?}")
        };
        assert_eq!(
            (record.child_id.as_str(), record.evidence.as_str()),
            ("ag-9", "cursor_task_metadata")
        );
    }

    #[test]
    fn settlement_ends_open_children_grandchildren_first() {
        let mut n = with_child();
        n.on_session_update(&spawn("c1", "g1", "task-g", "ag-g"));
        n.on_session_update(&on(
            ROOT,
            json!({"sessionUpdate":"subagent_update","sessionId":"idle-child",
            "state":{"state":"idle"}}),
        ));
        n.on_session_update(&text("g1", "still working"));
        let events = n.finish(TurnEnding::Completed);
        let ended: Vec<(&str, DelegationStatus, &str)> = delegations(&events)
            .into_iter()
            .map(|(_, d)| (d.child_id.as_str(), d.status, d.evidence.as_str()))
            .collect();
        assert_eq!(
            ended,
            [
                ("idle-child", DelegationStatus::Closed, "turn_settled"),
                ("g1", DelegationStatus::Interrupted, "turn_settled"),
                ("c1", DelegationStatus::Interrupted, "turn_settled"),
            ]
        );
        let g1_closed = events
            .iter()
            .position(|e| matches!(e, ActivityPayload::ItemCompleted(b) if b.child_id.as_deref() == Some("g1")));
        let g1_ended = events
            .iter()
            .position(|e| matches!(e, ActivityPayload::DelegationCompleted(d) if d.child_id == "g1"));
        assert!(g1_closed < g1_ended, "its open text closes before it ends");
        assert!(
            n.finish(TurnEnding::Completed).is_empty(),
            "a second settlement yields nothing"
        );
    }

    #[test]
    fn an_acp_child_waits_when_idle_runs_again_and_is_interrupted_at_settlement() {
        let mut n = normalizer();
        let announce = json!({"sessionUpdate":"subagent_update","sessionId":"a1","title":"Researcher",
            "description":"Survey","state":{"state":"running"}});
        let started = n.on_session_update(&on(ROOT, announce));
        let [("started", record)] = delegations(&started)[..] else {
            panic!("{started:?}")
        };
        assert_eq!(
            (record.name.as_deref(), record.task.as_deref(), record.evidence.as_str()),
            (Some("Researcher"), Some("Survey"), "acp_subagent_update")
        );
        let steps = [
            (json!({"state":"requires_action"}), Some(DelegationStatus::Waiting)),
            (json!({"state":"requires_action"}), None),
            (json!({"state":"running"}), Some(DelegationStatus::Running)),
            (json!({"state":"_custom","detail":1}), Some(DelegationStatus::Running)),
        ];
        for (patch, expected) in steps {
            let events = n.on_session_update(&on(
                ROOT,
                json!({"sessionUpdate":"subagent_update","sessionId":"a1","state":patch}),
            ));
            match expected {
                None => assert!(events.is_empty(), "an unchanged record emits nothing"),
                Some(status) => {
                    let [("updated", record)] = delegations(&events)[..] else {
                        panic!("{events:?}")
                    };
                    assert_eq!(record.status, status, "{patch}");
                }
            }
        }
        let settled = n.finish(TurnEnding::Completed);
        let [("completed", record)] = delegations(&settled)[..] else {
            panic!("{settled:?}")
        };
        assert_eq!(
            (record.status, record.native_state.as_deref()),
            (DelegationStatus::Interrupted, Some("_custom"))
        );
    }

    #[test]
    fn a_resumed_child_needs_the_agent_id_and_a_numbered_suffix() {
        let cases = [
            ("ag-1.2", Some(2), Some("c1"), DelegationAction::Resume),
            ("ag-1.x", None, None, DelegationAction::Spawn),
            ("ag-2.2", None, None, DelegationAction::Spawn),
        ];
        for (child, incarnation, resumed_from, action) in cases {
            let mut n = with_child();
            let events = n.on_session_update(&spawn(ROOT, child, "task-2", "ag-1"));
            let [("started", record)] = delegations(&events)[..] else {
                panic!("{events:?}")
            };
            assert_eq!(record.incarnation, incarnation, "{child}");
            assert_eq!(record.resumed_from.as_deref(), resumed_from, "{child}");
            assert_eq!(record.action, Some(action), "{child}");
        }
    }

    #[test]
    fn child_for_attributes_by_session_then_by_a_tool_call_only_one_child_has() {
        let mut n = with_child();
        n.on_session_update(&spawn(ROOT, "c2", "task-2", "ag-2"));
        n.on_session_update(&tool(ROOT, "root-tool", "x"));
        n.on_session_update(&tool("c1", "c1-tool", "x"));
        n.on_session_update(&tool("c1", "shared", "x"));
        n.on_session_update(&tool("c2", "shared", "x"));
        n.on_session_update(&tool(ROOT, "everywhere", "x"));
        n.on_session_update(&tool("c1", "everywhere", "x"));
        let cases = [
            (Some("c1"), None, Some("c1")),
            (Some("c2"), Some("c1-tool"), Some("c2")),
            (Some(ROOT), Some("c1-tool"), Some("c1")),
            (None, Some("c1-tool"), Some("c1")),
            (None, Some("root-tool"), None),
            (None, Some("everywhere"), None),
            (None, Some("shared"), None),
            (None, Some("never-seen"), None),
            (None, None, None),
            (Some("elsewhere"), Some("c1-tool"), None),
        ];
        for (session, tool_call, child) in cases {
            let found = n.child_for(session, tool_call);
            assert_eq!(
                found.as_ref().map(|c| c.child_id.as_str()),
                child,
                "{session:?} {tool_call:?}"
            );
        }
        let c1 = n.child_for(Some("c1"), None).unwrap();
        assert_eq!(
            c1,
            ChildRef {
                child_id: "c1".into(),
                parent_id: ROOT.into(),
                parent_tool_call_id: Some("task-1".into()),
                agent_id: Some("ag-1".into()),
            }
        );
        assert!(n.knows_tool_call("root-tool") && n.knows_tool_call("c1-tool") && n.knows_tool_call("shared"));
        assert!(!n.knows_tool_call("never-seen"));
    }

    #[test]
    fn todos_for_a_child_tool_call_update_that_childs_checklist() {
        let mut n = with_child();
        n.on_session_update(&tool("c1", "todo-tool", "updateTodos"));
        let todos =
            json!({"toolCallId":"todo-tool","merge":false,"todos":[{"id":"a","content":"A","status":"pending"}]});
        let events = n.on_extension("cursor/update_todos", &todos);
        let [ActivityPayload::PlanUpdated(plan)] = &events[..] else {
            panic!("{events:?}")
        };
        assert_eq!(plan.child_id.as_deref(), Some("c1"));
        assert_eq!(plan.plan_id, "t1:child-1:checklist");
        let root = n.on_extension("cursor/update_todos", &json!({"toolCallId":"unknown","todos":[]}));
        assert!(
            root.iter().all(|e| e.child_id().is_none()),
            "unattributable todos stay the root's"
        );
    }

    #[test]
    fn the_child_bound_is_exact() {
        let mut n = normalizer();
        for i in 0..MAX_CHILDREN_PER_TURN {
            let events = n.on_session_update(&spawn(ROOT, &format!("c{i}"), &format!("t{i}"), &format!("a{i}")));
            assert_eq!(types(&events), ["delegation.started"], "child {i}");
        }
        let over = n.on_session_update(&spawn(ROOT, "one-more", "t", "a"));
        assert_eq!(only_notice(&over).category, "child_limit_reached");
        assert_eq!(n.suppressed(Suppression::ChildLimit), 1);
    }

    #[test]
    fn suppression_notices_stop_at_their_bound_and_settlement_totals_the_rest() {
        for (sessions, totalled) in [(MAX_SUPPRESSION_NOTICES, false), (MAX_SUPPRESSION_NOTICES + 1, true)] {
            let mut n = normalizer();
            let notices: usize = (0..sessions)
                .map(|i| n.on_session_update(&text(&format!("foreign-{i}"), "x")).len())
                .sum();
            assert_eq!(notices, MAX_SUPPRESSION_NOTICES);
            assert_eq!(n.suppressed(Suppression::UnknownSession) as usize, sessions);
            let summary = n
                .finish(TurnEnding::Completed)
                .into_iter()
                .any(|e| matches!(e, ActivityPayload::ProviderNotice(n) if n.category == "session_updates_suppressed"));
            assert_eq!(summary, totalled, "{sessions}");
        }
    }

    #[test]
    fn child_ids_are_taken_whole_at_the_bound_and_refused_beyond_it() {
        for (chars, admitted) in [(MAX_NAME_CHARS, true), (MAX_NAME_CHARS + 1, false)] {
            let mut n = normalizer();
            let events = n.on_session_update(&spawn(ROOT, &"é".repeat(chars), "task-1", "ag-1"));
            assert_eq!(types(&events) == ["delegation.started"], admitted, "{chars}");
        }
    }

    #[test]
    fn a_300_kb_task_is_bounded_and_the_spawn_admitted() {
        for (chars, truncated) in [
            (MAX_DELEGATION_TASK_CHARS, false),
            (MAX_DELEGATION_TASK_CHARS + 1, true),
            (300 * 1024, true),
        ] {
            let mut n = normalizer();
            let update = on(
                ROOT,
                json!({"sessionUpdate":"subagent_spawned","subagentSessionId":"c1","task":"t".repeat(chars),
                    "_meta":{"cursor":{"toolCallId":"task-1","agentId":"ag-1"}}}),
            );
            let events = n.on_session_update(&update);
            let [("started", record)] = delegations(&events)[..] else {
                panic!("{chars}")
            };
            assert_eq!(record.task.as_ref().unwrap().chars().count(), MAX_DELEGATION_TASK_CHARS);
            assert_eq!(record.task_truncated, truncated, "{chars}");
            let noticed = events
                .iter()
                .any(|e| matches!(e, ActivityPayload::ProviderNotice(n) if n.category == "delegation_task_truncated"));
            assert_eq!(noticed, truncated, "{chars}");
        }
    }

    #[test]
    fn the_activity_summary_keeps_its_tail_at_the_bound() {
        let summary_after = |chunks: &[String]| {
            let mut n = with_child();
            for chunk in chunks {
                n.on_session_update(&text("c1", chunk));
            }
            let events = n.on_session_update(&state(ROOT, "c1", "completed"));
            delegations(&events)[0].1.activity_summary.clone().unwrap()
        };
        let at = summary_after(&["a".repeat(MAX_ACTIVITY_SUMMARY_CHARS)]);
        assert!(!at.truncated);
        assert_eq!(at.text.chars().count(), MAX_ACTIVITY_SUMMARY_CHARS);
        let over = summary_after(&[format!("X{}", "a".repeat(MAX_ACTIVITY_SUMMARY_CHARS))]);
        assert!(over.truncated);
        assert_eq!(over.text.chars().count(), MAX_ACTIVITY_SUMMARY_CHARS);
        assert!(over.text.starts_with('…') && !over.text.contains('X'));
        let many: Vec<String> = (0..30).map(|i| format!("{i:03}{}", "b".repeat(397))).collect();
        let long = summary_after(&many);
        assert!(long.truncated);
        assert_eq!(long.text.chars().count(), MAX_ACTIVITY_SUMMARY_CHARS);
        assert!(long.text.ends_with(&many[29]), "the tail is the latest activity");
    }

    /// One child's valid updates, in order; every text, tool title and plan step names
    /// the child (`marker`), so attribution can be checked from the events alone.
    fn child_script(session: &str, parent: &str, marker: &str) -> Vec<Value> {
        let mut script = vec![text(session, &format!("[{marker}] hello "))];
        for step in 0..3 {
            script.push(on(
                session,
                json!({"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":format!("[{marker}] thinking {step} ")}}),
            ));
            // Every child uses the same tool call ids: they are session-local.
            script.push(tool(
                session,
                &format!("tool-{step}"),
                &format!("[{marker}] tool {step}"),
            ));
            script.push(text(session, &format!("[{marker}] text {step} ")));
            script.push(on(
                session,
                json!({"sessionUpdate":"tool_call_update","toolCallId":format!("tool-{step}"),"status":"completed",
                    "rawOutput":{"output":format!("[{marker}] out")}}),
            ));
        }
        script.push(on(
            session,
            json!({"sessionUpdate":"plan","entries":[{"content":format!("[{marker}] step"),"priority":"low","status":"pending"}]}),
        ));
        script.push(state(parent, session, "completed"));
        script
    }

    fn marker_of(text: &str) -> Option<&str> {
        text.strip_prefix('[')?.split(']').next()
    }

    #[test]
    fn any_interleaving_keeps_every_event_with_its_own_child_and_none_in_the_parent_text() {
        let children = [("c1", ROOT), ("c2", ROOT), ("c3", ROOT), ("g1", "c1")];
        for seed in 1..=200u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut n = normalizer();
            let mut events = Vec::new();
            for (index, (child, parent)) in children.iter().enumerate() {
                events.extend(n.on_session_update(&spawn(
                    parent,
                    child,
                    &format!("task-{index}"),
                    &format!("ag-{child}"),
                )));
            }
            let mut scripts: Vec<std::collections::VecDeque<Value>> = children
                .iter()
                .map(|(child, parent)| child_script(child, parent, child).into())
                .collect();
            scripts.push(
                (0..8)
                    .map(|i| text(ROOT, &format!("[{ROOT}] root {i} ")))
                    .collect::<Vec<_>>()
                    .into(),
            );
            while scripts.iter().any(|s| !s.is_empty()) {
                let open: Vec<usize> = (0..scripts.len()).filter(|i| !scripts[*i].is_empty()).collect();
                let pick = open[rng.below(open.len() as u64) as usize];
                let params = scripts[pick].pop_front().unwrap();
                events.extend(n.on_session_update(&params));
            }
            events.extend(n.finish(TurnEnding::Completed));

            let mut item_owner: HashMap<String, Option<String>> = HashMap::new();
            let mut completed: HashMap<String, u32> = HashMap::new();
            for event in &events {
                let owner = event.child_id().map(str::to_owned);
                if let Some(item) = event.item_id() {
                    let previous = item_owner.entry(item.to_owned()).or_insert_with(|| owner.clone());
                    assert_eq!(*previous, owner, "seed {seed}: item {item} has one owner");
                }
                let expected = owner.as_deref().unwrap_or(ROOT);
                let named = match event {
                    ActivityPayload::ItemDelta(d) => marker_of(&d.text),
                    ActivityPayload::ToolStarted(t) | ActivityPayload::ToolCompleted(t) => marker_of(&t.name),
                    ActivityPayload::PlanUpdated(p) => marker_of(&p.steps[0].body),
                    ActivityPayload::DelegationCompleted(d) => {
                        *completed.entry(d.child_id.clone()).or_default() += 1;
                        None
                    }
                    ActivityPayload::ProviderNotice(notice) => panic!("seed {seed}: {notice:?}"),
                    _ => None,
                };
                if let Some(named) = named {
                    assert_eq!(named, expected, "seed {seed}: {event:?}");
                }
            }
            for (child, _) in children {
                assert_eq!(completed.get(child), Some(&1), "seed {seed}: {child} completes once");
            }
        }
    }
}
