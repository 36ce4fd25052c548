//! Goal P3 (shared/spec/performance.md): `AnswerInteraction` → bytes on the agent's stdin,
//! PostgreSQL durable, p99 ≤ 5× one single-row commit measured in the same run. The client
//! times the RPC, which returns only after the flushed pipe write and the `delivered`
//! commit (an upper bound of the goal's measure). Also prints the store operations one
//! question costs. Prints a table and writes `target/answer_bench.json`; never asserts.
//!
//! `ANSWER_QUESTIONS` (default 300; 5 without `--bench`, as `cargo test --benches` runs it).

use cursor_runner_e2e::answer_latency::measure;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let questions = std::env::var("ANSWER_QUESTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 300 } else { 5 });
    let report = measure(questions).await;
    let ratio = report.answer.p99_ms / report.single_row_commit.p99_ms.max(f64::EPSILON);
    println!("P3 on PostgreSQL, {questions} questions answered one after another");
    println!("{:<48} {:>9} {:>9} {:>9}", "measure", "p50 ms", "p99 ms", "mean ms");
    for (name, p) in [
        ("AnswerInteraction (to delivered)", &report.answer),
        ("anchor: one single-row INSERT commit", &report.single_row_commit),
    ] {
        println!("{name:<48} {:>9.3} {:>9.3} {:>9.3}", p.p50_ms, p.p99_ms, p.mean_ms);
    }
    println!("p99 ratio {ratio:.1}× one commit (goal ≤ 5×)");
    let total: f64 = report.store_operations_per_question.values().sum();
    println!("store operations per question (persisted → delivered → resolved): {total:.1}");
    for (operation, n) in &report.store_operations_per_question {
        println!("  {operation:<40} {n:.2}");
    }
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/answer_bench.json");
    let _ = std::fs::write(
        &out,
        serde_json::to_string_pretty(&serde_json::json!({"report": report, "p99_ratio": ratio})).unwrap(),
    );
}
