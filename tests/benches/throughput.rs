//! Goal P1 (shared/spec/performance.md): agent updates per second consumed end to end
//! (stdout → normalize → durable outbox → a gRPC subscriber) beside the parse-only
//! limit on the same bytes, on PostgreSQL. Prints figures and writes
//! `target/throughput_bench.json`; never asserts. `THROUGHPUT_UPDATES` sets the size.

use cursor_runner_e2e::Backend;
use cursor_runner_e2e::throughput::measure;

/// acpx's measured json-output figure on this kind of machine (performance.md anchors).
const ACPX_UPDATES_PER_SEC: f64 = 29_000.0;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let updates = std::env::var("THROUGHPUT_UPDATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let report = measure(Backend::Postgres, updates).await;
    println!(
        "updates: {} ({} bytes per line), backend {}",
        report.updates, report.line_bytes, report.backend
    );
    println!(
        "events streamed: {} (adjacent deltas coalesced up to {} bytes); text {} of {} bytes",
        report.events_streamed,
        cursor_runner_activity::MAX_COALESCED_DELTA_BYTES,
        report.text_bytes_streamed,
        report.text_bytes_sent
    );
    println!("{:<44} {:>12}", "path", "updates/s");
    println!(
        "{:<44} {:>12.0}",
        "end to end (stdout → outbox → subscriber)", report.end_to_end_per_sec
    );
    println!(
        "{:<44} {:>12.0}",
        "parse-only limit (split + serde_json)", report.parse_limit_per_sec
    );
    println!(
        "ratio to the parse limit: {:.3} (goal ≥ 0.7); to acpx's {ACPX_UPDATES_PER_SEC}/s: {:.2}× (goal ≥ 10×)",
        report.end_to_end_per_sec / report.parse_limit_per_sec,
        report.end_to_end_per_sec / ACPX_UPDATES_PER_SEC
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/throughput_bench.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!("written to {}", path.display());
}
