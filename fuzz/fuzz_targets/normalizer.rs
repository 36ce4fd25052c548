//! Arbitrary bytes into the activity crate's `TurnNormalizer`, then `finish()`; every
//! event is checked against the bounds in `services/activity/src/bounds.rs` and the
//! lifecycle rules by the same checker the property tests use
//! (`services/activity/tests/support/event_bounds.rs`).
//!
//! The input is read as NDJSON in the transcript format of `fixtures/transcripts/`
//! (so each fixture file is a seed as it is). A line that is not JSON is skipped. A JSON
//! line is one of:
//! - `{"normalizer": {"rootSession": …, "betweenTurns": true}}` as the first line:
//!   configures the normalizer (root session, spawns refused);
//! - a JSON-RPC message `{"method": …, "params": …}`: `session/update` params go to
//!   `on_session_update`, any other method to `on_extension` (`cursor/update_todos`,
//!   `cursor/task`, unknown ones);
//! - `{"extension": {"method": …, "params": …}}`: `on_extension`;
//! - `{"sessionId": …, "update": …}`: `on_session_update`;
//! - anything else: the `update` object of a root `session/update` (`on_update`).
//!
//! Bounds are far beyond fuzzer-sized inputs, so a string value `"@@x<N>:<s>"` is
//! expanded to `<s>` repeated `N` times (at most 4 MiB per string): a few bytes of
//! input reach 64 KiB of text or output.

#![no_main]

#[path = "../../services/activity/tests/support/event_bounds.rs"]
mod event_bounds;

use cursor_runner_activity::{TurnEnding, TurnNormalizer};
use event_bounds::EventChecker;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const TURN_ID: &str = "t1";
const WORKSPACE: &str = "/work/repo";
const MAX_EXPANDED_BYTES: usize = 4 * 1024 * 1024;

/// Expands `"@@x<N>:<s>"` strings in place, within a total budget per input.
fn expand(value: &mut Value, budget: &mut usize) {
    match value {
        Value::String(text) => {
            let Some((count, unit)) = text
                .strip_prefix("@@x")
                .and_then(|rest| rest.split_once(':'))
                .and_then(|(n, unit)| Some((n.parse::<usize>().ok()?, unit)))
            else {
                return;
            };
            let bytes = count.saturating_mul(unit.len());
            if unit.is_empty() || bytes > *budget {
                return;
            }
            *budget -= bytes;
            *text = unit.repeat(count);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| expand(v, budget)),
        Value::Object(map) => map.values_mut().for_each(|v| expand(v, budget)),
        _ => {}
    }
}

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

fuzz_target!(|data: &[u8]| {
    let mut budget = MAX_EXPANDED_BYTES;
    let mut lines: Vec<Value> = data
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .collect();
    for line in &mut lines {
        expand(line, &mut budget);
    }
    let config = match lines.first() {
        Some(first) if first.get("normalizer").is_some() => Some(lines.remove(0)["normalizer"].take()),
        _ => None,
    };
    let mut normalizer = configured(config.as_ref());
    // The way the turn ends, as transcripts say it; unknown spellings end it normally.
    let ending = match config.as_ref().and_then(|c| c.get("ending")).and_then(Value::as_str) {
        Some("cancelled") => TurnEnding::Cancelled,
        Some("interrupted") => TurnEnding::Interrupted,
        Some("failed") => TurnEnding::Failed,
        _ => TurnEnding::Completed,
    };
    let mut checker = EventChecker::new();
    let null = Value::Null;
    for (index, line) in lines.iter().enumerate() {
        let events = if let Some(method) = line.get("method").and_then(Value::as_str) {
            let params = line.get("params").unwrap_or(&null);
            match method {
                "session/update" => normalizer.on_session_update(params),
                other => normalizer.on_extension(other, params),
            }
        } else if let Some(extension) = line.get("extension") {
            let method = extension.get("method").and_then(Value::as_str).unwrap_or("");
            normalizer.on_extension(method, extension.get("params").unwrap_or(&null))
        } else if line.get("update").is_some() && line.get("sessionUpdate").is_none() {
            normalizer.on_session_update(line)
        } else {
            normalizer.on_update(line)
        };
        if let Err(e) = checker.check_all(&events) {
            panic!("line {}: {e}", index + 1);
        }
    }
    let settled = normalizer.finish(ending);
    if let Err(e) = checker.check_finish(&settled) {
        panic!("finish(): {e}");
    }
    assert!(normalizer.finish(ending).is_empty(), "a second finish() yields events");
});
