//! No agent process, nor any descendant, outlives its execution (issue 4, item 7). The
//! fake agent forks two sleepers: one stays in its process group, the other calls
//! `setsid()` and ignores SIGTERM. Descendants are found in the host's `/proc` by
//! walking the process tree (pids inside a PID namespace are namespace-local), checked
//! alive first, then polled until none runs (zombies count as dead: the host's init
//! can take seconds to reap). A SIGKILL of the whole service is tested with the service
//! as a separate process, in `services/runner/tests/orphans.rs`.

use cursor_runner_e2e::*;

on_both_backends!(
    closing_an_execution_kills_every_descendant_even_one_that_called_setsid,
    an_agent_crash_kills_every_descendant_even_one_that_called_setsid,
    without_a_pid_namespace_closing_kills_every_descendant_the_census_saw,
    without_a_pid_namespace_an_agent_crash_kills_every_descendant_the_census_saw,
);

/// An execution whose agent has run its first turn and left its two sleepers behind.
struct Tree {
    service: TestService,
    client: Client,
    execution: proto::Execution,
    events: Subscriber,
    agent: HostProcess,
    /// The sleeper that stayed in the agent's group, and the one that left it.
    grouped: HostProcess,
    detached: HostProcess,
    /// The launched process (the init with a namespace), and all below it.
    everything: Vec<HostProcess>,
}

async fn agent_with_two_sleepers(backend: Backend, pid_namespace: bool) -> Tree {
    let options = Options {
        pid_namespace,
        ..Options::default()
    };
    let service = TestService::start_with(backend, "orphans.json", options).await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    assert_eq!(
        events.until_turn_settles().await.last().unwrap().event_type,
        "turn.completed"
    );
    let agent = host_process(execution.pid.expect("pid") as i32).expect("the agent runs");
    let root = if pid_namespace {
        let init = host_process(agent.ppid).expect("its parent");
        assert!(cmdline(init.pid).contains("agent-init"), "{}", cmdline(init.pid));
        assert_eq!(
            ns_pids(init.pid).last(),
            Some(&1),
            "the init is PID 1 of a new namespace"
        );
        assert_eq!(ns_pids(agent.pid).last(), Some(&2), "the agent runs inside it");
        init
    } else {
        assert_eq!(ns_pids(agent.pid).len(), 1, "no PID namespace of its own");
        agent
    };
    let (grouped, detached) = the_two_sleepers(root.pid).await;
    assert_eq!(grouped.pgid, agent.pid, "one sleeper stays in the agent's group");
    assert_ne!(detached.pgid, agent.pid, "the other left it with setsid()");
    let mut everything = vec![root];
    everything.extend(descendants_of(root.pid));
    assert!(
        everything.iter().all(HostProcess::still_running) && everything.len() >= 3,
        "all alive before: {everything:?}"
    );
    let ledger = ledger_pids(service.state_dir());
    assert!(
        ledger.contains(&root.pid) && ledger.contains(&agent.pid),
        "launch recorded: {ledger:?}"
    );
    Tree {
        service,
        client,
        execution,
        events,
        agent,
        grouped,
        detached,
        everything,
    }
}

async fn close(tree: &mut Tree) {
    let closed = tree
        .client
        .close_execution(proto::CloseExecutionRequest {
            request_id: "close-1".into(),
            execution_id: tree.execution.execution_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    assert_eq!(closed.state, proto::ExecutionState::Closed as i32);
}

async fn crash(tree: &mut Tree) {
    start_turn(&mut tree.client, &tree.execution.execution_id, "turn-2")
        .await
        .unwrap();
    let settled = tree.events.until_turn_settles().await;
    let exited = settled.iter().find(|e| e.event_type == "process.exited").unwrap();
    assert_eq!(
        payload(exited)["signal"],
        6,
        "the agent's own death (SIGABRT) is recorded, through the init too"
    );
    assert_eq!(settled.last().unwrap().event_type, "turn.failed");
}

async fn closing_an_execution_kills_every_descendant_even_one_that_called_setsid(backend: Backend) {
    let mut tree = agent_with_two_sleepers(backend, true).await;
    close(&mut tree).await;
    until_all_gone("after CloseExecution", &tree.everything).await;
    tree.service.shutdown().await;
}

async fn an_agent_crash_kills_every_descendant_even_one_that_called_setsid(backend: Backend) {
    let mut tree = agent_with_two_sleepers(backend, true).await;
    crash(&mut tree).await;
    until_all_gone("after the agent crashed", &tree.everything).await;
    tree.service.shutdown().await;
}

/// Without a namespace, the census (a walk of the agent's tree, right before the stop
/// ladder and every `CENSUS_INTERVAL`) is what lets the service kill a descendant that
/// left the agent's group; the service, as subreaper, then reaps it.
async fn without_a_pid_namespace_closing_kills_every_descendant_the_census_saw(backend: Backend) {
    let mut tree = agent_with_two_sleepers(backend, false).await;
    close(&mut tree).await;
    until_all_gone("after CloseExecution", &tree.everything).await;
    until_reaped(&tree.detached).await;
    tree.service.shutdown().await;
}

/// An agent that crashes orphans its descendants at once: only those the periodic
/// census has already recorded can be attributed to it (the documented window), so
/// the test waits until the ledger shows the detached sleeper before the crash.
async fn without_a_pid_namespace_an_agent_crash_kills_every_descendant_the_census_saw(backend: Backend) {
    let mut tree = agent_with_two_sleepers(backend, false).await;
    let (grouped, detached) = (tree.grouped.pid, tree.detached.pid);
    let state_dir = tree.service.state_dir().to_path_buf();
    until_some("the census to record both sleepers", || {
        let ledger = ledger_pids(&state_dir);
        (ledger.contains(&grouped) && ledger.contains(&detached)).then_some(())
    })
    .await;
    crash(&mut tree).await;
    until_all_gone("after the agent crashed", &tree.everything).await;
    until_reaped(&tree.detached).await;
    assert!(!tree.agent.still_running());
    tree.service.shutdown().await;
}

/// The orphan was adopted by the service (its subreaper) and reaped: not even a zombie.
async fn until_reaped(process: &HostProcess) {
    until_some("the orphan to be reaped by the service", || {
        host_process(process.pid)
            .is_none_or(|p| p.start_time != process.start_time)
            .then_some(())
    })
    .await;
}
