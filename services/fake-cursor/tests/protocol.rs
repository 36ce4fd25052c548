//! Drives the built `fake-cursor` binary over stdio.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(10);

struct Fake {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Fake {
    /// Spawns the fake with an empty environment, as the service does.
    fn spawn(scenario: &Path, extra: &[&str]) -> Fake {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fake-cursor"))
            .env_clear()
            .arg("--scenario")
            .arg(scenario)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fake-cursor");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[fake stderr] {line}");
            }
        });
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Fake { child, stdin, lines }
    }

    fn send(&mut self, msg: Value) {
        self.send_line(&msg.to_string());
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next stdout line as JSON.
    fn recv(&mut self) -> Value {
        let line = self.lines.recv_timeout(TIMEOUT).expect("a line from the fake");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad JSON {line:?}: {e}"))
    }

    /// Asserts that nothing is written for `wait`.
    fn expect_silence(&mut self, wait: Duration) {
        if let Ok(line) = self.lines.recv_timeout(wait) {
            panic!("unexpected output: {line}");
        }
    }

    /// Reads the rest of stdout (until EOF).
    fn drain(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            match self.lines.recv_timeout(TIMEOUT) {
                Ok(line) => out.push(serde_json::from_str(&line).unwrap()),
                Err(mpsc::RecvTimeoutError::Disconnected) => return out,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("stdout did not close"),
            }
        }
    }

    fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "fake-cursor did not exit");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// initialize + session/new; returns the session id.
    fn handshake(&mut self) -> String {
        self.send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}));
        let init = self.recv();
        assert_eq!(init["id"], 1);
        assert_eq!(init["result"]["protocolVersion"], 1);
        assert_eq!(init["result"]["authMethods"][0]["id"], "cursor_login");
        self.send(json!({"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}));
        let new = self.recv();
        assert_eq!(new["id"], 2);
        assert_eq!(new["result"]["models"]["currentModelId"], "default[]");
        let cmds = self.recv();
        assert_eq!(cmds["method"], "session/update");
        assert_eq!(cmds["params"]["update"]["sessionUpdate"], "available_commands_update");
        new["result"]["sessionId"].as_str().unwrap().to_string()
    }

    fn prompt(&mut self, id: i64, session: &str) {
        self.send(json!({"jsonrpc":"2.0","id":id,"method":"session/prompt","params":{"sessionId":session,"prompt":[{"type":"text","text":"go"}]}}));
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/scenarios")
        .join(name)
}

fn write_scenario(dir: &tempfile::TempDir, scenario: Value) -> PathBuf {
    let path = dir.path().join("scenario.json");
    std::fs::write(&path, scenario.to_string()).unwrap();
    path
}

fn answered_pg() -> Value {
    json!({"outcome":{"outcome":"answered","answers":[{"questionId":"db","selectedOptionIds":["pg"]}]}})
}

#[test]
fn demo_fixture_full_turn() {
    let mut fake = Fake::spawn(&fixture("demo.json"), &[]);
    let sid = fake.handshake();
    assert_eq!(sid, "sess-demo");
    // The client's prompt deliberately uses id 0 too: independent id spaces.
    fake.prompt(0, &sid);
    let kinds: Vec<Value> = (0..5)
        .map(|_| fake.recv()["params"]["update"]["sessionUpdate"].clone())
        .collect();
    assert_eq!(
        kinds,
        json!([
            "agent_thought_chunk",
            "agent_message_chunk",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let q = fake.recv();
    assert_eq!(q["method"], "cursor/ask_question");
    assert_eq!(q["id"], json!(0));
    assert!(q["id"].is_i64());
    assert!(q["params"].get("sessionId").is_none());
    assert_eq!(q["params"]["toolCallId"], "tq-1");
    fake.send(json!({"jsonrpc":"2.0","id":0,"result":answered_pg()}));
    let last = fake.recv();
    assert_eq!(last["params"]["update"]["content"]["text"], "Great, using PostgreSQL.");
    let done = fake.recv();
    assert_eq!(done, json!({"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}));
    fake.close_stdin();
    assert!(fake.drain().is_empty());
    assert_eq!(fake.wait().code(), Some(0));
}

#[test]
fn mismatched_answer_exits_97() {
    let mut fake = Fake::spawn(&fixture("demo.json"), &[]);
    let sid = fake.handshake();
    fake.prompt(3, &sid);
    loop {
        let msg = fake.recv();
        if msg["method"] == "cursor/ask_question" {
            break;
        }
    }
    fake.send(json!({"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"skipped"}}}));
    assert_eq!(fake.wait().code(), Some(97));
}

#[test]
fn unknown_requests_get_32601_and_notifications_are_never_answered() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(&dir, json!({"turns": []}));
    let mut fake = Fake::spawn(&path, &[]);
    fake.send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"x"}}));
    fake.send(json!({"jsonrpc":"2.0","method":"cursor/whatever","params":{}}));
    fake.send(json!({"jsonrpc":"2.0","method":"initialized"}));
    fake.expect_silence(Duration::from_millis(300));
    fake.send(json!({"jsonrpc":"2.0","id":"abc","method":"session/resume","params":{"sessionId":"x"}}));
    assert_eq!(
        fake.recv(),
        json!({"jsonrpc":"2.0","id":"abc","error":{"code":-32601,"message":"\"Method not found\": session/resume"}})
    );
    fake.send(json!({"jsonrpc":"2.0","id":7,"method":"authenticate","params":{"methodId":"cursor_login"}}));
    assert_eq!(fake.recv(), json!({"jsonrpc":"2.0","id":7,"result":{}}));
    fake.close_stdin();
    assert!(fake.drain().is_empty());
    assert_eq!(fake.wait().code(), Some(0));
}

#[test]
fn eof_exits_zero_and_record_captures_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(&dir, json!({"turns": []}));
    let record = dir.path().join("record.ndjson");
    let mut fake = Fake::spawn(&path, &["--record", record.to_str().unwrap()]);
    let lines = [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#,
        r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#,
        r#"{ "jsonrpc" : "2.0", "id" : 1, "method" : "authenticate" }"#,
    ];
    for line in lines {
        fake.send_line(line);
    }
    assert_eq!(fake.recv()["id"], 0);
    assert_eq!(fake.recv()["id"], 1);
    // Recording happens as lines are read, before they are processed.
    let recorded = std::fs::read_to_string(&record).unwrap();
    assert_eq!(recorded, lines.join("\n") + "\n");
    fake.close_stdin();
    assert_eq!(fake.wait().code(), Some(0));
}

#[test]
fn cancel_ends_turn_and_requests_are_served_while_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        &dir,
        json!({"session_id": "s-1", "turns": [[
            {"request": {"method": "cursor/task", "params": {"toolCallId": "t"}}, "no_wait": true},
            {"request": {"method": "session/request_permission", "id": "perm-1", "params": {"sessionId": "s-1"}},
             "expect": {"outcome": {"outcome": "cancelled"}}},
            {"await": 0, "expect": {"error": {"code": -32601, "message": "nope"}}},
            {"wait_for_cancel": true},
            {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "after"}}, "session_id": "child"},
        ], [
            {"stop_reason": "end_turn"},
            {"update": {"sessionUpdate": "session_info_update", "title": "T"}},
        ]]}),
    );
    let mut fake = Fake::spawn(&path, &[]);
    let sid = fake.handshake();
    fake.prompt(0, &sid);
    let task = fake.recv();
    assert_eq!(
        (task["id"].clone(), task["method"].clone()),
        (json!(0), json!("cursor/task"))
    );
    let perm = fake.recv();
    assert_eq!(perm["id"], "perm-1");
    // Blocked on perm-1: a request is still answered.
    fake.send(json!({"jsonrpc":"2.0","id":5,"method":"session/set_model","params":{"sessionId":sid,"modelId":"gpt-x[effort=high]"}}));
    assert_eq!(fake.recv(), json!({"jsonrpc":"2.0","id":5,"result":{}}));
    fake.send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":sid}}));
    fake.send(json!({"jsonrpc":"2.0","id":"perm-1","result":{"outcome":{"outcome":"cancelled"}}}));
    fake.send(json!({"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"nope"}}));
    let after = fake.recv();
    assert_eq!(after["params"]["sessionId"], "child");
    assert_eq!(
        fake.recv(),
        json!({"jsonrpc":"2.0","id":0,"result":{"stopReason":"cancelled"}})
    );
    // Second turn: the update follows the prompt result.
    fake.prompt(1, &sid);
    assert_eq!(
        fake.recv(),
        json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}})
    );
    assert_eq!(fake.recv()["params"]["update"]["sessionUpdate"], "session_info_update");
    // A third prompt has no script: it just ends.
    fake.prompt(2, &sid);
    assert_eq!(
        fake.recv(),
        json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}})
    );
    fake.close_stdin();
    assert_eq!(fake.wait().code(), Some(0));
}

#[test]
fn exit_mid_turn_fixture() {
    let mut fake = Fake::spawn(&fixture("exit_mid_turn.json"), &[]);
    let sid = fake.handshake();
    fake.prompt(3, &sid);
    let out = fake.drain();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["params"]["update"]["sessionUpdate"], "agent_message_chunk");
    assert_eq!(fake.wait().code(), Some(3));
}

#[test]
fn session_new_error_and_env_report() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        &dir,
        json!({"session_new_error": {"code": -32000, "message": "Authentication required"},
               "turns": [[{"env_report": true}]]}),
    );
    let mut fake = Fake::spawn(&path, &["acp", "--api-key", "k"]);
    fake.send(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}));
    assert_eq!(
        fake.recv(),
        json!({"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Authentication required"}})
    );
    fake.prompt(2, "fake-session-1");
    let env = fake.recv();
    assert_eq!(env["method"], "fake/env");
    assert_eq!(env["params"]["env"], json!({}));
    assert_eq!(env["params"]["argv"][3], "acp");
    assert!(env["params"]["uid"].is_u64());
    assert_eq!(fake.recv()["result"]["stopReason"], "end_turn");
}

#[test]
fn all_fixtures_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let out = Command::new(env!("CARGO_BIN_EXE_fake-cursor"))
                .arg("--scenario")
                .arg(&path)
                .arg("--check")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            n += 1;
        }
    }
    assert!(n >= 7, "expected the fixtures, found {n}");
}

#[test]
fn question_cancel_and_long_turn_fixtures() {
    let mut fake = Fake::spawn(&fixture("question_cancel.json"), &[]);
    let sid = fake.handshake();
    fake.prompt(1, &sid);
    assert_eq!(fake.recv()["method"], "session/update");
    let q = fake.recv();
    assert_eq!(
        (q["id"].clone(), q["method"].clone()),
        (json!(0), json!("cursor/ask_question"))
    );
    fake.send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":sid}}));
    fake.send(json!({"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"cancelled"}}}));
    assert_eq!(
        fake.recv(),
        json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled"}})
    );

    let mut fake = Fake::spawn(&fixture("long_turn.json"), &[]);
    let sid = fake.handshake();
    fake.prompt(1, &sid);
    assert_eq!(fake.recv()["method"], "session/update");
    fake.expect_silence(Duration::from_millis(200));
    fake.send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":sid}}));
    assert_eq!(fake.recv()["params"]["update"]["content"]["text"], "stopped");
    assert_eq!(
        fake.recv(),
        json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled"}})
    );
}

#[test]
fn a_paced_flood_spaces_its_stamped_chunks_and_a_cancel_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        &dir,
        json!({"turns": [
            [{"flood": {"count": 5, "text": "y", "interval_us": 20_000, "stamp": true}}],
            [{"flood": {"count": 100_000, "interval_us": 10_000}}],
        ]}),
    );
    let mut fake = Fake::spawn(&path, &[]);
    let sid = fake.handshake();
    let prompted = Instant::now();
    fake.prompt(1, &sid);
    let mut stamps = Vec::new();
    for _ in 0..5 {
        let text = fake.recv()["params"]["update"]["content"]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        let stamp = text
            .strip_prefix("y[sent:")
            .and_then(|t| t.strip_suffix(']'))
            .expect(&text);
        stamps.push(stamp.parse::<u128>().unwrap());
    }
    // Chunk k is due 20k ms after the flood starts, which is after the prompt arrived.
    assert!(prompted.elapsed() >= Duration::from_millis(80));
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
    assert_eq!(fake.recv()["result"]["stopReason"], "end_turn");

    fake.prompt(2, &sid);
    assert_eq!(fake.recv()["params"]["update"]["content"]["text"], "x");
    fake.send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":sid}}));
    loop {
        let message = fake.recv();
        if message["id"] == 2 {
            assert_eq!(message["result"]["stopReason"], "cancelled");
            break;
        }
    }
}

#[test]
fn flood_and_slow_start_fixtures() {
    let mut fake = Fake::spawn(&fixture("flood.json"), &[]);
    let sid = fake.handshake();
    fake.prompt(1, &sid);
    for _ in 0..2000 {
        assert_eq!(fake.recv()["params"]["update"]["content"]["text"], "x");
    }
    assert_eq!(fake.recv()["result"]["stopReason"], "end_turn");

    let mut fake = Fake::spawn(&fixture("slow_start.json"), &[]);
    let start = Instant::now();
    fake.handshake();
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[test]
fn crash_and_kill_self_end_by_signal() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    for (step, signal) in [
        (json!({"crash": true}), nix::libc::SIGABRT),
        (json!({"kill_self": "SIGKILL"}), nix::libc::SIGKILL),
    ] {
        let path = write_scenario(&dir, json!({"turns": [[step]]}));
        let mut fake = Fake::spawn(&path, &[]);
        fake.prompt(1, "fake-session-1");
        assert_eq!(fake.wait().signal(), Some(signal));
    }
}

#[test]
fn hang_with_ignore_sigterm_needs_sigkill_and_sleeper_is_reported() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        &dir,
        json!({"ignore_sigterm": true, "ignore_stdin_eof": true, "turns": [[
            {"spawn_sleeper": {"setsid": true, "ignore_sigterm": true}},
            {"hang": true}
        ]]}),
    );
    let mut fake = Fake::spawn(&path, &[]);
    fake.prompt(1, "fake-session-1");
    let spawned = fake.recv();
    assert_eq!(spawned["method"], "fake/spawned");
    let sleeper = Pid::from_raw(spawned["params"]["pid"].as_i64().unwrap() as i32);
    assert_eq!(nix::unistd::getsid(Some(sleeper)).unwrap(), sleeper);
    fake.close_stdin();
    let pid = Pid::from_raw(fake.child.id() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    thread::sleep(Duration::from_millis(300));
    assert!(fake.child.try_wait().unwrap().is_none(), "SIGTERM was not ignored");
    kill(sleeper, Signal::SIGTERM).unwrap();
    thread::sleep(Duration::from_millis(100));
    assert!(kill(sleeper, None).is_ok(), "the sleeper should ignore SIGTERM");
    kill(sleeper, Signal::SIGKILL).unwrap();
    kill(pid, Signal::SIGKILL).unwrap();
    assert_eq!(fake.wait().signal(), Some(nix::libc::SIGKILL));
}

#[test]
fn eof_right_after_prompt_still_finishes_the_turn() {
    let mut fake = Fake::spawn(&fixture("two_turns.json"), &[]);
    let sid = fake.handshake();
    fake.prompt(1, &sid);
    fake.close_stdin();
    let out = fake.drain();
    let texts: Vec<&str> = out[..2]
        .iter()
        .map(|m| m["params"]["update"]["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["First turn: ", "hello."]);
    assert_eq!(
        out[2],
        json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}})
    );
    assert_eq!(out.len(), 3);
    assert_eq!(fake.wait().code(), Some(0));
}

#[test]
fn an_unanswered_method_is_read_and_never_answered_while_others_are() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        &dir,
        json!({"unanswered_methods": ["cursor/list_available_models"], "turns": []}),
    );
    let mut fake = Fake::spawn(&path, &[]);
    fake.handshake();
    fake.send(json!({"jsonrpc":"2.0","id":3,"method":"cursor/list_available_models","params":{}}));
    fake.expect_silence(Duration::from_millis(300));
    fake.send(json!({"jsonrpc":"2.0","id":4,"method":"authenticate","params":{"methodId":"cursor_login"}}));
    assert_eq!(fake.recv(), json!({"jsonrpc":"2.0","id":4,"result":{}}));
}

#[test]
fn after_session_new_an_agent_that_stops_reading_stdin_lets_the_pipe_fill() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_scenario(
        &dir,
        json!({"stops_reading_stdin_after_session_new": true, "turns": []}),
    );
    let mut fake = Fake::spawn(&path, &[]);
    fake.handshake();
    let mut stdin = fake.stdin.take().expect("stdin open");
    let (wrote, written) = mpsc::channel();
    // Far more than any pipe buffer: a writer to an agent that reads nothing blocks.
    thread::spawn(move || {
        let line = vec![b'x'; 4 << 20];
        let _ = wrote.send(stdin.write_all(&line).and_then(|()| stdin.flush()).is_ok());
    });
    assert!(
        written.recv_timeout(Duration::from_secs(2)).is_err(),
        "the write must block: the agent reads nothing"
    );
    assert!(fake.child.try_wait().unwrap().is_none(), "the agent stays alive");
}
