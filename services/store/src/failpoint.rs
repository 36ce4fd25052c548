//! Named crash windows for the runner's crash tests (feature `failpoints`), in the
//! store (the innermost crate that has one) so that a window can sit inside a transaction.

/// Test-only windows: with the `failpoints` feature, a point named in
/// `CURSOR_RUNNER_FAILPOINT` announces itself on stderr and then holds the calling task
/// for good (so a test can SIGKILL the service exactly there), or for
/// `CURSOR_RUNNER_FAILPOINT_PAUSE_MS` if that is set (so a test can act inside the
/// window and watch the service go on). Without the feature it compiles to nothing.
pub async fn failpoint(name: &str) {
    #[cfg(feature = "failpoints")]
    if std::env::var("CURSOR_RUNNER_FAILPOINT").as_deref() == Ok(name) {
        eprintln!("failpoint reached: {name}");
        match std::env::var("CURSOR_RUNNER_FAILPOINT_PAUSE_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
        {
            Some(ms) => tokio::time::sleep(std::time::Duration::from_millis(ms)).await,
            None => std::future::pending().await,
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
