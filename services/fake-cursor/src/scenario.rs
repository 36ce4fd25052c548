//! The declarative scenario format (see README.md) and its validation.
//!
//! Scenario files are parsed strictly: unknown top-level fields, unknown step
//! keys and wrongly typed values are rejected at startup, so a typo in a test
//! fixture fails loudly instead of silently changing the script.

use std::str::FromStr;

use anyhow::{Context, Result, anyhow, bail};
use nix::sys::signal::Signal;
use serde::Deserialize;
use serde_json::{Map, Value};

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
    /// Not signed in: `session/load`, `session/list` and `cursor/list_available_models`
    /// answer `-32000`, as Cursor does without a credential (`session/new` too, with
    /// `session_new_error`).
    pub unauthenticated: bool,
    /// A standard ACP agent that needs `authenticate`: advertise only this method in
    /// `authMethods` and answer `session/new` `-32000` until `authenticate` with it.
    pub requires_authenticate: Option<String>,
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
    unauthenticated: bool,
    #[serde(default)]
    requires_authenticate: Option<String>,
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
    load_history: Vec<Value>,
    #[serde(default)]
    ignore_sigterm: bool,
    #[serde(default)]
    ignore_stdin_eof: bool,
    #[serde(default)]
    turns: Vec<Vec<Value>>,
}

/// Where an `update` step sends its `session/update`.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateSession {
    /// The scenario's own session id.
    Default,
    /// An explicit (e.g. child or foreign) session id.
    Id(String),
    /// `"session_id": null`: omit `sessionId` from the params entirely.
    Omit,
}

/// One step of a turn script.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Update {
        update: Value,
        session: UpdateSession,
    },
    Notify {
        method: String,
        params: Option<Value>,
    },
    Request {
        method: String,
        params: Option<Value>,
        id: Option<Value>,
        expect: Option<Value>,
        no_wait: bool,
    },
    Await {
        id: Value,
        expect: Option<Value>,
    },
    Raw {
        text: String,
        newline: bool,
    },
    SleepMs(u64),
    WaitForCancel {
        timeout_ms: Option<u64>,
    },
    StopReason(String),
    PromptError(Value),
    Exit {
        code: i32,
        stderr: Option<String>,
    },
    Crash,
    KillSelf(Signal),
    /// Closes stdin (the client's writes then fail) and keeps running, stdout open.
    CloseStdin,
    Hang,
    Flood {
        count: u64,
        text: String,
    },
    SpawnSleeper {
        setsid: bool,
        ignore_sigterm: bool,
        inherit_stdio: bool,
    },
    /// Reports the process's environment as a `fake/env` notification and, when a
    /// file is named (relative to the working directory, i.e. the workspace), also
    /// writes the report there so a test can read it without the client's help.
    EnvReport {
        file: Option<String>,
    },
    /// Plays a hostile agent: tries to read `read` paths, to create a file in each of
    /// `write_into`, to read every other fake agent's `/proc/<pid>/environ` and the
    /// `/proc/<pid>/cmdline` of the pid written in `cmdline_of` (a file), and lists the
    /// pids `/proc` shows, and tries to speak to the service's own API at the address
    /// written in `api_address_file`; writes what happened (and its uid/gid) as JSON to
    /// `file` (paths relative to the session cwd).
    AccessReport {
        file: String,
        read: Vec<String>,
        write_into: Vec<String>,
        cmdline_of: Option<String>,
        api_address_file: Option<String>,
    },
    /// Says the value of an environment variable back: in a message chunk and in a tool
    /// call's raw input and output (an agent echoing a credential it was given).
    EchoEnv {
        name: String,
    },
}

/// The keys that select a step kind; exactly one must be present.
const PRIMARY_KEYS: &[&str] = &[
    "update",
    "notify",
    "request",
    "await",
    "raw",
    "raw_no_newline",
    "sleep_ms",
    "wait_for_cancel",
    "stop_reason",
    "prompt_error",
    "exit",
    "crash",
    "kill_self",
    "close_stdin",
    "hang",
    "flood",
    "spawn_sleeper",
    "env_report",
    "echo_env",
    "access_report",
];

impl Scenario {
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
        let mut turns = Vec::with_capacity(raw.turns.len());
        for (t, steps) in raw.turns.iter().enumerate() {
            let mut parsed = Vec::with_capacity(steps.len());
            for (s, step) in steps.iter().enumerate() {
                parsed.push(parse_step(step).with_context(|| format!("turns[{t}][{s}]"))?);
            }
            turns.push(parsed);
        }
        Ok(Scenario {
            session_id: raw.session_id.unwrap_or_else(|| DEFAULT_SESSION_ID.to_string()),
            initialize_delay_ms: raw.initialize_delay_ms,
            initialize_error: raw.initialize_error.filter(|v| !v.is_null()),
            startup_exit_code: raw.startup_exit_code,
            startup_stderr: raw.startup_stderr,
            session_new_delay_ms: raw.session_new_delay_ms,
            session_new_error: raw.session_new_error.filter(|v| !v.is_null()),
            config_echo_override: raw.config_echo_override,
            config_options_unsupported: raw.config_options_unsupported,
            list_models_unsupported: raw.list_models_unsupported,
            unauthenticated: raw.unauthenticated,
            requires_authenticate: raw.requires_authenticate,
            modes: raw.modes,
            permission_only_in_mode: raw.permission_only_in_mode,
            no_image_prompts: raw.no_image_prompts,
            no_sse_mcp: raw.no_sse_mcp,
            silent_after_initialize: raw.silent_after_initialize,
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

/// A JSON-RPC error object must have an integer `code` and a string `message`.
fn check_error_object(v: &Value) -> Result<()> {
    let obj = v
        .as_object()
        .ok_or_else(|| anyhow!("error must be an object {{code, message, data?}}"))?;
    if !obj.get("code").is_some_and(|c| c.is_i64()) {
        bail!("error.code must be an integer");
    }
    if !obj.get("message").is_some_and(Value::is_string) {
        bail!("error.message must be a string");
    }
    Ok(())
}

/// Request ids are integers (including 0) or strings.
fn check_id(v: &Value) -> Result<()> {
    if v.is_i64() || v.is_u64() || v.is_string() {
        Ok(())
    } else {
        bail!("id must be an integer or a string, got {v}")
    }
}

fn parse_step(v: &Value) -> Result<Step> {
    let obj = v.as_object().ok_or_else(|| anyhow!("a step must be a JSON object"))?;
    let primaries: Vec<&str> = PRIMARY_KEYS.iter().copied().filter(|k| obj.contains_key(*k)).collect();
    let key = match primaries.as_slice() {
        [one] => *one,
        [] => bail!("step has none of the known keys ({}): {v}", PRIMARY_KEYS.join(", ")),
        many => bail!("step has more than one step key ({}): {v}", many.join(", ")),
    };
    let val = &obj[key];
    let step = match key {
        "update" => {
            allow_keys(obj, key, &["session_id"])?;
            let session = match obj.get("session_id") {
                None => UpdateSession::Default,
                Some(Value::Null) => UpdateSession::Omit,
                Some(Value::String(s)) => UpdateSession::Id(s.clone()),
                Some(other) => bail!("session_id must be a string or null, got {other}"),
            };
            Step::Update {
                update: val.clone(),
                session,
            }
        }
        "notify" => {
            allow_keys(obj, key, &[])?;
            let inner = val
                .as_object()
                .ok_or_else(|| anyhow!("notify must be an object {{method, params?}}"))?;
            allow_keys(inner, "", &["method", "params"])?;
            Step::Notify {
                method: method_of(inner)?,
                params: inner.get("params").cloned(),
            }
        }
        "request" => {
            allow_keys(obj, key, &["expect", "no_wait"])?;
            let inner = val
                .as_object()
                .ok_or_else(|| anyhow!("request must be an object {{method, params?, id?}}"))?;
            allow_keys(inner, "", &["method", "params", "id"])?;
            let id = inner.get("id").cloned();
            if let Some(id) = &id {
                check_id(id)?;
            }
            let no_wait = opt_bool(obj, "no_wait")?.unwrap_or(false);
            if no_wait && obj.contains_key("expect") {
                bail!("a no_wait request cannot have expect; put it on the later await step");
            }
            Step::Request {
                method: method_of(inner)?,
                params: inner.get("params").cloned(),
                id,
                expect: obj.get("expect").cloned(),
                no_wait,
            }
        }
        "await" => {
            allow_keys(obj, key, &["expect"])?;
            check_id(val)?;
            Step::Await {
                id: val.clone(),
                expect: obj.get("expect").cloned(),
            }
        }
        "raw" | "raw_no_newline" => {
            allow_keys(obj, key, &[])?;
            Step::Raw {
                text: val
                    .as_str()
                    .ok_or_else(|| anyhow!("{key} must be a string"))?
                    .to_string(),
                newline: key == "raw",
            }
        }
        "sleep_ms" => {
            allow_keys(obj, key, &[])?;
            Step::SleepMs(as_u64(val, key)?)
        }
        "wait_for_cancel" => {
            allow_keys(obj, key, &["timeout_ms"])?;
            require_true(val, key)?;
            let timeout_ms = match obj.get("timeout_ms") {
                None | Some(Value::Null) => None,
                Some(t) => Some(as_u64(t, "timeout_ms")?),
            };
            Step::WaitForCancel { timeout_ms }
        }
        "stop_reason" => {
            allow_keys(obj, key, &[])?;
            Step::StopReason(
                val.as_str()
                    .ok_or_else(|| anyhow!("stop_reason must be a string"))?
                    .to_string(),
            )
        }
        "prompt_error" => {
            allow_keys(obj, key, &[])?;
            check_error_object(val)?;
            Step::PromptError(val.clone())
        }
        "exit" => {
            allow_keys(obj, key, &["stderr"])?;
            let code = val
                .as_i64()
                .and_then(|c| i32::try_from(c).ok())
                .ok_or_else(|| anyhow!("exit must be an integer exit code"))?;
            let stderr = match obj.get("stderr") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => bail!("stderr must be a string"),
            };
            Step::Exit { code, stderr }
        }
        "crash" => {
            allow_keys(obj, key, &[])?;
            require_true(val, key)?;
            Step::Crash
        }
        "kill_self" => {
            allow_keys(obj, key, &[])?;
            Step::KillSelf(parse_signal(val)?)
        }
        "close_stdin" => {
            allow_keys(obj, key, &[])?;
            require_true(val, key)?;
            Step::CloseStdin
        }
        "hang" => {
            allow_keys(obj, key, &[])?;
            require_true(val, key)?;
            Step::Hang
        }
        "flood" => {
            allow_keys(obj, key, &[])?;
            let inner = val
                .as_object()
                .ok_or_else(|| anyhow!("flood must be an object {{count, text}}"))?;
            allow_keys(inner, "", &["count", "text"])?;
            let count = as_u64(
                inner.get("count").ok_or_else(|| anyhow!("flood.count is required"))?,
                "flood.count",
            )?;
            let text = match inner.get("text") {
                None => "x".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(_) => bail!("flood.text must be a string"),
            };
            Step::Flood { count, text }
        }
        "spawn_sleeper" => {
            allow_keys(obj, key, &[])?;
            let inner = match val {
                Value::Object(m) => m.clone(),
                Value::Bool(true) => Map::new(),
                _ => bail!("spawn_sleeper must be an object {{setsid?, ignore_sigterm?, inherit_stdio?}}"),
            };
            allow_keys(&inner, "", &["setsid", "ignore_sigterm", "inherit_stdio"])?;
            Step::SpawnSleeper {
                setsid: opt_bool(&inner, "setsid")?.unwrap_or(false),
                ignore_sigterm: opt_bool(&inner, "ignore_sigterm")?.unwrap_or(false),
                inherit_stdio: opt_bool(&inner, "inherit_stdio")?.unwrap_or(false),
            }
        }
        "env_report" => {
            allow_keys(obj, key, &[])?;
            match val {
                Value::String(file) => Step::EnvReport {
                    file: Some(file.clone()),
                },
                _ => {
                    require_true(val, key)?;
                    Step::EnvReport { file: None }
                }
            }
        }
        "access_report" => {
            allow_keys(obj, key, &[])?;
            let inner = val
                .as_object()
                .ok_or_else(|| anyhow!("access_report must be an object {{file, read?, write_into?, cmdline_of?}}"))?;
            allow_keys(
                inner,
                "",
                &["file", "read", "write_into", "cmdline_of", "api_address_file"],
            )?;
            let strings = |name: &str| -> Result<Vec<String>> {
                match inner.get(name) {
                    None => Ok(Vec::new()),
                    Some(Value::Array(items)) => items
                        .iter()
                        .map(|v| {
                            v.as_str()
                                .map(str::to_owned)
                                .ok_or_else(|| anyhow!("{name} holds strings"))
                        })
                        .collect(),
                    Some(_) => bail!("{name} must be an array of paths"),
                }
            };
            Step::AccessReport {
                file: inner
                    .get("file")
                    .and_then(Value::as_str)
                    .ok_or_else(|| anyhow!("access_report.file is required"))?
                    .to_owned(),
                read: strings("read")?,
                write_into: strings("write_into")?,
                cmdline_of: match inner.get("cmdline_of") {
                    None => None,
                    Some(Value::String(file)) => Some(file.clone()),
                    Some(_) => bail!("access_report.cmdline_of must be a file name"),
                },
                api_address_file: match inner.get("api_address_file") {
                    None => None,
                    Some(Value::String(file)) => Some(file.clone()),
                    Some(_) => bail!("access_report.api_address_file must be a file name"),
                },
            }
        }
        "echo_env" => {
            allow_keys(obj, key, &[])?;
            Step::EchoEnv {
                name: val
                    .as_str()
                    .ok_or_else(|| anyhow!("echo_env must be a variable name"))?
                    .to_owned(),
            }
        }
        other => unreachable!("unhandled primary key {other}"),
    };
    Ok(step)
}

/// Rejects keys other than `primary`, `extra` and the free-text `comment`.
fn allow_keys(obj: &Map<String, Value>, primary: &str, extra: &[&str]) -> Result<()> {
    for k in obj.keys() {
        if k != primary && k != "comment" && !extra.contains(&k.as_str()) {
            if primary.is_empty() {
                bail!("unknown key {k:?} (allowed: {})", extra.join(", "));
            }
            bail!("unknown key {k:?} next to {primary:?}");
        }
    }
    Ok(())
}

fn method_of(obj: &Map<String, Value>) -> Result<String> {
    obj.get("method")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| anyhow!("method (a string) is required"))
}

fn opt_bool(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => bail!("{key} must be a boolean"),
    }
}

fn as_u64(v: &Value, what: &str) -> Result<u64> {
    v.as_u64()
        .ok_or_else(|| anyhow!("{what} must be a non-negative integer, got {v}"))
}

fn require_true(v: &Value, key: &str) -> Result<()> {
    if v == &Value::Bool(true) {
        Ok(())
    } else {
        bail!("{key} must be true")
    }
}

/// Accepts `"SIGKILL"`, `"KILL"` or a signal number.
fn parse_signal(v: &Value) -> Result<Signal> {
    match v {
        Value::String(s) => {
            let name = s.trim().to_ascii_uppercase();
            let name = if name.starts_with("SIG") {
                name
            } else {
                format!("SIG{name}")
            };
            Signal::from_str(&name).map_err(|_| anyhow!("unknown signal {s:?}"))
        }
        Value::Number(n) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .and_then(|n| Signal::try_from(n).ok())
            .ok_or_else(|| anyhow!("unknown signal number {n}")),
        _ => bail!("kill_self must be a signal name or number"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_transcript_plays_its_lines_as_one_turn_on_its_root_session_then_ends_the_turn() {
        let sc = Scenario::from_transcript(concat!(
            "{\"normalizer\":{\"rootSession\":\"sess-root\"}}\n",
            "{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"hi\"}}\n",
            "\n",
            "{\"sessionId\":\"child-1\",\"update\":{\"sessionUpdate\":\"plan\",\"entries\":[]}}\n",
            "{\"sessionId\":\"sess-root\",\"update\":{\"sessionUpdate\":\"plan\",\"entries\":[]}}\n",
            "{\"extension\":{\"method\":\"cursor/task\",\"params\":{\"toolCallId\":\"t\"}}}\n",
        ))
        .unwrap();
        assert_eq!(sc.session_id, "sess-root");
        assert_eq!(sc.workspace_placeholder.as_deref(), Some(TRANSCRIPT_WORKSPACE));
        let sessions: Vec<_> = sc.turns[0]
            .iter()
            .map(|step| match step {
                Step::Update { session, .. } => format!("{session:?}"),
                Step::Request { method, id, .. } => format!("{method} {id:?}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            sessions,
            [
                "Default",
                "Id(\"child-1\")",
                "Default",
                "cursor/task None",
                "StopReason(\"end_turn\")"
            ]
        );
    }

    #[test]
    fn a_transcript_the_agent_cannot_end_by_itself_is_refused() {
        for config in [
            r#"{"normalizer":{"betweenTurns":true}}"#,
            r#"{"normalizer":{"ending":"cancelled"}}"#,
        ] {
            assert!(Scenario::from_transcript(config).is_err(), "{config}");
        }
    }

    #[test]
    fn parses_all_step_kinds() {
        let text = json!({
            "description": "all kinds",
            "turns": [[
                {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}},
                {"update": {"sessionUpdate": "plan", "entries": []}, "session_id": "child"},
                {"update": {"sessionUpdate": "plan", "entries": []}, "session_id": null},
                {"notify": {"method": "cursor/task", "params": {}}},
                {"request": {"method": "cursor/ask_question", "params": {}, "id": 0}, "expect": {"x": 1}},
                {"request": {"method": "cursor/task", "id": "s-1"}, "no_wait": true},
                {"await": "s-1", "expect": {}},
                {"raw": "not json"},
                {"raw_no_newline": "{\"jsonrpc\""},
                {"sleep_ms": 5},
                {"wait_for_cancel": true, "timeout_ms": 100},
                {"stop_reason": "end_turn"},
                {"prompt_error": {"code": -32603, "message": "boom"}},
                {"exit": 3, "stderr": "fatal"},
                {"crash": true},
                {"kill_self": "SIGKILL"},
                {"kill_self": "term"},
                {"hang": true, "comment": "forever"},
                {"flood": {"count": 3, "text": "y"}},
                {"spawn_sleeper": {"setsid": true, "ignore_sigterm": true}},
                {"env_report": true}
            ]]
        })
        .to_string();
        let s = Scenario::parse(&text).unwrap();
        assert_eq!(s.session_id, DEFAULT_SESSION_ID);
        assert_eq!(s.turns[0].len(), 21);
        assert_eq!(
            s.turns[0][2],
            Step::Update {
                update: json!({"sessionUpdate": "plan", "entries": []}),
                session: UpdateSession::Omit
            }
        );
        assert_eq!(s.turns[0][16], Step::KillSelf(Signal::SIGTERM));
    }

    #[test]
    fn repeat_objects_expand_to_long_strings() {
        let sc = Scenario::parse(r#"{"turns":[[{"raw":{"$repeat":["ab",3]}}]]}"#).unwrap();
        assert!(matches!(&sc.turns[0][0], Step::Raw { text, .. } if text == "ababab"));
        assert!(Scenario::parse(r#"{"turns":[[{"raw":{"$repeat":["ab"]}}]]}"#).is_err());
    }

    #[test]
    fn rejects_bad_steps() {
        for bad in [
            json!({}),
            json!({"update": {}, "raw": "x"}),
            json!({"update": {}, "sesion_id": "typo"}),
            json!({"request": {"params": {}}}),
            json!({"request": {"method": "m", "id": 1.5}}),
            json!({"request": {"method": "m"}, "no_wait": true, "expect": {}}),
            json!({"await": null}),
            json!({"exit": "3"}),
            json!({"kill_self": "SIGNOPE"}),
            json!({"prompt_error": {"message": "no code"}}),
            json!({"crash": false}),
        ] {
            let text = json!({"turns": [[bad.clone()]]}).to_string();
            assert!(Scenario::parse(&text).is_err(), "accepted {bad}");
        }
        assert!(Scenario::parse(r#"{"turns": [], "typo": 1}"#).is_err());
        assert!(Scenario::parse(r#"{"session_new_error": {"code": "x"}}"#).is_err());
    }
}
