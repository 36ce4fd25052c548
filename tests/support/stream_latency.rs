//! The latency and memory measurements behind goals P1b and P4 (`benches/perf.rs` prints
//! them): `cursor-runner serve` as its own process on PostgreSQL, `executions` executions
//! each with its fake agent and a `StreamEvents` subscriber, the first `streaming` of them
//! together streaming a steady `updates_per_sec` (each agent paces its share and stamps
//! every chunk with its send time; the turns start one update's time apart, so the shares
//! interleave evenly); the others stay open and idle, their agents running. Latency is a chunk's stamp to its arrival at the subscriber, for chunks sent
//! while every execution streams: once every turn has started and before the first
//! execution sends its last chunk (the turns all end within one pacing interval, so each
//! last chunk races every other execution's settlement: that end is reported apart). The
//! service's RSS is read from `/proc` before the first execution and while they stream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proto::stream_events_response::Frame;
use serde_json::json;
use tokio::task::JoinSet;

use crate::answer_latency::store_operations;
use crate::cpu_steal::MachineCpu;
use crate::lease_latency::Percentiles;
use crate::throughput::{CHUNK_TEXT, flood_scenario};
use crate::{
    Backend, Client, ServiceDirs, ServiceProcess, ServiceSettings, Subscriber, TestDatabase, payload, proto,
    scrape_metrics, start_turn,
};

/// Executions served by one gRPC connection of the bench.
const EXECUTIONS_PER_CONNECTION: usize = 50;
/// `CreateExecution`s in flight at once while the executions are set up.
const CONCURRENT_CREATES: usize = 8;

#[derive(Debug, Clone, serde::Serialize)]
pub struct LatencyReport {
    pub executions: usize,
    /// Those of them that streamed; the others were open and idle.
    pub streaming: usize,
    /// All executions together.
    pub updates_per_sec: u64,
    pub seconds: f64,
    /// Chunks timed (those sent while every execution streamed).
    pub samples: usize,
    pub latency: Percentiles,
    pub max_ms: f64,
    /// Every chunk sent once every turn had started, the last ones included.
    pub with_the_turns_ending: Percentiles,
    /// The service's RSS before the first execution.
    pub rss_before_kib: u64,
    /// With every execution created (agents up, sessions open, subscribers attached).
    pub rss_idle_kib: u64,
    /// The highest RSS seen while the executions streamed.
    pub rss_peak_kib: u64,
    /// (peak − before) / executions.
    pub rss_per_execution_kib: f64,
    /// CPU the machine's PID 1 (not the service) used per second while the executions
    /// streamed, and the processes the machine ran then ([`MachineCpu`]).
    pub machine_init_cpu_ms_per_sec: Option<f64>,
    /// CPU the kernel's memory monitor (DAMON's `kdamond` threads) used per second then.
    pub machine_memory_monitor_cpu_ms_per_sec: Option<f64>,
    pub machine_processes: usize,
    /// The store operations the service made while the executions streamed, by operation,
    /// per update streamed.
    pub store_operations_per_update: BTreeMap<String, f64>,
}

/// Streams `updates_per_sec` for `seconds`, spread over `streaming` of `executions`
/// executions.
pub async fn measure(executions: usize, streaming: usize, updates_per_sec: u64, seconds: f64) -> LatencyReport {
    let executions = executions.max(1);
    let streaming_executions = streaming.clamp(1, executions);
    let chunks = ((seconds * updates_per_sec as f64) / streaming_executions as f64)
        .ceil()
        .max(1.0) as u64;
    let scratch = tempfile::tempdir().expect("temp dir");
    let scenario = flood_scenario(
        scratch.path(),
        json!({"count": chunks, "text": CHUNK_TEXT, "stamp": true,
               "interval_us": streaming_executions as u64 * 1_000_000 / updates_per_sec.max(1)}),
    );
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let capacity = (executions + 8).to_string();
    let service = ServiceProcess::start(ServiceSettings {
        binary: &crate::agent_init(),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario: scenario.to_str().expect("a UTF-8 path"),
        record: &dirs.record,
        env: Vec::new(),
        // Hundreds of agents would need as many provisioned host accounts; the service's
        // memory and latency do not depend on the agents' uids.
        args: vec![
            "--agent-uid-separation".into(),
            "false".into(),
            "--pool-max-per-profile".into(),
            capacity.clone(),
            "--pool-max-processes".into(),
            capacity,
            "--metrics-listen".into(),
            "127.0.0.1:0".into(),
        ],
    });
    let pid = service.child.id();
    let mut clients = Vec::new();
    for _ in 0..executions.div_ceil(EXECUTIONS_PER_CONNECTION) {
        clients.push(service.client().await);
    }
    let rss_before_kib = rss_kib(pid);
    let memory_monitors = MachineCpu::memory_monitors();

    let admitted = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_CREATES));
    let mut created = JoinSet::new();
    for n in 0..executions {
        let mut client = clients[n / EXECUTIONS_PER_CONNECTION].clone();
        let workspace = dirs.workspace.clone();
        let admitted = admitted.clone();
        created.spawn(async move {
            let _permit = admitted.acquire_owned().await.expect("semaphore");
            let execution = crate::create_execution_in(&mut client, &workspace, &format!("create-{n}")).await;
            let events = Subscriber::open(&mut client, &execution.execution_id, 0)
                .await
                .expect("StreamEvents");
            (client, execution.execution_id, events)
        });
    }
    let created = created.join_all().await;
    let rss_idle_kib = rss_kib(pid);

    let (started_tx, mut started_rx) = tokio::sync::mpsc::channel(executions);
    let mut streaming = JoinSet::new();
    let mut created = created;
    // Held open until the end, as the streaming ones are.
    let idle = created.split_off(streaming_executions);
    // Each agent sends its first chunk as its turn starts and then one every interval: turns
    // started all at once would send in bursts (500 turns, started within ≈ 270 ms of a
    // 500 ms interval, sent ≈ 1.85k updates/s half the time and none the other half). Turns
    // started `interval / executions` apart interleave their chunks into the steady rate.
    let first_turn = tokio::time::Instant::now();
    let turn_spacing = Duration::from_secs(1) / updates_per_sec.max(1) as u32;
    for (n, (client, execution_id, events)) in created.into_iter().enumerate() {
        let start_at = first_turn + turn_spacing * n as u32;
        streaming.spawn(stream_one(client, execution_id, events, start_at, started_tx.clone()));
    }
    drop(started_tx);
    for _ in 0..streaming_executions {
        if started_rx.recv().await.is_none() {
            let failed = streaming.join_next().await.map(|joined| joined.err());
            panic!("a turn did not start: {failed:?}");
        }
    }
    let steady_from = unix_nanos(SystemTime::now());
    let (machine_before, steady_started) = (MachineCpu::now(&memory_monitors), std::time::Instant::now());
    let scrape_before = scrape_metrics(service.metrics_address());
    let operations_before = store_operations(&scrape_before);
    let mut rss_peak_kib = rss_kib(pid);
    let mut stamps = Vec::new();
    // When the first execution sent its last chunk.
    let mut steady_until = u128::MAX;
    loop {
        tokio::select! {
            joined = streaming.join_next() => match joined {
                Some(arrivals) => {
                    let arrivals = arrivals.expect("a subscriber");
                    if let Some((last, _)) = arrivals.last() {
                        steady_until = steady_until.min(*last);
                    }
                    stamps.extend(arrivals);
                }
                None => break,
            },
            () = tokio::time::sleep(Duration::from_millis(100)) => rss_peak_kib = rss_peak_kib.max(rss_kib(pid)),
        }
    }
    let (machine_after, streamed_secs) = (
        MachineCpu::now(&memory_monitors),
        steady_started.elapsed().as_secs_f64(),
    );
    let scrape = scrape_metrics(service.metrics_address());
    if let Ok(path) = std::env::var("PERF_DUMP_METRICS") {
        let label = match executions - streaming_executions {
            0 => executions.to_string(),
            idle => format!("{executions}-{idle}-idle"),
        };
        std::fs::write(format!("{path}.{label}.before"), &scrape_before).unwrap();
        std::fs::write(format!("{path}.{label}"), &scrape).unwrap();
    }
    let operations_after = store_operations(&scrape);
    drop(idle);
    service.stop();
    database.drop_database().await;

    if let Ok(path) = std::env::var("PERF_DUMP_SAMPLES") {
        let lines: Vec<String> = stamps.iter().map(|(s, a)| format!("{s} {a}")).collect();
        std::fs::write(path, lines.join("\n")).unwrap();
    }
    let latency = |(sent, arrived): &(u128, u128)| Duration::from_nanos(arrived.saturating_sub(*sent) as u64);
    let mut latencies: Vec<Duration> = stamps
        .iter()
        .filter(|(sent, _)| (steady_from..steady_until).contains(sent))
        .map(latency)
        .collect();
    let mut with_the_turns_ending: Vec<Duration> = stamps
        .iter()
        .filter(|(sent, _)| *sent >= steady_from)
        .map(latency)
        .collect();
    let streamed = (chunks * streaming_executions as u64) as f64;
    let store_operations_per_update = operations_after
        .iter()
        .map(|(operation, n)| {
            (
                operation.clone(),
                (n - operations_before.get(operation).unwrap_or(&0.0)) / streamed,
            )
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    let max_ms = latencies.iter().max().map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    LatencyReport {
        executions,
        streaming: streaming_executions,
        updates_per_sec,
        seconds,
        samples: latencies.len(),
        latency: Percentiles::of(&mut latencies),
        max_ms,
        with_the_turns_ending: Percentiles::of(&mut with_the_turns_ending),
        rss_before_kib,
        rss_idle_kib,
        rss_peak_kib,
        machine_init_cpu_ms_per_sec: machine_after
            .zip(machine_before)
            .and_then(|(after, before)| after.init_ms_per_sec_since(&before, streamed_secs)),
        machine_memory_monitor_cpu_ms_per_sec: machine_after
            .zip(machine_before)
            .and_then(|(after, before)| after.memory_monitor_ms_per_sec_since(&before, streamed_secs)),
        machine_processes: machine_before.map_or(0, |machine| machine.processes),
        rss_per_execution_kib: rss_peak_kib.saturating_sub(rss_before_kib) as f64 / executions as f64,
        store_operations_per_update,
    }
}

/// Starts the execution's turn at `start_at`, says so, and returns `(sent, arrived)` in nanoseconds since
/// the Unix epoch for every stamped chunk until the turn settles.
async fn stream_one(
    mut client: Client,
    execution_id: String,
    events: Subscriber,
    start_at: tokio::time::Instant,
    started: tokio::sync::mpsc::Sender<()>,
) -> Vec<(u128, u128)> {
    tokio::time::sleep_until(start_at).await;
    start_turn(&mut client, &execution_id, &format!("turn-{execution_id}"))
        .await
        .expect("StartTurn");
    started.send(()).await.expect("the bench waits");
    arrivals(events).await
}

/// `(sent, arrived)` in nanoseconds since the Unix epoch for every stamped chunk `events`
/// shows, until the turn settles.
pub(crate) async fn arrivals(mut events: Subscriber) -> Vec<(u128, u128)> {
    let mut stamps = Vec::new();
    loop {
        let Frame::Event(event) = events.next_frame().await else {
            continue;
        };
        let arrived = unix_nanos(SystemTime::now());
        if event.event_type == "item.delta" {
            let text = payload(&event)["text"].as_str().unwrap_or_default().to_owned();
            // Adjacent chunks may arrive coalesced into one delta: each keeps its stamp.
            stamps.extend(self::stamps(&text).map(|sent| (sent, arrived)));
        }
        if crate::is_settlement(&event.event_type) {
            return stamps;
        }
    }
}

/// The `[sent:NANOS]` stamps the fake agent put in `text`, in order.
pub(crate) fn stamps(text: &str) -> impl Iterator<Item = u128> + '_ {
    text.split("[sent:")
        .skip(1)
        .map(|stamp| stamp.split(']').next().and_then(|n| n.parse().ok()).expect("a stamp"))
}

pub(crate) fn unix_nanos(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos()
}

/// `VmRSS` of `pid`, in KiB (0 once it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}
