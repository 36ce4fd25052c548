//! A small mock of the OpenAI Responses API on loopback, for ACP agents built on it
//! (codex-acp): `POST …/responses` answered with canned server-sent events, chosen by
//! what the request holds. Every request is recorded (path, the bearer it carried, its
//! JSON body) so a test can say what reached the "model".
//!
//! The script, by the newest user message of the request:
//! - the input already holds a `function_call_output` → the final text
//!   [`AFTER_TOOL_TEXT`] (the tool's result went back to the model);
//! - [`SHELL_PROMPT`] → one `exec_command` function call asking to run [`SHELL_COMMAND`]
//!   outside the sandbox (so the agent must ask for permission first);
//! - [`HANG_PROMPT`] → one text delta, then nothing until the client goes away (a turn
//!   that only a cancel ends);
//! - anything else → [`TEXT_REPLY`] in two deltas.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const SHELL_PROMPT: &str = "CONFORMANCE-SHELL: write the marker file";
pub const HANG_PROMPT: &str = "CONFORMANCE-HANG: think forever";
/// What the shell tool call runs (in the workspace).
pub const SHELL_COMMAND: &str = "echo conformance > shell-ran.txt";
pub const TEXT_REPLY: [&str; 2] = ["Hello from ", "the mock Responses API."];
pub const AFTER_TOOL_TEXT: &str = "The command ran.";
pub const HANG_TEXT: &str = "Thinking";
/// The function call's id, which codex-acp uses as the ACP tool call id.
pub const CALL_ID: &str = "call_conformance_1";

/// Largest request the mock reads (codex sends ~50 KiB of instructions and tools).
const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// How long a hanging response stays open at most.
const HANG_LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// The `Authorization` header as sent.
    pub authorization: Option<String>,
    pub body: Value,
}

/// The running mock; it stops when dropped.
pub struct MockResponses {
    address: SocketAddr,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockResponses {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockResponses {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let address = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, recorded.clone()));
            }
        });
        Self {
            address,
            requests,
            task,
        }
    }

    /// The base URL a provider is configured with (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().unwrap().clone()
    }
}

async fn serve(mut stream: TcpStream, recorded: Arc<Mutex<Vec<RecordedRequest>>>) {
    // One request per connection: the answer says `connection: close`.
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    let events = if request.method == "POST" && request.path.ends_with("/responses") {
        Some(script(&request.body))
    } else {
        None
    };
    recorded.lock().unwrap().push(request);
    let Some((events, hang)) = events else {
        let _ = stream
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
        return;
    };
    let mut body = String::new();
    for event in &events {
        body.push_str(&format!(
            "event: {}\ndata: {event}\n\n",
            event["type"].as_str().unwrap()
        ));
    }
    if hang {
        // Chunked, never finished: the agent streams what came and waits for more.
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
        let chunk = format!("{:x}\r\n{body}\r\n", body.len());
        if stream.write_all(head.as_bytes()).await.is_err() || stream.write_all(chunk.as_bytes()).await.is_err() {
            return;
        }
        let _ = stream.flush().await;
        let mut sink = [0u8; 1024];
        // Until the client hangs up (a cancelled turn drops the stream), or the limit.
        let _ = tokio::time::timeout(HANG_LIMIT, async {
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
        return;
    }
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.flush().await;
}

async fn read_request(stream: &mut TcpStream) -> Option<RecordedRequest> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buffer.len() > MAX_REQUEST_BYTES {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let mut length = 0usize;
    let mut authorization = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "authorization" => authorization = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    if length > MAX_REQUEST_BYTES {
        return None;
    }
    while buffer.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buffer[head_end..head_end + length]).unwrap_or(Value::Null);
    Some(RecordedRequest {
        method,
        path,
        authorization,
        body,
    })
}

/// The newest user message's text.
fn last_user_text(body: &Value) -> String {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["role"] == "user")
        .filter_map(|item| item["content"].as_array())
        .flatten()
        .filter_map(|part| part["text"].as_str())
        .next_back()
        .unwrap_or_default()
        .to_owned()
}

/// The events for one request, and whether the response then hangs.
fn script(body: &Value) -> (Vec<Value>, bool) {
    let answered_tool = body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|item| item["type"] == "function_call_output");
    let prompt = last_user_text(body);
    if answered_tool {
        (message("resp_after_tool", "msg_after_tool", &[AFTER_TOOL_TEXT]), false)
    } else if prompt.contains(SHELL_PROMPT) {
        let arguments = json!({
            "cmd": SHELL_COMMAND,
            "sandbox_permissions": "require_escalated",
            "justification": "Write a marker file to prove the shell ran",
        })
        .to_string();
        let call = |arguments: &str| json!({"type": "function_call", "id": "fc_conformance_1", "call_id": CALL_ID, "name": "exec_command", "arguments": arguments});
        (
            vec![
                json!({"type": "response.created", "response": {"id": "resp_shell"}}),
                json!({"type": "response.output_item.added", "output_index": 0, "item": call("")}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": call(&arguments)}),
                completed("resp_shell"),
            ],
            false,
        )
    } else if prompt.contains(HANG_PROMPT) {
        let mut events = message("resp_hang", "msg_hang", &[HANG_TEXT]);
        // Keep the item open: drop its `done` and the response's completion.
        events.truncate(3);
        (events, true)
    } else {
        (message("resp_text", "msg_text", &TEXT_REPLY), false)
    }
}

fn message(response_id: &str, item_id: &str, deltas: &[&str]) -> Vec<Value> {
    let text: String = deltas.concat();
    let mut events = vec![
        json!({"type": "response.created", "response": {"id": response_id}}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "message", "role": "assistant", "id": item_id, "content": []}}),
    ];
    events.extend(deltas.iter().map(|delta| {
        json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0, "content_index": 0, "delta": delta})
    }));
    events.push(json!({"type": "response.output_item.done", "output_index": 0,
        "item": {"type": "message", "role": "assistant", "id": item_id,
                 "content": [{"type": "output_text", "text": text}]}}));
    events.push(completed(response_id));
    events
}

fn completed(response_id: &str) -> Value {
    json!({"type": "response.completed", "response": {"id": response_id,
        "usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}}})
}
