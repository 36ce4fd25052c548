//! Replays every `fixtures/transcripts/<name>.ndjson` through a fresh normalizer (turn
//! `t1`, workspace `/work/repo`), settles it with `finish()`, and compares the canonical
//! events with the checked-in `<name>.expected.json`.
//!
//! Each transcript line is one of:
//! - the `update` object of one `session/update` of the root session;
//! - the whole params `{"sessionId": …, "update": …}` of one `session/update`, routed by
//!   its session (a child's, a foreign one, or none when `sessionId` is left out);
//! - `{"extension": {"method": …, "params": …}}` for a Cursor extension request;
//! - `{"permission": <params of session/request_permission>}`: the normalizer makes no
//!   event of it (the execution's actor records the interaction), so the replay writes
//!   `{"permissionRequested": {"toolCallId": …, "toolCallKnown": …}}` — whether the tool
//!   call it is about was already reported, which the interaction carries as
//!   `tool_call_known` — in its place among the events;
//! - as the first line only, `{"normalizer": {"rootSession": …, "betweenTurns": true}}`:
//!   the root session (children are tracked only with one, as when the client opts in
//!   with `_meta.subagents`), and whether the normalizer serves the session between
//!   turns (spawns refused), and `"ending"` (`completed`, the default, `cancelled`,
//!   `interrupted` or `failed`): how the turn settles, which decides what a tool left
//!   open becomes. Without it the normalizer has no root session.
//!
//! A mismatch fails. To regenerate the expected files deliberately (then review the
//! diff): `UPDATE_TRANSCRIPTS=1 cargo test -p cursor-runner-activity --test transcripts`.

use std::fs;
use std::path::{Path, PathBuf};

use cursor_runner_activity::{TurnEnding, TurnNormalizer};
use serde_json::Value;

const TURN_ID: &str = "t1";
const WORKSPACE: &str = "/work/repo";

fn transcripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/transcripts")
}

/// The normalizer a transcript's optional first line configures.
fn configured(config: Option<&Value>) -> TurnNormalizer {
    let mut normalizer = TurnNormalizer::new(TURN_ID).with_workspace(WORKSPACE);
    let Some(config) = config else {
        return normalizer;
    };
    if let Some(root) = config.get("rootSession").and_then(Value::as_str) {
        normalizer = normalizer.with_root_session(root);
    }
    if config.get("betweenTurns").and_then(Value::as_bool) == Some(true) {
        normalizer = normalizer.between_turns();
    }
    normalizer
}

fn replay(name: &str, text: &str) -> Value {
    let mut lines: Vec<(usize, Value)> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            let value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}.ndjson line {}: {e}", index + 1));
            (index + 1, value)
        })
        .collect();
    let config = match lines.first() {
        Some((_, first)) if first.get("normalizer").is_some() => Some(lines.remove(0).1["normalizer"].take()),
        _ => None,
    };
    let mut normalizer = configured(config.as_ref());
    let ending = match config.as_ref().and_then(|c| c.get("ending")).and_then(Value::as_str) {
        None | Some("completed") => TurnEnding::Completed,
        Some("cancelled") => TurnEnding::Cancelled,
        Some("interrupted") => TurnEnding::Interrupted,
        Some("failed") => TurnEnding::Failed,
        Some(other) => panic!("{name}.ndjson: unknown ending `{other}`"),
    };
    let mut events = Vec::new();
    for (line, value) in lines {
        if let Some(permission) = value.get("permission") {
            let tool_call_id = permission["toolCall"]["toolCallId"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}.ndjson line {line}: a permission without toolCall.toolCallId"));
            events.push(serde_json::json!({"permissionRequested": {
                "toolCallId": tool_call_id,
                "toolCallKnown": normalizer.knows_tool_call(tool_call_id),
            }}));
            continue;
        }
        let produced = if let Some(extension) = value.get("extension") {
            let method = extension["method"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}.ndjson line {line}: extension without a method"));
            normalizer.on_extension(method, extension.get("params").unwrap_or(&Value::Null))
        } else if value.get("normalizer").is_some() {
            panic!("{name}.ndjson line {line}: the normalizer is configured on the first line only");
        } else if value.get("update").is_some() && value.get("sessionUpdate").is_none() {
            normalizer.on_session_update(&value)
        } else {
            normalizer.on_update(&value)
        };
        events.extend(
            produced
                .iter()
                .map(|event| serde_json::to_value(event).expect("events serialize")),
        );
    }
    events.extend(
        normalizer
            .finish(ending)
            .iter()
            .map(|event| serde_json::to_value(event).expect("events serialize")),
    );
    Value::Array(events)
}

fn first_difference(actual: &Value, expected: &Value) -> String {
    let (Some(actual), Some(expected)) = (actual.as_array(), expected.as_array()) else {
        return "the expected file is not a JSON array".into();
    };
    for (index, (a, e)) in actual.iter().zip(expected).enumerate() {
        if a != e {
            return format!("event {index} differs:\n  actual:   {a}\n  expected: {e}");
        }
    }
    format!("{} events, {} expected", actual.len(), expected.len())
}

#[test]
fn every_transcript_replays_to_its_expected_events() {
    let update = std::env::var("UPDATE_TRANSCRIPTS").is_ok_and(|v| v == "1");
    let dir = transcripts_dir();
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".ndjson").map(str::to_owned)
        })
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no transcripts in {}", dir.display());

    let mut failures = Vec::new();
    for name in &names {
        let text = fs::read_to_string(dir.join(format!("{name}.ndjson"))).unwrap();
        let actual = replay(name, &text);
        let expected_path = dir.join(format!("{name}.expected.json"));
        if update {
            let pretty = serde_json::to_string_pretty(&actual).unwrap() + "\n";
            fs::write(&expected_path, pretty).unwrap();
            continue;
        }
        let Ok(expected_text) = fs::read_to_string(&expected_path) else {
            failures.push(format!(
                "{name}: no {name}.expected.json (regenerate deliberately with UPDATE_TRANSCRIPTS=1)"
            ));
            continue;
        };
        let expected: Value = match serde_json::from_str(&expected_text) {
            Ok(expected) => expected,
            Err(e) => {
                failures.push(format!("{name}: {name}.expected.json is not JSON: {e}"));
                continue;
            }
        };
        if actual != expected {
            failures.push(format!("{name}: {}", first_difference(&actual, &expected)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} transcript(s) differ from their expected events (if the change is intended, rerun with \
         UPDATE_TRANSCRIPTS=1 and review the diff):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_expected_file_has_its_transcript() {
    let dir = transcripts_dir();
    for entry in fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(stem) = name.strip_suffix(".expected.json") {
            assert!(
                dir.join(format!("{stem}.ndjson")).exists(),
                "{name} has no {stem}.ndjson"
            );
        }
    }
}

/// The scenarios the transcripts must keep covering.
#[test]
fn the_required_scenarios_have_transcripts() {
    let dir = transcripts_dir();
    for name in [
        "tool_diffs_and_locations",
        "tool_call_resent",
        "tool_failing_exit_code",
        "todos_merge_replace_cancelled",
        "acp_plan_entries",
        "cursor_task",
        "session_metadata",
        "unknown_update_kinds",
        "terminal_escapes",
        "usage_unavailable",
        "usage_reported",
        "children_interleaved",
        "children_grandchild",
        "children_same_tool_call_id",
        "children_suppressed",
        "children_between_turns",
        "children_resumed",
        "children_cancelled",
        "children_acp_subagent_update",
    ] {
        assert!(dir.join(format!("{name}.ndjson")).exists(), "{name}.ndjson");
        assert!(
            dir.join(format!("{name}.expected.json")).exists(),
            "{name}.expected.json"
        );
    }
}

#[test]
fn the_child_transcript_doc_example_is_a_real_replay() {
    let doc_path = transcripts_dir().join("../../docs/child-transcripts.md");
    let doc = fs::read_to_string(&doc_path).unwrap_or_else(|e| panic!("{}: {e}", doc_path.display()));
    let block = doc
        .split("```jsonl\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("docs/child-transcripts.md has a ```jsonl block");
    let shown: Vec<Value> = block
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let expected_text = fs::read_to_string(transcripts_dir().join("children_grandchild.expected.json")).unwrap();
    let expected: Vec<Value> = serde_json::from_str(&expected_text).unwrap();
    assert_eq!(
        shown, expected,
        "the doc's example is not what children_grandchild replays to: regenerate it from the expected file"
    );
}
