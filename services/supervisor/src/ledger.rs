//! The launch ledger: every launch's marker (written *before* the fork), every process
//! the service starts for an agent (and, without a PID namespace, every descendant it
//! has seen), one JSON line each, in `<state dir>/launch-ledger.jsonl`. A service that
//! restarts after being SIGKILLed sweeps it: each recorded process that still runs
//! *with the recorded start time* is SIGKILLed (with its process group when it leads
//! one), and so is every process whose environment still carries a recorded launch
//! marker — a descendant forked too late for any census to see it is found that way;
//! a pid that now belongs to another process is left alone. The file is then truncated.
//!
//! Lines are written with plain `write(2)`, not fsynced: the ledger only has to survive
//! the death of the service, never a machine crash (which ends every agent too).

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::procfs;

/// The ledger's file name inside the state directory.
pub const LEDGER_FILE: &str = "launch-ledger.jsonl";

/// The environment variable that carries a launch's marker to the agent and, through
/// fork, exec and `setsid()`, to every descendant that does not replace its environment.
pub const LAUNCH_MARKER_VARIABLE: &str = "CURSOR_RUNNER_LAUNCH";

/// How many times a marker sweep looks again for marked processes: a process forked
/// by a marked one just before it was killed shows up in the next pass.
pub const MAX_MARKER_SWEEP_PASSES: usize = 16;

/// A launch's unique marker: 128 random bits, in hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LaunchMarker(String);

impl LaunchMarker {
    /// A new, unique marker.
    pub fn new() -> io::Result<Self> {
        let mut bytes = [0u8; 16];
        // SAFETY: the buffer is valid for its length; flags 0 (urandom, blocking only
        // until the pool is first initialized).
        let read = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
        if usize::try_from(read).ok() != Some(bytes.len()) {
            return Err(io::Error::last_os_error());
        }
        Ok(Self(hex::encode(bytes)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `CURSOR_RUNNER_LAUNCH=<marker>`, as it appears in `/proc/<pid>/environ`.
    pub fn environ_entry(&self) -> Vec<u8> {
        format!("{LAUNCH_MARKER_VARIABLE}={}", self.0).into_bytes()
    }
}

/// A launch about to happen, recorded before the fork: whatever carries its marker
/// belongs to that execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRecord {
    pub marker: LaunchMarker,
    pub execution_id: String,
    pub generation: i64,
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
enum Line {
    Process(LedgerEntry),
    Launch(LaunchRecord),
}

impl Line {
    fn belongs_to(&self, execution_id: &str, generation: i64) -> bool {
        let (id, g) = match self {
            Line::Process(e) => (&e.execution_id, e.generation),
            Line::Launch(l) => (&l.execution_id, l.generation),
        };
        id == execution_id && g == generation
    }
}

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
    /// A process found by its launch marker (by a sweep, or when its agent ended).
    Marked,
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
    /// Processes that still ran with a recorded identity, or carried a recorded launch
    /// marker, and were killed.
    pub killed: Vec<LedgerEntry>,
    /// Lines that could not be parsed (skipped).
    pub unreadable: usize,
}

/// The ledger of one state directory. Entries of executions still running are kept in
/// memory, so the file can be rewritten without those that ended.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    live: Vec<Line>,
    /// Held for the ledger's life: one live process per state directory, since each sweeps
    /// (kills) what the directory's ledger names.
    _lock: std::fs::File,
}

/// The lock file beside the ledger.
const LOCK_FILE: &str = "launch-ledger.lock";

impl Ledger {
    /// Sweeps what a previous incarnation left in `state_dir`, truncates the file, and
    /// returns the (empty) ledger with the sweep's report.
    ///
    /// Another live process holding the directory's ledger is
    /// [`io::ErrorKind::WouldBlock`]: its agents are not a previous incarnation's to sweep.
    pub fn open(state_dir: &Path) -> io::Result<(Self, SweepReport)> {
        std::fs::create_dir_all(state_dir)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(state_dir.join(LOCK_FILE))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(io::ErrorKind::WouldBlock.into()),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        let path = state_dir.join(LEDGER_FILE);
        let report = sweep(&path)?;
        std::fs::File::create(&path)?;
        Ok((
            Self {
                path,
                live: Vec::new(),
                _lock: lock,
            },
            report,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one process.
    pub fn record(&mut self, entry: LedgerEntry) -> io::Result<()> {
        self.append(Line::Process(entry))
    }

    /// Appends a launch's marker: call it before the fork, so no process of the launch
    /// can exist unrecorded.
    pub fn record_launch(&mut self, launch: LaunchRecord) -> io::Result<()> {
        self.append(Line::Launch(launch))
    }

    fn append(&mut self, entry: Line) -> io::Result<()> {
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
        self.live.retain(|line| !line.belongs_to(execution_id, generation));
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
/// recorded start time (its group too when it leads one), then every process that
/// carries a recorded launch marker. Nothing else is touched: a reused pid has another
/// start time, and no process outside a launch carries its marker.
pub fn sweep(path: &Path) -> io::Result<SweepReport> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SweepReport::default()),
        Err(e) => return Err(e),
    };
    let mut report = SweepReport::default();
    let mut launches = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Line>(line) {
            Ok(Line::Process(entry)) => {
                report.recorded += 1;
                if kill_if_same(&entry) {
                    report.killed.push(entry);
                }
            }
            Ok(Line::Launch(launch)) => {
                report.recorded += 1;
                launches.push(launch);
            }
            Err(_) => report.unreadable += 1,
        }
    }
    report.killed.extend(kill_marked(&launches));
    Ok(report)
}

/// SIGKILLs every running process (but this one) whose environment carries the marker
/// of one of `launches`, pass after pass until a pass finds none it has not killed
/// already (at most [`MAX_MARKER_SWEEP_PASSES`]): a child forked just before its parent
/// was killed is found by the next pass.
pub fn kill_marked(launches: &[LaunchRecord]) -> Vec<LedgerEntry> {
    let mut killed = Vec::new();
    if launches.is_empty() {
        return killed;
    }
    let entries: Vec<Vec<u8>> = launches.iter().map(|l| l.marker.environ_entry()).collect();
    let me = std::process::id() as i32;
    let mut seen = HashSet::new();
    for _ in 0..MAX_MARKER_SWEEP_PASSES {
        let mut found = false;
        for stat in procfs::all().into_values() {
            if stat.pid == me || !stat.is_running() || seen.contains(&(stat.pid, stat.start_time)) {
                continue;
            }
            let Some(launch) = entries
                .iter()
                .position(|entry| procfs::environ_contains(stat.pid, entry))
                .map(|index| &launches[index])
            else {
                continue;
            };
            found = true;
            seen.insert((stat.pid, stat.start_time));
            if procfs::signal_if_same(stat.pid, stat.start_time, libc::SIGKILL) {
                killed.push(LedgerEntry {
                    pid: stat.pid,
                    pgid: stat.pgid,
                    start_time: stat.start_time,
                    execution_id: launch.execution_id.clone(),
                    generation: launch.generation,
                    role: LedgerRole::Marked,
                });
            }
        }
        if !found {
            break;
        }
    }
    killed
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
    fn a_launch_line_round_trips_and_is_retired_with_its_execution() {
        let dir = tempfile::tempdir().unwrap();
        let (mut ledger, _) = Ledger::open(dir.path()).unwrap();
        let launch = LaunchRecord {
            marker: LaunchMarker::new().unwrap(),
            execution_id: "exec-1".into(),
            generation: 1,
        };
        ledger.record_launch(launch.clone()).unwrap();
        let text = std::fs::read_to_string(ledger.path()).unwrap();
        assert_eq!(serde_json::from_str::<Line>(text.trim()).unwrap(), Line::Launch(launch));
        ledger.retire("exec-1", 1).unwrap();
        assert_eq!(std::fs::read_to_string(ledger.path()).unwrap(), "");
    }

    #[test]
    fn markers_are_unique_and_name_their_variable() {
        let (a, b) = (LaunchMarker::new().unwrap(), LaunchMarker::new().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert_eq!(
            a.environ_entry(),
            format!("CURSOR_RUNNER_LAUNCH={}", a.as_str()).into_bytes()
        );
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
