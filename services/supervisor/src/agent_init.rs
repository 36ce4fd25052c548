//! `cursor-runner agent-init -- <program> <args…>`: the tiny init each agent runs under.
//!
//! The launcher forks it as PID 1 of a new PID namespace (see `spawner`). When PID 1
//! of a namespace dies, the kernel SIGKILLs every other process in it — including one
//! that called `setsid()` — so the whole agent tree ends with this process, whether it
//! exits because the agent did, is SIGKILLed by the stop ladder, or gets its
//! parent-death signal because the service died.
//!
//! It spawns the agent with stdin, stdout, stderr, environment and working directory
//! passed through (the agent leads its own process group), forwards SIGTERM, SIGINT,
//! SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the agent's group, reaps every child (PID 1
//! inherits every orphan of the namespace), and exits with the agent's exit code, or
//! 128 + the signal that killed it. PID 1 cannot die of a signal it does not handle, so
//! the exact status also goes to the launcher on `--status-fd`, one line each:
//! `pid <host pid>` once the agent runs, then `exit <code>` or `signal <number>`
//! (`error <message>` if the agent could not be started).
//!
//! With `--private-proc` it first enters a mount namespace of its own (propagation
//! private, so nothing it mounts reaches the host) and mounts a fresh procfs on
//! `/proc`: the agent's `/proc` then lists its own namespace's processes only, not the
//! service's (nor its command line) nor any other process of the host. Failing to do so
//! is fatal (`error …`): the launcher asked for it because the start-up probe proved it
//! possible, so an agent never silently gets the host's `/proc` instead.
//!
//! With `--lease-fd N` it reads the service's ownership lease from that descriptor, one
//! `until <CLOCK_MONOTONIC ms>` line per renewal (`docs/scale-out.md` §3), and SIGKILLs the
//! agent's group once the latest deadline passes unextended: a service frozen past its
//! lease (SIGSTOP, a stalled node) cannot stop its own agents, but its inits can.
//!
//! Single-threaded and synchronous on purpose: no runtime, no logging, nothing on
//! stdout (it belongs to the agent's protocol).

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::process::CommandExt;

use nix::errno::Errno;
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpid};

/// The signals the init passes on to the agent's process group.
pub const FORWARDED_SIGNALS: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Exit code when the agent cannot be started (as a shell reports "command not found").
const CANNOT_START: i32 = 127;

/// `agent-init [--status-fd N] -- <program> <args…>` (the arguments after
/// `agent-init`). Never returns.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ! {
    let mut args = args.into_iter();
    let mut status_fd = None;
    let mut private_proc = false;
    let mut lease_fd = None;
    let (mut uid, mut gid) = (None, None);
    let mut command = Vec::new();
    let number = |value: Option<OsString>| value.and_then(|v| v.to_str()?.parse::<u32>().ok());
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--status-fd") => {
                status_fd = args.next().and_then(|fd| fd.to_str()?.parse::<RawFd>().ok());
                if status_fd.is_none() {
                    usage();
                }
            }
            Some("--private-proc") => private_proc = true,
            Some("--lease-fd") => {
                lease_fd = args.next().and_then(|fd| fd.to_str()?.parse::<RawFd>().ok());
                if lease_fd.is_none() {
                    usage();
                }
            }
            Some("--uid") => uid = Some(number(args.next()).unwrap_or_else(|| usage())),
            Some("--gid") => gid = Some(number(args.next()).unwrap_or_else(|| usage())),
            Some("--") => {
                command.extend(args.by_ref());
                break;
            }
            _ => usage(),
        }
    }
    if command.is_empty() || uid.is_some() != gid.is_some() {
        usage();
    }
    run(
        Descriptors {
            status: status_fd,
            lease: lease_fd,
        },
        private_proc,
        uid.zip(gid),
        &command,
    )
}

/// The descriptors the launcher passed: where the status goes, where the lease comes from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Descriptors {
    pub status: Option<RawFd>,
    pub lease: Option<RawFd>,
}

fn usage() -> ! {
    eprintln!(
        "usage: cursor-runner agent-init [--status-fd N] [--lease-fd N] [--private-proc] [--uid U --gid G] -- <program> [args…]"
    );
    std::process::exit(2)
}

/// Runs the agent (as `identity`, uid and gid, when given; under a fresh `/proc` with
/// `private_proc`) and exits with its status. The descriptors are inherited from the
/// launcher; `command` is the agent's program and arguments.
pub fn run(descriptors: Descriptors, private_proc: bool, identity: Option<(u32, u32)>, command: &[OsString]) -> ! {
    // SAFETY: the launcher passed these descriptors to us for exactly this use; nothing
    // else in this process owns them.
    let mut status = descriptors.status.map(|fd| unsafe { File::from_raw_fd(fd) });
    let lease = descriptors.lease.map(|fd| unsafe { File::from_raw_fd(fd) });
    let code = match supervise(status.as_mut(), lease, private_proc, identity, command) {
        Ok(code) => code,
        Err(e) => {
            report(status.as_mut(), &format!("error {e}"));
            eprintln!("cursor-runner agent-init: {e}");
            CANNOT_START
        }
    };
    std::process::exit(code)
}

/// Lets go of our copies of the agent's stdin and stdout, so the agent alone holds
/// them: when it closes stdin the runner's next write fails (EPIPE) instead of filling
/// a pipe nobody reads, and its stdout ends when the agent (and whatever it handed it
/// to) closes it. Stderr stays: our own diagnostics go there.
fn release_agent_pipes(status_fd: Option<RawFd>) -> io::Result<()> {
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    if status_fd != Some(0) {
        nix::unistd::dup2_stdin(&null).map_err(io::Error::from)?;
    }
    // Unless the status goes there (a direct run may point `--status-fd` at stdout).
    if status_fd != Some(1) {
        nix::unistd::dup2_stdout(&null).map_err(io::Error::from)?;
    }
    Ok(())
}

/// Enters a mount namespace of its own whose `/proc` is a fresh procfs of this PID
/// namespace. Returns this thread's `children` file as the host's `/proc` shows it,
/// opened before the remount, so the agent's host pid can still be read from it.
fn mount_private_proc() -> io::Result<File> {
    // Outside a PID namespace of its own, a fresh procfs would list the host's
    // processes all the same.
    if getpid().as_raw() != 1 {
        return Err(io::Error::other(
            "a private /proc needs the init to be PID 1 of its own namespace",
        ));
    }
    let host_children = File::open("/proc/thread-self/children")?;
    let context = |what: &'static str| move |e: Errno| io::Error::other(format!("private /proc: {what}: {e}"));
    unshare(CloneFlags::CLONE_NEWNS).map_err(context("unshare(CLONE_NEWNS)"))?;
    // Private (recursively) before anything is mounted: no mount event of ours may
    // propagate back to the host's namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(context("making / private"))?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), "/proc", Some("proc"), flags, None::<&str>).map_err(context("mounting procfs"))?;
    Ok(host_children)
}

fn supervise(
    mut status: Option<&mut File>,
    lease: Option<File>,
    private_proc: bool,
    identity: Option<(u32, u32)>,
    command: &[OsString],
) -> io::Result<i32> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| io::Error::other("no agent command given"))?;
    if let Some(file) = status.as_deref() {
        // The agent must not inherit the status pipe.
        set_cloexec(file.as_raw_fd())?;
    }
    // The launcher armed it before exec; arming it again costs nothing.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
    // Before the agent exists, so it never sees the host's `/proc`.
    let host_children = if private_proc {
        Some(mount_private_proc()?)
    } else {
        None
    };

    // Blocked before the agent exists, so a SIGTERM sent meanwhile waits for us
    // instead of being dropped (PID 1 ignores signals it does not handle).
    let mut watched = SigSet::empty();
    watched.add(Signal::SIGCHLD);
    watched.add(Signal::SIGIO);
    for signal in FORWARDED_SIGNALS {
        watched.add(signal);
    }
    watched.thread_block().map_err(io::Error::from)?;
    // After SIGIO is blocked: its default action would end this process.
    let mut lease = lease.map(LeaseFeed::new).transpose()?;

    let mut command = std::process::Command::new(program);
    command.args(args).process_group(0);
    if let Some((uid, gid)) = identity {
        command.uid(uid).gid(gid);
    }
    // The agent must not inherit our blocked signals (std resets SIGPIPE, not the mask).
    // SAFETY: sigprocmask is async-signal-safe; the set is a stack value.
    unsafe {
        command.pre_exec(|| {
            let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(empty.as_mut_ptr());
            if libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let child = command
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot start {}: {e}", program.to_string_lossy())))?;
    let agent = Pid::from_raw(child.id() as i32);
    // We reap it ourselves with waitpid(-1); the std handle is not needed.
    drop(child);
    release_agent_pipes(status.as_deref().map(AsRawFd::as_raw_fd))?;
    report(
        status.as_deref_mut(),
        &format!("pid {}", host_pid_of(agent, host_children.as_ref())),
    );

    loop {
        let signal = match lease.as_ref().and_then(LeaseFeed::left) {
            Some(left) => wait_at_most(&watched, left)?,
            None => Some(watched.wait().map_err(io::Error::from)?),
        };
        let Some(signal) = signal else {
            eprintln!("cursor-runner agent-init: the service's lease ended unrenewed; killing the agent");
            forward(agent, Signal::SIGKILL);
            lease = None;
            continue;
        };
        if signal == Signal::SIGIO {
            if let Some(lease) = lease.as_mut() {
                lease.read();
            }
            continue;
        }
        if signal != Signal::SIGCHLD {
            forward(agent, signal);
            continue;
        }
        // Reap everything that has exited: the agent, and any orphan PID 1 inherited.
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == agent => {
                    report(status.as_deref_mut(), &format!("exit {code}"));
                    return Ok(code);
                }
                Ok(WaitStatus::Signaled(pid, signal, _)) if pid == agent => {
                    report(status.as_deref_mut(), &format!("signal {}", signal as i32));
                    return Ok(128 + signal as i32);
                }
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// `--lease-fd`: the latest lease deadline the service sent, on `CLOCK_MONOTONIC`. The
/// descriptor signals input with SIGIO (the init waits on signals alone) and is read
/// without blocking.
struct LeaseFeed {
    file: File,
    pending: Vec<u8>,
    until_ms: Option<u64>,
}

impl LeaseFeed {
    fn new(file: File) -> io::Result<Self> {
        let fd = file.as_raw_fd();
        // The agent must not inherit it.
        set_cloexec(fd)?;
        // SAFETY: fcntl on a descriptor this process owns.
        unsafe {
            if libc::fcntl(fd, libc::F_SETOWN, libc::getpid()) != 0 {
                return Err(io::Error::last_os_error());
            }
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC | libc::O_NONBLOCK) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let mut feed = Self {
            file,
            pending: Vec::new(),
            until_ms: None,
        };
        // What was written before SIGIO was armed raised none.
        feed.read();
        Ok(feed)
    }

    /// Takes in every complete line that has arrived; the latest deadline counts. At end of
    /// file the service is gone, and the parent-death signal ends this process.
    fn read(&mut self) {
        let mut chunk = [0u8; 512];
        loop {
            match (&self.file).read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            if let Some(until) = std::str::from_utf8(&line)
                .ok()
                .and_then(|line| line.trim().strip_prefix("until "))
                .and_then(|ms| ms.parse().ok())
            {
                self.until_ms = Some(until);
            }
        }
    }

    /// How long until the deadline (zero once passed); `None` before the first one.
    fn left(&self) -> Option<std::time::Duration> {
        self.until_ms
            .map(|until| std::time::Duration::from_millis(until.saturating_sub(monotonic_ms())))
    }
}

/// Now on `CLOCK_MONOTONIC`, in milliseconds: the clock of `--lease-fd` deadlines (it runs
/// on while a process is stopped, unlike the process's own view of time).
pub fn monotonic_ms() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    u64::try_from(now.tv_sec).unwrap_or(0) * 1000 + u64::try_from(now.tv_nsec).unwrap_or(0) / 1_000_000
}

/// The next signal of `set`, or `None` if none came within `left`.
fn wait_at_most(set: &SigSet, left: std::time::Duration) -> io::Result<Option<Signal>> {
    let timeout = libc::timespec {
        tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(left.subsec_nanos() as i32),
    };
    loop {
        // SAFETY: a valid signal set and timeout; no siginfo is asked for.
        let number = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &timeout) };
        if number >= 0 {
            return Signal::try_from(number).map(Some).map_err(io::Error::from);
        }
        match Errno::last() {
            Errno::EAGAIN => return Ok(None),
            // Interrupted early: waiting the whole timeout again only delays the kill by it.
            Errno::EINTR => continue,
            e => return Err(e.into()),
        }
    }
}

/// Sends `signal` to the agent's process group, or to the agent alone if it left it.
fn forward(agent: Pid, signal: Signal) {
    if killpg(agent, signal) == Err(Errno::ESRCH) {
        let _ = kill(agent, signal);
    }
}

/// The agent's pid as the host sees it. `/proc/thread-self` resolves in the PID
/// namespace of the procfs it is read through, so this thread's `children` file in the
/// host's `/proc` lists host pids: `host_children` when `/proc` was remounted (opened
/// before), else `/proc` itself. Outside a namespace the pid is already the host's.
fn host_pid_of(agent: Pid, host_children: Option<&File>) -> i32 {
    if getpid().as_raw() != 1 {
        return agent.as_raw();
    }
    let mut children = String::new();
    let read = match host_children {
        Some(mut file) => file.read_to_string(&mut children).map(drop),
        None => std::fs::read_to_string("/proc/thread-self/children").map(|text| children = text),
    };
    read.ok()
        .and_then(|()| children.split_whitespace().next()?.parse().ok())
        // 0: unknown; the launcher then names the init instead.
        .unwrap_or(0)
}

fn report(status: Option<&mut File>, line: &str) {
    if let Some(file) = status {
        // The launcher may be gone; the init carries on regardless.
        let _ = writeln!(file, "{line}");
    }
}

fn set_cloexec(fd: RawFd) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    // SAFETY: `fd` is open for the lifetime of this call (owned by the caller's File).
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(io::Error::from)?;
    Ok(())
}
