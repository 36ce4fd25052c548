//! The launch ledger: every process the service starts for an agent (and, without a
//! PID namespace, every descendant it has seen), one JSON line each, in
//! `<state dir>/launch-ledger.jsonl`. A service that restarts after being SIGKILLed
//! sweeps it: each recorded process that still runs *with the recorded start time* is
//! SIGKILLed (with its process group when it leads one); a pid that now belongs to
//! another process is left alone. The file is then truncated.
//!
//! Lines are written with plain `write(2)`, not fsynced: the ledger only has to survive
//! the death of the service, never a machine crash (which ends every agent too).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::procfs;

/// The ledger's file name inside the state directory.
pub const LEDGER_FILE: &str = "launch-ledger.jsonl";

/// What a recorded process was to its execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerRole {
    /// `agent-init`, PID 1 of the agent's namespace: killing it ends the namespace.
    Init,
    /// The agent itself.
    Agent,
    /// A process found under the agent (without a namespace only).
    Descendant,
}

/// One recorded process: its identity (pid and start time), its group, and whom it
/// was launched for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    pub pid: i32,
    pub pgid: i32,
    /// `/proc/<pid>/stat` field 22: clock ticks after boot.
    pub start_time: u64,
    pub execution_id: String,
    pub generation: i64,
    pub role: LedgerRole,
}

/// What a start-up sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Entries read from the ledger.
    pub recorded: usize,
    /// Entries whose process still ran with the recorded start time, and were killed.
    pub killed: Vec<LedgerEntry>,
    /// Lines that could not be parsed (skipped).
    pub unreadable: usize,
}

/// The ledger of one state directory. Entries of executions still running are kept in
/// memory, so the file can be rewritten without those that ended.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    live: Vec<LedgerEntry>,
}

impl Ledger {
    /// Sweeps what a previous incarnation left in `state_dir`, truncates the file, and
    /// returns the (empty) ledger with the sweep's report.
    pub fn open(state_dir: &Path) -> io::Result<(Self, SweepReport)> {
        std::fs::create_dir_all(state_dir)?;
        let path = state_dir.join(LEDGER_FILE);
        let report = sweep(&path)?;
        std::fs::File::create(&path)?;
        Ok((Self { path, live: Vec::new() }, report))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one entry.
    pub fn record(&mut self, entry: LedgerEntry) -> io::Result<()> {
        let mut line = serde_json::to_string(&entry).map_err(io::Error::other)?;
        line.push('\n');
        use std::os::unix::fs::OpenOptionsExt;
        // The service's alone: agents share the host.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&self.path)?;
        // One write per line: a concurrent reader never sees half an entry.
        file.write_all(line.as_bytes())?;
        self.live.push(entry);
        Ok(())
    }

    /// Forgets an execution's entries once none of its processes runs any more, and
    /// rewrites the file without them (atomically, by rename).
    pub fn retire(&mut self, execution_id: &str, generation: i64) -> io::Result<()> {
        let before = self.live.len();
        self.live
            .retain(|e| !(e.execution_id == execution_id && e.generation == generation));
        if self.live.len() == before {
            return Ok(());
        }
        let mut text = String::new();
        for entry in &self.live {
            text.push_str(&serde_json::to_string(entry).map_err(io::Error::other)?);
            text.push('\n');
        }
        let staging = self.path.with_extension("jsonl.tmp");
        std::fs::write(&staging, text)?;
        std::fs::rename(&staging, &self.path)
    }
}

/// Kills every process recorded in the ledger at `path` that still runs with its
/// recorded start time (its group too when it leads one). Nothing else is touched: a
/// reused pid has another start time.
pub fn sweep(path: &Path) -> io::Result<SweepReport> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SweepReport::default()),
        Err(e) => return Err(e),
    };
    let mut report = SweepReport::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(entry) = serde_json::from_str::<LedgerEntry>(line) else {
            report.unreadable += 1;
            continue;
        };
        report.recorded += 1;
        if kill_if_same(&entry) {
            report.killed.push(entry);
        }
    }
    Ok(report)
}

/// SIGKILLs the recorded process if — and only if — the pid still names the process
/// that started at the recorded time. A group is killed only through its leader's
/// identity: while the leader lives, no other process can own that group id.
pub fn kill_if_same(entry: &LedgerEntry) -> bool {
    if !procfs::is_same_running(entry.pid, entry.start_time) {
        return false;
    }
    if entry.pgid == entry.pid {
        let _ = killpg(Pid::from_raw(entry.pid), Signal::SIGKILL);
    }
    procfs::signal_if_same(entry.pid, entry.start_time, libc::SIGKILL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pid: i32, start_time: u64) -> LedgerEntry {
        LedgerEntry {
            pid,
            pgid: pid,
            start_time,
            execution_id: "exec-1".into(),
            generation: 1,
            role: LedgerRole::Agent,
        }
    }

    #[test]
    fn entries_round_trip_as_one_json_line_each_and_retire_rewrites_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (mut ledger, report) = Ledger::open(dir.path()).unwrap();
        assert_eq!(report, SweepReport::default());
        // Pids that cannot exist, so a sweep of this file touches nothing.
        ledger.record(entry(i32::MAX - 1, 1)).unwrap();
        let mut other = entry(i32::MAX - 2, 2);
        other.execution_id = "exec-2".into();
        ledger.record(other.clone()).unwrap();
        let text = std::fs::read_to_string(ledger.path()).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.contains(r#""role":"agent""#), "{text}");
        ledger.retire("exec-1", 1).unwrap();
        let text = std::fs::read_to_string(ledger.path()).unwrap();
        let left: Vec<LedgerEntry> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(left, vec![other]);
    }

    #[test]
    fn a_sweep_skips_unreadable_lines_and_truncates_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEDGER_FILE);
        let line = serde_json::to_string(&entry(i32::MAX - 1, 1)).unwrap();
        std::fs::write(&path, format!("{line}\nnot json\n")).unwrap();
        let (_ledger, report) = Ledger::open(dir.path()).unwrap();
        assert_eq!(report.recorded, 1);
        assert_eq!(report.unreadable, 1);
        assert!(report.killed.is_empty());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }
}
