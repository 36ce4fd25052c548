//! The few facts about a process this crate reads from the host's `/proc`: its parent,
//! group, session, state and start time, and whether its environment carries a launch
//! marker. A process's identity is (pid, start time): a pid alone can be reused, the
//! pair cannot.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// One process as `/proc/<pid>/stat` describes it (fields 3–6 and 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    /// `R`, `S`, `D`, `Z` (zombie), `X` (dead), …
    pub state: char,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    /// Clock ticks after boot at which the process started (field 22).
    pub start_time: u64,
}

impl ProcStat {
    /// Exited processes (zombies waiting for a reaper, or dead ones) count as gone.
    pub fn is_running(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may contain
/// spaces and parentheses, so the fields are read after its last `)`.
pub fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    let (_, rest) = text.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgid: fields.get(2)?.parse().ok()?,
        sid: fields.get(3)?.parse().ok()?,
        // Field 22 is the 20th after the command name.
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// The process `pid`, if it exists (zombies included).
pub fn stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// The start time of `pid`, if it exists.
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// True when `pid` is running and still the process that started at `start_time`.
pub fn is_same_running(pid: i32, start_time: u64) -> bool {
    stat(pid).is_some_and(|s| s.start_time == start_time && s.is_running())
}

/// Sends `signal` to `pid` only if it is still the process that started at
/// `start_time`. A pidfd pins the process first, so the pid cannot be reused between
/// the identity check and the signal. Returns whether the signal was delivered.
pub fn signal_if_same(pid: i32, start_time: u64, signal: i32) -> bool {
    // SAFETY: plain system calls; the descriptor is owned and closed below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` was just returned by pidfd_open and is owned here only.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    if !is_same_running(pid, start_time) {
        return false;
    }
    // SAFETY: a valid pidfd, a null siginfo, no flags.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    sent == 0
}

/// Whether `pid`'s environment (`/proc/<pid>/environ`: the block it was exec'd with)
/// holds exactly `entry` (`NAME=value`). False when it cannot be read: an exited
/// process, or one this process may not inspect.
pub fn environ_contains(pid: i32, entry: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| environ.split(|b| *b == 0).any(|e| e == entry))
}

/// Whether `pid`'s environment sets the variable `name` (any value); false when it cannot
/// be read.
pub fn environ_sets(pid: i32, name: &str) -> bool {
    let prefix = [name.as_bytes(), b"="].concat();
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|b| *b == 0).any(|e| e.starts_with(&prefix)))
}

/// Every process visible in `/proc`, by pid.
pub fn all() -> HashMap<i32, ProcStat> {
    let mut out = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(stat) = stat(pid) {
            out.insert(pid, stat);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped_whole() {
        let text = "42 (a (weird) name) S 7 42 40 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 1 2 3";
        let stat = parse_stat(42, text).unwrap();
        assert_eq!(
            stat,
            ProcStat {
                pid: 42,
                state: 'S',
                ppid: 7,
                pgid: 42,
                sid: 40,
                start_time: 123456,
            }
        );
        assert!(stat.is_running());
    }

    #[test]
    fn this_process_is_found_with_its_start_time() {
        let pid = std::process::id() as i32;
        let me = stat(pid).expect("own stat");
        assert!(me.is_running());
        assert!(is_same_running(pid, me.start_time));
        assert!(!is_same_running(pid, me.start_time + 1));
        assert!(all().contains_key(&pid));
    }

    #[test]
    fn an_environment_entry_is_matched_whole() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("PROCFS_TEST_MARKER", "abc")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Until it execs, the child shows the environment it was forked with (ours).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !environ_contains(pid, b"PROCFS_TEST_MARKER=abc") {
            assert!(std::time::Instant::now() < deadline, "the marker never appeared");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            !environ_contains(pid, b"PROCFS_TEST_MARKER=ab"),
            "a prefix is not a match"
        );
        assert!(!environ_contains(std::process::id() as i32, b"PROCFS_TEST_MARKER=abc"));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_signal_reaches_a_process_only_with_its_own_start_time() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let start = start_time(pid).unwrap();
        assert!(
            !signal_if_same(pid, start + 1, libc::SIGKILL),
            "another start time: left alone"
        );
        assert!(stat(pid).unwrap().is_running());
        assert!(signal_if_same(pid, start, libc::SIGKILL));
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }
}
