//! The host's view of processes, read straight from `/proc` (independently of the
//! service's own code): trees, identities (pid + start time), PID-namespace pids.

use std::collections::HashMap;
use std::time::Duration;

use crate::WAIT;

/// One process as the host's `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostProcess {
    pub pid: i32,
    pub state: char,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    /// Field 22: with the pid, the process's identity.
    pub start_time: u64,
}

impl HostProcess {
    /// Zombies (exited, waiting for a reaper — the host's init can take seconds) are dead.
    pub fn running(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// Still running, and still the same process (not a reused pid).
    pub fn still_running(&self) -> bool {
        host_process(self.pid).is_some_and(|p| p.start_time == self.start_time && p.running())
    }
}

pub fn host_process(pid: i32) -> Option<HostProcess> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(") ")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(HostProcess {
        pid,
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgid: f.get(2)?.parse().ok()?,
        sid: f.get(3)?.parse().ok()?,
        start_time: f.get(19)?.parse().ok()?,
    })
}

pub fn host_processes() -> Vec<HostProcess> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(host_process)
        .collect()
}

/// Every running process below `root` in the host's process tree (not `root` itself).
pub fn descendants_of(root: i32) -> Vec<HostProcess> {
    let all = host_processes();
    let mut children: HashMap<i32, Vec<HostProcess>> = HashMap::new();
    for p in &all {
        children.entry(p.ppid).or_default().push(*p);
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            queue.push(child.pid);
            if child.running() {
                out.push(*child);
            }
        }
    }
    out
}

/// The command line of `pid`, arguments joined by spaces.
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " ").trim().to_owned())
        .unwrap_or_default()
}

/// `NSpid` of `pid`: its pid in each PID namespace from the host's down to its own.
pub fn ns_pids(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .map(|v| v.split_whitespace().filter_map(|n| n.parse().ok()).collect())
        })
        .unwrap_or_default()
}

/// True when `pid` ignores SIGTERM (`SigIgn` in its status).
pub fn ignores_sigterm(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (15 - 1)) != 0)
}

/// Polls until none of `processes` runs any more, or fails the test after `WAIT`.
pub async fn until_all_gone(what: &str, processes: &[HostProcess]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let alive: Vec<String> = processes
            .iter()
            .filter(|p| p.still_running())
            .map(|p| format!("{} ({})", p.pid, cmdline(p.pid)))
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: still running after {WAIT:?}: {alive:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls until `check` yields a value, or fails the test after `WAIT`.
pub async fn until_some<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The fake agent's two sleepers below `root` (`spawn_sleeper` runs `sleep 100000`):
/// the one that stayed in the agent's process group, and the one that called
/// `setsid()` and ignores SIGTERM. Waits until both have exec'd.
pub async fn the_two_sleepers(root: i32) -> (HostProcess, HostProcess) {
    until_some("the agent's two sleepers", || {
        let sleepers: Vec<HostProcess> = descendants_of(root)
            .into_iter()
            .filter(|p| cmdline(p.pid).contains("100000"))
            .collect();
        let detached = sleepers.iter().find(|p| p.sid == p.pid && ignores_sigterm(p.pid))?;
        let grouped = sleepers.iter().find(|p| p.sid != p.pid)?;
        Some((*grouped, *detached))
    })
    .await
}

/// Every pid recorded in the launch ledger under `state_dir`.
pub fn ledger_pids(state_dir: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(state_dir.join("launch-ledger.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["pid"].as_i64().map(|p| p as i32))
        .collect()
}
