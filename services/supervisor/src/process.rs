//! A running agent: its own process group, its stderr tail, and the stop ladder.

use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::launch::{LaunchError, LaunchSpec};

/// Bytes of the agent's stderr kept for failure reports (the newest ones).
pub const STDERR_TAIL_BYTES: usize = 4 * 1024;

/// How a process ended: the exit proof recorded in `process.exited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitProof {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

impl From<std::process::ExitStatus> for ExitProof {
    fn from(status: std::process::ExitStatus) -> Self {
        Self {
            exit_code: status.code(),
            signal: status.signal(),
        }
    }
}

pub struct AgentProcess {
    child: Child,
    pid: u32,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    exit: Option<ExitProof>,
}

impl AgentProcess {
    /// Starts the agent as the leader of a new process group with a closed environment.
    pub fn spawn(spec: &LaunchSpec) -> Result<(Self, ChildStdin, ChildStdout), LaunchError> {
        spec.prepare()?;
        let mut command = Command::new(&spec.command.program);
        command
            .args(&spec.command.args)
            .current_dir(&spec.workspace)
            .env_clear()
            .envs(spec.environment())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| LaunchError::Spawn(e.to_string()))?;
        let pid = child
            .id()
            .ok_or_else(|| LaunchError::Spawn("the process exited at once".into()))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| LaunchError::Spawn("no stdin".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| LaunchError::Spawn("no stdout".into()))?;
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        if let Some(mut stderr) = child.stderr.take() {
            let tail = stderr_tail.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                    tail.extend_from_slice(&buf[..n]);
                    let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
                    tail.drain(..excess);
                }
            });
        }
        Ok((
            Self {
                child,
                pid,
                stderr_tail,
                exit: None,
            },
            stdin,
            stdout,
        ))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The newest stderr bytes, lossily decoded.
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&tail).into_owned()
    }

    /// Waits for the process to exit by itself and reaps it.
    pub async fn wait(&mut self) -> ExitProof {
        if let Some(exit) = self.exit {
            return exit;
        }
        let proof = match self.child.wait().await {
            Ok(status) => ExitProof::from(status),
            Err(_) => ExitProof {
                exit_code: None,
                signal: None,
            },
        };
        self.signal_group(Signal::SIGKILL);
        self.exit = Some(proof);
        proof
    }

    /// Waits up to `limit` for the process to exit by itself.
    pub async fn wait_for(&mut self, limit: Duration) -> Option<ExitProof> {
        tokio::time::timeout(limit, self.wait()).await.ok()
    }

    /// The stop ladder after stdin is closed: SIGTERM to the group, `grace`, SIGKILL to
    /// the group, reap. Always returns with the process reaped.
    pub async fn stop(&mut self, grace: Duration) -> ExitProof {
        if let Some(exit) = self.exit {
            return exit;
        }
        self.signal_group(Signal::SIGTERM);
        if let Some(proof) = self.wait_for(grace).await {
            return proof;
        }
        self.signal_group(Signal::SIGKILL);
        self.wait().await
    }

    /// Signals the whole group, so descendants that stayed in it go too.
    fn signal_group(&self, signal: Signal) {
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = killpg(Pid::from_raw(pid), signal);
        }
    }
}
