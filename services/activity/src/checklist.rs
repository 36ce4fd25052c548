//! The checklist reducer, one per session of a turn (the root's and each child's): ACP
//! `plan` updates and `cursor/update_todos` feed one list, and every change emits a full
//! `plan.updated` snapshot with the next revision.
//!
//! - ACP `plan` replaces the whole list (entries have no ids: step ids are ordinal,
//!   `entry-N`).
//! - `cursor/update_todos` with `merge:true` upserts by todo id (fields absent from a
//!   todo keep their previous value; new ids are appended in order); `merge:false` (or
//!   absent) replaces the list.
//! - A todo/entry status `cancelled` becomes `blocked` with the label `Cancelled`; an
//!   unknown status becomes `blocked` with the label `Unknown status: <status>`.
//! - At most [`MAX_PLAN_STEPS`] steps are kept; entries beyond it, and malformed ones,
//!   are dropped with a `*_detail_partial` notice, and snapshots say `partial` until a
//!   replacement fits again.
//! - An update that leaves the snapshot unchanged emits nothing.

use std::collections::HashMap;

use cursor_runner_acp::cursor::UpdateTodosParams;
use cursor_runner_acp::methods;
use serde_json::Value;

use crate::bounds::{MAX_PLAN_STEPS, MAX_STEP_BODY_CHARS};
use crate::event::*;
use crate::sanitize::{display_text, is_identifier};

#[derive(Debug)]
pub(crate) struct Checklist {
    plan_id: String,
    revision: u64,
    /// Native id (merge key) → index into `steps`, which are in display order.
    index: HashMap<String, usize>,
    steps: Vec<PlanStep>,
    partial: bool,
    sanitized: bool,
    last: Option<(Vec<PlanStep>, bool)>,
}

/// One native entry after validation.
struct Entry {
    key: Option<String>,
    body: Option<(String, bool)>,
    status: Option<(StepStatus, Option<String>)>,
    priority: Option<StepPriority>,
}

impl Checklist {
    pub(crate) fn new(plan_id: String) -> Self {
        Self {
            plan_id,
            revision: 0,
            index: HashMap::new(),
            steps: Vec::new(),
            partial: false,
            sanitized: false,
            last: None,
        }
    }

    /// ACP `plan` update: `entries[{content, priority, status}]`, replacing the list.
    pub(crate) fn apply_acp_plan(&mut self, update: &Value) -> Vec<ActivityPayload> {
        let Some(entries) = update.get("entries").and_then(Value::as_array) else {
            return vec![malformed("plan", "`entries` is not an array")];
        };
        let mut dropped = 0usize;
        let mut parsed = Vec::new();
        for (index, raw) in entries.iter().enumerate() {
            match parse_entry(raw, false) {
                Some(mut entry) if entry.body.is_some() => {
                    entry.key = Some(format!("entry-{}", index + 1));
                    parsed.push(entry);
                }
                _ => dropped += 1,
            }
        }
        self.replace(parsed, &mut dropped);
        self.emit(PlanSource::AcpPlan, "acp_plan_detail_partial", dropped)
    }

    /// `cursor/update_todos` params: `{toolCallId, todos[{id, content, status}], merge}`.
    pub(crate) fn apply_todos(&mut self, params: &UpdateTodosParams) -> Vec<ActivityPayload> {
        let Some(todos) = &params.todos else {
            return vec![malformed(methods::UPDATE_TODOS, "`todos` is not an array")];
        };
        let merge = params.merge.unwrap_or(false);
        let mut dropped = 0usize;
        let mut parsed = Vec::new();
        for raw in todos {
            match parse_entry(raw, true) {
                Some(entry) if entry.key.is_some() => parsed.push(entry),
                _ => dropped += 1,
            }
        }
        if merge {
            for entry in parsed {
                self.upsert(entry, &mut dropped);
            }
        } else {
            self.replace(parsed, &mut dropped);
        }
        self.emit(PlanSource::CursorTodos, "cursor_todo_detail_partial", dropped)
    }

    fn replace(&mut self, entries: Vec<Entry>, dropped: &mut usize) {
        self.index.clear();
        self.steps.clear();
        self.partial = false;
        self.sanitized = false;
        for entry in entries {
            self.upsert(entry, dropped);
        }
    }

    fn upsert(&mut self, entry: Entry, dropped: &mut usize) {
        let key = entry.key.unwrap_or_default();
        let index = match self.index.get(&key) {
            Some(index) => *index,
            None if self.steps.len() >= MAX_PLAN_STEPS => {
                *dropped += 1;
                return;
            }
            None => {
                self.index.insert(key.clone(), self.steps.len());
                self.steps.push(PlanStep {
                    step_id: key,
                    body: String::new(),
                    status: StepStatus::Pending,
                    label: None,
                    priority: None,
                });
                self.steps.len() - 1
            }
        };
        let step = &mut self.steps[index];
        if let Some((body, clean)) = entry.body {
            step.body = body;
            self.sanitized |= clean;
        }
        if let Some((status, label)) = entry.status {
            step.status = status;
            step.label = label;
        }
        if entry.priority.is_some() {
            step.priority = entry.priority;
        }
    }

    fn emit(&mut self, source: PlanSource, partial_category: &str, dropped: usize) -> Vec<ActivityPayload> {
        let mut events = Vec::new();
        if dropped > 0 {
            self.partial = true;
            events.push(ActivityPayload::ProviderNotice(ProviderNotice::warning(
                partial_category,
                NoticeScope::Turn,
                format!(
                    "{dropped} checklist entr{} dropped (malformed, or beyond the {MAX_PLAN_STEPS}-step bound); the checklist is partial",
                    if dropped == 1 { "y was" } else { "ies were" }
                ),
            )));
        }
        if self
            .last
            .as_ref()
            .is_some_and(|(steps, partial)| *steps == self.steps && *partial == self.partial)
        {
            return events;
        }
        self.revision += 1;
        self.last = Some((self.steps.clone(), self.partial));
        events.push(ActivityPayload::PlanUpdated(PlanUpdated {
            plan_id: self.plan_id.clone(),
            revision: self.revision,
            steps: self.steps.clone(),
            source,
            partial: self.partial,
            sanitized: self.sanitized,
            child_id: None,
        }));
        events
    }
}

/// Validates one native entry. `todo` entries carry an `id` (string or number); ACP
/// entries do not. A present but ill-typed field makes the entry malformed.
fn parse_entry(raw: &Value, todo: bool) -> Option<Entry> {
    let object = raw.as_object()?;
    let key = if todo {
        match object.get("id")? {
            Value::String(id) if is_identifier(id) => Some(id.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => return None,
        }
    } else {
        None
    };
    let body = match object.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(display_text(text, MAX_STEP_BODY_CHARS)),
        Some(_) => return None,
    };
    let status = match object.get("status") {
        None | Some(Value::Null) => None,
        Some(Value::String(status)) => Some(map_status(status)),
        Some(_) => return None,
    };
    let priority = match object.get("priority").and_then(Value::as_str) {
        Some("high") => Some(StepPriority::High),
        Some("medium") => Some(StepPriority::Medium),
        Some("low") => Some(StepPriority::Low),
        _ => None,
    };
    Some(Entry {
        key,
        body,
        status,
        priority,
    })
}

fn map_status(status: &str) -> (StepStatus, Option<String>) {
    match status {
        "pending" => (StepStatus::Pending, None),
        "in_progress" => (StepStatus::InProgress, None),
        "completed" => (StepStatus::Completed, None),
        "cancelled" => (StepStatus::Blocked, Some("Cancelled".to_owned())),
        other => {
            let (name, _) = display_text(other, 64);
            (StepStatus::Blocked, Some(format!("Unknown status: {name}")))
        }
    }
}

fn malformed(what: &str, reason: &str) -> ActivityPayload {
    ActivityPayload::ProviderNotice(ProviderNotice::warning(
        "malformed_checklist_update",
        NoticeScope::Turn,
        format!("{what}: {reason}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::MAX_NAME_CHARS;
    use serde_json::json;

    fn snapshot(events: &[ActivityPayload]) -> &PlanUpdated {
        events
            .iter()
            .find_map(|e| match e {
                ActivityPayload::PlanUpdated(p) => Some(p),
                _ => None,
            })
            .expect("a plan.updated")
    }

    fn todos(list: Value, merge: bool) -> UpdateTodosParams {
        UpdateTodosParams::from_params(&json!({"toolCallId": "tc", "todos": list, "merge": merge}))
    }

    #[test]
    fn a_cancelled_todo_becomes_blocked_with_the_cancelled_label() {
        let mut c = Checklist::new("t1:checklist".into());
        let events = c.apply_todos(&todos(json!([{"id":"a","content":"Read","status":"cancelled"}]), false));
        let step = &snapshot(&events).steps[0];
        assert_eq!(step.status, StepStatus::Blocked);
        assert_eq!(step.label.as_deref(), Some("Cancelled"));
    }

    #[test]
    fn todo_status_mapping_table() {
        let cases = [
            ("pending", StepStatus::Pending, None),
            ("in_progress", StepStatus::InProgress, None),
            ("completed", StepStatus::Completed, None),
            ("cancelled", StepStatus::Blocked, Some("Cancelled")),
            ("exploded", StepStatus::Blocked, Some("Unknown status: exploded")),
        ];
        for (native, status, label) in cases {
            let mut c = Checklist::new("p".into());
            let events = c.apply_todos(&todos(json!([{"id":"a","content":"x","status":native}]), false));
            let step = &snapshot(&events).steps[0];
            assert_eq!((step.status, step.label.as_deref()), (status, label), "{native}");
        }
    }

    #[test]
    fn merging_todos_upserts_by_id_and_replacing_starts_over() {
        let mut c = Checklist::new("p".into());
        c.apply_todos(&todos(
            json!([{"id":"a","content":"A","status":"pending"},{"id":"b","content":"B","status":"pending"}]),
            false,
        ));
        let merged = c.apply_todos(&todos(
            json!([{"id":"b","status":"completed"},{"id":"c","content":"C","status":"in_progress"}]),
            true,
        ));
        let plan = snapshot(&merged);
        assert_eq!(plan.revision, 2);
        let view: Vec<_> = plan
            .steps
            .iter()
            .map(|s| (s.step_id.as_str(), s.body.as_str(), s.status))
            .collect();
        assert_eq!(
            view,
            [
                ("a", "A", StepStatus::Pending),
                ("b", "B", StepStatus::Completed),
                ("c", "C", StepStatus::InProgress)
            ]
        );
        let replaced = c.apply_todos(&todos(json!([{"id":"z","content":"Z","status":"pending"}]), false));
        let plan = snapshot(&replaced);
        assert_eq!(plan.revision, 3);
        assert_eq!(plan.steps.len(), 1);
        assert_eq!(plan.steps[0].step_id, "z");
    }

    #[test]
    fn a_todo_id_of_exactly_max_name_chars_is_kept_whole_and_one_more_drops_the_todo() {
        let longest = "a".repeat(MAX_NAME_CHARS);
        let over = format!("{longest}b");
        let mut c = Checklist::new("p".into());
        let events = c.apply_todos(&todos(
            json!([
                {"id": longest, "content": "kept", "status": "pending"},
                {"id": over, "content": "would merge with the first if cut", "status": "pending"},
                {"id": "ctl\u{1b}[31m", "content": "would be rewritten", "status": "pending"},
            ]),
            false,
        ));
        let plan = snapshot(&events);
        let ids: Vec<&str> = plan.steps.iter().map(|s| s.step_id.as_str()).collect();
        assert_eq!(ids, [longest.as_str()]);
        assert!(plan.partial, "the dropped todos are reported");
    }

    #[test]
    fn acp_plan_entries_keep_priority_and_get_ordinal_ids() {
        let mut c = Checklist::new("p".into());
        let events = c.apply_acp_plan(&json!({"sessionUpdate":"plan","entries":[
            {"content":"One","priority":"high","status":"completed"},
            {"content":"Two","priority":"low","status":"cancelled"}
        ]}));
        let plan = snapshot(&events);
        assert_eq!(plan.source, PlanSource::AcpPlan);
        assert_eq!(plan.steps[0].step_id, "entry-1");
        assert_eq!(plan.steps[0].priority, Some(StepPriority::High));
        assert_eq!(plan.steps[1].status, StepStatus::Blocked);
        assert_eq!(plan.steps[1].label.as_deref(), Some("Cancelled"));
    }

    #[test]
    fn an_unchanged_snapshot_is_not_emitted_again() {
        let mut c = Checklist::new("p".into());
        let update = todos(json!([{"id":"a","content":"A","status":"pending"}]), true);
        assert_eq!(c.apply_todos(&update).len(), 1);
        assert!(c.apply_todos(&update).is_empty());
    }

    #[test]
    fn the_step_bound_is_exact_and_one_over_emits_a_partial_notice() {
        let list = |n: usize| -> Value {
            Value::Array(
                (0..n)
                    .map(|i| json!({"id": format!("t{i}"), "content": "x", "status": "pending"}))
                    .collect(),
            )
        };
        let mut c = Checklist::new("p".into());
        let at = c.apply_todos(&todos(list(MAX_PLAN_STEPS), false));
        assert_eq!(at.len(), 1);
        assert_eq!(snapshot(&at).steps.len(), MAX_PLAN_STEPS);
        assert!(!snapshot(&at).partial);

        let over = c.apply_todos(&todos(list(MAX_PLAN_STEPS + 1), false));
        let ActivityPayload::ProviderNotice(notice) = &over[0] else {
            panic!("{over:?}")
        };
        assert_eq!(notice.category, "cursor_todo_detail_partial");
        assert_eq!(snapshot(&over).steps.len(), MAX_PLAN_STEPS);
        assert!(snapshot(&over).partial);

        let merged = c.apply_todos(&todos(json!([{"id":"new","content":"x","status":"pending"}]), true));
        assert_eq!(merged.len(), 1, "the partial state is unchanged: only the notice");
    }

    #[test]
    fn malformed_entries_are_dropped_and_reported() {
        let mut c = Checklist::new("p".into());
        let events = c.apply_todos(&todos(
            json!([{"content":"no id"}, {"id":"a","content":5}, "x", {"id":"b","content":"ok","status":"pending"}]),
            false,
        ));
        assert_eq!(events.len(), 2);
        assert_eq!(snapshot(&events).steps.len(), 1);
        let events = c.apply_todos(&UpdateTodosParams::from_params(&json!({"todos": "nope"})));
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn step_bodies_are_sanitized_and_bounded() {
        let mut c = Checklist::new("p".into());
        let long = "y".repeat(MAX_STEP_BODY_CHARS + 5);
        let events = c.apply_todos(&todos(
            json!([{"id":"a","content":"\u{1b}[2Jclear","status":"pending"},{"id":"b","content":long,"status":"pending"}]),
            false,
        ));
        let plan = snapshot(&events);
        assert_eq!(plan.steps[0].body, "␛[2Jclear");
        assert!(plan.sanitized);
        assert_eq!(plan.steps[1].body.chars().count(), MAX_STEP_BODY_CHARS);
        assert!(plan.steps[1].body.ends_with('…'));
    }
}
