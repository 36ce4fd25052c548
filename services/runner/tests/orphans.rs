//! SIGKILL of the whole service leaves no agent process and no descendant behind
//! (issue 4, item 7). The service runs as `cursor-runner serve` in its own process; the
//! fake agent forks two sleepers, one of which calls `setsid()` and ignores SIGTERM.
//!
//! - With a PID namespace, the kernel does it: the init's parent-death signal kills the
//!   init, and with PID 1 gone every process of its namespace is killed.
//! - Without one, the agent's parent-death signal kills the agent only; its
//!   descendants survive the service until the next start-up sweeps the launch ledger:
//!   the identities the census recorded, and every process that still carries the
//!   launch's environment marker (recorded before the fork, so no census is needed).

use std::path::Path;

use cursor_runner_e2e::*;

fn service(dirs: &ServiceDirs, pid_namespace: bool) -> ServiceProcess {
    let database_url = format!("sqlite:{}", dirs.root.path().join("runner.db").display());
    ServiceProcess::start(ServiceSettings {
        binary: Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database_url,
        state_dir: dirs.root.path(),
        scenario: "orphans.json",
        record: &dirs.record,
        env: vec![
            ("CURSOR_RUNNER_PID_NAMESPACE".into(), pid_namespace.to_string()),
            ("CURSOR_RUNNER_LOG".into(), "info".into()),
            // Plain text, so the report's `key=value` pairs can be matched.
            ("NO_COLOR".into(), "1".into()),
        ],
        // Without a namespace, a SIGKILLed service's survivors keep running as the agent's uid,
        // and any other service on this host that takes that uid next (another test running in
        // parallel) rightly kills everything of it first, racing the start-up sweep these
        // tests are about: their agents run as the service's own uid instead.
        args: if pid_namespace {
            Vec::new()
        } else {
            vec!["--agent-uid-separation".into(), "false".into()]
        },
    })
}

/// Creates an execution, runs the turn that forks the sleepers, and returns the agent.
async fn agent_with_sleepers(service: &ServiceProcess, dirs: &ServiceDirs) -> HostProcess {
    let mut client = service.client().await;
    let execution = create_execution_in(&mut client, &dirs.workspace, "create-1").await;
    let mut events = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.completed"
    );
    host_process(execution.pid.unwrap() as i32).expect("the agent runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_pid_namespace_a_sigkilled_service_leaves_no_descendant_behind() {
    let dirs = ServiceDirs::new();
    let first = service(&dirs, true);
    first.wait_for_stderr("pid_namespace=true pdeathsig=true subreaper=true ledger=true");
    let agent = agent_with_sleepers(&first, &dirs).await;
    let init = host_process(agent.ppid).unwrap();
    assert_eq!(
        ns_pids(init.pid).last(),
        Some(&1),
        "the init is PID 1 of the agent's namespace"
    );
    let (_grouped, detached) = the_two_sleepers(init.pid).await;
    assert_ne!(detached.pgid, agent.pid);
    let mut everything = vec![init];
    everything.extend(descendants_of(init.pid));
    assert!(everything.iter().all(HostProcess::still_running), "{everything:?}");

    first.kill();
    until_all_gone("after SIGKILL of the service", &everything).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_pid_namespace_the_start_up_sweep_kills_what_the_ledger_recorded() {
    let dirs = ServiceDirs::new();
    let first = service(&dirs, false);
    first.wait_for_stderr("pid_namespace=false pdeathsig=true subreaper=true ledger=true");
    let agent = agent_with_sleepers(&first, &dirs).await;
    assert_eq!(ns_pids(agent.pid).len(), 1, "no PID namespace");
    let (grouped, detached) = the_two_sleepers(agent.pid).await;
    until_some("the census to record both sleepers in the ledger", || {
        let ledger = ledger_pids(dirs.root.path());
        (ledger.contains(&grouped.pid) && ledger.contains(&detached.pid)).then_some(())
    })
    .await;

    first.kill();
    until_all_gone("the agent (its parent-death signal)", &[agent]).await;
    // Nothing else reaches them while no service runs.
    assert!(grouped.still_running() && detached.still_running());

    let second = service(&dirs, false);
    second.wait_for_stderr("killed a process a previous incarnation left running");
    until_all_gone("after the start-up sweep", &[grouped, detached]).await;
    assert!(
        ledger_pids(dirs.root.path()).is_empty(),
        "the ledger is truncated after the sweep"
    );
    second.stop();
}

/// Issue 23, item 4: the service dies right after the agent forked, before any census
/// could see the sleepers. The marker the ledger recorded before the agent existed
/// still names them, so the next start-up finds and kills both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_pid_namespace_descendants_forked_just_before_a_sigkill_of_the_service_die_at_the_next_start_up() {
    let dirs = ServiceDirs::new();
    let first = service(&dirs, false);
    first.wait_for_stderr("pid_namespace=false pdeathsig=true subreaper=true ledger=true");
    let mut client = first.client().await;
    let execution = create_execution_in(&mut client, &dirs.workspace, "create-1").await;
    let agent = host_process(execution.pid.unwrap() as i32).expect("the agent runs");
    start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    // Killed as soon as both sleepers exist: well inside one census interval.
    let (grouped, detached) = the_two_sleepers(agent.pid).await;
    first.kill();
    until_all_gone("the agent (its parent-death signal)", &[agent]).await;

    let second = service(&dirs, false);
    // The sweep runs before the service listens.
    let _client = second.client().await;
    until_all_gone("after the start-up sweep", &[grouped, detached]).await;
    second.stop();
}
