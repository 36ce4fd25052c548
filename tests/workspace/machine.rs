//! The execution's machines (`services/executions/src/machine/`) decide and never act: no
//! `await`, no task, no store, no pipe, no clock. The runtime reads the time once per input
//! and passes it in, which is what makes every state × input a table test.

use std::path::Path;

use crate::production_sources;

/// Text that would mean a machine does I/O, waits, or reads the clock itself.
const FORBIDDEN: [&str; 10] = [
    ".await",
    "async fn",
    "Instant::now",
    "now_ms(",
    "SystemTime",
    "tokio::spawn",
    "tokio::sync",
    "sqlx",
    "std::fs",
    "std::process",
];

#[test]
fn the_execution_machines_do_no_io_and_read_no_clock() {
    let machine = Path::new(env!("CARGO_MANIFEST_DIR")).join("../services/executions/src/machine");
    let sources = production_sources(&machine);
    assert!(!sources.is_empty(), "the machines live in {}", machine.display());
    let mut found = Vec::new();
    for (file, source) in sources {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with("_tests.rs") {
            continue;
        }
        for (n, line) in source.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            found.extend(
                FORBIDDEN
                    .iter()
                    .filter(|token| code.contains(*token))
                    .map(|token| format!("{name}:{}: `{token}`", n + 1)),
            );
        }
    }
    assert!(found.is_empty(), "the machines must stay sans-IO: {found:?}");
}
