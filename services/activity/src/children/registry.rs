//! The child agents of one turn: routing by session, the lifecycle (spawn, state,
//! ACP `subagent_update`), each child's transcript, `cursor/task` matching, settlement.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use agent_client_protocol_schema::v1 as acp;
use cursor_runner_acp::cursor::{TaskParams, UpdateTodosParams};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::delegation::*;
use super::summary::SummaryTail;
use super::suppression::Suppression;
use crate::bounds::*;
use crate::event::*;
use crate::sanitize::{display_text, is_identifier, safe_tag};
use crate::transcript::{Transcript, or_malformed_notice};

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
