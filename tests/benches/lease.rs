//! Goal P2 (shared/spec/performance.md): lease latency, warm (an idle slot) against
//! cold (spawn + `initialize`), timed from a gRPC client on PostgreSQL, with the
//! agent's own `session/new` time subtracted and shown beside it. Prints a table and
//! writes `target/lease_bench.json`; never asserts.
//!
//! `LEASE_EXECUTIONS` (default 200) sets the number of executions per run;
//! `LEASE_INIT_DELAY_MS` / `LEASE_SESSION_NEW_DELAY_MS` the fake agent's start-up;
//! `LEASE_NODE_AGENT` a real ACP agent's command line to measure beside the fake one;
//! without it, `benches/node-agent/agent.mjs` (a minimal agent on the official
//! `@agentclientprotocol/sdk`) is measured once `npm ci --prefix tests/benches/node-agent`
//! has installed its packages.

use cursor_runner_e2e::Backend;
use cursor_runner_e2e::lease_latency::{FakeStartup, LeaseAgent, LeaseFigures, LeaseReport, measure};

/// `LEASE_NODE_AGENT`, else the SDK agent beside this bench once its packages are installed.
fn node_agent() -> Option<String> {
    if let Ok(command) = std::env::var("LEASE_NODE_AGENT") {
        return Some(command).filter(|c| !c.trim().is_empty());
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/node-agent");
    let installed = dir.join("node_modules/@agentclientprotocol/sdk").is_dir();
    let node = ["/usr/bin/node", "/usr/local/bin/node"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file());
    match (installed, node) {
        (true, Some(node)) => Some(format!("{node} {}", dir.join("agent.mjs").display())),
        _ => None,
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn print(report: &LeaseReport) {
    println!(
        "agent: {}; {} executions per run; backend {}",
        report.agent, report.executions, report.backend
    );
    println!(
        "{:<44} {:>10} {:>10} {:>10}",
        "CreateExecution minus the agent's session/new", "p50 ms", "p99 ms", "mean ms"
    );
    let row = |name: &str, figures: &LeaseFigures| {
        let p = &figures.client_lease;
        println!("{name:<44} {:>10.2} {:>10.2} {:>10.2}", p.p50_ms, p.p99_ms, p.mean_ms);
        let s = &figures.service_lease;
        println!(
            "{:<44} {:>10.2} {:>10.2} {:>10.2}",
            format!("  {name}: the service's own lease"),
            s.p50_ms,
            s.p99_ms,
            s.mean_ms
        );
        let n = &figures.session_new;
        println!(
            "{:<44} {:>10.2} {:>10.2} {:>10.2}",
            format!("  {name}: the agent's session/new (apart)"),
            n.p50_ms,
            n.p99_ms,
            n.mean_ms
        );
    };
    row("cold (spawn + initialize)", &report.cold);
    row("warm (idle slot)", &report.warm);
    println!(
        "warm leases in the warm run: {}/{}; warm/cold p50: {:.4} (goal ≤ {:.4}, i.e. 1/50)",
        report.warm.warm_leases,
        report.executions,
        report.warm_to_cold_p50,
        1.0 / 50.0
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let executions = env_number("LEASE_EXECUTIONS", 200) as usize;
    let startup = FakeStartup {
        initialize_delay_ms: env_number("LEASE_INIT_DELAY_MS", FakeStartup::default().initialize_delay_ms),
        session_new_delay_ms: env_number(
            "LEASE_SESSION_NEW_DELAY_MS",
            FakeStartup::default().session_new_delay_ms,
        ),
    };
    let mut reports = vec![measure(Backend::Postgres, executions, LeaseAgent::Fake(startup)).await];
    match node_agent() {
        Some(command) => reports.push(measure(Backend::Postgres, executions, LeaseAgent::Command(command)).await),
        None => println!(
            "no real Node ACP agent measured: set LEASE_NODE_AGENT, or `npm ci --prefix tests/benches/node-agent`"
        ),
    }
    for report in &reports {
        print(report);
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/lease_bench.json");
    std::fs::write(&path, serde_json::to_string_pretty(&reports).unwrap()).unwrap();
    println!("written to {}", path.display());
}
