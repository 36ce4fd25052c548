//! The steps of a turn script and their strict parsing: exactly one step key, no
//! unknown keys, typed values.

use std::str::FromStr;

use anyhow::{Result, anyhow, bail};
use nix::sys::signal::Signal;
use serde_json::{Map, Value};

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
    /// `count` chunks of `text`: back to back, or one every `interval_us` (paced from the
    /// step's start, so a late chunk does not shift the ones after it); with `stamp`, each
    /// chunk's text ends with `[sent:<ns since the Unix epoch>]`, taken just before the write.
    Flood {
        count: u64,
        text: String,
        interval_us: Option<u64>,
        stamp: bool,
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
    /// Says the value of an environment variable back: in a message chunk (its text, and
    /// the name of an extra field) and in a tool call's raw input and output (an agent
    /// echoing a credential it was given).
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

/// A JSON-RPC error object must have an integer `code` and a string `message`.
pub(crate) fn check_error_object(v: &Value) -> Result<()> {
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

/// Request ids are numbers or strings, as JSON-RPC allows (one no integer holds, like
/// 1.5, tests a client that cannot serve it).
fn check_id(v: &Value) -> Result<()> {
    if v.is_number() || v.is_string() {
        Ok(())
    } else {
        bail!("id must be a number or a string, got {v}")
    }
}

pub(crate) fn parse_step(v: &Value) -> Result<Step> {
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
                .ok_or_else(|| anyhow!("flood must be an object {{count, text?, interval_us?, stamp?}}"))?;
            allow_keys(inner, "", &["count", "text", "interval_us", "stamp"])?;
            let count = as_u64(
                inner.get("count").ok_or_else(|| anyhow!("flood.count is required"))?,
                "flood.count",
            )?;
            let text = match inner.get("text") {
                None => "x".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(_) => bail!("flood.text must be a string"),
            };
            let interval_us = match inner.get("interval_us") {
                None | Some(Value::Null) => None,
                Some(v) => Some(as_u64(v, "flood.interval_us")?),
            };
            Step::Flood {
                count,
                text,
                interval_us,
                stamp: opt_bool(inner, "stamp")?.unwrap_or(false),
            }
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

pub(crate) fn method_of(obj: &Map<String, Value>) -> Result<String> {
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
