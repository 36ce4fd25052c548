//! Property tests for the normalizer with seeded pseudo-random, shape-valid ACP input
//! (`fastrand`; every failure names its seed and the update that broke it).
//!
//! Random turns of `agent_message_chunk`, `agent_thought_chunk`, `tool_call`,
//! `tool_call_update` (with raw input and output around and far beyond their bounds,
//! locations inside and outside the workspace, diff and text content), ACP `plan` and
//! `cursor/update_todos` (up to well past 256 steps), plus session metadata and unknown
//! tags, are fed to one `TurnNormalizer` and settled with `finish()`. Every event must:
//!
//! - respect its bound and the lifecycle rules (`support/event_bounds.rs`, shared with
//!   the `normalizer` fuzz target): item text ≤ `MAX_ITEM_TEXT_CHARS`, tool output ≤
//!   `MAX_TOOL_OUTPUT_BYTES`, raw input ≤ `MAX_RAW_INPUT_BYTES`, plan steps ≤
//!   `MAX_PLAN_STEPS`, notices ≤ `NOTICE_SUMMARY_CHARS`, …; items and tools open once
//!   and close once; plan revisions strictly increase; one `usage.reported`, last;
//! - match a small model of what each update should yield: one delta per chunk with the
//!   exact kept length, truncation and sanitizing flags; an `item.started` exactly when
//!   no item of that kind is open; a tool's started/progressed/completed by its known
//!   and terminal state; raw input kept exactly when it fits; output byte counts, the
//!   kept tail and its source; the checklist's step count, `partial` flag and revision.
//!
//! The crate has no 4 KiB "preview" bound to check (issue 6 §9): the nearest one is
//! the notice summary, `NOTICE_SUMMARY_CHARS` (4,000 characters), checked on every
//! notice.

#[path = "support/event_bounds.rs"]
mod event_bounds;

use std::collections::{HashMap, HashSet};

use cursor_runner_activity::*;
use event_bounds::EventChecker;
use serde_json::{Value, json};

const TURN: &str = "t1";
const ROOT: &str = "root-session";
const WORKSPACE: &str = "/work/repo";

/// What the text model expects of sanitizing: C0 controls other than `\n`/`\t` (and
/// `\r` right before `\n`), DEL, C1 controls and bidi overrides are replaced.
fn needs_sanitizing(text: &str) -> bool {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let flagged = match c {
            '\n' | '\t' => false,
            '\r' => chars.peek() != Some(&'\n'),
            '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
            _ => false,
        };
        if flagged {
            return true;
        }
    }
    false
}

/// Exactly `n` characters: mostly ASCII, with multi-byte characters, newlines and the
/// control, C1 and bidi characters display sanitizing must neutralize.
fn text(rng: &mut fastrand::Rng, n: usize) -> String {
    const SPICE: &[char] = &[
        'é', '中', '🎉', '\n', '\t', '\r', '\u{1b}', '\u{7}', '\u{0}', '\u{7f}', '\u{9b}', '\u{202e}', '\u{2066}',
    ];
    let plain = rng.bool();
    (0..n)
        .map(|_| {
            if plain || rng.u8(0..8) != 0 {
                rng.alphanumeric()
            } else {
                SPICE[rng.usize(..SPICE.len())]
            }
        })
        .collect()
}

/// A length around `bound` (just under, at, just over, far over) or a small one.
fn length_around(rng: &mut fastrand::Rng, bound: usize) -> usize {
    match rng.u8(0..10) {
        0 => bound - 1,
        1 => bound,
        2 => bound + 1,
        3 => bound + 1 + rng.usize(0..bound),
        _ => rng.usize(0..64),
    }
}

/// `{"command": …}` whose compact JSON is exactly `bytes` long (ASCII, no escapes).
fn raw_input_of(rng: &mut fastrand::Rng, bytes: usize) -> Value {
    let overhead = json!({"command": ""}).to_string().len();
    let filler: String = (0..bytes.saturating_sub(overhead))
        .map(|_| rng.alphanumeric())
        .collect();
    let value = json!({ "command": filler });
    assert_eq!(value.to_string().len(), bytes.max(overhead));
    value
}

/// What the model knows of the root transcript.
#[derive(Default)]
struct Model {
    message_open: bool,
    reasoning_open: bool,
    tools: HashMap<String, bool>,
    /// The checklist's native keys in display order.
    steps: Vec<String>,
    partial: bool,
    revision: u64,
    /// Step count of the last emitted snapshot.
    emitted_steps: Option<usize>,
}

struct Turn {
    rng: fastrand::Rng,
    normalizer: TurnNormalizer,
    checker: EventChecker,
    model: Model,
    seed: u64,
    step: usize,
}

type Expect = Box<dyn FnOnce(&mut Model, &[ActivityPayload]) -> Result<(), String>>;

impl Turn {
    fn new(seed: u64) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
            normalizer: TurnNormalizer::new(TURN)
                .with_workspace(WORKSPACE)
                .with_root_session(ROOT),
            checker: EventChecker::new(),
            model: Model::default(),
            seed,
            step: 0,
        }
    }

    /// Feeds one update (as the `update` object, or wrapped as the params of the root
    /// session's `session/update`), then checks the bounds and the model.
    fn update(&mut self, update: Value, expect: Expect) {
        let events = if self.rng.bool() {
            self.normalizer.on_update(&update)
        } else {
            self.normalizer
                .on_session_update(&json!({"sessionId": ROOT, "update": update}))
        };
        self.verify(&update, &events, expect);
    }

    fn extension(&mut self, method: &str, params: Value, expect: Expect) {
        let events = self.normalizer.on_extension(method, &params);
        self.verify(&json!({"method": method, "params": params}), &events, expect);
    }

    fn verify(&mut self, input: &Value, events: &[ActivityPayload], expect: Expect) {
        let (seed, step) = (self.seed, self.step);
        let show = || {
            let mut shown = input.to_string();
            if shown.len() > 600 {
                let mut cut = 600;
                while !shown.is_char_boundary(cut) {
                    cut -= 1;
                }
                shown.truncate(cut);
                shown.push('…');
            }
            shown
        };
        if let Err(e) = self.checker.check_all(events) {
            panic!("seed {seed}, update {step}: {e}\ninput: {}", show());
        }
        if let Err(e) = expect(&mut self.model, events) {
            let kinds: Vec<String> = events.iter().map(|e| e.into_parts().0).collect();
            panic!("seed {seed}, update {step}: {e}\nevents: {kinds:?}\ninput: {}", show());
        }
        self.step += 1;
    }

    fn finish(&mut self) {
        let endings = [
            TurnEnding::Completed,
            TurnEnding::Cancelled,
            TurnEnding::Interrupted,
            TurnEnding::Failed,
        ];
        let ending = endings[self.rng.usize(..endings.len())];
        let events = self.normalizer.finish(ending);
        for event in &events {
            if let ActivityPayload::ToolCompleted(tool) = event {
                assert_eq!(
                    tool.status,
                    ending.open_tool_status(),
                    "seed {}: a tool left open settles by how the turn ended",
                    self.seed
                );
            }
        }
        if let Err(e) = self.checker.check_finish(&events) {
            panic!("seed {}, finish(): {e}", self.seed);
        }
        let closed = events
            .iter()
            .filter(|e| matches!(e, ActivityPayload::ItemCompleted(_)))
            .count();
        let open = usize::from(self.model.message_open) + usize::from(self.model.reasoning_open);
        assert_eq!(
            closed, open,
            "seed {}: finish() closes exactly the open items",
            self.seed
        );
        assert!(
            self.normalizer.finish(TurnEnding::Completed).is_empty(),
            "seed {}: a second finish()",
            self.seed
        );
    }

    fn chunk(&mut self) {
        let reasoning = self.rng.bool();
        let n = length_around(&mut self.rng, MAX_ITEM_TEXT_CHARS);
        let sent = text(&mut self.rng, n);
        let tag = if reasoning {
            "agent_thought_chunk"
        } else {
            "agent_message_chunk"
        };
        let sanitized = needs_sanitizing(&sent);
        let update = json!({"sessionUpdate": tag, "content": {"type": "text", "text": sent}});
        self.update(
            update,
            Box::new(move |model, events| {
                let open = if reasoning {
                    &mut model.reasoning_open
                } else {
                    &mut model.message_open
                };
                let started = events
                    .iter()
                    .filter(|e| matches!(e, ActivityPayload::ItemStarted(_)))
                    .count();
                if started != usize::from(!*open) {
                    return Err(format!("{started} item.started with an item open: {open}"));
                }
                *open = true;
                let deltas: Vec<&ItemDelta> = events
                    .iter()
                    .filter_map(|e| match e {
                        ActivityPayload::ItemDelta(d) => Some(d),
                        _ => None,
                    })
                    .collect();
                let [delta] = deltas[..] else {
                    return Err(format!("{} deltas for one chunk", deltas.len()));
                };
                let kept = delta.text.chars().count();
                if kept != n.min(MAX_ITEM_TEXT_CHARS) || delta.truncated != (n > MAX_ITEM_TEXT_CHARS) {
                    return Err(format!("{n} chars sent, {kept} kept, truncated={}", delta.truncated));
                }
                if delta.sanitized != sanitized {
                    return Err(format!("sanitized={} but expected {sanitized}", delta.sanitized));
                }
                let expected_kind = if reasoning {
                    ItemKind::Reasoning
                } else {
                    ItemKind::AgentMessage
                };
                if delta.kind != expected_kind || events.len() != started + 1 {
                    return Err("a chunk yields its delta (after a start) and nothing else".into());
                }
                Ok(())
            }),
        );
    }

    fn location(&mut self) -> Value {
        let path = match self.rng.u8(0..6) {
            0 => "/etc/passwd".to_owned(),
            1 => "/work/repo/../etc/shadow".to_owned(),
            2 => "/work/repository/x.rs".to_owned(),
            3 => format!("/work/repo/{}", "d/".repeat(self.rng.usize(0..2200))),
            _ => format!("/work/repo/src/{}.rs", self.rng.usize(0..100)),
        };
        if self.rng.bool() {
            json!({"path": path, "line": self.rng.u32(..)})
        } else {
            json!({"path": path})
        }
    }

    fn tool(&mut self) {
        let is_call = self.rng.u8(0..3) == 0;
        let ids = ["call-1", "call-2", "édit-3", "🎉", "toolu_01ABC"];
        let id = ids[self.rng.usize(..ids.len())].to_owned();
        let mut update = json!({
            "sessionUpdate": if is_call { "tool_call" } else { "tool_call_update" },
            "toolCallId": id,
        });
        let title_chars = (is_call || self.rng.bool()).then(|| length_around(&mut self.rng, MAX_NAME_CHARS));
        if let Some(n) = title_chars {
            update["title"] = Value::String(text(&mut self.rng, n));
        }
        if self.rng.bool() {
            let kinds = [
                "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other",
            ];
            update["kind"] = json!(kinds[self.rng.usize(..kinds.len())]);
        }
        let status = match self.rng.u8(0..6) {
            0 => Some("pending"),
            1 => Some("in_progress"),
            2 | 3 => Some("completed"),
            4 => Some("failed"),
            _ => None,
        };
        if let Some(status) = status {
            update["status"] = json!(status);
        }
        let raw_input = self.rng.bool().then(|| {
            let bytes = length_around(&mut self.rng, MAX_RAW_INPUT_BYTES).max(14);
            raw_input_of(&mut self.rng, bytes)
        });
        if let Some(raw) = &raw_input {
            update["rawInput"] = raw.clone();
        }
        let raw_text = self.rng.bool().then(|| {
            let mut raw = json!({});
            let mut full = String::new();
            if self.rng.bool() {
                // ASCII of an exact byte length around the bound.
                let n = length_around(&mut self.rng, MAX_TOOL_OUTPUT_BYTES);
                full = (0..n).map(|_| self.rng.alphanumeric()).collect();
                raw["stdout"] = Value::String(full.clone());
            } else {
                for key in ["stdout", "output", "stderr"] {
                    if self.rng.bool() {
                        // Output is data: any character, multi-byte ones straddling the cut.
                        let n = length_around(&mut self.rng, MAX_TOOL_OUTPUT_BYTES / 2);
                        let part = text(&mut self.rng, n);
                        full.push_str(&part);
                        raw[key] = Value::String(part);
                    }
                }
            }
            if self.rng.bool() {
                raw["exitCode"] = json!(self.rng.i32(-2..3));
            }
            update["rawOutput"] = raw;
            full
        });
        if self.rng.u8(0..3) == 0 {
            let locations: Vec<Value> = (0..self.rng.usize(0..80)).map(|_| self.location()).collect();
            update["locations"] = Value::Array(locations);
        }
        if self.rng.u8(0..3) == 0 {
            let mut content = Vec::new();
            for _ in 0..self.rng.usize(0..24) {
                let block = if self.rng.bool() {
                    let n = length_around(&mut self.rng, MAX_DIFF_TEXT_BYTES / 4);
                    let old = self.rng.bool().then(|| text(&mut self.rng, n));
                    let new_chars = length_around(&mut self.rng, 64);
                    let new = text(&mut self.rng, new_chars);
                    let path = self.location()["path"].clone();
                    json!({"type": "diff", "path": path, "oldText": old, "newText": new})
                } else {
                    let n = length_around(&mut self.rng, 4096);
                    json!({"type": "content", "content": {"type": "text", "text": text(&mut self.rng, n)}})
                };
                content.push(block);
            }
            update["content"] = Value::Array(content);
        }
        self.update(
            update,
            Box::new(move |model, events| {
                let known = model.tools.contains_key(&id);
                let terminal = model.tools.get(&id).copied().unwrap_or(false);
                let becomes_terminal = !terminal && matches!(status, Some("completed" | "failed"));
                model.tools.insert(id.clone(), terminal || becomes_terminal);
                let tools: Vec<&ActivityPayload> = events
                    .iter()
                    .filter(|e| {
                        matches!(
                            e,
                            ActivityPayload::ToolStarted(_)
                                | ActivityPayload::ToolProgressed(_)
                                | ActivityPayload::ToolCompleted(_)
                        )
                    })
                    .collect();
                let kinds: Vec<&str> = tools
                    .iter()
                    .map(|e| match e {
                        ActivityPayload::ToolStarted(_) => "started",
                        ActivityPayload::ToolProgressed(_) => "progressed",
                        _ => "completed",
                    })
                    .collect();
                let expected: Vec<&str> = match (known, becomes_terminal) {
                    (false, false) => vec!["started"],
                    (false, true) => vec!["started", "completed"],
                    (true, false) => vec!["progressed"],
                    (true, true) => vec!["completed"],
                };
                if kinds != expected {
                    return Err(format!("tool {id}: {kinds:?}, expected {expected:?}"));
                }
                if is_call && events.iter().any(|e| matches!(e, ActivityPayload::ItemCompleted(_))) {
                    let closed = events
                        .iter()
                        .filter(|e| matches!(e, ActivityPayload::ItemCompleted(_)))
                        .count();
                    let open = usize::from(model.message_open) + usize::from(model.reasoning_open);
                    if closed != open {
                        return Err(format!("a tool_call closed {closed} items, {open} were open"));
                    }
                }
                if is_call {
                    model.message_open = false;
                    model.reasoning_open = false;
                } else if events.iter().any(|e| matches!(e, ActivityPayload::ItemCompleted(_))) {
                    return Err("a tool_call_update closed an item".into());
                }
                let (ActivityPayload::ToolStarted(snapshot)
                | ActivityPayload::ToolProgressed(snapshot)
                | ActivityPayload::ToolCompleted(snapshot)) = tools[tools.len() - 1]
                else {
                    unreachable!()
                };
                if snapshot.tool_call_id != id {
                    return Err(format!("snapshot of {} for {id}", snapshot.tool_call_id));
                }
                if let Some(n) = title_chars {
                    let kept = snapshot.name.chars().count();
                    if kept != n.min(MAX_NAME_CHARS) || (n > MAX_NAME_CHARS) != snapshot.name.ends_with('…') {
                        return Err(format!("title of {n} chars kept as {kept}: {:?}", snapshot.name));
                    }
                }
                if let Some(raw) = raw_input {
                    let fits = raw.to_string().len() <= MAX_RAW_INPUT_BYTES;
                    let kept = snapshot.raw_input.as_ref() == Some(&raw);
                    if kept != fits || snapshot.raw_input_truncated == fits {
                        return Err(format!(
                            "raw input of {} bytes: kept={kept}, truncated={}",
                            raw.to_string().len(),
                            snapshot.raw_input_truncated
                        ));
                    }
                }
                if let Some(full) = raw_text.filter(|t| !t.is_empty()) {
                    let Some(output) = &snapshot.output else {
                        return Err("raw output text without output".into());
                    };
                    // The last 64 KiB, the cut moved forward to a char boundary.
                    let kept = output.output.len();
                    let kept_ok = if full.len() <= MAX_TOOL_OUTPUT_BYTES {
                        kept == full.len()
                    } else {
                        kept <= MAX_TOOL_OUTPUT_BYTES && kept + 3 >= MAX_TOOL_OUTPUT_BYTES
                    };
                    if snapshot.output_source != Some(OutputSource::RawOutput)
                        || output.output_bytes != full.len() as u64
                        || !full.ends_with(&output.output)
                        || !kept_ok
                        || output.output_truncated != (full.len() > MAX_TOOL_OUTPUT_BYTES)
                    {
                        return Err(format!(
                            "{} output bytes sent, {} claimed, {} kept from {:?}",
                            full.len(),
                            output.output_bytes,
                            output.output.len(),
                            snapshot.output_source
                        ));
                    }
                }
                Ok(())
            }),
        );
    }

    /// ACP `plan`: replaces the checklist with `entry-N` steps.
    fn plan(&mut self) {
        let count = match self.rng.u8(0..5) {
            0 => MAX_PLAN_STEPS,
            1 => MAX_PLAN_STEPS + 1,
            2 => MAX_PLAN_STEPS + 1 + self.rng.usize(0..200),
            _ => self.rng.usize(0..12),
        };
        let statuses = ["pending", "in_progress", "completed", "cancelled", "weird"];
        let entries: Vec<Value> = (0..count)
            .map(|_| {
                let n = length_around(&mut self.rng, MAX_STEP_BODY_CHARS);
                let priority = ["high", "medium", "low"][self.rng.usize(..3)];
                json!({
                    "content": text(&mut self.rng, n),
                    "priority": priority,
                    "status": statuses[self.rng.usize(..statuses.len())],
                })
            })
            .collect();
        let keys: Vec<String> = (1..=count).map(|i| format!("entry-{i}")).collect();
        self.update(
            json!({"sessionUpdate": "plan", "entries": entries}),
            Box::new(move |model, events| checklist(model, events, true, keys, 0)),
        );
    }

    /// `cursor/update_todos`, merged or replacing, with ids from a pool large enough to
    /// pass the step bound; some todos are malformed.
    fn todos(&mut self) {
        let merge = self.rng.bool();
        let pool = if self.rng.bool() { 20 } else { 3 * MAX_PLAN_STEPS };
        let count = match self.rng.u8(0..4) {
            0 => MAX_PLAN_STEPS + self.rng.usize(0..100),
            _ => self.rng.usize(0..16),
        };
        let mut keys = Vec::new();
        let mut dropped = 0;
        let todos: Vec<Value> = (0..count)
            .map(|_| {
                let n = self.rng.usize(0..pool);
                let id = match self.rng.u8(0..12) {
                    0 => {
                        dropped += 1;
                        json!("")
                    }
                    1 => {
                        keys.push(n.to_string());
                        json!(n)
                    }
                    _ => {
                        keys.push(format!("todo-{n}"));
                        json!(format!("todo-{n}"))
                    }
                };
                let mut todo = json!({"id": id});
                if self.rng.u8(0..4) != 0 {
                    let chars = length_around(&mut self.rng, MAX_STEP_BODY_CHARS);
                    todo["content"] = json!(text(&mut self.rng, chars));
                }
                if self.rng.bool() {
                    let status = ["pending", "in_progress", "completed", "cancelled"][self.rng.usize(..4)];
                    todo["status"] = json!(status);
                }
                todo
            })
            .collect();
        let params = json!({"toolCallId": "todo-call", "merge": merge, "todos": todos});
        self.extension(
            "cursor/update_todos",
            params,
            Box::new(move |model, events| checklist(model, events, !merge, keys, dropped)),
        );
    }

    /// Session metadata and tags the normalizer does not project: only the shared
    /// bounds are checked.
    fn other(&mut self) {
        let update = match self.rng.u8(0..6) {
            0 => {
                let n = length_around(&mut self.rng, MAX_NAME_CHARS);
                json!({"sessionUpdate": "current_mode_update", "currentModeId": text(&mut self.rng, n)})
            }
            1 => {
                let n = length_around(&mut self.rng, MAX_METADATA_TEXT_CHARS);
                json!({"sessionUpdate": "session_info_update", "title": text(&mut self.rng, n)})
            }
            2 => {
                let commands: Vec<Value> = (0..length_around(&mut self.rng, MAX_SESSION_COMMANDS))
                    .map(|i| json!({"name": format!("cmd{i}"), "description": text(&mut self.rng, 40)}))
                    .collect();
                json!({"sessionUpdate": "available_commands_update", "availableCommands": commands})
            }
            3 => json!({"sessionUpdate": "usage_update", "used": self.rng.u64(..), "size": 200_000}),
            4 => {
                let n = length_around(&mut self.rng, 64);
                json!({"sessionUpdate": text(&mut self.rng, n), "x": 1})
            }
            _ => json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}}),
        };
        self.update(update, Box::new(|_, _| Ok(())));
    }
}

/// The checklist model: `replace` starts the list over; each key is upserted, a new
/// one only while fewer than `MAX_PLAN_STEPS` steps are kept.
fn checklist(
    model: &mut Model,
    events: &[ActivityPayload],
    replace: bool,
    keys: Vec<String>,
    mut dropped: usize,
) -> Result<(), String> {
    if replace {
        model.steps.clear();
        model.partial = false;
    }
    let mut known: HashSet<String> = model.steps.iter().cloned().collect();
    for key in keys {
        if known.contains(&key) {
            continue;
        }
        if model.steps.len() >= MAX_PLAN_STEPS {
            dropped += 1;
            continue;
        }
        known.insert(key.clone());
        model.steps.push(key);
    }
    model.partial |= dropped > 0;
    let notices = events
        .iter()
        .filter(|e| matches!(e, ActivityPayload::ProviderNotice(n) if n.category.ends_with("_detail_partial")))
        .count();
    if notices != usize::from(dropped > 0) {
        return Err(format!("{dropped} entries dropped, {notices} partial notices"));
    }
    let snapshots: Vec<&PlanUpdated> = events
        .iter()
        .filter_map(|e| match e {
            ActivityPayload::PlanUpdated(p) => Some(p),
            _ => None,
        })
        .collect();
    match snapshots[..] {
        [] => {
            // Nothing changed: the last snapshot still holds.
            if model.emitted_steps != Some(model.steps.len()) {
                return Err(format!(
                    "no snapshot, yet the list went from {:?} to {} steps",
                    model.emitted_steps,
                    model.steps.len()
                ));
            }
        }
        [snapshot] => {
            if snapshot.steps.len() != model.steps.len() || snapshot.partial != model.partial {
                return Err(format!(
                    "snapshot of {} steps (partial {}), model {} (partial {})",
                    snapshot.steps.len(),
                    snapshot.partial,
                    model.steps.len(),
                    model.partial
                ));
            }
            if snapshot.revision != model.revision + 1 {
                return Err(format!("revision {} after {}", snapshot.revision, model.revision));
            }
            model.revision = snapshot.revision;
            model.emitted_steps = Some(snapshot.steps.len());
        }
        _ => return Err(format!("{} snapshots for one update", snapshots.len())),
    }
    Ok(())
}

#[test]
fn random_turns_never_exceed_a_bound_and_keep_their_order() {
    for seed in 0..40u64 {
        let mut turn = Turn::new(seed);
        let updates = turn.rng.usize(1..50);
        for _ in 0..updates {
            match turn.rng.u8(0..10) {
                0..=2 => turn.chunk(),
                3..=5 => turn.tool(),
                6 => turn.plan(),
                7 => turn.todos(),
                _ => turn.other(),
            }
        }
        turn.finish();
    }
}

#[test]
fn long_streams_of_small_updates_keep_items_tools_and_revisions_in_order() {
    // Many small updates per turn: item numbering, tool lifecycles and revisions over
    // hundreds of steps, with payloads kept small so the turn stays fast.
    for seed in 100..110u64 {
        let mut turn = Turn::new(seed);
        for _ in 0..400 {
            match turn.rng.u8(0..4) {
                0 => {
                    let update =
                        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}});
                    turn.update(
                        update,
                        Box::new(|model, events| {
                            let started = events.iter().any(|e| matches!(e, ActivityPayload::ItemStarted(_)));
                            if started == model.message_open {
                                return Err(format!("started={started} with open={}", model.message_open));
                            }
                            model.message_open = true;
                            Ok(())
                        }),
                    );
                }
                1 => {
                    let id = format!("c{}", turn.rng.usize(0..30));
                    let is_call = turn.rng.bool();
                    let status = ["pending", "in_progress", "completed", "failed"][turn.rng.usize(..4)];
                    let tag = if is_call { "tool_call" } else { "tool_call_update" };
                    let update = json!({"sessionUpdate": tag, "toolCallId": id, "title": "t", "status": status});
                    turn.update(
                        update,
                        Box::new(move |model, _| {
                            if is_call {
                                model.message_open = false;
                                model.reasoning_open = false;
                            }
                            Ok(())
                        }),
                    );
                }
                2 => {
                    let entries: Vec<Value> = (0..turn.rng.usize(0..4))
                        .map(|i| json!({"content": format!("s{i}"), "priority": "low", "status": "pending"}))
                        .collect();
                    let keys = (1..=entries.len()).map(|i| format!("entry-{i}")).collect();
                    turn.update(
                        json!({"sessionUpdate": "plan", "entries": entries}),
                        Box::new(move |model, events| checklist(model, events, true, keys, 0)),
                    );
                }
                _ => {
                    let n = turn.rng.usize(0..6);
                    let params = json!({"merge": true, "todos": [{"id": format!("k{n}"), "status": "completed"}]});
                    let keys = vec![format!("k{n}")];
                    turn.extension(
                        "cursor/update_todos",
                        params,
                        Box::new(move |model, events| checklist(model, events, false, keys, 0)),
                    );
                }
            }
        }
        turn.finish();
    }
}

#[test]
fn the_checker_catches_what_it_claims_to() {
    // The shared checker must be able to fail: events that break each rule are refused.
    let mut over = ItemDelta {
        item_id: "t1:msg-1".into(),
        kind: ItemKind::AgentMessage,
        channel: Channel::Progress,
        text: "a".repeat(MAX_ITEM_TEXT_CHARS + 1),
        truncated: true,
        sanitized: false,
        child_id: None,
    };
    let started = ActivityPayload::ItemStarted(ItemBoundary {
        item_id: "t1:msg-1".into(),
        kind: ItemKind::AgentMessage,
        channel: Channel::Progress,
        child_id: None,
    });
    let mut checker = EventChecker::new();
    checker.check_all(std::slice::from_ref(&started)).unwrap();
    assert!(checker.check_all(&[ActivityPayload::ItemDelta(over.clone())]).is_err());
    over.text = "\u{1b}[2J".into();
    assert!(
        EventChecker::new()
            .check_all(&[started.clone(), ActivityPayload::ItemDelta(over.clone())])
            .is_err()
    );
    over.text = "ok".into();
    assert!(
        EventChecker::new()
            .check_all(&[ActivityPayload::ItemDelta(over)])
            .is_err(),
        "a delta before its start"
    );
    assert!(
        EventChecker::new().check_all(&[started.clone(), started]).is_err(),
        "started twice"
    );

    let mut tool = ToolExecution::new("c");
    tool.output = Some(bound_output(&"o".repeat(MAX_TOOL_OUTPUT_BYTES)));
    tool.output.as_mut().unwrap().output.push('o');
    assert!(event_bounds::check_tool(&tool).is_err(), "output over its bound");
    let mut tool = ToolExecution::new("c");
    tool.raw_input = Some(json!({"command": "x".repeat(MAX_RAW_INPUT_BYTES)}));
    assert!(event_bounds::check_tool(&tool).is_err(), "raw input over its bound");
    let mut tool = ToolExecution::new("c");
    tool.locations = vec![ToolLocation {
        path: "/etc/passwd".into(),
        line: None,
    }];
    assert!(event_bounds::check_tool(&tool).is_err(), "an absolute location");

    let plan = |revision: u64, steps: usize| {
        ActivityPayload::PlanUpdated(PlanUpdated {
            plan_id: "p".into(),
            revision,
            steps: (0..steps)
                .map(|i| PlanStep {
                    step_id: format!("s{i}"),
                    body: "b".into(),
                    status: StepStatus::Pending,
                    label: None,
                    priority: None,
                })
                .collect(),
            source: PlanSource::AcpPlan,
            partial: false,
            sanitized: false,
            child_id: None,
        })
    };
    assert!(
        EventChecker::new().check_all(&[plan(1, MAX_PLAN_STEPS + 1)]).is_err(),
        "too many steps"
    );
    assert!(
        EventChecker::new().check_all(&[plan(2, 1), plan(2, 1)]).is_err(),
        "a repeated revision"
    );
    assert!(EventChecker::new().check_all(&[plan(1, MAX_PLAN_STEPS)]).is_ok());

    let notice = ProviderNotice::info("c", NoticeScope::Turn, "x".repeat(3 * NOTICE_SUMMARY_CHARS));
    assert!(
        EventChecker::new()
            .check_all(&[ActivityPayload::ProviderNotice(notice.clone())])
            .is_ok()
    );
    let mut long = notice;
    long.summary = "x".repeat(NOTICE_SUMMARY_CHARS + 1);
    assert!(
        EventChecker::new()
            .check_all(&[ActivityPayload::ProviderNotice(long)])
            .is_err()
    );

    let mut n = TurnNormalizer::new(TURN);
    let mut checker = EventChecker::new();
    checker.check_all(&[]).unwrap();
    let mut events = n.finish(TurnEnding::Completed);
    let usage = events.pop().unwrap();
    assert!(checker.check_finish(&events).is_err(), "a turn without usage.reported");
    let mut checker = EventChecker::new();
    assert!(
        checker.check_finish(&[usage.clone(), usage.clone()]).is_err(),
        "two usage.reported"
    );
    let mut checker = EventChecker::new();
    checker
        .check_all(&[ActivityPayload::ToolStarted(ToolExecution::new("open"))])
        .unwrap();
    assert!(
        checker.check_finish(&[usage]).is_err(),
        "a tool still running at the end"
    );
}

/// Found by `random_turns_never_exceed_a_bound_and_keep_their_order` (seed 30): a cut
/// between the `\r` and `\n` of a CRLF used to leave a bare carriage return in display
/// text, right before the cut marker.
#[test]
fn a_cut_between_cr_and_lf_leaves_no_bare_carriage_return() {
    let mut n = TurnNormalizer::new(TURN).with_workspace(WORKSPACE);
    let body = format!("{}\r\nrest", "a".repeat(MAX_STEP_BODY_CHARS - 2));
    let title = format!("{}\r\nrest", "a".repeat(MAX_NAME_CHARS - 2));
    let mut events =
        n.on_update(&json!({"sessionUpdate": "plan", "entries": [{"content": body, "status": "pending"}]}));
    events.extend(n.on_update(&json!({"sessionUpdate": "tool_call", "toolCallId": "c", "title": title})));
    let ActivityPayload::PlanUpdated(plan) = &events[0] else {
        panic!("{events:?}")
    };
    let ActivityPayload::ToolStarted(tool) = &events[1] else {
        panic!("{events:?}")
    };
    for text in [&plan.steps[0].body, &tool.name] {
        assert!(text.ends_with('…'), "the text was cut");
        event_bounds::display_safe(text).unwrap_or_else(|e| panic!("{e}: …{:?}", &text[text.len() - 6..]));
    }
}
