//! The lifetime guardian: no agent process, nor any descendant, outlives its execution
//! or the service.
//!
//! | mechanism | covers | where |
//! |---|---|---|
//! | PID namespace (`agent-init` as PID 1) | every descendant, `setsid()` or not, when the agent exits, is stopped, or the service dies | root or `CAP_SYS_ADMIN`, and an `agent-init` binary configured |
//! | private `/proc` (a mount namespace with a fresh procfs, set up by `agent-init`) | not lifetime but sight: the agent sees its own namespace's processes only, never the service's command line nor the host's processes | with a PID namespace, when the start-up probe could mount one |
//! | parent-death signal (SIGKILL), armed from one long-lived spawner thread | the launched process (init, or the agent without a namespace) when the service dies | always |
//! | own process group + stop ladder | the agent and the descendants that stayed in its group | always |
//! | child subreaper + census | without a namespace: descendants the census has seen (tree walk every [`CENSUS_INTERVAL`] and right before a stop) are killed when their execution ends, orphans adopted by the service are reaped | always (the census only without a namespace) |
//! | launch marker (`CURSOR_RUNNER_LAUNCH` in the agent's environment, inherited by every descendant) | without a namespace: every descendant that kept its environment, seen by a census or not, when the agent ends (killed, and reaped once adopted) | always |
//! | launch ledger | after a SIGKILL of the service: what was recorded (the marker, written before the fork; init and agent; without a namespace also the census's descendants) is killed at the next start-up if pid *and* start time still match, or if it carries the marker | a writable state directory |
//!
//! The reaper thread only `waitpid`s pids it knows are adopted descendants of an agent,
//! never a child that tokio (or anyone else in the process) spawned and will wait for.

use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::process::{ChildStdin, ChildStdout};

use crate::launch::{LaunchError, LaunchSpec};
use crate::lease_feed::AgentDeadline;
use crate::ledger::{LaunchMarker, LaunchRecord, Ledger, LedgerEntry, LedgerRole};
use crate::process::{AgentProcess, Isolation, TreeWatch};
use crate::procfs::{self, ProcStat};
use crate::spawner::Spawner;

/// How often the census walks `/proc` for descendants of agents launched without a
/// namespace (only while there are some).
pub const CENSUS_INTERVAL: Duration = Duration::from_millis(200);

/// Another live process uses the state directory (its launch ledger): each process needs its
/// own, or each would sweep, and kill, the other's agents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("another live cursor-runner uses the state directory {}: each process needs its own --state-dir", .0.display())]
pub struct StateDirInUse(pub PathBuf);

/// What the guardian is configured with.
#[derive(Debug, Clone)]
pub struct GuardianConfig {
    /// The ledger lives here (`launch-ledger.jsonl`).
    pub state_dir: PathBuf,
    /// The binary whose hidden `agent-init` mode runs as PID 1 of each agent's
    /// namespace; `None` launches agents directly.
    pub agent_init: Option<PathBuf>,
    /// `false` turns the PID namespace off even with `agent_init` set.
    pub pid_namespace: bool,
    /// The service's ownership lease deadline, which each agent's init enforces even while
    /// the service is stopped (`agent-init --lease-fd`); `None` inside: no deadline.
    pub lease: Option<AgentDeadline>,
}

/// Which mechanisms are active (logged at start-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GuardianReport {
    pub pid_namespace: bool,
    pub pdeathsig: bool,
    pub subreaper: bool,
    pub ledger: bool,
    /// Agents in a PID namespace get a fresh `/proc` of it (else they see the host's).
    pub private_proc: bool,
}

/// Launches agents and keeps them from outliving their execution or the service.
#[derive(Clone)]
pub struct Guardian {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Guardian {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guardian").field("report", &self.inner.report).finish()
    }
}

struct Inner {
    report: GuardianReport,
    isolation: Isolation,
    ledger: Mutex<Option<Ledger>>,
    tracked: Mutex<HashMap<u64, Tracked>>,
    next_key: AtomicU64,
}

/// One launched agent and what is known to descend from it.
struct Tracked {
    execution_id: String,
    generation: i64,
    root_pid: i32,
    root_start: u64,
    /// Walk `/proc` for descendants (no namespace to do it for us).
    census: bool,
    /// `CURSOR_RUNNER_LAUNCH=<marker>`: once the agent ended, whatever still carries it
    /// is one of its descendants.
    marker: Vec<u8>,
    /// Descendants seen so far: pid → start time.
    known: HashMap<i32, u64>,
    /// The agent has exited and been reaped: whatever is known must die.
    ended: bool,
}

impl Guardian {
    /// Sweeps the ledger a previous incarnation left, registers the service as child
    /// subreaper, starts the spawner and reaper threads, and logs the report. Refused while
    /// another live process uses the state directory.
    pub fn start(config: GuardianConfig) -> Result<Self, StateDirInUse> {
        let ledger = match Ledger::open(&config.state_dir) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(StateDirInUse(config.state_dir.clone()));
            }
            Ok((ledger, sweep)) => {
                for entry in &sweep.killed {
                    tracing::warn!(
                        pid = entry.pid,
                        role = ?entry.role,
                        execution_id = %entry.execution_id,
                        "killed a process a previous incarnation left running"
                    );
                }
                if sweep.recorded > 0 {
                    tracing::info!(
                        recorded = sweep.recorded,
                        killed = sweep.killed.len(),
                        unreadable = sweep.unreadable,
                        "launch ledger swept"
                    );
                }
                Some(ledger)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the launch ledger is unavailable; survivors of a crash will not be swept");
                None
            }
        };
        let subreaper = match nix::sys::prctl::set_child_subreaper(true) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot become a child subreaper");
                false
            }
        };
        let spawner = Spawner::global();
        let isolation = match (&config.agent_init, config.pid_namespace) {
            (Some(init), true) if !init.is_file() => {
                tracing::warn!(init = %init.display(), "the agent-init binary does not exist; no PID namespace");
                Isolation::Direct
            }
            (Some(init), true) => match spawner.run(|context| context.can_create_pid_namespaces()) {
                Ok(true) => {
                    let private_proc = spawner.run(|context| context.can_mount_private_proc()).unwrap_or(false);
                    if !private_proc {
                        tracing::warn!(
                            "a private /proc cannot be mounted here; agents see the host's processes and their command lines"
                        );
                    }
                    Isolation::PidNamespace {
                        init: init.clone(),
                        private_proc,
                        lease: config.lease.clone(),
                    }
                }
                _ => {
                    tracing::warn!("PID namespaces are not permitted here; using the fallback mechanisms only");
                    Isolation::Direct
                }
            },
            _ => Isolation::Direct,
        };
        let report = GuardianReport {
            pid_namespace: matches!(isolation, Isolation::PidNamespace { .. }),
            pdeathsig: true,
            subreaper,
            ledger: ledger.is_some(),
            private_proc: matches!(isolation, Isolation::PidNamespace { private_proc: true, .. }),
        };
        tracing::info!(
            pid_namespace = report.pid_namespace,
            pdeathsig = report.pdeathsig,
            subreaper = report.subreaper,
            ledger = report.ledger,
            private_proc = report.private_proc,
            "agent lifetime guardian"
        );
        let inner = Arc::new(Inner {
            report,
            isolation,
            ledger: Mutex::new(ledger),
            tracked: Mutex::new(HashMap::new()),
            next_key: AtomicU64::new(1),
        });
        Reaper::global().register(&inner);
        Ok(Self { inner })
    }

    pub fn report(&self) -> GuardianReport {
        self.inner.report
    }

    /// The ledger file, when there is one.
    pub fn ledger_path(&self) -> Option<PathBuf> {
        self.inner.ledger.lock().as_ref().map(|l| l.path().to_path_buf())
    }

    /// Launches an agent for `execution_id` (generation `generation`) with every active
    /// mechanism, and records it in the ledger: its marker before the fork, its
    /// processes after. Must be called inside a tokio runtime.
    pub fn spawn(
        &self,
        spec: &LaunchSpec,
        execution_id: &str,
        generation: i64,
    ) -> Result<(AgentProcess, ChildStdin, ChildStdout), LaunchError> {
        let marker = LaunchMarker::new().map_err(|e| LaunchError::Spawn(format!("no launch marker: {e}")))?;
        if let Some(ledger) = self.inner.ledger.lock().as_mut() {
            let launch = LaunchRecord {
                marker: marker.clone(),
                execution_id: execution_id.to_owned(),
                generation,
            };
            if let Err(e) = ledger.record_launch(launch) {
                tracing::warn!(error = %e, "recording a launch marker in the ledger failed");
            }
        }
        let launched = AgentProcess::launch(spec, &self.inner.isolation, Some(&marker));
        let (mut process, stdin, stdout) = match launched {
            Ok(launched) => launched,
            Err(e) => {
                // Nothing was started: the marker names no process.
                if let Some(ledger) = self.inner.ledger.lock().as_mut()
                    && let Err(e) = ledger.retire(execution_id, generation)
                {
                    tracing::warn!(error = %e, "rewriting the launch ledger failed");
                }
                return Err(e);
            }
        };
        let agent = process.pid() as i32;
        let root = procfs::stat(agent);
        let mut entries = Vec::new();
        if let Some(init) = process.init_pid().and_then(|pid| procfs::stat(pid as i32)) {
            entries.push((init, LedgerRole::Init));
        }
        if let Some(root) = root.filter(|_| Some(agent as u32) != process.init_pid()) {
            entries.push((root, LedgerRole::Agent));
        }
        {
            let mut ledger = self.inner.ledger.lock();
            if let Some(ledger) = ledger.as_mut() {
                for (stat, role) in entries {
                    let entry = ledger_entry(&stat, execution_id, generation, role);
                    if let Err(e) = ledger.record(entry) {
                        tracing::warn!(error = %e, "recording a launch in the ledger failed");
                    }
                }
            }
        }
        let key = self.inner.next_key.fetch_add(1, Ordering::Relaxed);
        self.inner.tracked.lock().insert(
            key,
            Tracked {
                execution_id: execution_id.to_owned(),
                generation,
                root_pid: agent,
                root_start: root.map_or(0, |s| s.start_time),
                census: matches!(self.inner.isolation, Isolation::Direct),
                marker: marker.environ_entry(),
                known: HashMap::new(),
                ended: false,
            },
        );
        tracing::info!(
            execution_id,
            agent_pid = agent,
            init_pid = process.init_pid(),
            pid_namespace = self.inner.report.pid_namespace,
            "agent launched"
        );
        process.attach(Box::new(Registration {
            inner: self.inner.clone(),
            key,
        }));
        Ok((process, stdin, stdout))
    }
}

fn ledger_entry(stat: &ProcStat, execution_id: &str, generation: i64, role: LedgerRole) -> LedgerEntry {
    LedgerEntry {
        pid: stat.pid,
        pgid: stat.pgid,
        start_time: stat.start_time,
        execution_id: execution_id.to_owned(),
        generation,
        role,
    }
}

/// An agent's tie to its guardian, held by its [`AgentProcess`].
pub(crate) struct Registration {
    inner: Arc<Inner>,
    key: u64,
}

impl TreeWatch for Registration {
    /// Walks `/proc` now for this agent's descendants (before a stop, while the tree
    /// still hangs from the agent).
    fn census(&self) {
        let wanted = self
            .inner
            .tracked
            .lock()
            .get(&self.key)
            .is_some_and(|t| t.census && !t.ended);
        if wanted {
            let procs = procfs::all();
            self.inner.tick(&procs, Some(self.key));
        }
    }

    /// The agent has exited and been reaped: kill what is known to descend from it
    /// (with a namespace there is nothing left to kill: just retire its ledger lines).
    fn end(&self) {
        let census = {
            let mut tracked = self.inner.tracked.lock();
            match tracked.get_mut(&self.key) {
                Some(t) if !t.ended => {
                    t.ended = true;
                    Some(t.census)
                }
                _ => None,
            }
        };
        match census {
            Some(true) => {
                let procs = procfs::all();
                self.inner.tick(&procs, Some(self.key));
                Reaper::global().wake();
            }
            Some(false) => self.inner.tick(&HashMap::new(), Some(self.key)),
            None => {}
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.end();
    }
}

impl Inner {
    fn has_work(&self) -> bool {
        self.tracked.lock().values().any(|t| t.census || t.ended)
    }

    /// One census step for one tracked agent (`only`) or all of them: find new
    /// descendants (recorded in the ledger), kill those of ended agents, reap adopted
    /// ones that died, and retire agents with nothing left.
    fn tick(&self, procs: &HashMap<i32, ProcStat>, only: Option<u64>) {
        let me = std::process::id() as i32;
        let mut found = Vec::new();
        let mut retired = Vec::new();
        {
            let mut tracked = self.tracked.lock();
            for (key, t) in tracked.iter_mut() {
                if only.is_some_and(|k| k != *key) {
                    continue;
                }
                if t.census {
                    let mut new = t.expand(procs);
                    if t.ended {
                        new.extend(t.marked(procs));
                    }
                    for stat in new {
                        found.push(ledger_entry(
                            &stat,
                            &t.execution_id,
                            t.generation,
                            LedgerRole::Descendant,
                        ));
                    }
                    if t.ended {
                        for (pid, start) in &t.known {
                            procfs::signal_if_same(*pid, *start, libc::SIGKILL);
                        }
                    }
                    t.known.retain(|pid, start| match procs.get(pid) {
                        Some(stat) if stat.start_time == *start && stat.is_running() => true,
                        Some(stat) if stat.start_time == *start => {
                            // An adopted orphan that died: ours to reap (never one of
                            // tokio's children, which are agents, not descendants).
                            if stat.ppid == me {
                                let _ = waitpid(Pid::from_raw(*pid), Some(WaitPidFlag::WNOHANG));
                            }
                            false
                        }
                        _ => false,
                    });
                    // Killed just now: keep them until the next pass sees them gone.
                    if t.ended && t.known.is_empty() {
                        retired.push(*key);
                    }
                } else if t.ended {
                    retired.push(*key);
                }
            }
            let retired: Vec<(String, i64)> = retired
                .iter()
                .filter_map(|key| tracked.remove(key))
                .map(|t| (t.execution_id, t.generation))
                .collect();
            let mut ledger = self.ledger.lock();
            if let Some(ledger) = ledger.as_mut() {
                for entry in found {
                    if let Err(e) = ledger.record(entry) {
                        tracing::warn!(error = %e, "recording a descendant in the ledger failed");
                    }
                }
                for (execution_id, generation) in retired {
                    if let Err(e) = ledger.retire(&execution_id, generation) {
                        tracing::warn!(error = %e, "rewriting the launch ledger failed");
                    }
                }
            }
        }
    }
}

impl Tracked {
    /// Adds every process that hangs from the agent or from a known descendant —
    /// by parent, or by a process group or session one of them created — and returns
    /// the new ones. Identities are checked by start time, so a reused pid is never
    /// taken for a known one.
    fn expand(&mut self, procs: &HashMap<i32, ProcStat>) -> Vec<ProcStat> {
        let same = |pid: i32, start: u64| procs.get(&pid).is_some_and(|s| s.start_time == start);
        let mut anchors: HashSet<i32> = self
            .known
            .iter()
            .filter(|(pid, start)| same(**pid, **start))
            .map(|(pid, _)| *pid)
            .collect();
        if same(self.root_pid, self.root_start) {
            anchors.insert(self.root_pid);
        }
        let mut found = Vec::new();
        loop {
            let before = found.len();
            for stat in procs.values() {
                if stat.pid == self.root_pid || anchors.contains(&stat.pid) {
                    continue;
                }
                if anchors.contains(&stat.ppid) || anchors.contains(&stat.pgid) || anchors.contains(&stat.sid) {
                    anchors.insert(stat.pid);
                    self.known.insert(stat.pid, stat.start_time);
                    found.push(*stat);
                }
            }
            if found.len() == before {
                return found;
            }
        }
    }

    /// Once the agent ended: adds every running process that carries the launch's marker
    /// — one forked and orphaned between two censuses, or a census never ran for — and
    /// returns the new ones.
    fn marked(&mut self, procs: &HashMap<i32, ProcStat>) -> Vec<ProcStat> {
        let mut found = Vec::new();
        for stat in procs.values() {
            let known = self.known.get(&stat.pid) == Some(&stat.start_time);
            if !known && stat.is_running() && procfs::environ_contains(stat.pid, &self.marker) {
                self.known.insert(stat.pid, stat.start_time);
                found.push(*stat);
            }
        }
        found
    }
}

/// The process-wide census and reaping thread.
struct Reaper {
    guardians: Mutex<Vec<Weak<Inner>>>,
    wake: Condvar,
}

impl Reaper {
    fn global() -> &'static Reaper {
        static REAPER: OnceLock<&'static Reaper> = OnceLock::new();
        REAPER.get_or_init(|| {
            let reaper: &'static Reaper = Box::leak(Box::new(Reaper {
                guardians: Mutex::new(Vec::new()),
                wake: Condvar::new(),
            }));
            std::thread::Builder::new()
                .name("agent-reaper".into())
                .spawn(move || reaper.run())
                .expect("starting the agent reaper thread");
            reaper
        })
    }

    fn register(&self, inner: &Arc<Inner>) {
        let mut guardians = self.guardians.lock();
        guardians.retain(|g| g.strong_count() > 0);
        guardians.push(Arc::downgrade(inner));
    }

    fn wake(&self) {
        self.wake.notify_all();
    }

    fn run(&self) {
        loop {
            let live: Vec<Arc<Inner>> = {
                let mut guardians = self.guardians.lock();
                self.wake.wait_for(&mut guardians, CENSUS_INTERVAL);
                guardians.iter().filter_map(Weak::upgrade).collect()
            };
            let busy: Vec<&Arc<Inner>> = live.iter().filter(|g| g.has_work()).collect();
            if busy.is_empty() {
                continue;
            }
            let procs = procfs::all();
            for guardian in busy {
                guardian.tick(&procs, None);
            }
        }
    }
}
