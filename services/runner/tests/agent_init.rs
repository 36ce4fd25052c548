//! `cursor-runner agent-init`, the init each agent runs under as PID 1 of its own PID
//! namespace: status passthrough, signal forwarding, reaping, and the namespace's end.
//! The agents here are shell scripts launched through the real guardian.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cursor_runner_e2e::{cmdline, descendants_of, host_processes, ns_pids, until_all_gone, until_some};
use cursor_runner_supervisor::{AgentCommand, AgentProcess, Guardian, GuardianConfig, LaunchSpec};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

fn init_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cursor-runner"))
}

fn guardian(state: &Path) -> Guardian {
    let guardian = Guardian::start(GuardianConfig {
        state_dir: state.to_path_buf(),
        agent_init: Some(init_binary()),
        pid_namespace: true,
        lease: None,
    })
    .expect("the state directory is this test's alone");
    assert!(guardian.report().pid_namespace, "CI and this machine run as root");
    guardian
}

/// Launches `script` (a shell script) as an agent; returns it with its stdout lines.
fn launch(
    guardian: &Guardian,
    state: &Path,
    script: &str,
) -> (
    AgentProcess,
    tokio::process::ChildStdin,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) {
    let path = state.join("agent.sh");
    std::fs::write(&path, script).unwrap();
    let spec = LaunchSpec {
        identity: None,
        command: AgentCommand::parse(&format!("/bin/sh {}", path.display())).unwrap(),
        private_home: state.join("home"),
        credential: None,
        extra_env: Vec::new(),
    };
    let (process, stdin, stdout) = guardian.spawn(&spec, "exec-1", 1).expect("launch");
    (process, stdin, tokio::io::BufReader::new(stdout).lines())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_init_is_pid_1_reaps_orphans_and_exits_with_the_agents_status_taking_the_namespace_along() {
    let state = tempfile::tempdir().unwrap();
    let guardian = guardian(state.path());
    let script = "( sleep 0.2 & )\n( setsid sleep 300 & )\necho ready\nread line\nexit 5\n";
    let (mut process, mut stdin, mut stdout) = launch(&guardian, state.path(), script);
    assert_eq!(
        stdout.next_line().await.unwrap().as_deref(),
        Some("ready"),
        "stdout passes through"
    );
    let init = process.init_pid().expect("an init") as i32;
    let agent = process.pid() as i32;
    assert_ne!(init, agent, "events name the agent's own host pid");
    assert_eq!(ns_pids(init)[1..], [1], "the init is PID 1 of the new namespace");
    assert_eq!(ns_pids(agent)[1..], [2]);
    let detached = until_some("the detached sleeper", || {
        descendants_of(init)
            .into_iter()
            .find(|p| cmdline(p.pid).contains("sleep 300"))
    })
    .await;
    // The orphaned `sleep 0.2` was re-parented to PID 1, which must reap it.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let zombies: Vec<_> = host_processes()
        .into_iter()
        .filter(|p| p.ppid == init && !p.running())
        .collect();
    assert!(zombies.is_empty(), "PID 1 reaps its orphans: {zombies:?}");

    stdin.shutdown().await.unwrap();
    drop(stdin);
    let exit = process.wait().await;
    assert_eq!((exit.exit_code, exit.signal), (Some(5), None), "the agent's own status");
    until_all_gone("the namespace after its init exited", &[detached]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_the_init_reaches_the_agents_group_and_a_signal_death_is_reported_as_such() {
    let state = tempfile::tempdir().unwrap();
    let guardian = guardian(state.path());
    let script = "trap 'exit 42' TERM\necho ready\nwhile :; do sleep 0.05; done\n";
    let (mut process, _stdin, mut stdout) = launch(&guardian, state.path(), script);
    assert_eq!(stdout.next_line().await.unwrap().as_deref(), Some("ready"));
    let exit = process.stop(Duration::from_secs(10)).await;
    assert_eq!(exit.exit_code, Some(42), "the forwarded SIGTERM ran the agent's trap");

    let script = "echo ready\nkill -KILL $$\n";
    let (mut process, _stdin, mut stdout) = launch(&guardian, state.path(), script);
    assert_eq!(stdout.next_line().await.unwrap().as_deref(), Some("ready"));
    let exit = process.wait().await;
    assert_eq!(
        (exit.exit_code, exit.signal),
        (None, Some(9)),
        "a signal death is reported as the signal, not as the init's 128+9"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_ignoring_sigterm_is_ended_by_sigkill_of_the_init_with_its_whole_namespace() {
    let state = tempfile::tempdir().unwrap();
    let guardian = guardian(state.path());
    let script = "trap '' TERM\n( setsid sleep 300 & )\necho ready\nwhile :; do sleep 0.05; done\n";
    let (mut process, _stdin, mut stdout) = launch(&guardian, state.path(), script);
    assert_eq!(stdout.next_line().await.unwrap().as_deref(), Some("ready"));
    let init = process.init_pid().unwrap() as i32;
    let mut everything = until_some("the agent's tree", || {
        let tree = descendants_of(init);
        tree.iter()
            .any(|p| cmdline(p.pid).contains("sleep 300"))
            .then_some(tree)
    })
    .await;
    everything.extend(host_processes().into_iter().filter(|p| p.pid == init));
    let exit = process.stop(Duration::from_millis(300)).await;
    assert_eq!(exit.signal, Some(9));
    until_all_gone("the namespace", &everything).await;
}

/// The pids this `/proc` lists, and whether it shows the service: shell builtins only,
/// so no process of the probe's own shows up.
const PROC_PROBE: &str = "for p in /proc/[0-9]*; do printf '%s ' \"${p#/proc/}\"; done; echo\n\
                          [ -e /proc/$SERVICE_PID ] && echo service-visible || echo service-hidden\n\
                          read line\n";

/// How many procfs mounts this process's mount namespace holds.
fn proc_mounts() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(" - proc "))
        .count()
}

/// Issue 23, item 3b: the agent's `/proc` is its namespace's own, so the service (its
/// command line included) and the host's processes are not there, and the mount
/// stays in the agent's mount namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_sees_only_its_own_namespace_in_proc_and_the_hosts_mounts_are_untouched() {
    let state = tempfile::tempdir().unwrap();
    let guardian = guardian(state.path());
    assert!(
        guardian.report().private_proc,
        "root here: a private /proc can be mounted"
    );
    let host_mounts = proc_mounts();
    let script = PROC_PROBE.replace("$SERVICE_PID", &std::process::id().to_string());
    let (mut process, stdin, mut stdout) = launch(&guardian, state.path(), &script);
    assert_eq!(
        stdout.next_line().await.unwrap().as_deref(),
        Some("1 2 "),
        "its init and itself, nothing of the host"
    );
    assert_eq!(stdout.next_line().await.unwrap().as_deref(), Some("service-hidden"));
    assert_eq!(
        proc_mounts(),
        host_mounts,
        "nothing was mounted in the host's namespace"
    );
    drop(stdin);
    process.wait().await;
}

#[test]
fn run_directly_the_init_passes_the_status_through_and_reports_it_on_the_status_fd() {
    let run = |script: &str| {
        let output = std::process::Command::new(init_binary())
            .args(["agent-init", "--status-fd", "1", "--", "/bin/sh", "-c", script])
            .output()
            .unwrap();
        let lines: Vec<String> = BufReader::new(&output.stdout[..]).lines().map(Result::unwrap).collect();
        (output.status.code(), lines)
    };
    let (code, lines) = run("exit 7");
    assert_eq!(code, Some(7));
    assert!(lines[0].starts_with("pid "), "{lines:?}");
    assert_eq!(lines[1], "exit 7");
    let (code, lines) = run("kill -TERM $$");
    assert_eq!(code, Some(128 + 15), "128 + the signal");
    assert_eq!(lines[1], "signal 15");
    let missing = std::process::Command::new(init_binary())
        .args(["agent-init", "--", "/definitely/not/here"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(127));
}

/// Outside a PID namespace of its own a fresh procfs would still list the host: the
/// init refuses to start the agent rather than pretend.
#[test]
fn run_directly_the_init_refuses_a_private_proc_it_cannot_make_private() {
    let output = std::process::Command::new(init_binary())
        .args(["agent-init", "--status-fd", "1", "--private-proc", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(127));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("error ") && stdout.contains("PID 1"), "{stdout}");
}

/// A lease deadline `ms` from now, as the service writes it on `--lease-fd`.
fn lease_until(ms: u64) -> String {
    format!("until {}\n", cursor_runner_supervisor::agent_init::monotonic_ms() + ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_dies_at_its_lease_deadline_while_the_service_is_stopped() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    const LEASE_MS: u64 = 600;
    // The test writes what the service would: a deadline per renewal.
    let (read, write) = nix::unistd::pipe().unwrap();
    let mut init = std::process::Command::new(init_binary())
        .arg("agent-init")
        .arg("--lease-fd")
        .arg(read.as_raw_fd().to_string())
        .args(["--", "/bin/sleep", "300"])
        .spawn()
        .unwrap();
    drop(read);
    let mut lease = std::fs::File::from(write);
    lease.write_all(lease_until(LEASE_MS).as_bytes()).unwrap();
    let agent = until_some("the agent", || {
        descendants_of(init.id() as i32)
            .into_iter()
            .find(|p| cmdline(p.pid).contains("sleep"))
    })
    .await;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(LEASE_MS / 2)).await;
        lease.write_all(lease_until(LEASE_MS).as_bytes()).unwrap();
    }
    assert!(
        agent.still_running(),
        "renewed before each deadline, the agent lives on"
    );

    // The service stops renewing (frozen): the agent dies at the last deadline.
    let frozen = tokio::time::Instant::now();
    until_all_gone("the agent", &[agent]).await;
    assert!(
        frozen.elapsed() < Duration::from_millis(LEASE_MS * 2),
        "killed {:?} after the last renewal, not at its deadline",
        frozen.elapsed()
    );
    assert_eq!(init.wait().unwrap().code(), Some(128 + 9), "the init reports the kill");
    drop(lease);
}
