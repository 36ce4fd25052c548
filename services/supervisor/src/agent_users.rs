//! Agents under their own uids. An agent runs arbitrary shell commands; agents sharing
//! one account could read each other's `/proc/<pid>/environ`, and one running as the
//! service could read its configuration and tokens. So each agent process gets an
//! unprivileged uid of its own from a provisioned range (`cursor-agent-<n>` with real
//! passwd entries — Node's `os.userInfo()` throws without one — all in the group
//! `cursor-agents`), held for the process's life and reused only once nothing of it is
//! left running.

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

/// The names of provisioned agent accounts: `cursor-agent-0`, `cursor-agent-1`, …
pub const AGENT_USER_PREFIX: &str = "cursor-agent-";
/// Their shared primary group: operators make workspaces writable for it.
pub const AGENT_GROUP: &str = "cursor-agents";
/// Where `setup-agent-users` starts numbering by default (far from login and system users).
pub const DEFAULT_FIRST_AGENT_UID: u32 = 61000;
/// Most agent users provisioned at once.
pub const MAX_AGENT_USERS: u32 = 4096;

/// The uid and gid one agent process runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentIdentity {
    pub uid: u32,
    pub gid: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentUsersError {
    #[error("provisioning agent users needs root")]
    NotRoot,
    #[error("`{0}` exists with another uid ({1}); remove it or pick another --first-uid")]
    Conflict(String, u32),
    #[error("{command} failed: {detail}")]
    Command { command: String, detail: String },
    #[error("at most {MAX_AGENT_USERS} agent users")]
    TooMany,
}

/// The provisioned agent accounts, and which are free.
#[derive(Clone)]
pub struct AgentUsers {
    inner: Arc<Inner>,
}

struct Inner {
    free: Mutex<BTreeSet<AgentIdentity>>,
    /// Every agent account's uid, free or not.
    uids: BTreeSet<u32>,
    count: usize,
    /// Kill whatever still runs under a uid before it is handed out and once it is given
    /// back (off only for accounts that are not this host's).
    sweep: bool,
}

impl std::fmt::Debug for AgentUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentUsers").field("count", &self.inner.count).finish()
    }
}

impl AgentUsers {
    /// The `cursor-agent-<n>` accounts of this host's passwd database.
    pub fn discover() -> Self {
        Self::from_passwd(&std::fs::read_to_string("/etc/passwd").unwrap_or_default(), true)
    }

    fn from_passwd(passwd: &str, sweep: bool) -> Self {
        let identities: BTreeSet<AgentIdentity> = passwd
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(':').collect();
                let suffix = fields.first()?.strip_prefix(AGENT_USER_PREFIX)?;
                suffix.parse::<u32>().ok()?;
                Some(AgentIdentity {
                    uid: fields.get(2)?.parse().ok()?,
                    gid: fields.get(3)?.parse().ok()?,
                })
            })
            .filter(|identity| identity.uid != 0 && identity.gid != 0)
            .collect();
        Self {
            inner: Arc::new(Inner {
                count: identities.len(),
                uids: identities.iter().map(|identity| identity.uid).collect(),
                free: Mutex::new(identities),
                sweep,
            }),
        }
    }

    /// How many agent accounts exist.
    pub fn count(&self) -> usize {
        self.inner.count
    }

    /// Every agent account's uid: nothing running under one is the service's own.
    pub fn uids(&self) -> BTreeSet<u32> {
        self.inner.uids.clone()
    }

    /// A free identity for one process, returned when the lease drops; `None` when all
    /// are in use.
    pub fn take(&self) -> Option<AgentLease> {
        let mut free = self.inner.free.lock();
        // Another service on this host may hold some: a uid is this process's only while
        // it holds the uid's lock file.
        let candidates: Vec<AgentIdentity> = free.iter().copied().collect();
        for identity in candidates {
            let Some(host_lock) = lock_uid(identity.uid) else {
                continue;
            };
            free.remove(&identity);
            drop(free);
            // Whatever a previous holder left running goes first: the uid is reused only empty.
            if self.inner.sweep {
                kill_everything_of(identity.uid);
            }
            return Some(AgentLease {
                identity,
                users: self.inner.clone(),
                _host_lock: host_lock,
            });
        }
        None
    }

    /// Creates the group and `count` users (idempotent: existing matching accounts are
    /// kept). Runs `groupadd` / `useradd`, so it needs root.
    pub fn provision(count: u32, first_uid: u32) -> Result<(), AgentUsersError> {
        if count > MAX_AGENT_USERS {
            return Err(AgentUsersError::TooMany);
        }
        if !nix::unistd::geteuid().is_root() {
            return Err(AgentUsersError::NotRoot);
        }
        let gid = match nix::unistd::Group::from_name(AGENT_GROUP).ok().flatten() {
            Some(group) => group.gid.as_raw(),
            None => {
                run("groupadd", &["--system", "--gid", &first_uid.to_string(), AGENT_GROUP])?;
                first_uid
            }
        };
        for n in 0..count {
            let name = format!("{AGENT_USER_PREFIX}{n}");
            let uid = first_uid + n;
            match nix::unistd::User::from_name(&name).ok().flatten() {
                Some(user) if user.uid.as_raw() == uid => continue,
                Some(user) => return Err(AgentUsersError::Conflict(name, user.uid.as_raw())),
                None => run(
                    "useradd",
                    &[
                        "--system",
                        "--no-create-home",
                        "--home-dir",
                        "/nonexistent",
                        "--shell",
                        "/usr/sbin/nologin",
                        "--no-user-group",
                        "--gid",
                        &gid.to_string(),
                        "--uid",
                        &uid.to_string(),
                        &name,
                    ],
                )?,
            }
        }
        Ok(())
    }
}

fn run(program: &str, args: &[&str]) -> Result<(), AgentUsersError> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| AgentUsersError::Command {
            command: program.into(),
            detail: e.to_string(),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(AgentUsersError::Command {
            command: format!("{program} {}", args.join(" ")),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// Where the per-uid lock files live: shared by every service on the host.
fn lock_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("cursor-runner-agent-uids")
}

/// An exclusive, non-blocking lock on `uid` across processes; `None` if another holds it.
fn lock_uid(uid: u32) -> Option<nix::fcntl::Flock<std::fs::File>> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = lock_dir();
    let _ = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(dir.join(format!("{uid}.lock")))
        .ok()?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).ok()
}

/// One identity held for one agent process.
pub struct AgentLease {
    identity: AgentIdentity,
    users: Arc<Inner>,
    /// Released (after the sweep) when the lease drops.
    _host_lock: nix::fcntl::Flock<std::fs::File>,
}

impl AgentLease {
    pub fn identity(&self) -> AgentIdentity {
        self.identity
    }
}

impl std::fmt::Debug for AgentLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AgentLease").field(&self.identity).finish()
    }
}

impl Drop for AgentLease {
    fn drop(&mut self) {
        if self.users.sweep {
            kill_everything_of(self.identity.uid);
        }
        self.users.free.lock().insert(self.identity);
    }
}

/// SIGKILLs every process whose real uid is `uid` (only an agent's ever are).
fn kill_everything_of(uid: u32) {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if real_uid(&entry.path()) == Some(uid) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

fn real_uid(proc_dir: &Path) -> Option<u32> {
    let status = std::fs::read_to_string(proc_dir.join("status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Gives `path` and everything below it (never following links) to `identity`.
pub fn give_to(path: &Path, identity: AgentIdentity) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(identity.uid), Some(identity.gid))?;
    if std::fs::symlink_metadata(path)?.is_dir() {
        for entry in std::fs::read_dir(path)? {
            give_to(&entry?.path(), identity)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        cursor-agent-0:x:71000:71000::/nonexistent:/usr/sbin/nologin\n\
        cursor-agent-1:x:71001:71000::/nonexistent:/usr/sbin/nologin\n\
        cursor-agent-x:x:71009:71000::/nonexistent:/usr/sbin/nologin\n\
        cursor-agent-2:x:0:0::/root:/bin/sh\n\
        nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n";

    #[test]
    fn only_numbered_unprivileged_agent_accounts_are_used() {
        let users = AgentUsers::from_passwd(PASSWD, false);
        assert_eq!(users.count(), 2, "not root, not a name without a number");
        let first = users.take().unwrap();
        let second = users.take().unwrap();
        assert_ne!(first.identity(), second.identity());
        assert!(users.take().is_none(), "all in use");
        drop(first);
        assert!(users.take().is_some(), "returned when the process is gone");
    }
}
