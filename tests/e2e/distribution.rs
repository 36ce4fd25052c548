//! A pinned Cursor distribution: the agent is launched only from its verified closure,
//! with the fixed argv, and a closure changed after verification is refused.

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
);

/// A synthetic distribution whose `node` is a launcher for the fake agent, pinned and
/// materialized into `dir/closure`.
fn pinned_fake(dir: &Path, scenario_name: &str, record: &Path) -> PinnedDistribution {
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
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(service.workspace.join("env.json")).unwrap()).unwrap();
    let argv: Vec<String> = serde_json::from_value(report["argv"].clone()).unwrap();
    assert_eq!(
        argv[argv.len() - 4..],
        [
            closure.join("index.js").display().to_string(),
            "--disable-project-configs".into(),
            "--disable-auto-update".into(),
            "acp".into(),
        ],
        "the fixed argv, never --force, --trust or --approve-mcps"
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
    assert!(!record.exists(), "nothing was launched");
    service.shutdown().await;
}
