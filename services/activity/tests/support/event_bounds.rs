//! Checks every canonical event of one turn against the bounds in `bounds.rs` and the
//! lifecycle and ordering the normalizer promises. Shared by the property tests
//! (`tests/properties.rs`) and the `normalizer` fuzz target (`fuzz/`, through
//! `#[path]`), so both assert the same thing. Public API only.
//!
//! Per event: every bounded field within its constant; display text free of terminal
//! control, C1 and bidi override characters; tool output a suffix-window with a
//! consistent byte count, truncation flag and digest; raw input within its byte bound
//! or dropped with the flag; paths workspace-relative.
//!
//! Across the turn: an item is started once, receives deltas only while open, and is
//! completed once; item numbers grow per transcript; a tool call starts once (as
//! `running`) before it progresses or completes, and completes at most once; plan
//! revisions strictly increase per plan; a spawned child completes exactly once; the
//! turn's one `usage.reported` is the last event `finish()` yields.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};

use cursor_runner_activity::*;

/// State carried across the events of one turn.
#[derive(Debug, Default)]
pub struct EventChecker {
    /// Open items: id → kind.
    open_items: HashMap<String, ItemKind>,
    seen_items: HashSet<String>,
    /// Last item number per transcript prefix (`t1`, `t1:child-1`, …).
    item_numbers: HashMap<String, u64>,
    /// (child, tool call id) → completed.
    tools: HashMap<(Option<String>, String), bool>,
    plan_revisions: HashMap<(Option<String>, String), u64>,
    /// Spawned children → delegation.completed seen.
    children: HashMap<String, bool>,
    usage_reports: usize,
    events: usize,
    finished: bool,
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

/// Display text must carry no terminal control: C0 controls other than `\n` and `\t`
/// (a `\r` only before `\n`, or last: a chunk boundary may split a `\r\n` pair), DEL,
/// C1 controls and bidi embeddings/overrides/isolates. A bound's cut between `\r` and
/// `\n` must not leave a bare `\r` before the cut marker.
pub fn display_safe(text: &str) -> Result<(), String> {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let bad = match c {
            '\n' | '\t' => false,
            '\r' => !matches!(chars.peek(), None | Some('\n')),
            '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
            _ => false,
        };
        if bad {
            return Err(format!("display text carries {c:?}"));
        }
    }
    Ok(())
}

fn within(what: &str, len: usize, max: usize) -> Result<(), String> {
    if len > max {
        return Err(format!("{what}: {len} > bound {max}"));
    }
    Ok(())
}

fn display(what: &str, text: &str, max_chars: usize) -> Result<(), String> {
    within(what, chars(text), max_chars)?;
    display_safe(text).map_err(|e| format!("{what}: {e}"))
}

fn opt_display(what: &str, text: &Option<String>, max_chars: usize) -> Result<(), String> {
    text.as_deref().map_or(Ok(()), |t| display(what, t, max_chars))
}

/// A workspace-relative path as events carry it: bounded, not absolute, no `..`.
fn relative_path(what: &str, path: &str) -> Result<(), String> {
    within(what, chars(path), MAX_PATH_CHARS)?;
    if path.starts_with('/') || path.split('/').any(|c| c == "..") {
        return Err(format!("{what}: `{path}` is not workspace-relative"));
    }
    display_safe(path).map_err(|e| format!("{what}: {e}"))
}

/// `<prefix>:msg-<n>` / `<prefix>:reasoning-<n>` → (prefix, n).
fn item_number(item_id: &str) -> Option<(&str, u64)> {
    let (prefix, local) = item_id.rsplit_once(':')?;
    let n = local
        .strip_prefix("msg-")
        .or_else(|| local.strip_prefix("reasoning-"))?;
    Some((prefix, n.parse().ok()?))
}

pub fn check_output(what: &str, output: &BoundedOutput) -> Result<(), String> {
    within(what, output.output.len(), MAX_TOOL_OUTPUT_BYTES)?;
    let kept = output.output.len() as u64;
    if output.output_bytes < kept {
        return Err(format!("{what}: outputBytes {} < kept {kept}", output.output_bytes));
    }
    if output.output_truncated != (output.output_bytes > kept) {
        return Err(format!(
            "{what}: truncated={} but {kept} of {} bytes kept",
            output.output_truncated, output.output_bytes
        ));
    }
    // A cut keeps the last 64 KiB, moved forward to a char boundary (at most 3 bytes).
    if output.output_truncated && kept + 3 < MAX_TOOL_OUTPUT_BYTES as u64 {
        return Err(format!("{what}: truncated yet only {kept} bytes kept"));
    }
    let digest = output.output_digest.strip_prefix("sha256:").unwrap_or("");
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{what}: digest `{}`", output.output_digest));
    }
    Ok(())
}

pub fn check_tool(tool: &ToolExecution) -> Result<(), String> {
    display("tool name", &tool.name, MAX_NAME_CHARS)?;
    if let Some(output) = &tool.output {
        check_output("tool output", output)?;
    }
    if let Some(raw) = &tool.raw_input {
        let bytes = serde_json::to_vec(raw).map_err(|e| e.to_string())?.len();
        within("raw input bytes", bytes, MAX_RAW_INPUT_BYTES)?;
        if tool.raw_input_truncated {
            return Err("raw input kept and flagged truncated".into());
        }
    }
    within("locations", tool.locations.len(), MAX_TOOL_LOCATIONS)?;
    for location in &tool.locations {
        relative_path("location", &location.path)?;
    }
    if let Some(target) = &tool.target {
        relative_path("target", target)?;
    }
    within("diffs", tool.diffs.len(), MAX_TOOL_DIFFS)?;
    let mut diff_bytes = 0;
    for diff in &tool.diffs {
        relative_path("diff path", &diff.path)?;
        for (text, bytes) in [
            (&diff.old_text, diff.old_text_bytes),
            (&diff.new_text, diff.new_text_bytes),
        ] {
            if let Some(text) = text {
                diff_bytes += text.len();
                let full = bytes.ok_or("diff text without its byte count")?;
                if (text.len() as u64) > full {
                    return Err(format!("diff text of {} bytes claims {full}", text.len()));
                }
                if (text.len() as u64) < full && !diff.truncated {
                    return Err("a cut diff text is not flagged".into());
                }
            }
        }
    }
    within("diff text bytes", diff_bytes, MAX_DIFF_TEXT_BYTES)?;
    within("artifacts", tool.artifacts.len(), MAX_TOOL_ARTIFACTS)?;
    for artifact in &tool.artifacts {
        if let Some(reference) = &artifact.reference {
            relative_path("artifact reference", reference)?;
        }
        if let Some(uri) = &artifact.uri {
            within("artifact uri", chars(uri), MAX_URI_CHARS)?;
            if uri.chars().any(char::is_control) {
                return Err("artifact uri with a control character".into());
            }
        }
        opt_display("artifact media type", &artifact.media_type, MAX_NAME_CHARS)?;
        opt_display("artifact title", &artifact.title, MAX_METADATA_TEXT_CHARS)?;
        if artifact.registered {
            return Err("a content-block reference claims to be registered".into());
        }
    }
    if let Some(code) = tool.exit_code
        && i32::try_from(code).is_err()
    {
        return Err(format!("exit code {code} outside i32"));
    }
    Ok(())
}

fn check_plan(plan: &PlanUpdated) -> Result<(), String> {
    within("plan steps", plan.steps.len(), MAX_PLAN_STEPS)?;
    for step in &plan.steps {
        display("step body", &step.body, MAX_STEP_BODY_CHARS)?;
        display("step id", &step.step_id, MAX_NAME_CHARS)?;
        if let Some(label) = &step.label {
            // `Unknown status: ` + at most 64 characters of the native status.
            display("step label", label, MAX_NAME_CHARS)?;
        }
    }
    Ok(())
}

fn check_delegation(d: &Delegation) -> Result<(), String> {
    display("child id", &d.child_id, MAX_NAME_CHARS)?;
    opt_display("parent id", &d.parent_id, MAX_NAME_CHARS)?;
    opt_display("parent tool call id", &d.parent_tool_call_id, MAX_NAME_CHARS)?;
    opt_display("agent id", &d.agent_id, MAX_NAME_CHARS)?;
    display("role", &d.role, MAX_NAME_CHARS)?;
    opt_display("name", &d.name, MAX_NAME_CHARS)?;
    opt_display("subagent type", &d.subagent_type_raw, MAX_NAME_CHARS)?;
    opt_display("model", &d.model, MAX_NAME_CHARS)?;
    opt_display("task", &d.task, MAX_DELEGATION_TASK_CHARS)?;
    opt_display("native state", &d.native_state, MAX_NAME_CHARS)?;
    opt_display("resumed from", &d.resumed_from, MAX_NAME_CHARS)?;
    if let Some(summary) = &d.activity_summary {
        display("activity summary", &summary.text, MAX_ACTIVITY_SUMMARY_CHARS)?;
    }
    Ok(())
}

impl EventChecker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks the events one update (or extension request) yielded.
    pub fn check_all(&mut self, events: &[ActivityPayload]) -> Result<(), String> {
        if self.finished {
            return Err("events after finish()".into());
        }
        for event in events {
            self.check(event)
                .map_err(|e| format!("event #{} {}: {e}", self.events, event.into_parts().0))?;
            self.events += 1;
        }
        Ok(())
    }

    /// Checks what `finish()` yielded, then the end-of-turn properties.
    pub fn check_finish(&mut self, events: &[ActivityPayload]) -> Result<(), String> {
        let before = self.usage_reports;
        self.check_all(events)?;
        self.finished = true;
        if !matches!(events.last(), Some(ActivityPayload::UsageReported(_))) {
            return Err("finish() does not end with usage.reported".into());
        }
        if before != 0 || self.usage_reports != 1 {
            return Err(format!("{} usage.reported in the turn", self.usage_reports));
        }
        if let Some(open) = self.open_items.keys().next() {
            return Err(format!("item {open} still open after finish()"));
        }
        if let Some((child, _)) = self.children.iter().find(|(_, done)| !**done) {
            return Err(format!("child {child} never completed"));
        }
        if let Some(((_, tool), _)) = self.tools.iter().find(|(_, done)| !**done) {
            return Err(format!("tool {tool} still running after finish()"));
        }
        Ok(())
    }

    fn check(&mut self, event: &ActivityPayload) -> Result<(), String> {
        match event {
            ActivityPayload::ItemStarted(b) => {
                if !self.seen_items.insert(b.item_id.clone()) {
                    return Err(format!("item {} started twice", b.item_id));
                }
                let (prefix, n) = item_number(&b.item_id).ok_or(format!("item id `{}`", b.item_id))?;
                let last = self.item_numbers.entry(prefix.to_owned()).or_insert(0);
                if n <= *last {
                    return Err(format!("item number {n} after {last} in {prefix}"));
                }
                *last = n;
                self.open_items.insert(b.item_id.clone(), b.kind);
            }
            ActivityPayload::ItemDelta(d) => {
                match self.open_items.get(&d.item_id) {
                    Some(kind) if *kind == d.kind => {}
                    _ => return Err(format!("delta for item {} that is not open", d.item_id)),
                }
                display("item delta text", &d.text, MAX_ITEM_TEXT_CHARS)?;
            }
            ActivityPayload::ItemCompleted(b) => {
                let was_open = self.open_items.remove(&b.item_id);
                if was_open != Some(b.kind) {
                    return Err(format!("completed item {} that is not open", b.item_id));
                }
            }
            ActivityPayload::ToolStarted(t) => {
                check_tool(t)?;
                let key = (t.child_id.clone(), t.tool_call_id.clone());
                if self.tools.insert(key, false).is_some() {
                    return Err(format!("tool {} started twice", t.tool_call_id));
                }
                if t.status != ToolStatus::Running {
                    return Err(format!("tool {} started as {:?}", t.tool_call_id, t.status));
                }
            }
            ActivityPayload::ToolProgressed(t) | ActivityPayload::ToolCompleted(t) => {
                check_tool(t)?;
                let completing = matches!(event, ActivityPayload::ToolCompleted(_));
                let key = (t.child_id.clone(), t.tool_call_id.clone());
                let Some(done) = self.tools.get_mut(&key) else {
                    return Err(format!("tool {} reported before it started", t.tool_call_id));
                };
                if completing {
                    if *done {
                        return Err(format!("tool {} completed twice", t.tool_call_id));
                    }
                    if t.status == ToolStatus::Running {
                        return Err(format!("tool {} completed as running", t.tool_call_id));
                    }
                    *done = true;
                }
            }
            ActivityPayload::PlanUpdated(plan) => {
                check_plan(plan)?;
                let key = (plan.child_id.clone(), plan.plan_id.clone());
                let last = self.plan_revisions.entry(key).or_insert(0);
                if plan.revision <= *last {
                    return Err(format!("plan revision {} after {last}", plan.revision));
                }
                *last = plan.revision;
            }
            ActivityPayload::ProviderNotice(n) => {
                display("notice summary", &n.summary, NOTICE_SUMMARY_CHARS)?;
                within("notice category", n.category.len(), MAX_NAME_CHARS)?;
                if !n.category.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return Err(format!("notice category `{}`", n.category));
                }
            }
            ActivityPayload::DelegationStarted(d) => {
                check_delegation(d)?;
                if self.children.insert(d.child_id.clone(), false).is_some() {
                    return Err(format!("child {} started twice", d.child_id));
                }
            }
            ActivityPayload::DelegationUpdated(d) => check_delegation(d)?,
            ActivityPayload::DelegationCompleted(d) => {
                check_delegation(d)?;
                if let Some(done) = self.children.get_mut(&d.child_id) {
                    if *done {
                        return Err(format!("child {} completed twice", d.child_id));
                    }
                    *done = true;
                }
            }
            ActivityPayload::ReviewModeChanged(m) => {
                display("mode id", &m.mode_id, MAX_NAME_CHARS)?;
                opt_display("previous mode id", &m.previous_mode_id, MAX_NAME_CHARS)?;
            }
            ActivityPayload::SessionConfigUpdated(c) => {
                within("config options", c.config_options.len(), MAX_CONFIG_OPTIONS)?;
                for option in &c.config_options {
                    display("config id", &option.id, MAX_NAME_CHARS)?;
                    opt_display("config name", &option.name, MAX_NAME_CHARS)?;
                    opt_display("config category", &option.category, MAX_NAME_CHARS)?;
                    within("config values", option.values.len(), MAX_CONFIG_OPTION_VALUES)?;
                    for value in &option.values {
                        display("config value", &value.value, MAX_NAME_CHARS)?;
                        opt_display("config value name", &value.name, MAX_NAME_CHARS)?;
                    }
                }
            }
            ActivityPayload::SessionInfoUpdated(i) => {
                opt_display("session title", &i.title, MAX_METADATA_TEXT_CHARS)?;
                opt_display("session updatedAt", &i.updated_at, MAX_METADATA_TEXT_CHARS)?;
            }
            ActivityPayload::SessionCommandsUpdated(c) => {
                within("commands", c.commands.len(), MAX_SESSION_COMMANDS)?;
                for command in &c.commands {
                    display("command name", &command.name, MAX_NAME_CHARS)?;
                    opt_display("command description", &command.description, MAX_METADATA_TEXT_CHARS)?;
                    opt_display("command hint", &command.input_hint, MAX_METADATA_TEXT_CHARS)?;
                }
            }
            ActivityPayload::UsageReported(u) => {
                self.usage_reports += 1;
                if !self.finished && self.usage_reports > 1 {
                    return Err("a second usage.reported".into());
                }
                if let Some(cost) = &u.cost {
                    display("currency", &cost.currency, 16)?;
                }
            }
            ActivityPayload::ArtifactGenerated(a) => {
                display("artifact description", &a.description, MAX_METADATA_TEXT_CHARS)?;
            }
            _ => {}
        }
        Ok(())
    }
}
