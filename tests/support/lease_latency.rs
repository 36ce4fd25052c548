//! The lease latency measurement behind goal P2 (`benches/lease.rs` prints it; a smoke
//! test runs it tiny): `CreateExecution` timed from a gRPC client, cold (the pool
//! starts a process: spawn + `initialize`) and warm (an idle slot is taken), with the
//! agent's own `session/new` time subtracted and reported beside it.

use std::time::{Duration, Instant};

use cursor_runner_pool::PoolConfig;
use cursor_runner_supervisor::AgentCommand;
use serde_json::json;

use crate::{Backend, Options, TestService, WAIT, create_execution, fake_agent, proto};

/// How the fake agent pretends to be a Node runtime starting.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct FakeStartup {
    pub initialize_delay_ms: u64,
    pub session_new_delay_ms: u64,
}

impl Default for FakeStartup {
    /// Mid-range of real ACP agents measured here: `initialize` in 0.3–0.8 s; a short
    /// `session/new` (it is subtracted anyway).
    fn default() -> Self {
        Self {
            initialize_delay_ms: 500,
            session_new_delay_ms: 100,
        }
    }
}

/// Which agent the pool launches.
#[derive(Debug, Clone)]
pub enum LeaseAgent {
    Fake(FakeStartup),
    /// Any ACP agent's command line (e.g. a Node agent built on `@agentclientprotocol/sdk`).
    Command(String),
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

impl Percentiles {
    pub fn of(samples: &mut [Duration]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let at = |q: f64| ms(samples[((samples.len() - 1) as f64 * q).round() as usize]);
        Self {
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            mean_ms: samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64,
        }
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LeaseFigures {
    /// `CreateExecution` as the client sees it, minus the agent's own `session/new`.
    pub client_lease: Percentiles,
    /// The service's own admission → ready-for-`session/new` (`Execution.lease`).
    pub service_lease: Percentiles,
    /// The agent's own `session/new`, reported beside the lease.
    pub session_new: Percentiles,
    /// Executions whose lease was warm (for the warm run: all of them).
    pub warm_leases: usize,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LeaseReport {
    pub backend: String,
    pub agent: String,
    pub executions: usize,
    pub cold: LeaseFigures,
    pub warm: LeaseFigures,
    /// warm p50 / cold p50 of the client-side lease (goal ≤ 1/50).
    pub warm_to_cold_p50: f64,
}

/// Runs `executions` cold then `executions` warm leases against a fresh service.
pub async fn measure(backend: Backend, executions: usize, agent: LeaseAgent) -> LeaseReport {
    let dir = tempfile::tempdir().expect("temp dir");
    let (command, label) = match &agent {
        LeaseAgent::Fake(startup) => {
            let scenario = dir.path().join("startup.json");
            let body = json!({
                "initialize_delay_ms": startup.initialize_delay_ms,
                "session_new_delay_ms": startup.session_new_delay_ms,
                "turns": [],
            });
            std::fs::write(&scenario, body.to_string()).expect("scenario");
            let line = format!("{} --scenario {}", fake_agent().display(), scenario.display());
            (
                line,
                format!(
                    "fake-cursor (initialize {} ms, session/new {} ms)",
                    startup.initialize_delay_ms, startup.session_new_delay_ms
                ),
            )
        }
        LeaseAgent::Command(line) => (line.clone(), line.clone()),
    };
    let cold = run(backend, &command, executions, 0).await;
    let warm = run(backend, &command, executions, 1).await;
    let ratio = if cold.client_lease.p50_ms > 0.0 {
        warm.client_lease.p50_ms / cold.client_lease.p50_ms
    } else {
        0.0
    };
    LeaseReport {
        backend: format!("{backend:?}"),
        agent: label,
        executions,
        cold,
        warm,
        warm_to_cold_p50: ratio,
    }
}

async fn run(backend: Backend, command: &str, executions: usize, min_idle: usize) -> LeaseFigures {
    let options = Options {
        agent_command: Some(AgentCommand::parse(command).expect("agent command")),
        pool: PoolConfig {
            min_idle,
            probe_interval: None,
            ..PoolConfig::default()
        },
        ..Options::default()
    };
    let service = TestService::start_with(backend, "demo.json", options).await;
    let mut client = service.client().await;
    let mut admin = service.admin(None).await;
    let (mut client_lease, mut service_lease, mut session_new) = (Vec::new(), Vec::new(), Vec::new());
    let mut warm_leases = 0;
    // A warm run teaches the pool its profile with one untimed execution first.
    let rounds = if min_idle > 0 { executions + 1 } else { executions };
    for round in 0..rounds {
        if min_idle > 0 && round > 0 {
            until_idle(&mut admin).await;
        }
        let started = Instant::now();
        let execution = create_execution(&mut client, &service, &format!("lease-{round}")).await;
        let took = started.elapsed();
        let lease = execution.lease.clone().expect("lease");
        let own = lease
            .session_new_duration
            .map(|d| Duration::try_from(d).unwrap_or_default())
            .unwrap_or_default();
        if min_idle == 0 || round > 0 {
            client_lease.push(took.saturating_sub(own));
            service_lease.push(
                lease
                    .lease_duration
                    .map(|d| Duration::try_from(d).unwrap_or_default())
                    .unwrap_or_default(),
            );
            session_new.push(own);
            warm_leases += usize::from(lease.warm);
        }
        client
            .close_execution(proto::CloseExecutionRequest {
                request_id: format!("close-{round}"),
                execution_id: execution.execution_id,
            })
            .await
            .expect("CloseExecution");
    }
    service.shutdown().await;
    LeaseFigures {
        client_lease: Percentiles::of(&mut client_lease),
        service_lease: Percentiles::of(&mut service_lease),
        session_new: Percentiles::of(&mut session_new),
        warm_leases,
    }
}

async fn until_idle(admin: &mut crate::AdminClient) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status = admin
            .get_pool_status(proto::GetPoolStatusRequest {})
            .await
            .expect("GetPoolStatus")
            .into_inner();
        if status.profiles.iter().any(|p| p.idle > 0) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "no warm slot appeared");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
