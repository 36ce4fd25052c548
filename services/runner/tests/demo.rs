//! The README's main command, run as a user would: `cursor-runner demo`.

use std::process::Command;

#[test]
fn the_demo_runs_a_turn_whose_question_is_answered_through_the_api() {
    let output = Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
        .arg("demo")
        .env_remove("CURSOR_RUNNER_DATABASE_URL")
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "demo failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let event_types: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix('#'))
        .filter_map(|rest| rest.split_whitespace().nth(1))
        .collect();
    let position = |name: &str| {
        event_types
            .iter()
            .position(|t| *t == name)
            .unwrap_or_else(|| panic!("{name} missing from the demo output:\n{stdout}"))
    };
    assert!(position("turn.started") < position("tool.execution.completed"));
    assert!(position("runtime_request.created") < position("runtime_request.resolved"));
    assert!(position("runtime_request.resolved") < position("turn.completed"));
    assert!(position("turn.completed") < position("process.exited"));
    assert!(
        stdout.contains("interaction is delivered (delivery: pipe_written)"),
        "{stdout}"
    );
    assert!(stdout.contains("\"Great, using PostgreSQL.\""), "{stdout}");
}
