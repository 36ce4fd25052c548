//! The one thread that forks agents.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the
//! process: an agent forked from a tokio worker or the blocking pool would be killed
//! whenever the runtime retires that thread. Every agent is therefore forked by one
//! dedicated std thread that lives as long as the process; callers hand it a job over a
//! channel and block for the result (a fork takes microseconds).
//!
//! The same thread creates the PID namespaces: `unshare(CLONE_NEWPID)` moves no one, it
//! only makes the calling *thread's* next child PID 1 of a new namespace. The thread
//! unshares, forks the init, and returns to its own namespace (`setns`), so nothing
//! else in the service is affected.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::sync::mpsc;

use nix::sched::{CloneFlags, setns, unshare};

type Job = Box<dyn FnOnce(&SpawnerContext) + Send>;

/// What the spawner thread owns for the jobs it runs.
pub(crate) struct SpawnerContext {
    /// The PID namespace this thread (and the service) lives in.
    own_pid_namespace: Option<OwnedFd>,
    /// A pipe whose write end only the service holds: a child that sees it hung up
    /// knows the service died before the parent-death signal was armed.
    liveness_read: OwnedFd,
    liveness_write: OwnedFd,
}

impl SpawnerContext {
    /// Runs `spawn` so that the first process it forks is PID 1 of a new PID
    /// namespace, then puts this thread's children back into its own namespace.
    pub(crate) fn in_new_pid_namespace<R>(&self, spawn: impl FnOnce() -> R) -> io::Result<R> {
        let own = self
            .own_pid_namespace
            .as_ref()
            .ok_or_else(|| io::Error::other("the service's own PID namespace is unknown"))?;
        unshare(CloneFlags::CLONE_NEWPID).map_err(io::Error::from)?;
        let result = spawn();
        setns(own.as_fd(), CloneFlags::CLONE_NEWPID).map_err(io::Error::from)?;
        Ok(result)
    }

    /// Whether this thread may create PID namespaces (root, or `CAP_SYS_ADMIN`).
    pub(crate) fn can_create_pid_namespaces(&self) -> bool {
        self.in_new_pid_namespace(|| ()).is_ok()
    }

    /// Whether an agent's init could give it a `/proc` of its own: forks a probe as PID 1
    /// of a new PID namespace that does what `agent-init --private-proc` does — a mount
    /// namespace with private propagation and a fresh procfs on `/proc` — and exits.
    /// Both vanish with the probe.
    pub(crate) fn can_mount_private_proc(&self) -> bool {
        let probe = || {
            // SAFETY: the child makes raw system calls only (no allocation, no locks:
            // this process has other threads), then `_exit`s; the strings are literals.
            unsafe {
                match libc::fork() {
                    -1 => false,
                    0 => {
                        let private = libc::MS_REC | libc::MS_PRIVATE;
                        let proc_flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                        let ok = libc::unshare(libc::CLONE_NEWNS) == 0
                            && libc::mount(
                                std::ptr::null(),
                                c"/".as_ptr(),
                                std::ptr::null(),
                                private,
                                std::ptr::null(),
                            ) == 0
                            && libc::mount(
                                c"proc".as_ptr(),
                                c"/proc".as_ptr(),
                                c"proc".as_ptr(),
                                proc_flags,
                                std::ptr::null(),
                            ) == 0;
                        libc::_exit(if ok { 0 } else { 1 })
                    }
                    child => {
                        let mut status = 0;
                        while libc::waitpid(child, &mut status, 0) < 0 {
                            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                                return false;
                            }
                        }
                        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
                    }
                }
            }
        };
        self.in_new_pid_namespace(probe).unwrap_or(false)
    }

    /// Puts this thread's future children back into its own PID namespace, in case a
    /// previous job failed half-way.
    fn reset(&self) {
        if let Some(own) = &self.own_pid_namespace {
            let _ = setns(own.as_fd(), CloneFlags::CLONE_NEWPID);
        }
    }

    /// The file descriptors [`arm_child`] needs, copied for a `pre_exec` closure.
    pub(crate) fn child_guard(&self) -> ChildGuard {
        ChildGuard {
            liveness_read: self.liveness_read.as_raw_fd(),
            liveness_write: self.liveness_write.as_raw_fd(),
        }
    }
}

/// Runs in the forked child, before `exec`: arms the parent-death signal, then checks
/// the service did not die before it was armed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildGuard {
    liveness_read: RawFd,
    liveness_write: RawFd,
}

impl ChildGuard {
    /// Async-signal-safe: raw system calls only, no allocation.
    pub(crate) fn arm(self) -> io::Result<()> {
        // SAFETY: prctl, close and poll are async-signal-safe; the pointers are valid.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Our copy of the write end goes, so only the service keeps the pipe open.
            libc::close(self.liveness_write);
            let mut poll = libc::pollfd {
                fd: self.liveness_read,
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut poll, 1, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            if poll.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                // The service is gone: do not start an agent nobody supervises.
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        Ok(())
    }
}

pub(crate) struct Spawner {
    jobs: mpsc::Sender<Job>,
}

impl Spawner {
    /// The process's spawner thread, started on first use.
    pub(crate) fn global() -> &'static Spawner {
        static SPAWNER: OnceLock<Spawner> = OnceLock::new();
        SPAWNER.get_or_init(|| {
            let (jobs, receiver) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("agent-spawner".into())
                .spawn(move || {
                    let context = SpawnerContext::open().expect("the spawner's pipe");
                    // The sender lives in a static, so this loop (and the thread) never ends.
                    while let Ok(job) = receiver.recv() {
                        context.reset();
                        // A panicking job must not end the thread: every agent it forked
                        // would get its parent-death signal.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&context)));
                    }
                })
                .expect("starting the agent spawner thread");
            Spawner { jobs }
        })
    }

    /// Runs `job` on the spawner thread and returns its result.
    pub(crate) fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce(&SpawnerContext) -> R + Send + 'static,
    ) -> io::Result<R> {
        let (reply, result) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |context| {
            let _ = reply.send(job(context));
        });
        self.jobs
            .send(job)
            .map_err(|_| io::Error::other("the agent spawner thread is gone"))?;
        result
            .recv()
            .map_err(|_| io::Error::other("the agent spawner job panicked"))
    }
}

impl SpawnerContext {
    fn open() -> io::Result<Self> {
        let own_pid_namespace = std::fs::File::open("/proc/thread-self/ns/pid").ok().map(OwnedFd::from);
        let (liveness_read, liveness_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        Ok(Self {
            own_pid_namespace,
            liveness_read,
            liveness_write,
        })
    }
}
