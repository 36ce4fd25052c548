//! The launch ledger's start-up sweep kills exactly the recorded identities, and the
//! guardian's fallbacks, with real processes.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use cursor_runner_supervisor::ledger::{
    LAUNCH_MARKER_VARIABLE, LEDGER_FILE, LaunchMarker, LaunchRecord, Ledger, LedgerEntry, LedgerRole,
};
use cursor_runner_supervisor::{AgentCommand, Guardian, GuardianConfig, LaunchSpec, procfs};

/// How long a spawned sleeper may take to exec.
const EXEC_WAIT: Duration = Duration::from_secs(10);

fn sleeper() -> Child {
    Command::new("sleep").arg("300").spawn().expect("sleep")
}

fn entry_for(child: &Child, start_time: u64) -> LedgerEntry {
    let pid = child.id() as i32;
    LedgerEntry {
        pid,
        pgid: procfs::stat(pid).unwrap().pgid,
        start_time,
        execution_id: "exec-1".into(),
        generation: 1,
        role: LedgerRole::Descendant,
    }
}

fn killed_by_sigkill(child: &mut Child) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.signal() == Some(libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn the_sweep_kills_only_processes_whose_pid_and_start_time_both_match() {
    let state = tempfile::tempdir().unwrap();
    let mut recorded = sleeper();
    let mut reused = sleeper();
    let recorded_start = procfs::start_time(recorded.id() as i32).unwrap();
    let reused_start = procfs::start_time(reused.id() as i32).unwrap();
    let lines = [
        entry_for(&recorded, recorded_start),
        // The same pid with another start time: a pid the kernel gave to someone else.
        entry_for(&reused, reused_start + 1),
    ]
    .iter()
    .map(|e| serde_json::to_string(e).unwrap() + "\n")
    .collect::<String>();
    std::fs::write(state.path().join(LEDGER_FILE), lines).unwrap();

    let (_ledger, report) = Ledger::open(state.path()).unwrap();

    assert_eq!(report.recorded, 2);
    assert_eq!(report.killed.len(), 1);
    assert_eq!(report.killed[0].pid, recorded.id() as i32);
    assert!(killed_by_sigkill(&mut recorded), "the exact identity is killed");
    assert!(
        procfs::is_same_running(reused.id() as i32, reused_start),
        "a pid whose start time differs is left alone"
    );
    assert_eq!(
        std::fs::read_to_string(state.path().join(LEDGER_FILE)).unwrap(),
        "",
        "the ledger is truncated after the sweep"
    );
    reused.kill().unwrap();
    reused.wait().unwrap();
}

#[test]
fn a_dead_recorded_process_is_skipped() {
    let state = tempfile::tempdir().unwrap();
    let mut gone = sleeper();
    let entry = entry_for(&gone, procfs::start_time(gone.id() as i32).unwrap());
    gone.kill().unwrap();
    gone.wait().unwrap();
    std::fs::write(
        state.path().join(LEDGER_FILE),
        serde_json::to_string(&entry).unwrap() + "\n",
    )
    .unwrap();
    let (_ledger, report) = Ledger::open(state.path()).unwrap();
    assert_eq!(report.recorded, 1);
    assert!(report.killed.is_empty());
}

/// A sleeper whose environment carries `marker`, once it has exec'd (until then its
/// `/proc/<pid>/environ` is the environment it was forked with: this test's).
fn marked_sleeper(marker: &LaunchMarker) -> Child {
    let child = Command::new("sleep")
        .arg("300")
        .env(LAUNCH_MARKER_VARIABLE, marker.as_str())
        .spawn()
        .expect("sleep");
    let deadline = Instant::now() + EXEC_WAIT;
    while !procfs::environ_contains(child.id() as i32, &marker.environ_entry()) {
        assert!(Instant::now() < deadline, "the sleeper never exec'd");
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

/// A process no census ever saw is still found by the marker its launch recorded
/// before the fork; another launch's marker is left alone.
#[test]
fn the_sweep_kills_every_process_carrying_a_recorded_launch_marker_and_no_other() {
    let state = tempfile::tempdir().unwrap();
    let (recorded, unrecorded) = (LaunchMarker::new().unwrap(), LaunchMarker::new().unwrap());
    let mut marked = marked_sleeper(&recorded);
    let mut other = marked_sleeper(&unrecorded);
    let launch = LaunchRecord {
        marker: recorded,
        execution_id: "exec-1".into(),
        generation: 1,
    };
    std::fs::write(
        state.path().join(LEDGER_FILE),
        serde_json::to_string(&launch).unwrap() + "\n",
    )
    .unwrap();

    let (_ledger, report) = Ledger::open(state.path()).unwrap();

    assert_eq!(report.recorded, 1);
    assert_eq!(report.killed.len(), 1);
    assert_eq!(
        (report.killed[0].pid, report.killed[0].role),
        (marked.id() as i32, LedgerRole::Marked)
    );
    assert!(killed_by_sigkill(&mut marked), "the marked process is killed");
    assert!(
        other.try_wait().unwrap().is_none(),
        "another launch's marker is left alone"
    );
    other.kill().unwrap();
    other.wait().unwrap();
}

fn spec(home: PathBuf, command: &str) -> LaunchSpec {
    LaunchSpec {
        identity: None,
        command: AgentCommand::parse(command).unwrap(),
        private_home: home,
        credential: None,
        extra_env: Vec::new(),
    }
}

/// Without an `agent-init` binary there is no namespace; the fallbacks are on, and the
/// launch is recorded (its marker before the fork, then the agent's identity), then retired once it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_init_the_fallbacks_report_active_and_the_ledger_follows_the_agent() {
    let state = tempfile::tempdir().unwrap();
    let guardian = Guardian::start(GuardianConfig {
        state_dir: state.path().to_path_buf(),
        agent_init: None,
        pid_namespace: true,
        lease: None,
    })
    .expect("the state directory is this test's alone");
    let report = guardian.report();
    assert!(!report.pid_namespace, "no init binary, no namespace");
    assert!(report.pdeathsig && report.subreaper && report.ledger, "{report:?}");

    let spec = spec(state.path().join("home"), "/bin/sleep 300");
    let (mut process, _stdin, _stdout) = guardian.spawn(&spec, "exec-1", 1).unwrap();
    let pid = process.pid() as i32;
    let text = std::fs::read_to_string(guardian.ledger_path().unwrap()).unwrap();
    let mut lines = text.lines();
    let launch: LaunchRecord = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(launch.execution_id, "exec-1", "the marker is recorded first");
    let entry: LedgerEntry = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!((entry.pid, entry.pgid, entry.role), (pid, pid, LedgerRole::Agent));
    assert_eq!(entry.start_time, procfs::start_time(pid).unwrap());

    let exit = process.stop(Duration::from_millis(200)).await;
    assert_eq!(exit.signal, Some(libc::SIGTERM));
    assert_eq!(
        std::fs::read_to_string(guardian.ledger_path().unwrap()).unwrap(),
        "",
        "an ended execution's lines are retired"
    );
}

/// The disable switch: with `pid_namespace: false`, an existing init is not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pid_namespace_can_be_turned_off() {
    let state = tempfile::tempdir().unwrap();
    let guardian = Guardian::start(GuardianConfig {
        state_dir: state.path().to_path_buf(),
        // Any existing file would do: it is never launched.
        agent_init: Some(PathBuf::from("/bin/true")),
        pid_namespace: false,
        lease: None,
    })
    .expect("the state directory is this test's alone");
    assert!(!guardian.report().pid_namespace);
}
