//! Continuous workspace protection. Admission cannot stop a concurrent edit, so for
//! the life of a session the directories the workspace policy reads are watched, and
//! any change there re-runs the policy. This narrows the race between a check and the
//! agent loading project configuration; it cannot close it (the agent may read a file
//! in the instant between its creation and our reaction).
//!
//! One inotify instance serves every session (the per-user instance limit is small),
//! read by one background thread for the life of the service.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::sync::mpsc;

use crate::workspace_policy::{WorkspacePolicy, WorkspaceRefusal, directories_to_check};

/// Subdirectories (of each checked directory) that hold refused configuration.
const CONFIG_DIRS: [&str; 2] = [".cursor", ".claude"];

/// What a watch reports: the policy now refuses the workspace.
pub type Violation = WorkspaceRefusal;

struct Session {
    workspace: PathBuf,
    policy: WorkspacePolicy,
    notify: mpsc::UnboundedSender<Violation>,
    watches: HashSet<i32>,
    reported: bool,
}

struct State {
    inotify: Arc<Inotify>,
    sessions: HashMap<u64, Session>,
    /// Watch descriptor → sessions using it (inotify shares one descriptor per inode).
    users: HashMap<i32, HashSet<u64>>,
    descriptors: HashMap<i32, nix::sys::inotify::WatchDescriptor>,
    next_session: u64,
}

/// The process-wide watcher.
pub struct WorkspaceWatcher {
    state: Mutex<State>,
}

/// A session's watch; dropping it removes the session's watches.
pub struct WatchGuard {
    id: u64,
    watcher: &'static WorkspaceWatcher,
}

#[cfg(test)]
impl WatchGuard {
    /// Whether the session's current violation was reported (and not cleared since).
    fn reported(&self) -> bool {
        self.watcher.lock().sessions.get(&self.id).is_some_and(|s| s.reported)
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.watcher.unwatch(self.id);
    }
}

#[derive(Debug, thiserror::Error)]
#[error("watching the workspace failed: {0}")]
pub struct WatchError(String);

impl WorkspaceWatcher {
    /// The shared watcher, started on first use.
    pub fn global() -> Result<&'static Self, WatchError> {
        static WATCHER: OnceLock<Result<WorkspaceWatcher, String>> = OnceLock::new();
        WATCHER
            .get_or_init(|| {
                let inotify = Arc::new(Inotify::init(InitFlags::IN_CLOEXEC).map_err(|e| e.to_string())?);
                let reader = inotify.clone();
                std::thread::Builder::new()
                    .name("workspace-watch".into())
                    .spawn(move || read_loop(&reader))
                    .map_err(|e| e.to_string())?;
                Ok(Self {
                    state: Mutex::new(State {
                        inotify,
                        sessions: HashMap::new(),
                        users: HashMap::new(),
                        descriptors: HashMap::new(),
                        next_session: 0,
                    }),
                })
            })
            .as_ref()
            .map_err(|e| WatchError(e.clone()))
    }

    /// Watches `workspace` under `policy`; the receiver gets the first violation.
    pub fn watch(
        &'static self,
        workspace: &Path,
        policy: WorkspacePolicy,
    ) -> Result<(WatchGuard, mpsc::UnboundedReceiver<Violation>), WatchError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let real = std::fs::canonicalize(workspace).map_err(|e| WatchError(e.to_string()))?;
        let mut state = self.lock();
        let id = state.next_session;
        state.next_session += 1;
        state.sessions.insert(
            id,
            Session {
                workspace: real,
                policy,
                notify: tx,
                watches: HashSet::new(),
                reported: false,
            },
        );
        state.refresh_watches(id);
        Ok((WatchGuard { id, watcher: self }, rx))
    }

    fn unwatch(&self, id: u64) {
        let mut state = self.lock();
        if let Some(session) = state.sessions.remove(&id) {
            for wd in session.watches {
                state.release(wd, id);
            }
        }
    }

    fn on_event(&self, wd: i32) {
        let mut state = self.lock();
        let sessions: Vec<u64> = state.users.get(&wd).into_iter().flatten().copied().collect();
        for id in sessions {
            state.refresh_watches(id);
            let Some(session) = state.sessions.get_mut(&id) else {
                continue;
            };
            match session.policy.check(&session.workspace) {
                Err(refusal) if !session.reported => {
                    session.reported = true;
                    let _ = session.notify.send(refusal);
                }
                Err(_) => {}
                // Cleared: a violation that comes back later is reported again.
                Ok(()) => session.reported = false,
            }
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }
}

impl State {
    /// Watches every checked directory and its config subdirectories that exist now
    /// (a config directory created later is picked up by its parent's event).
    fn refresh_watches(&mut self, id: u64) {
        let Some(session) = self.sessions.get(&id) else { return };
        let mut paths = Vec::new();
        for dir in directories_to_check(&session.workspace) {
            for sub in CONFIG_DIRS {
                let config = dir.join(sub);
                if config.is_dir() {
                    paths.push(config.clone());
                    paths.push(config.join("plugins"));
                }
            }
            paths.push(dir);
        }
        let hooks_dir = session.policy.enterprise_hooks.parent().map(Path::to_path_buf);
        for path in paths.into_iter().filter(|p| p.is_dir()) {
            self.add_watch(id, &path);
        }
        // The host's enterprise hooks file: its directory, or the nearest one that exists.
        // A directory created between the look and the watch would hide the file's creation,
        // so look again after each watch until the nearest existing one is watched.
        let mut watched: Option<PathBuf> = None;
        while let Some(nearest) = hooks_dir
            .as_deref()
            .and_then(|p| p.ancestors().find(|a| a.is_dir()))
            .map(Path::to_path_buf)
            .filter(|nearest| watched.as_ref() != Some(nearest))
        {
            self.add_watch(id, &nearest);
            watched = Some(nearest);
        }
    }

    fn add_watch(&mut self, id: u64, path: &Path) {
        let mask = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM;
        if let Ok(wd) = self.inotify.add_watch(path, mask) {
            let raw = wd.as_raw();
            self.descriptors.insert(raw, wd);
            self.users.entry(raw).or_default().insert(id);
            if let Some(session) = self.sessions.get_mut(&id) {
                session.watches.insert(raw);
            }
        }
    }

    fn release(&mut self, wd: i32, id: u64) {
        let unused = self.users.get_mut(&wd).is_some_and(|users| {
            users.remove(&id);
            users.is_empty()
        });
        if unused {
            self.users.remove(&wd);
            if let Some(descriptor) = self.descriptors.remove(&wd) {
                let _ = self.inotify.rm_watch(descriptor);
            }
        }
    }
}

fn read_loop(inotify: &Inotify) {
    loop {
        match inotify.read_events() {
            Ok(events) => {
                let Ok(watcher) = WorkspaceWatcher::global() else {
                    return;
                };
                let descriptors: HashSet<i32> = events.iter().map(|e| e.wd.as_raw()).collect();
                for wd in descriptors {
                    watcher.on_event(wd);
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                tracing::error!(error = %e, "reading workspace watch events failed; protection stops");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn next(rx: &mut mpsc::UnboundedReceiver<Violation>) -> Option<Violation> {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test]
    async fn creating_project_mcp_config_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let policy = WorkspacePolicy {
            enterprise_hooks: dir.path().join("no-hooks.json"),
        };
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        let (_guard, mut rx) = WorkspaceWatcher::global().unwrap().watch(&workspace, policy).unwrap();
        std::fs::write(workspace.join("README.md"), "fine").unwrap();
        std::fs::create_dir_all(workspace.join(".cursor")).unwrap();
        std::fs::write(workspace.join(".cursor/mcp.json"), "{}").unwrap();
        let violation = next(&mut rx).await.expect("reported");
        assert!(violation.path().ends_with(".cursor/mcp.json"), "{violation}");
        std::fs::write(workspace.join(".cursor/hooks.json"), "{}").unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(300), rx.recv())
                .await
                .is_err(),
            "reported once"
        );
    }

    #[tokio::test]
    async fn the_enterprise_hooks_file_appearing_is_reported_even_when_its_directory_is_new() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = dir.path().join("etc/cursor/hooks.json");
        let policy = WorkspacePolicy {
            enterprise_hooks: hooks.clone(),
        };
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        let (_guard, mut rx) = WorkspaceWatcher::global().unwrap().watch(&workspace, policy).unwrap();
        std::fs::create_dir_all(hooks.parent().unwrap()).unwrap();
        std::fs::write(&hooks, "{}").unwrap();
        let violation = next(&mut rx).await.expect("reported");
        assert_eq!(violation.path(), hooks.as_path(), "{violation}");
    }

    #[tokio::test]
    async fn a_violation_cleared_and_made_again_is_reported_again() {
        let dir = tempfile::tempdir().unwrap();
        let policy = WorkspacePolicy {
            enterprise_hooks: dir.path().join("no-hooks.json"),
        };
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(workspace.join(".cursor")).unwrap();
        let (guard, mut rx) = WorkspaceWatcher::global().unwrap().watch(&workspace, policy).unwrap();
        let config = workspace.join(".cursor/mcp.json");
        std::fs::write(&config, "{}").unwrap();
        assert!(next(&mut rx).await.is_some(), "reported");
        std::fs::remove_file(&config).unwrap();
        let cleared = async {
            while guard.reported() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), cleared)
            .await
            .expect("the removal clears it");
        std::fs::write(&config, "{}").unwrap();
        assert!(next(&mut rx).await.is_some(), "reported again");
    }

    #[tokio::test]
    async fn a_dropped_guard_stops_reporting() {
        let dir = tempfile::tempdir().unwrap();
        let policy = WorkspacePolicy {
            enterprise_hooks: dir.path().join("no-hooks.json"),
        };
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        let (guard, mut rx) = WorkspaceWatcher::global().unwrap().watch(&workspace, policy).unwrap();
        drop(guard);
        std::fs::create_dir_all(workspace.join(".claude/plugins")).unwrap();
        assert!(next(&mut rx).await.is_none());
    }
}
