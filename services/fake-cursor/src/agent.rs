//! The protocol engine: answers the client's standard requests and plays the
//! scenario's turn scripts.
//!
//! Threading: a reader thread (`stdio`) turns stdin lines into [`Inbound`] items on an
//! mpsc channel; everything else (answering, scripts, writing stdout) runs on
//! the main thread. Whenever a script blocks (waiting for a response, for a
//! cancel, or sleeping) the main thread keeps pumping the channel, so requests
//! are still answered and `session/cancel` is still noted.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::models::SessionConfig;
use crate::probes;
use crate::scenario::{Scenario, Step, UpdateSession};
use crate::sessions::{listed_sessions, store_session, stored_session};
use crate::stdio::{Inbound, close_stdin, log, stop_reading_stdin_if, write_frame};
use crate::substitute::{env_values_in_strings, replace_in_strings, with_env_values};

/// Exit code when a response does not match a step's `expect`.
pub const EXIT_EXPECTATION_FAILED: i32 = 97;
/// The prompt currently being played.
struct Turn {
    /// The id of the client's `session/prompt` request.
    prompt_id: Value,
    /// A `session/cancel` arrived during this turn.
    cancelled: bool,
    /// The prompt has been answered (by `stop_reason` or `prompt_error`).
    answered: bool,
}

/// What a step tells the turn loop.
enum Flow {
    Continue,
    EndTurn,
}

pub struct Agent {
    sc: Scenario,
    rx: Receiver<Inbound>,
    /// stdin reached EOF (only kept running with `ignore_stdin_eof`).
    eof: bool,
    /// The next automatic id for an agent → client request.
    next_request_id: i64,
    /// Responses to our own requests, keyed by the compact JSON of their id.
    responses: HashMap<String, Value>,
    /// `session/prompt` ids waiting to be played, in arrival order.
    prompts: VecDeque<Value>,
    turn: Option<Turn>,
    /// How many prompts have started; selects `turns[k]`.
    turns_started: usize,
    /// The current session: the scenario's id for the first `session/new`, then
    /// `<id>-<n>` for the n-th (a process the runner reuses gets a new session each time).
    session_id: String,
    sessions_started: usize,
    /// The `cwd` of the last `session/new`: the workspace (the process itself runs in
    /// its private home).
    session_cwd: Option<std::path::PathBuf>,
    /// The client sent `clientCapabilities._meta.parameterizedModelPicker: true`.
    parameterized: bool,
    /// Mode, model and parameters: process-global, as Cursor's model choice is.
    config: SessionConfig,
    /// `authenticate` arrived with the scenario's `requires_authenticate` method.
    authenticated: bool,
}

impl Agent {
    pub fn new(sc: Scenario, rx: Receiver<Inbound>) -> Self {
        Agent {
            config: SessionConfig::new(sc.config_echo_override.clone(), sc.modes.clone()),
            parameterized: false,
            authenticated: false,
            session_id: sc.session_id.clone(),
            sc,
            rx,
            eof: false,
            next_request_id: 0,
            responses: HashMap::new(),
            prompts: VecDeque::new(),
            turn: None,
            turns_started: 0,
            sessions_started: 0,
            session_cwd: None,
        }
    }

    /// Runs until stdin EOF (exit 0) or until a step ends the process.
    pub fn run(mut self) -> ! {
        loop {
            if let Some(prompt_id) = self.prompts.pop_front() {
                self.run_turn(prompt_id);
            } else {
                self.pump(None);
            }
        }
    }

    // ----- inbound -------------------------------------------------------

    /// Handles one inbound item, waiting at most until `deadline`.
    /// Returns false when the deadline passed with nothing to handle.
    fn pump(&mut self, deadline: Option<Instant>) -> bool {
        if self.eof {
            self.after_eof(deadline);
            return false;
        }
        let item = match deadline {
            None => self.rx.recv().unwrap_or(Inbound::Eof),
            Some(d) => match self.rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(item) => item,
                Err(RecvTimeoutError::Timeout) => return false,
                Err(RecvTimeoutError::Disconnected) => Inbound::Eof,
            },
        };
        self.dispatch(item);
        true
    }

    /// Handles everything already queued, without blocking. Stops at EOF so
    /// that a turn in progress still gets to answer its prompt.
    fn drain_ready(&mut self) {
        while !self.eof {
            match self.rx.try_recv() {
                Ok(Inbound::Eof) | Err(mpsc::TryRecvError::Disconnected) => {
                    log("stdin closed");
                    self.eof = true;
                }
                Ok(item) => self.dispatch(item),
                Err(mpsc::TryRecvError::Empty) => return,
            }
        }
    }

    fn dispatch(&mut self, item: Inbound) {
        match item {
            Inbound::Msg(v) => self.handle(v),
            Inbound::Bad(err) => self.send(&json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {"code": -32700, "message": "Parse error", "data": err},
            })),
            Inbound::Eof => {
                if !self.eof {
                    log("stdin closed");
                }
                self.eof = true;
                if !self.sc.ignore_stdin_eof {
                    std::process::exit(0);
                }
            }
        }
    }

    /// Called when stdin is gone: exit 0, or (with `ignore_stdin_eof`) idle
    /// until the deadline / forever.
    fn after_eof(&mut self, deadline: Option<Instant>) {
        if !self.sc.ignore_stdin_eof {
            std::process::exit(0);
        }
        match deadline {
            Some(d) => thread::sleep(d.saturating_duration_since(Instant::now())),
            None => loop {
                thread::sleep(Duration::from_secs(3600));
            },
        }
    }

    fn handle(&mut self, msg: Value) {
        let Value::Object(obj) = msg else {
            let what = if msg.is_array() { "batch" } else { "non-object message" };
            log(&format!("rejecting a {what}"));
            self.send(&json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {"code": -32600, "message": "Invalid Request", "data": format!("{what} not supported")},
            }));
            return;
        };
        let params = obj.get("params").cloned().unwrap_or(Value::Null);
        match (obj.get("method"), obj.get("id")) {
            (Some(Value::String(method)), Some(id)) => self.handle_request(method, id.clone(), params),
            (Some(Value::String(method)), None) => self.handle_notification(method, &params),
            (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
                let key = id.to_string();
                if self.responses.insert(key.clone(), Value::Object(obj)).is_some() {
                    log(&format!("a second response for id {key} replaced the first"));
                }
            }
            (_, id) => {
                log(&format!("invalid message: {}", Value::Object(obj.clone())));
                if let Some(id) = id {
                    self.send(&json!({
                        "jsonrpc": "2.0",
                        "id": id,
                        "error": {"code": -32600, "message": "Invalid Request"},
                    }));
                }
            }
        }
    }

    fn handle_notification(&mut self, method: &str, params: &Value) {
        match method {
            "session/cancel" => {
                let sid = params.get("sessionId").and_then(Value::as_str);
                if sid.is_some_and(|s| s != self.session_id) {
                    log(&format!(
                        "session/cancel names session {sid:?}, ours is {:?}; honouring it anyway",
                        self.session_id
                    ));
                }
                match self.turn.as_mut() {
                    Some(turn) => turn.cancelled = true,
                    None => log("session/cancel with no turn running: ignored"),
                }
            }
            other => log(&format!("ignoring notification {other}")),
        }
    }

    fn handle_request(&mut self, method: &str, id: Value, params: Value) {
        if self.sc.leaves_unanswered(method) {
            log(&format!("silent: leaving {method} unanswered"));
            return;
        }
        match method {
            "initialize" => {
                if self.sc.initialize_delay_ms > 0 {
                    thread::sleep(Duration::from_millis(self.sc.initialize_delay_ms));
                }
                if let Some(err) = self.sc.initialize_error.clone() {
                    self.respond_error(id, err);
                    return;
                }
                self.parameterized = params["clientCapabilities"]["_meta"]["parameterizedModelPicker"] == json!(true);
                self.respond(
                    id,
                    json!({
                        "protocolVersion": 1,
                        "agentCapabilities": {
                            "loadSession": true,
                            "mcpCapabilities": {"http": true, "sse": !self.sc.no_sse_mcp},
                            "promptCapabilities": {"image": !self.sc.no_image_prompts, "audio": false, "embeddedContext": false},
                            "sessionCapabilities": {"list": {}},
                        },
                        "authMethods": self.sc.auth_methods.clone().unwrap_or_else(|| match &self.sc.requires_authenticate {
                            Some(method) => json!([{"id": method, "name": method, "description": "an API key in the environment"}]),
                            None => json!([{"id": "cursor_login", "name": "Cursor Login"}]),
                        }),
                    }),
                );
            }
            "authenticate" => match &self.sc.requires_authenticate {
                Some(method) if params["methodId"] != json!(method) => {
                    self.respond_error(id, json!({"code": -32602, "message": "unknown authentication method"}));
                }
                _ => {
                    self.authenticated = true;
                    self.respond(id, json!({}));
                }
            },
            "session/new" if self.sc.requires_authenticate.is_some() && !self.authenticated => {
                self.respond_error(id, json!({"code": -32000, "message": "Authentication required"}));
            }
            "session/new" => {
                if self.sc.session_new_delay_ms > 0 {
                    thread::sleep(Duration::from_millis(self.sc.session_new_delay_ms));
                }
                if let Some(err) = self.sc.session_new_error.clone() {
                    self.respond_error(id, err);
                    return;
                }
                self.sessions_started += 1;
                self.session_id = match self.sessions_started {
                    1 => self.sc.session_id.clone(),
                    n => format!("{}-{n}", self.sc.session_id),
                };
                self.session_cwd = params.get("cwd").and_then(Value::as_str).map(Into::into);
                store_session(
                    &self.session_id,
                    params.get("cwd").and_then(Value::as_str).unwrap_or_default(),
                );
                let mut result = self.session_state();
                result["sessionId"] = json!(self.session_id);
                self.respond(id, result);
                stop_reading_stdin_if(self.sc.stops_reading_stdin_after_session_new);
                self.send_update(
                    &UpdateSession::Default,
                    json!({
                        "sessionUpdate": "available_commands_update",
                        "availableCommands": [
                            {"name": "copy-request-id", "description": "Copy the last request id"},
                        ],
                    }),
                );
            }
            "session/load" | "session/list" | "cursor/list_available_models" if self.sc.unauthenticated => {
                self.respond_error(id, json!({"code": -32000, "message": "Authentication required"}));
            }
            "session/load" => {
                let sid = params
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                if !stored_session(&sid) {
                    // Cursor's answer for an id it has no history for.
                    self.respond_error(
                        id,
                        json!({"code": -32602, "message": "Invalid params", "data": {"message": format!("Session \"{sid}\" not found")}}),
                    );
                    return;
                }
                self.session_id = sid;
                self.session_cwd = params.get("cwd").and_then(Value::as_str).map(Into::into);
                for update in self.sc.load_history.clone() {
                    self.send_update(&UpdateSession::Default, update);
                }
                let state = self.session_state();
                self.respond(id, state);
            }
            "session/list" => {
                let cwd = params.get("cwd").and_then(Value::as_str);
                self.respond(id, json!({"sessions": listed_sessions(cwd)}));
            }
            "session/prompt" => {
                if let Some(turn) = self.turn.as_mut()
                    && !turn.answered
                {
                    log("a second session/prompt cancels the running turn");
                    turn.cancelled = true;
                }
                self.prompts.push_back(id);
            }
            "session/set_mode" if self.sc.no_modes => self.respond(id, json!({})),
            "session/set_mode" => {
                let mode = params.get("modeId").cloned().unwrap_or_else(|| json!("agent"));
                let refused = self.sc.set_mode_error.clone();
                match refused.map_or_else(|| self.config.set("mode", &mode), Err) {
                    Ok(()) => {
                        self.respond(id, json!({}));
                        self.send_update(
                            &UpdateSession::Default,
                            json!({"sessionUpdate": "current_mode_update", "currentModeId": mode}),
                        );
                    }
                    Err(error) => self.respond_error(id, error),
                }
            }
            "session/set_model" => {
                let model = params.get("modelId").and_then(Value::as_str).unwrap_or_default();
                match self.config.set_model_id(model) {
                    Ok(()) => self.respond(id, json!({})),
                    Err(error) => self.respond_error(id, error),
                }
            }
            "session/set_config_option" if !self.sc.config_options_unsupported => {
                let config_id = params.get("configId").and_then(Value::as_str).unwrap_or_default();
                let value = params.get("value").cloned().unwrap_or(Value::Null);
                match self.config.set(config_id, &value) {
                    Ok(()) => self.respond(id, json!({"configOptions": self.config.config_options()})),
                    Err(error) => self.respond_error(id, error),
                }
            }
            "cursor/list_available_models" if !self.sc.list_models_unsupported => {
                self.respond(id, SessionConfig::list_available_models(&self.sc.extra_models));
            }
            other => self.respond_error(
                id,
                json!({"code": -32601, "message": format!("\"Method not found\": {other}")}),
            ),
        }
    }

    // ----- turns -----------------------------------------------------------

    fn run_turn(&mut self, prompt_id: Value) {
        let index = self.turns_started;
        self.turns_started += 1;
        let steps = self.sc.turns.get(index).cloned().unwrap_or_default();
        self.turn = Some(Turn {
            prompt_id,
            cancelled: false,
            answered: false,
        });
        for step in steps {
            self.drain_ready();
            if let Flow::EndTurn = self.run_step(step) {
                break;
            }
        }
        self.drain_ready();
        let turn = self.turn.take().expect("turn in progress");
        if !turn.answered {
            let reason = if turn.cancelled { "cancelled" } else { "end_turn" };
            self.respond(turn.prompt_id, json!({"stopReason": reason}));
        }
    }

    fn turn_mut(&mut self) -> &mut Turn {
        self.turn.as_mut().expect("turn in progress")
    }

    fn run_step(&mut self, step: Step) -> Flow {
        let step = self.in_workspace(step);
        match step {
            Step::Update { update, session } => self.send_update(&session, update),
            Step::Notify { method, params } => {
                let mut msg = json!({"jsonrpc": "2.0", "method": method});
                if let Some(p) = params {
                    msg["params"] = p;
                }
                self.send(&msg);
            }
            Step::Request {
                method,
                params,
                id,
                expect,
                no_wait,
            } => {
                if method == "session/request_permission"
                    && let Some(asking) = &self.sc.permission_only_in_mode
                    && self.config.mode != *asking
                {
                    // An agent whose current mode approves tools by itself: the tool runs.
                    log(&format!("mode {} approves {method} by itself", self.config.mode));
                    return Flow::Continue;
                }
                let id = id.unwrap_or_else(|| {
                    let n = self.next_request_id;
                    self.next_request_id += 1;
                    json!(n)
                });
                let mut msg = json!({"jsonrpc": "2.0", "id": id, "method": method});
                if let Some(mut p) = params {
                    env_values_in_strings(&mut p);
                    msg["params"] = p;
                }
                self.send(&msg);
                if !no_wait {
                    self.await_response(&id, expect.as_ref());
                }
            }
            Step::Await { id, expect } => self.await_response(&id, expect.as_ref()),
            Step::Raw { text, newline } => self.write_bytes(text.as_bytes(), newline),
            Step::SleepMs(ms) => {
                let deadline = Instant::now() + Duration::from_millis(ms);
                while Instant::now() < deadline {
                    self.pump(Some(deadline));
                }
            }
            Step::WaitForCancel { timeout_ms } => {
                let deadline = timeout_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
                while !self.turn_mut().cancelled {
                    if !self.pump(deadline) && deadline.is_some_and(|d| Instant::now() >= d) {
                        log("wait_for_cancel timed out");
                        break;
                    }
                }
            }
            Step::StopReason(reason) => self.answer_prompt(json!({"stopReason": reason}), None),
            Step::PromptError(err) => {
                self.answer_prompt(Value::Null, Some(err));
                return Flow::EndTurn;
            }
            Step::Exit { code, stderr } => {
                if let Some(text) = stderr.as_deref().map(with_env_values) {
                    let mut err = io::stderr().lock();
                    let _ = err.write_all(text.as_bytes());
                    if !text.ends_with('\n') {
                        let _ = err.write_all(b"\n");
                    }
                    let _ = err.flush();
                }
                std::process::exit(code);
            }
            Step::Crash => std::process::abort(),
            Step::KillSelf(sig) => {
                if let Err(e) = nix::sys::signal::raise(sig) {
                    log(&format!("raise({sig}) failed: {e}"));
                }
                log(&format!("still alive after raising {sig}"));
            }
            Step::CloseStdin => close_stdin(),
            Step::Hang => {
                log("hanging forever");
                loop {
                    thread::sleep(Duration::from_secs(3600));
                }
            }
            Step::Flood {
                count,
                text,
                interval_us,
                stamp,
            } => {
                let sid = self.session_id.clone();
                let line_of = |text: &str| {
                    json!({
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {"sessionId": sid, "update": {
                            "sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": text},
                        }},
                    })
                    .to_string()
                };
                let plain = line_of(&text);
                let started = Instant::now();
                for n in 0..count {
                    if let Some(interval) = interval_us {
                        let due = started + Duration::from_micros(interval.saturating_mul(n));
                        while Instant::now() < due {
                            self.pump(Some(due));
                        }
                        if self.turn_mut().cancelled {
                            break;
                        }
                    }
                    if stamp {
                        let sent = SystemTime::now()
                            .duration_since(UNIX_EPOCH)
                            .unwrap_or_default()
                            .as_nanos();
                        self.write_bytes(line_of(&format!("{text}[sent:{sent}]")).as_bytes(), true);
                    } else {
                        self.write_bytes(plain.as_bytes(), true);
                    }
                }
            }
            Step::SpawnSleeper {
                setsid,
                ignore_sigterm,
                inherit_stdio,
            } => {
                if let Some(pid) = probes::spawn_sleeper(setsid, ignore_sigterm, inherit_stdio) {
                    self.send(&json!({
                        "jsonrpc": "2.0",
                        "method": "fake/spawned",
                        "params": {"pid": pid},
                    }));
                }
            }
            Step::EnvReport { file } => {
                let report = probes::env_report(self.session_cwd.as_deref(), &self.session_id, file.as_deref());
                self.send(&json!({
                    "jsonrpc": "2.0",
                    "method": "fake/env",
                    "params": report,
                }));
            }
            Step::AccessReport {
                file,
                read,
                write_into,
                cmdline_of,
                api_address_file,
            } => probes::access_report(
                self.session_cwd.as_deref(),
                &file,
                &read,
                &write_into,
                cmdline_of.as_deref(),
                api_address_file.as_deref(),
            ),
            Step::EchoEnv { name } => {
                let value = std::env::var(&name).unwrap_or_default();
                let session = UpdateSession::Default;
                let mut chunk = json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": format!("my {name} is {value}")}});
                chunk[value.as_str()] = json!(true); // and as the name of a field no client reads
                self.send_update(&session, chunk);
                self.send_update(
                    &session,
                    json!({"sessionUpdate": "tool_call", "toolCallId": "echo-1", "title": format!("curl -H 'x-key: {value}'"),
                           "kind": "execute", "status": "completed", "rawInput": {"command": format!("echo {value}")},
                           "rawOutput": {"output": value, "exitCode": 0}}),
                );
            }
        }
        Flow::Continue
    }

    /// Answers the open prompt once; later attempts are logged and dropped.
    fn answer_prompt(&mut self, result: Value, error: Option<Value>) {
        let turn = self.turn_mut();
        if turn.answered {
            log("the prompt was already answered; ignoring a second answer");
            return;
        }
        turn.answered = true;
        let id = turn.prompt_id.clone();
        match error {
            Some(err) => self.respond_error(id, err),
            None => self.respond(id, result),
        }
    }

    /// Blocks (while still serving other messages) until the response to our
    /// request `id` arrives, then checks it against `expect`.
    fn await_response(&mut self, id: &Value, expect: Option<&Value>) {
        let key = id.to_string();
        let response = loop {
            if let Some(r) = self.responses.remove(&key) {
                break r;
            }
            self.pump(None);
        };
        let actual = match response.get("result") {
            Some(result) => result.clone(),
            None => json!({"error": response.get("error").cloned().unwrap_or(Value::Null)}),
        };
        // An expectation may name what the agent was handed (`${NAME}`), as its requests do.
        let expect = expect.cloned().map(|mut expected| {
            env_values_in_strings(&mut expected);
            expected
        });
        if let Some(expected) = expect
            && actual != expected
        {
            log(&format!("expectation failed: expected {expected} got {actual}"));
            std::process::exit(EXIT_EXPECTATION_FAILED);
        }
    }

    /// Modes, models and (for a client that opted in) `configOptions`, as `session/new`
    /// and `session/load` return them.
    fn session_state(&self) -> Value {
        let mut result = json!({
            "modes": {
                "currentModeId": self.config.mode,
                "availableModes": self.config.modes().iter().map(|m| json!({"id": m, "name": m})).collect::<Vec<_>>(),
            },
            "models": self.config.models(),
        });
        if self.parameterized && !self.sc.config_options_unsupported {
            result["configOptions"] = self.config.config_options();
        }
        if self.sc.no_modes {
            result.as_object_mut().map(|r| r.remove("modes"));
        }
        result
    }

    // ----- outbound --------------------------------------------------------

    /// A transcript's workspace placeholder replaced by the session's real workspace, in
    /// the updates and requests it plays.
    fn in_workspace(&self, mut step: Step) -> Step {
        if let (Some(placeholder), Some(cwd)) = (&self.sc.workspace_placeholder, &self.session_cwd) {
            let cwd = cwd.to_string_lossy();
            match &mut step {
                Step::Update { update, .. } => replace_in_strings(update, placeholder, &cwd),
                Step::Request {
                    params: Some(params), ..
                } => replace_in_strings(params, placeholder, &cwd),
                _ => {}
            }
        }
        step
    }

    fn send_update(&mut self, session: &UpdateSession, update: Value) {
        let mut params = Map::new();
        match session {
            UpdateSession::Default => {
                params.insert("sessionId".into(), json!(self.session_id));
            }
            UpdateSession::Id(s) => {
                params.insert("sessionId".into(), json!(s));
            }
            UpdateSession::Omit => {}
        }
        params.insert("update".into(), update);
        self.send(&json!({"jsonrpc": "2.0", "method": "session/update", "params": params}));
    }

    fn respond(&mut self, id: Value, result: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    fn respond_error(&mut self, id: Value, error: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "error": error}));
    }

    fn send(&mut self, msg: &Value) {
        self.write_bytes(msg.to_string().as_bytes(), true);
    }

    /// Writes one frame (plus `\n` when asked) and flushes it.
    fn write_bytes(&mut self, bytes: &[u8], newline: bool) {
        write_frame(bytes, newline);
    }
}
