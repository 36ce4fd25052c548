//! A running agent: its own process group (inside its own PID namespace when
//! permitted), its stderr tail, and the stop ladder.

use parking_lot::Mutex;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::launch::{LaunchError, LaunchSpec};
use crate::lease_feed::{AgentDeadline, feed_lease, phase_of};
use crate::ledger::{LAUNCH_MARKER_VARIABLE, LaunchMarker};
use crate::spawner::{ChildGuard, Spawner};

/// How long `agent-init` may take to report the agent it started.
const INIT_REPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How an agent is launched.
#[derive(Debug, Clone)]
pub(crate) enum Isolation {
    /// Under `<init> agent-init`, forked as PID 1 of a new PID namespace; with
    /// `private_proc`, the init gives the agent a fresh `/proc` of that namespace; with a
    /// `lease`, the init kills the agent at its deadline.
    PidNamespace {
        init: PathBuf,
        private_proc: bool,
        lease: Option<AgentDeadline>,
    },
    /// Directly (fallback mechanisms only).
    Direct,
}

/// Bytes of the agent's stderr kept for failure reports (the newest ones).
pub const STDERR_TAIL_BYTES: usize = 4 * 1024;

/// How long, once the agent is reaped, to let its stderr reader take the last bytes
/// from the pipe: exiting does not mean they were read, and a descendant that kept
/// stderr open must not hold up the report.
pub const STDERR_DRAIN_LIMIT: Duration = Duration::from_millis(500);

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

/// What watches an agent's process tree beyond the agent itself (the guardian): told
/// before a stop to take a census of the descendants, and when the agent has been reaped.
/// Dropping it ends the watch.
pub(crate) trait TreeWatch: Send + Sync {
    fn census(&self);
    fn end(&self);
}

pub struct AgentProcess {
    /// `agent-init` with a PID namespace, else the agent itself.
    child: Child,
    /// The agent's pid as the host sees it.
    pid: u32,
    /// `agent-init`'s pid, when the agent runs in its own PID namespace.
    init_pid: Option<u32>,
    /// `agent-init`'s status pipe: the agent's exact exit status.
    init_status: Option<File>,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    /// Reads stderr into the tail until EOF; awaited (bounded) after the reap.
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
    exit: Option<ExitProof>,
    registration: Option<Box<dyn TreeWatch>>,
}

impl AgentProcess {
    /// Starts the agent as the leader of a new process group with a closed environment,
    /// forked by the dedicated spawner thread with a parent-death signal (no PID
    /// namespace, no ledger: see [`crate::Guardian::spawn`] for those).
    pub fn spawn(spec: &LaunchSpec) -> Result<(Self, ChildStdin, ChildStdout), LaunchError> {
        Self::launch(spec, &Isolation::Direct, None)
    }

    /// Launches `spec`; with a `marker`, the environment also carries
    /// `CURSOR_RUNNER_LAUNCH=<marker>`, which every descendant inherits.
    pub(crate) fn launch(
        spec: &LaunchSpec,
        isolation: &Isolation,
        marker: Option<&LaunchMarker>,
    ) -> Result<(Self, ChildStdin, ChildStdout), LaunchError> {
        spec.prepare()?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| LaunchError::Spawn("agents are launched from inside a tokio runtime".into()))?;
        let (program, args) = (spec.command.program.clone(), spec.command.args.clone());
        let mut environment = spec.environment();
        environment.extend(marker.map(|m| (LAUNCH_MARKER_VARIABLE.to_owned(), m.as_str().to_owned())));
        let working_dir = spec.private_home.clone();
        let identity = spec.identity;
        let isolation = isolation.clone();
        let spawned = Spawner::global()
            .run(move |spawner| {
                // tokio registers the child with this runtime's process driver.
                let _runtime = runtime.enter();
                let guard = spawner.child_guard();
                let base = |command: &mut Command| {
                    command
                        .current_dir(&working_dir)
                        .env_clear()
                        .envs(environment)
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .process_group(0)
                        .kill_on_drop(true);
                };
                match isolation {
                    Isolation::Direct => {
                        let mut command = Command::new(&program);
                        command.args(&args);
                        base(&mut command);
                        // setgid, setgroups([]) and setuid happen before `pre_exec`, so the
                        // parent-death signal is armed under the agent's own uid (a uid
                        // change would clear it).
                        if let Some(identity) = identity {
                            command.uid(identity.uid).gid(identity.gid);
                        }
                        // SAFETY: `arm` makes async-signal-safe system calls only.
                        unsafe { command.pre_exec(move || guard.arm()) };
                        command.spawn().map(|child| (child, None))
                    }
                    Isolation::PidNamespace {
                        init,
                        private_proc,
                        lease,
                    } => {
                        let (status_read, status_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
                        let status_fd = status_write.as_raw_fd();
                        // Non-blocking: a renewal is dropped rather than block on an init
                        // that does not read.
                        let lease_pipe = lease
                            .map(|lease| {
                                nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                                    .map(|pipe| (pipe, lease))
                            })
                            .transpose()?;
                        let lease_fd = lease_pipe.as_ref().map(|((read, _), _)| read.as_raw_fd());
                        let mut command = Command::new(&init);
                        command.arg("agent-init").arg("--status-fd").arg(status_fd.to_string());
                        if let Some(fd) = lease_fd {
                            command.arg("--lease-fd").arg(fd.to_string());
                        }
                        if private_proc {
                            command.arg("--private-proc");
                        }
                        // The init stays root (PID 1 of the namespace, out of the agent's
                        // reach); it drops to the agent's uid for the agent alone.
                        if let Some(identity) = identity {
                            command
                                .arg("--uid")
                                .arg(identity.uid.to_string())
                                .arg("--gid")
                                .arg(identity.gid.to_string());
                        }
                        command.arg("--").arg(&program).args(&args);
                        base(&mut command);
                        // SAFETY: async-signal-safe system calls only.
                        unsafe { command.pre_exec(move || arm_init(guard, status_fd, lease_fd)) };
                        let child = spawner.in_new_pid_namespace(|| command.spawn())??;
                        drop(status_write);
                        if let Some(((_, write), lease)) = lease_pipe {
                            let phase = phase_of(child.id().unwrap_or_default());
                            tokio::spawn(feed_lease(File::from(write), lease, phase));
                        }
                        Ok((child, Some(File::from(status_read))))
                    }
                }
            })
            .and_then(|spawned| spawned)
            .map_err(|e| LaunchError::Spawn(e.to_string()))?;
        let (mut child, init_status) = spawned;
        let first_pid = child
            .id()
            .ok_or_else(|| LaunchError::Spawn("the process exited at once".into()))?;
        let (pid, init_pid) = match &init_status {
            None => (first_pid, None),
            Some(status) => match read_line(status, INIT_REPORT_TIMEOUT) {
                Ok(Some(line)) if line.starts_with("pid ") => {
                    let agent = line[4..].trim().parse::<u32>().ok().filter(|p| *p > 0);
                    (agent.unwrap_or(first_pid), Some(first_pid))
                }
                other => {
                    let message = match other {
                        Ok(Some(line)) => line.strip_prefix("error ").unwrap_or(&line).to_owned(),
                        Ok(None) => "agent-init exited before starting the agent".to_owned(),
                        Err(e) => format!("agent-init did not report the agent: {e}"),
                    };
                    let _ = child.start_kill();
                    return Err(LaunchError::Spawn(message));
                }
            },
        };
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| LaunchError::Spawn("no stdin".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| LaunchError::Spawn("no stdout".into()))?;
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        let stderr_reader = child.stderr.take().map(|mut stderr| {
            let tail = stderr_tail.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut tail = tail.lock();
                    tail.extend_from_slice(&buf[..n]);
                    let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
                    tail.drain(..excess);
                }
            })
        });
        Ok((
            Self {
                child,
                pid,
                init_pid,
                init_status,
                stderr_tail,
                stderr_reader,
                exit: None,
                registration: None,
            },
            stdin,
            stdout,
        ))
    }

    pub(crate) fn attach(&mut self, registration: Box<dyn TreeWatch>) {
        self.registration = Some(registration);
    }

    /// Without a PID namespace: notes every descendant of the agent now, while the
    /// tree still hangs from it, so those that left its process group (`setsid()`) are
    /// killed when it ends. Call it before the first step of the stop ladder (closing
    /// stdin lets the agent exit and orphan them). A no-op with a namespace.
    pub fn census_descendants(&self) {
        if let Some(registration) = &self.registration {
            registration.census();
        }
    }

    /// `agent-init`'s pid (PID 1 of the agent's namespace, seen from the host), if any.
    pub fn init_pid(&self) -> Option<u32> {
        self.init_pid
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The newest stderr bytes, lossily decoded; after [`Self::wait`] or [`Self::stop`]
    /// they include what the agent wrote before it exited.
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr_tail.lock();
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
        let proof = match self.init_status.take() {
            // agent-init has exited, so its namespace is empty; the agent's own status
            // is on the pipe unless the init itself was killed first.
            Some(mut status) => agent_status(&mut status).unwrap_or(proof),
            // The leader is reaped; what stayed in its group goes now.
            None => {
                self.signal_group(Signal::SIGKILL);
                proof
            }
        };
        self.exit = Some(proof);
        if let Some(registration) = &self.registration {
            registration.end();
        }
        if let Some(reader) = self.stderr_reader.take() {
            let _ = tokio::time::timeout(STDERR_DRAIN_LIMIT, reader).await;
        }
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
        self.census_descendants();
        self.signal_group(Signal::SIGTERM);
        if let Some(proof) = self.wait_for(grace).await {
            return proof;
        }
        if let Some(exit) = self.exit {
            // Reaped within the grace; only the stderr drain ran past it.
            return exit;
        }
        self.signal_group(Signal::SIGKILL);
        self.wait().await
    }

    /// Signals the whole group, so descendants that stayed in it go too. With a PID
    /// namespace the init gets it: it forwards SIGTERM to the agent's group, and its
    /// death by SIGKILL ends the whole namespace.
    fn signal_group(&self, signal: Signal) {
        match self.init_pid {
            Some(init) => {
                if let Ok(init) = i32::try_from(init) {
                    let _ = kill(Pid::from_raw(init), signal);
                }
            }
            None => {
                if let Ok(pid) = i32::try_from(self.pid) {
                    let _ = killpg(Pid::from_raw(pid), signal);
                }
            }
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if self.exit.is_none() {
            // Not reaped yet, so the pid (and its group id) is still ours.
            // `kill_on_drop` then SIGKILLs the direct child and tokio reaps it.
            self.signal_group(Signal::SIGKILL);
        }
    }
}

/// In the forked child, before exec'ing `agent-init`: the parent-death signal, and the
/// status pipe left open across exec.
fn arm_init(guard: ChildGuard, status_fd: RawFd, lease_fd: Option<RawFd>) -> io::Result<()> {
    guard.arm()?;
    for fd in std::iter::once(status_fd).chain(lease_fd) {
        // SAFETY: fcntl is async-signal-safe.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// One line from the init's status pipe, waiting at most `limit`; `None` at EOF.
fn read_line(file: &File, limit: Duration) -> io::Result<Option<String>> {
    let deadline = Instant::now() + limit;
    let mut line = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"));
        }
        let mut poll = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if ready == 0 {
            continue;
        }
        let mut byte = [0u8; 1];
        match (&*file).read(&mut byte)? {
            0 => return Ok(None),
            _ if byte[0] == b'\n' => return Ok(Some(String::from_utf8_lossy(&line).into_owned())),
            _ => line.push(byte[0]),
        }
    }
}

/// The agent's exit status as `agent-init` reported it (`exit N` / `signal N`), read
/// after the init exited (so the pipe is at EOF, never blocking).
fn agent_status(status: &mut File) -> Option<ExitProof> {
    let mut text = String::new();
    status.read_to_string(&mut text).ok()?;
    text.lines().rev().find_map(|line| {
        let (kind, value) = line.split_once(' ')?;
        let value = value.trim().parse::<i32>().ok()?;
        match kind {
            "exit" => Some(ExitProof {
                exit_code: Some(value),
                signal: None,
            }),
            "signal" => Some(ExitProof {
                exit_code: None,
                signal: Some(value),
            }),
            _ => None,
        }
    })
}
