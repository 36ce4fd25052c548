//! Prometheus's `promtool` (Debian package `prometheus`), for the tests that hold the
//! metrics exposition and the alert rules to what Prometheus accepts.

use std::path::PathBuf;
use std::process::Command;

/// Set (as `.ci/run` does) to make a missing `promtool` fail instead of skip.
pub const REQUIRE_PROMTOOL: &str = "CURSOR_RUNNER_REQUIRE_PROMTOOL";

/// `promtool` (from `$PROMTOOL`, else `PATH`), or `None` after a loud skip notice when it
/// is not installed. Panics when it is missing and [`REQUIRE_PROMTOOL`] is set.
pub fn promtool(test: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("PROMTOOL").unwrap_or_else(|| "promtool".into()));
    if Command::new(&path)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some(path);
    }
    assert!(
        std::env::var_os(REQUIRE_PROMTOOL).is_none(),
        "{test}: promtool not found and {REQUIRE_PROMTOOL} is set (apt-get install prometheus)"
    );
    eprintln!("SKIPPED {test}: promtool not found (apt-get install prometheus; CI installs it)");
    None
}
