//! The declarative scenario format (see README.md) and its validation.
//!
//! Scenario files are parsed strictly: unknown top-level fields, unknown step
//! keys and wrongly typed values are rejected at startup, so a typo in a test
//! fixture fails loudly instead of silently changing the script.

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::{Map, Value};

pub use crate::step::{Step, UpdateSession};
use crate::step::{check_error_object, method_of, parse_step};

/// Session id used when the scenario does not name one.
pub const DEFAULT_SESSION_ID: &str = "fake-session-1";

/// A whole scenario file.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub session_id: String,
    pub initialize_delay_ms: u64,
    /// Answer `initialize` with this JSON-RPC error (e.g. `-32000`) instead.
    pub initialize_error: Option<Value>,
    /// Exit with this code at start-up, before reading anything (a crash on start).
    pub startup_exit_code: Option<i32>,
    /// Written to stderr before a `startup_exit_code` exit.
    pub startup_stderr: Option<String>,
    /// How long `session/new` takes (the agent's own session set-up time).
    pub session_new_delay_ms: u64,
    pub session_new_error: Option<Value>,
    /// Config option values reported in place of the real ones (a build that silently
    /// substitutes), e.g. `{"model": "default[]"}`.
    pub config_echo_override: Map<String, Value>,
    /// An older build: no `configOptions` in `session/new`, `-32601` for
    /// `session/set_config_option` (only `session/set_model`).
    pub config_options_unsupported: bool,
    /// `-32601` for `cursor/list_available_models` (older builds).
    pub list_models_unsupported: bool,
    /// Models `cursor/list_available_models` lists after the catalog's, as given (e.g. one
    /// whose name is a `$repeat` of megabytes, for an answer past a transport's bound).
    pub extra_models: Vec<Value>,
    /// Answer `session/set_mode` with this JSON-RPC error, whatever the mode (a build
    /// that switches the model, then refuses the mode).
    pub set_mode_error: Option<Value>,
    /// Not signed in: `session/load`, `session/list` and `cursor/list_available_models`
    /// answer `-32000`, as Cursor does without a credential (`session/new` too, with
    /// `session_new_error`).
    pub unauthenticated: bool,
    /// A standard ACP agent that needs `authenticate`: advertise only this method in
    /// `authMethods` and answer `session/new` `-32000` until `authenticate` with it.
    pub requires_authenticate: Option<String>,
    /// `authMethods` exactly as given, in place of the generated list (a peer's own, e.g.
    /// codex-acp's `env_var` methods with their `vars`).
    pub auth_methods: Option<Value>,
    /// Like the ACP SDK's example agent: no `modes` in `session/new` (and no mode config
    /// option), yet `session/set_mode` answered `{}` whatever the mode.
    pub no_modes: bool,
    /// The agent's own mode ids, the first current at start (default Cursor's
    /// `agent`, `plan`, `ask`).
    pub modes: Option<Vec<String>>,
    /// An agent whose other modes approve tools by themselves: a `session/request_permission`
    /// request step is skipped (the tool runs) unless the current mode is this one.
    pub permission_only_in_mode: Option<String>,
    /// Advertise `promptCapabilities.image: false` (Cursor advertises images).
    pub no_image_prompts: bool,
    /// Advertise `mcpCapabilities.sse: false` (Cursor advertises http and sse).
    pub no_sse_mcp: bool,
    /// Answer `initialize`, then never answer another request (alive but unresponsive).
    pub silent_after_initialize: bool,
    /// Requests with these methods are read and never answered (alive, yet silent to them).
    pub unanswered_methods: Vec<String>,
    /// Once `session/new` is answered, never read stdin again, fd 0 left open: the
    /// client's writes block once the pipe is full, as with an agent whose event loop hangs.
    pub stops_reading_stdin_after_session_new: bool,
    /// The `update` objects `session/load` replays (with the loaded session's id) before
    /// it answers, as Cursor replays a session's history.
    pub load_history: Vec<Value>,
    pub ignore_sigterm: bool,
    pub ignore_stdin_eof: bool,
    /// Set for a replayed normalizer transcript: this path in any string of an update or
    /// request is the workspace, replaced by the `cwd` of `session/new` when played.
    pub workspace_placeholder: Option<String>,
    pub turns: Vec<Vec<Step>>,
}

/// The raw file shape; turns stay raw JSON so steps get hand-written errors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    /// `{unique}` in it becomes 16 random hex digits: sessions unique across processes (as
    /// Cursor's are) where several agents of one tenant open sessions side by side — a
    /// process id would not do, every agent being PID 2 of a namespace of its own.
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    initialize_delay_ms: u64,
    #[serde(default)]
    initialize_error: Option<Value>,
    #[serde(default)]
    startup_exit_code: Option<i32>,
    #[serde(default)]
    startup_stderr: Option<String>,
    #[serde(default)]
    session_new_delay_ms: u64,
    #[serde(default)]
    session_new_error: Option<Value>,
    #[serde(default)]
    config_echo_override: Map<String, Value>,
    #[serde(default)]
    config_options_unsupported: bool,
    #[serde(default)]
    list_models_unsupported: bool,
    #[serde(default)]
    extra_models: Vec<Value>,
    #[serde(default)]
    set_mode_error: Option<Value>,
    #[serde(default)]
    unauthenticated: bool,
    #[serde(default)]
    requires_authenticate: Option<String>,
    #[serde(default)]
    auth_methods: Option<Value>,
    #[serde(default)]
    no_modes: bool,
    #[serde(default)]
    modes: Option<Vec<String>>,
    #[serde(default)]
    permission_only_in_mode: Option<String>,
    #[serde(default)]
    no_image_prompts: bool,
    #[serde(default)]
    no_sse_mcp: bool,
    #[serde(default)]
    silent_after_initialize: bool,
    #[serde(default)]
    unanswered_methods: Vec<String>,
    #[serde(default)]
    stops_reading_stdin_after_session_new: bool,
    #[serde(default)]
    load_history: Vec<Value>,
    #[serde(default)]
    ignore_sigterm: bool,
    #[serde(default)]
    ignore_stdin_eof: bool,
    #[serde(default)]
    turns: Vec<Vec<Value>>,
}

/// 16 hex digits from the kernel's random source.
fn unique_hex() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .expect("/dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Scenario {
    /// Whether a request for `method` is read and never answered.
    pub fn leaves_unanswered(&self, method: &str) -> bool {
        (self.silent_after_initialize && method != "initialize") || self.unanswered_methods.iter().any(|m| m == method)
    }

    /// Reads and validates a scenario file.
    pub fn load(path: &str) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read scenario file {path}"))?;
        Self::parse(&text).with_context(|| format!("invalid scenario file {path}"))
    }

    /// Parses and validates scenario JSON text.
    pub fn parse(text: &str) -> Result<Self> {
        let mut value: Value = serde_json::from_str(text)?;
        expand_repeats(&mut value)?;
        let raw: RawScenario = serde_json::from_value(value)?;
        if let Some(err) = &raw.session_new_error
            && !err.is_null()
        {
            check_error_object(err).context("session_new_error")?;
        }
        if let Some(err) = &raw.initialize_error
            && !err.is_null()
        {
            check_error_object(err).context("initialize_error")?;
        }
        if let Some(err) = &raw.set_mode_error
            && !err.is_null()
        {
            check_error_object(err).context("set_mode_error")?;
        }
        let mut turns = Vec::with_capacity(raw.turns.len());
        for (t, steps) in raw.turns.iter().enumerate() {
            let mut parsed = Vec::with_capacity(steps.len());
            for (s, step) in steps.iter().enumerate() {
                parsed.push(parse_step(step).with_context(|| format!("turns[{t}][{s}]"))?);
            }
            turns.push(parsed);
        }
        Ok(Scenario {
            session_id: raw
                .session_id
                .map(|id| id.replace("{unique}", &unique_hex()))
                .unwrap_or_else(|| DEFAULT_SESSION_ID.to_string()),
            initialize_delay_ms: raw.initialize_delay_ms,
            initialize_error: raw.initialize_error.filter(|v| !v.is_null()),
            startup_exit_code: raw.startup_exit_code,
            startup_stderr: raw.startup_stderr,
            session_new_delay_ms: raw.session_new_delay_ms,
            session_new_error: raw.session_new_error.filter(|v| !v.is_null()),
            config_echo_override: raw.config_echo_override,
            config_options_unsupported: raw.config_options_unsupported,
            list_models_unsupported: raw.list_models_unsupported,
            extra_models: raw.extra_models,
            set_mode_error: raw.set_mode_error.filter(|v| !v.is_null()),
            unauthenticated: raw.unauthenticated,
            requires_authenticate: raw.requires_authenticate,
            auth_methods: raw.auth_methods,
            no_modes: raw.no_modes,
            modes: raw.modes,
            permission_only_in_mode: raw.permission_only_in_mode,
            no_image_prompts: raw.no_image_prompts,
            no_sse_mcp: raw.no_sse_mcp,
            silent_after_initialize: raw.silent_after_initialize,
            unanswered_methods: raw.unanswered_methods,
            stops_reading_stdin_after_session_new: raw.stops_reading_stdin_after_session_new,
            load_history: raw.load_history,
            ignore_sigterm: raw.ignore_sigterm,
            ignore_stdin_eof: raw.ignore_stdin_eof,
            workspace_placeholder: None,
            turns,
        })
    }

    /// Reads a normalizer transcript (`fixtures/transcripts/*.ndjson`) as a one-turn
    /// scenario, so the service replays the very fixture the normalizer's tests check.
    pub fn load_transcript(path: &str) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read transcript {path}"))?;
        Self::from_transcript(&text).with_context(|| format!("invalid transcript {path}"))
    }

    /// One turn playing each line in order, then `end_turn`: an `{"extension": {method,
    /// params}}` line is a `cursor/*` request, `{"sessionId", "update"}` a `session/update`
    /// on that session and any other line a bare update on the root session (`rootSession` of the
    /// optional `{"normalizer": {…}}` first line, else the default). Transcripts that
    /// need a normalizer the service cannot reproduce (`betweenTurns`, an `ending` other
    /// than `completed`) are refused.
    pub fn from_transcript(text: &str) -> Result<Self> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .peekable();
        let mut session_id = DEFAULT_SESSION_ID.to_owned();
        if let Some((_, first)) = lines.peek() {
            let first: Value = serde_json::from_str(first).context("line 1")?;
            if let Some(config) = first.get("normalizer") {
                lines.next();
                if config.get("betweenTurns").and_then(Value::as_bool) == Some(true) {
                    bail!("a between-turns transcript has no turn to play");
                }
                if let Some(ending) = config
                    .get("ending")
                    .and_then(Value::as_str)
                    .filter(|e| *e != "completed")
                {
                    bail!("a transcript ending `{ending}` needs the test to end the turn, not the agent");
                }
                if let Some(root) = config.get("rootSession").and_then(Value::as_str) {
                    session_id = root.to_owned();
                }
            }
        }
        let mut steps = Vec::new();
        for (index, line) in lines {
            let value: Value = serde_json::from_str(line).with_context(|| format!("line {}", index + 1))?;
            steps.push(transcript_step(value, &session_id).with_context(|| format!("line {}", index + 1))?);
        }
        steps.push(Step::StopReason("end_turn".to_owned()));
        Ok(Scenario {
            session_id,
            workspace_placeholder: Some(TRANSCRIPT_WORKSPACE.to_owned()),
            turns: vec![steps],
            ..Self::parse("{}")?
        })
    }
}

/// The workspace path normalizer transcripts are written against (their tests configure
/// the normalizer with it).
pub const TRANSCRIPT_WORKSPACE: &str = "/work/repo";

fn transcript_step(mut value: Value, root: &str) -> Result<Step> {
    if let Some(extension) = value.get_mut("extension") {
        return Ok(Step::Request {
            method: method_of(
                extension
                    .as_object()
                    .ok_or_else(|| anyhow!("extension must be an object"))?,
            )?,
            params: extension.get_mut("params").map(Value::take),
            id: None,
            expect: None,
            no_wait: false,
        });
    }
    // Anything else that is not `{sessionId, update}` is a bare update (tag or not: a
    // malformed one is part of what transcripts test).
    if value.get("sessionUpdate").is_some() || value.get("update").is_none() {
        return Ok(Step::Update {
            update: value,
            session: UpdateSession::Default,
        });
    }
    let update = value["update"].take();
    let session = match value.get("sessionId") {
        None | Some(Value::Null) => UpdateSession::Omit,
        Some(Value::String(id)) if id == root => UpdateSession::Default,
        Some(Value::String(id)) => UpdateSession::Id(id.clone()),
        Some(other) => bail!("sessionId must be a string, not {other}"),
    };
    Ok(Step::Update { update, session })
}

/// Largest string a `{"$repeat": [text, count]}` may expand to.
const MAX_REPEAT_BYTES: usize = 64 * 1024 * 1024;

/// Replaces every `{"$repeat": [text, count]}` object with `text` repeated `count`
/// times, so scenarios can send multi-hundred-KiB payloads without storing them.
fn expand_repeats(value: &mut Value) -> Result<()> {
    match value {
        Value::Object(map) if map.len() == 1 && map.contains_key("$repeat") => {
            let spec = &map["$repeat"];
            let (Some(text), Some(count)) = (spec[0].as_str(), spec[1].as_u64()) else {
                bail!("$repeat takes [text, count]");
            };
            let count = usize::try_from(count)?;
            if text.len().saturating_mul(count) > MAX_REPEAT_BYTES {
                bail!("$repeat would exceed {MAX_REPEAT_BYTES} bytes");
            }
            *value = Value::String(text.repeat(count));
        }
        Value::Object(map) => {
            for v in map.values_mut() {
                expand_repeats(v)?;
            }
        }
        Value::Array(items) => {
            for v in items {
                expand_repeats(v)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
#[path = "scenario_tests.rs"]
mod tests;
