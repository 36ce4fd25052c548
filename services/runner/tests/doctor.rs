//! `cursor-runner doctor` and `doctor --probe`, as an operator runs them.

use std::os::unix::process::CommandExt;
use std::process::Command;

use cursor_runner_e2e::{fake_agent, scenario};
use cursor_runner_supervisor::isolation::IsolationLayer;
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
        "service non-dumpable",
        "agent isolation",
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

/// The uid `doctor` is run as to see what an ordinary user's service would offer.
const ORDINARY_USER: nix::unistd::Uid = nix::unistd::Uid::from_raw(65534);

#[test]
fn doctor_run_by_an_ordinary_user_names_every_missing_isolation_layer_and_passes() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "doctor is run as an ordinary user from root: run the suite as root (CI does)"
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_cursor-runner"));
    command.arg("doctor").env_remove("CURSOR_RUNNER_DATABASE_URL");
    // SAFETY: setgroups, setgid and setuid are async-signal-safe; nothing else runs
    // between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let gid = nix::unistd::Gid::from_raw(ORDINARY_USER.as_raw());
            nix::unistd::setgroups(&[]).map_err(std::io::Error::from)?;
            nix::unistd::setgid(gid).map_err(std::io::Error::from)?;
            nix::unistd::setuid(ORDINARY_USER).map_err(std::io::Error::from)
        });
    }
    let run = command.output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "no isolation layer is required of an ordinary user:\n{text}"
    );
    let summary = text
        .lines()
        .find(|line| line.starts_with("warn agent isolation"))
        .unwrap_or_else(|| panic!("no agent isolation warning in:\n{text}"));
    for layer in IsolationLayer::ALL {
        assert!(
            summary.contains(layer.name()),
            "{} missing from: {summary}",
            layer.name()
        );
    }
    for check in [
        "agent uid separation",
        "lifetime guardian: PID namespaces",
        "agent sight: private /proc",
        "service non-dumpable",
    ] {
        assert!(
            text.contains(&format!("warn {check}")),
            "{check} is not a warning in:\n{text}"
        );
    }
}
