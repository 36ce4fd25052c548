//! The trace audit's raw capture: with `serve --wire-capture-dir DIR`, every line crossing
//! an agent's pipe is written as `{"dir":"agent"|"runner","line": …}`, with the secrets
//! handed to the agent redacted, up to a bound per file — so a real Cursor build's traffic
//! can be turned into fixture transcripts. Capture starts with the process, before
//! `initialize`, in `DIR/slot-<slot id>.ndjson`; the first execution that leases the
//! process takes that file over as `DIR/<execution id>.ndjson` (handshake included), and a
//! start that fails leaves it under the slot's name. Off by default.

use parking_lot::Mutex;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use cursor_runner_acp::{Direction, WireTap};
use cursor_runner_activity::Redactor;
use serde_json::json;

/// Bytes captured per file; past it one `{"truncated": true}` line ends the file.
pub const MAX_WIRE_CAPTURE_BYTES: u64 = 8 * 1024 * 1024;

pub struct WireCapture {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<CaptureState>,
}

struct CaptureState {
    out: Option<BufWriter<File>>,
    written: u64,
    path: PathBuf,
    /// The secrets of whoever the process serves now (its credential; an execution's
    /// MCP secrets too once leased).
    redactor: Redactor,
    /// Whether an execution took the file over already (a reused process starts a new
    /// file for the next one).
    leased: bool,
}

impl WireCapture {
    /// Creates (owner-only) `dir/slot-<slot_id>.ndjson` for a process about to start.
    pub fn for_slot(dir: &Path, slot_id: &str, redactor: Redactor, max_bytes: u64) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("slot-{slot_id}.ndjson"));
        Ok(Self {
            dir: dir.to_owned(),
            max_bytes,
            state: Mutex::new(CaptureState {
                out: Some(BufWriter::new(open_owner_only(&path)?)),
                written: 0,
                path,
                redactor,
                leased: false,
            }),
        })
    }

    /// The process now serves `execution_id`: its first lease renames the slot's file
    /// to `<execution_id>.ndjson` (the handshake stays in it); a later lease of a reused
    /// process starts that file afresh.
    pub fn lease_to(&self, execution_id: &str, redactor: Redactor) -> std::io::Result<()> {
        let path = self.dir.join(format!("{execution_id}.ndjson"));
        let mut state = self.state.lock();
        state.redactor = redactor;
        if state.leased || state.out.is_none() {
            state.out = Some(BufWriter::new(open_owner_only(&path)?));
            state.written = 0;
        } else {
            std::fs::rename(&state.path, &path)?;
        }
        state.path = path;
        state.leased = true;
        Ok(())
    }
}

fn open_owner_only(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl WireTap for WireCapture {
    fn line(&self, direction: Direction, line: &[u8]) {
        let dir = match direction {
            Direction::FromAgent => "agent",
            Direction::ToAgent => "runner",
        };
        let mut state = self.state.lock();
        let (text, _) = state.redactor.redact_text(&String::from_utf8_lossy(line));
        let mut record = json!({"dir": dir, "line": text}).to_string();
        record.push('\n');
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
        let capture = WireCapture::for_slot(dir.path(), "s1", Redactor::default(), 2 * one).unwrap();
        capture.lease_to("exec-1", redactor).unwrap();
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

    #[test]
    fn the_first_lease_takes_over_the_slots_file_with_the_handshake_a_reuse_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let capture = WireCapture::for_slot(dir.path(), "s1", Redactor::default(), MAX_WIRE_CAPTURE_BYTES).unwrap();
        capture.line(Direction::ToAgent, br#"{"method":"initialize"}"#);
        capture.lease_to("exec-1", Redactor::default()).unwrap();
        capture.line(Direction::ToAgent, br#"{"method":"session/new"}"#);
        capture.lease_to("exec-2", Redactor::default()).unwrap();
        capture.line(Direction::ToAgent, br#"{"method":"session/new","second":true}"#);

        assert!(!dir.path().join("slot-s1.ndjson").exists(), "taken over, not copied");
        let first = std::fs::read_to_string(dir.path().join("exec-1.ndjson")).unwrap();
        assert_eq!(first.lines().count(), 2, "{first}");
        assert!(first.lines().next().unwrap().contains("initialize"));
        let second = std::fs::read_to_string(dir.path().join("exec-2.ndjson")).unwrap();
        assert_eq!(second.lines().count(), 1, "{second}");
        assert!(second.contains("second"));
    }
}
