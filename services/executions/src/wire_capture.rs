//! The trace audit's raw capture: with `serve --wire-capture-dir DIR`, every line crossing
//! an execution's pipe is written to `DIR/<execution id>.ndjson` as `{"dir":"agent"|"runner",
//! "line": …}`, with the secrets handed to the agent redacted, up to a bound per execution —
//! so a real Cursor build's traffic can be turned into fixture transcripts. Off by default.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use cursor_runner_acp::{Direction, WireTap};
use cursor_runner_activity::Redactor;
use serde_json::json;

/// Bytes captured per execution; past it one `{"truncated": true}` line ends the file.
pub const MAX_WIRE_CAPTURE_BYTES: u64 = 8 * 1024 * 1024;

pub struct WireCapture {
    redactor: Redactor,
    max_bytes: u64,
    state: Mutex<CaptureState>,
}

struct CaptureState {
    out: Option<BufWriter<File>>,
    written: u64,
}

impl WireCapture {
    /// Creates (owner-only) `dir/<execution_id>.ndjson`.
    pub fn create(dir: &Path, execution_id: &str, redactor: Redactor, max_bytes: u64) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(dir)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(dir.join(format!("{execution_id}.ndjson")))?;
        Ok(Self {
            redactor,
            max_bytes,
            state: Mutex::new(CaptureState {
                out: Some(BufWriter::new(file)),
                written: 0,
            }),
        })
    }
}

impl WireTap for WireCapture {
    fn line(&self, direction: Direction, line: &[u8]) {
        let (text, _) = self.redactor.redact_text(&String::from_utf8_lossy(line));
        let dir = match direction {
            Direction::FromAgent => "agent",
            Direction::ToAgent => "runner",
        };
        let mut record = json!({"dir": dir, "line": text}).to_string();
        record.push('\n');
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let written = state.written;
        let Some(out) = state.out.as_mut() else { return };
        let result = if written + record.len() as u64 > self.max_bytes {
            let ended = out.write_all(b"{\"truncated\":true}\n").and_then(|()| out.flush());
            state.out = None;
            ended
        } else {
            let wrote = out.write_all(record.as_bytes()).and_then(|()| out.flush());
            state.written += record.len() as u64;
            wrote
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "wire capture failed; capturing stops for this execution");
            state.out = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_captured_redacted_up_to_the_bound_then_marked_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let redactor = Redactor::new([("CURSOR_API_KEY".to_owned(), "sk-wire-canary-0001".to_owned())]);
        let line = br#"{"jsonrpc":"2.0","method":"session/update","params":{"k":"sk-wire-canary-0001"}}"#;
        let one = json!({"dir": "agent", "line": String::from_utf8_lossy(line).replace("sk-wire-canary-0001", "[redacted:CURSOR_API_KEY]")})
            .to_string()
            .len() as u64
            + 1;
        // Room for exactly two lines: the third is cut, and nothing after it is written.
        let capture = WireCapture::create(dir.path(), "exec-1", redactor, 2 * one).unwrap();
        for _ in 0..4 {
            capture.line(Direction::FromAgent, line);
        }
        let text = std::fs::read_to_string(dir.path().join("exec-1.ndjson")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[..2]
                .iter()
                .all(|l| l.contains("[redacted:CURSOR_API_KEY]") && l.contains("\"agent\""))
        );
        assert_eq!(lines[2], r#"{"truncated":true}"#);
        assert!(!text.contains("sk-wire-canary-0001"));
    }
}
