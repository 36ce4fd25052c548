//! The pool with real agent processes (the fake agent, `services/fake-cursor`): a lease,
//! its release and reuse; a lease past the limits; a drain. No engine, no database.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::state::{ProfileOrigin, SlotState};
use cursor_runner_pool::{
    LaunchAs, LaunchSettings, POOL_RETRY_HINT, Pool, PoolConfig, PoolObserver, PoolStatus, Reservation, StartTimings,
    WarmProcess, WarmProfile,
};
use cursor_runner_supervisor::AgentCommand;
use parking_lot::Mutex;

/// How long a test waits for the pool to reach what it expects.
const WAIT: Duration = Duration::from_secs(20);

/// The fake agent, next to the test binaries; built first if it is not there.
fn fake_agent() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary");
        let path = exe
            .parent()
            .and_then(Path::parent)
            .expect("the target directory")
            .join("fake-cursor");
        if !path.is_file() {
            let status = std::process::Command::new(env!("CARGO"))
                .args(["build", "-q", "-p", "fake-cursor"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("cargo build -p fake-cursor");
            assert!(status.success(), "building the fake agent failed");
        }
        path
    })
}

/// Launches of the fake agent playing `scenario`, with private homes under `state_dir`.
fn launch(state_dir: &Path, scenario: &str) -> LaunchSettings {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/scenarios")
        .join(scenario);
    let command = format!("{} --scenario {}", fake_agent().display(), scenario.display());
    LaunchSettings {
        agent_command: AgentCommand::parse(&command).unwrap(),
        state_dir: state_dir.to_owned(),
        handshake_timeout: Duration::from_secs(10),
        stop_grace: Duration::from_secs(2),
        guardian: None,
        wire_capture_dir: None,
        agent_users: None,
    }
}

/// The leases the pool reported (`true`: warm); nothing else is looked at.
#[derive(Default)]
struct Leases(Mutex<Vec<bool>>);

impl PoolObserver for Leases {
    fn slot_moved(&self, _: ProfileOrigin, _: Option<SlotState>, _: Option<SlotState>) {}
    fn leased(&self, warm: bool) {
        self.0.lock().push(warm);
    }
    fn process_started(&self, _: Option<StartTimings>) {}
    fn failed(&self, _: Reason) {}
    fn quarantined(&self) {}
}

/// A process for `tenant`, started if the pool had none idle; whether it was warm.
async fn lease(pool: &Pool, tenant: &str) -> Result<(WarmProcess, bool), EngineError> {
    match pool.reserve(tenant, LaunchAs::default(), Duration::ZERO, None).await? {
        Reservation::Warm(warm) => Ok((*warm, true)),
        Reservation::Cold(cold) => cold.start().await.map(|warm| (warm, false)).map_err(|f| f.error),
    }
}

/// Stops a leased process the way an execution that ends does; its slot ends with it.
async fn end(mut warm: WarmProcess) {
    warm.connection.close_stdin().await;
    warm.process.stop(Duration::from_secs(2)).await;
}

/// Polls the pool's status until `check` holds.
async fn status_until(pool: &Pool, check: impl Fn(&PoolStatus) -> bool) -> PoolStatus {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status = pool.status();
        if check(&status) {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pool never got there: {status:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn slots_in(status: &PoolStatus, state: SlotState) -> Vec<u32> {
    status
        .profiles
        .iter()
        .flat_map(|p| &p.slots)
        .filter(|s| s.state == state)
        .filter_map(|s| s.pid)
        .collect()
}

#[tokio::test]
async fn a_process_given_back_is_leased_again_warm_to_the_next_lease_of_its_profile() {
    let state = tempfile::tempdir().unwrap();
    let leases = Arc::new(Leases::default());
    let config = PoolConfig {
        sessions_per_process: 2,
        ..PoolConfig::default()
    };
    let pool = Pool::start(config, launch(state.path(), "demo.json"), leases.clone());

    let (first, warm) = lease(&pool, "acme").await.expect("a cold start");
    assert!(!warm);
    let pid = first.process.pid();
    assert!(
        pool.give_back(first).is_ok(),
        "a process with sessions left is taken back"
    );
    status_until(&pool, |s| slots_in(s, SlotState::Idle) == [pid]).await;

    let (second, warm) = lease(&pool, "acme").await.expect("the idle process");
    assert!(warm);
    assert_eq!(second.process.pid(), pid, "the same process");
    assert_eq!(second.sessions_served, 1);
    assert_eq!(*leases.0.lock(), [false, true]);
    end(second).await;
}

#[tokio::test]
async fn a_lease_past_the_pools_limits_is_refused_pool_exhausted_with_a_retry_hint() {
    let state = tempfile::tempdir().unwrap();
    let config = PoolConfig {
        max_per_profile: 1,
        max_processes: 1,
        ..PoolConfig::default()
    };
    let pool = Pool::start(config, launch(state.path(), "demo.json"), Arc::new(Leases::default()));
    let (held, _) = lease(&pool, "acme").await.expect("the one process");

    let Err(refusal) = lease(&pool, "globex").await else {
        panic!("a second process past max_processes = 1");
    };

    assert_eq!(
        (refusal.kind, refusal.reason, refusal.retry_after),
        (
            ErrorKind::ResourceExhausted,
            Reason::PoolExhausted,
            Some(POOL_RETRY_HINT)
        )
    );
    end(held).await;
}

#[tokio::test]
async fn draining_stops_every_idle_slot_and_leaves_no_agent_process_behind() {
    let state = tempfile::tempdir().unwrap();
    let config = PoolConfig {
        warm_profiles: vec![WarmProfile {
            tenant_id: "acme".into(),
            credential: None,
            min_idle: 2,
        }],
        ..PoolConfig::default()
    };
    let pool = Pool::start(config, launch(state.path(), "demo.json"), Arc::new(Leases::default()));
    let idle = slots_in(
        &status_until(&pool, |s| slots_in(s, SlotState::Idle).len() == 2).await,
        SlotState::Idle,
    );

    pool.drain();
    pool.stopped(WAIT).await;

    let status = pool.status();
    assert!(status.draining);
    assert!(status.profiles.iter().all(|p| p.slots.is_empty()), "{status:#?}");
    for pid in idle {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "agent {pid} outlived the drain"
        );
    }
}
