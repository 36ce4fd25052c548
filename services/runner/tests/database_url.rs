//! The database password stays off the command line: every process on the host can read a
//! command line (`/proc/<pid>/cmdline`), an agent's included, so a URL carrying a password is
//! refused there and taken from a file (or the environment) instead.

use std::path::Path;
use std::process::{Command, Stdio};

use cursor_runner_e2e::*;

const PASSWORD_CANARY: &str = "pw-canary-16180-never-on-argv";

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_cursor-runner"))
}

/// `url` with `PASSWORD_CANARY` as its password (trust authentication ignores it).
fn with_password(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (user, host) = rest.split_once('@').expect("a URL with a user");
    format!("{scheme}://{user}:{PASSWORD_CANARY}@{host}")
}

/// Runs `cursor-runner ARGS` to its exit; (success, stderr).
fn run_to_exit(args: &[&str]) -> (bool, String) {
    let state = tempfile::tempdir().unwrap();
    let output = Command::new(binary())
        .args(args)
        .env_remove("CURSOR_RUNNER_DATABASE_URL")
        .env("CURSOR_RUNNER_STATE_DIR", state.path())
        .stdin(Stdio::null())
        .output()
        .expect("cursor-runner runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn serve_refuses_a_database_password_on_the_command_line_without_repeating_it() {
    let url = with_password(DEFAULT_DATABASE_URL);
    let (ok, stderr) = run_to_exit(&["serve", "--agent-command", "/bin/true", "--database-url", &url]);
    assert!(!ok, "refused: {stderr}");
    assert!(stderr.contains("--database-url-file"), "names the way out: {stderr}");
    assert!(
        !stderr.contains(PASSWORD_CANARY),
        "never repeats the password: {stderr}"
    );
}

#[test]
fn migrate_refuses_a_database_password_on_the_command_line_too() {
    let url = with_password(DEFAULT_DATABASE_URL);
    let (ok, stderr) = run_to_exit(&["migrate", "--database-url", &url]);
    assert!(!ok, "refused: {stderr}");
    assert!(
        stderr.contains("CURSOR_RUNNER_DATABASE_URL"),
        "names the way out: {stderr}"
    );
    assert!(
        !stderr.contains(PASSWORD_CANARY),
        "never repeats the password: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_url_from_a_file_serves_with_the_password_on_no_command_line() {
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let url_file = dirs.root.path().join("database-url");
    std::fs::write(&url_file, format!("{}\n", with_password(&database.url))).unwrap();
    let service = ServiceProcess::start(ServiceSettings {
        binary: binary(),
        database_url: "",
        state_dir: dirs.root.path(),
        scenario: "demo.json",
        record: &dirs.record,
        env: Vec::new(),
        args: vec!["--database-url-file".into(), url_file.display().to_string()],
    });
    let mut client = service.client().await;
    let (_execution, _turn, mut events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    events.events_until("runtime_request.created").await;

    let command_line = std::fs::read(format!("/proc/{}/cmdline", service.child.id())).unwrap();
    let command_line = String::from_utf8_lossy(&command_line);
    assert!(command_line.contains("--database-url-file"), "{command_line}");
    assert!(!command_line.contains(PASSWORD_CANARY), "{command_line}");
    // SIGKILL: a graceful drain would wait for the turn's pending question.
    service.kill();
    database.drop_database().await;
}
