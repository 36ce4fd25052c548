//! `cursor-runner doctor` and `doctor --probe`, as an operator runs them.

use std::process::Command;

use cursor_runner_e2e::{fake_agent, scenario};
use serde_json::Value;

#[test]
fn the_probe_records_what_an_unauthenticated_agent_offers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("probe.json");
    let agent = format!(
        "{} --scenario {}",
        fake_agent().display(),
        scenario("probe_unauthenticated.json").display()
    );
    let run = Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
        .args(["doctor", "--probe", "--agent-command", &agent, "--out"])
        .arg(&out)
        .env_remove("CURSOR_RUNNER_DATABASE_URL")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let calls = &report["calls"];
    assert_eq!(calls["initialize"]["outcome"], "result");
    assert_eq!(calls["initialize"]["result"]["authMethods"][0]["id"], "cursor_login");
    assert_eq!(
        calls["session/new"]["code"], -32000,
        "authentication required, as expected"
    );
    for method in ["session/fork", "session/resume"] {
        assert_eq!(calls[method]["code"], -32601, "{method}");
    }
    for method in ["cursor/list_available_models", "session/list"] {
        assert_eq!(calls[method]["code"], -32000, "{method}: needs a signed-in agent");
    }
    assert_eq!(report["distribution"], "unpinned");
    assert!(report["exit"].is_object(), "the probe's agent was stopped and reaped");
}

#[test]
fn doctor_reports_each_check_and_fails_on_a_missing_required_one() {
    let agent = format!("{} --scenario x", fake_agent().display());
    let ok = Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
        .args(["doctor", "--agent-command", &agent])
        .env_remove("CURSOR_RUNNER_DATABASE_URL")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&ok.stdout);
    assert!(ok.status.success(), "{text}");
    for name in [
        "platform",
        "distribution",
        "workspace watch",
        "agent uid separation",
        "PID namespaces",
        "child subreaper",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    let broken = Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
        .args([
            "doctor",
            "--agent-command",
            &agent,
            "--database-url",
            "postgres://nobody@127.0.0.1:1/none",
        ])
        .output()
        .unwrap();
    assert_eq!(
        broken.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&broken.stdout)
    );
    assert!(String::from_utf8_lossy(&broken.stdout).contains("FAIL database"));
}
