//! The TypeScript client in `deploy/clients/typescript` against the real `cursor-runner
//! serve` (demo scenario, bearer tokens): over gRPC with @grpc/grpc-js and over gRPC-Web on
//! HTTP/1.1 with @connectrpc/connect-node, each creates an execution, starts a turn,
//! streams its events, answers the agent's question, drops the stream and resumes it from
//! the acknowledged sequence with no gap and no duplicate, until `turn.completed`.
//!
//! Needs `node` (v20+) and the client's dependencies: `npm ci --prefix
//! deploy/clients/typescript` (CI runs it first). Without them these tests fail; they never
//! skip.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cursor_runner_e2e::typescript::installed_client;
use cursor_runner_e2e::{Backend, ServiceDirs, ServiceProcess, ServiceSettings, TENANT, TestDatabase};
use sha2::Digest;

const TOKEN: &str = "ts-client-token-3f1c";
/// The client gives up by itself after its own `--timeout-secs`; this bounds the process.
const CLIENT_LIMIT: Duration = Duration::from_secs(120);

/// Runs `command` to its end, killing it past `limit`.
fn run_bounded(command: &mut Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// `node --import tsx src/<variant>.ts` with the address, tenant, token and workspace.
fn run_client(variant: &str, addr: &str, token: &str, workspace: &Path) -> Output {
    let dir = installed_client();
    let started = Instant::now();
    let output = run_bounded(
        Command::new("node")
            .current_dir(&dir)
            .args(["--import", "tsx", &format!("src/{variant}.ts")])
            .args(["--addr", addr, "--timeout-secs", "60"])
            .arg("--workspace")
            .arg(workspace)
            .env("RUNNER_TENANT", TENANT)
            .env("RUNNER_TOKEN", token),
        CLIENT_LIMIT,
    );
    eprintln!(
        "--- {variant} client ({:.1} s, {}) ---\n{}{}",
        started.elapsed().as_secs_f64(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn tokens_file(dir: &Path) -> PathBuf {
    let path = dir.join("tokens.json");
    let digest = hex::encode(sha2::Sha256::digest(TOKEN.as_bytes()));
    let body = serde_json::json!({"tokens": [{"tenant_id": TENANT, "sha256": digest}]});
    std::fs::write(&path, body.to_string()).expect("tokens file");
    path
}

fn start_service(dirs: &ServiceDirs, database: &TestDatabase) -> ServiceProcess {
    start_service_playing(dirs, database, "demo.json")
}

fn start_service_playing(dirs: &ServiceDirs, database: &TestDatabase, scenario: &str) -> ServiceProcess {
    let tokens = tokens_file(dirs.root.path());
    let service = ServiceProcess::start(ServiceSettings {
        binary: Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario,
        record: &dirs.record,
        env: Vec::new(),
        args: vec!["--tokens-file".into(), tokens.display().to_string()],
    });
    wait_listening(service.address());
    service
}

fn wait_listening(address: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(address).is_err() {
        assert!(Instant::now() < deadline, "the service never listened on {address}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Checks what a client printed: every event once, in sequence from 1, the demo's
/// milestones in order, and the resume right after the question.
fn assert_demo_flow(output: &Output) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the client failed: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let events: Vec<(i64, &str)> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("event #"))
        .map(|rest| {
            let (sequence, event_type) = rest.split_once(' ').expect("`event #N TYPE`");
            (sequence.parse().expect("a sequence"), event_type)
        })
        .collect();
    let sequences: Vec<i64> = events.iter().map(|(sequence, _)| *sequence).collect();
    let expected: Vec<i64> = (1..=events.len() as i64).collect();
    assert_eq!(sequences, expected, "events contiguous from 1, each once:\n{stdout}");
    let position = |wanted: &str| {
        events
            .iter()
            .position(|(_, event_type)| *event_type == wanted)
            .unwrap_or_else(|| panic!("no {wanted} event:\n{stdout}"))
    };
    let milestones = [
        "turn.started",
        "item.delta",
        "tool.execution.started",
        "tool.execution.completed",
        "runtime_request.created",
        "runtime_request.resolved",
        "turn.completed",
        "process.exited",
    ];
    let positions: Vec<usize> = milestones.iter().map(|m| position(m)).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "milestones out of order:\n{stdout}"
    );
    let question = events[position("runtime_request.created")].0;
    assert!(
        stdout.contains(&format!("acked through #{question}; dropped the stream"))
            && stdout.contains(&format!("resumed after #{question}")),
        "the stream is dropped and resumed right after the question:\n{stdout}"
    );
    assert!(
        stdout.contains("-> option-1 (PostgreSQL): INTERACTION_STATE_DELIVERED"),
        "the question is answered PostgreSQL and delivered:\n{stdout}"
    );
    assert!(stdout.contains("with no gap and no duplicate"), "{stdout}");
}

#[test]
fn the_typescript_client_type_checks() {
    let dir = installed_client();
    let output = run_bounded(
        Command::new("node")
            .current_dir(&dir)
            .args(["node_modules/typescript/bin/tsc", "--noEmit", "-p", "."]),
        CLIENT_LIMIT,
    );
    assert!(
        output.status.success(),
        "tsc --noEmit failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_client_runs_the_demo_and_resumes_from_its_ack_without_gap_or_duplicate() {
    installed_client();
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let service = start_service(&dirs, &database);
    let addr = service.address().to_string();

    let output = tokio::task::block_in_place(|| run_client("grpc", &addr, TOKEN, &dirs.workspace));
    assert_demo_flow(&output);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("gRPC (HTTP/2)"),
        "the gRPC variant ran"
    );

    // A wrong token: the client fails, non-zero, and says why.
    let refused = tokio::task::block_in_place(|| run_client("grpc", &addr, "not-the-token", &dirs.workspace));
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("UNAUTHENTICATED"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    service.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_web_client_runs_the_demo_over_http1_and_resumes_without_gap_or_duplicate() {
    installed_client();
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let service = start_service(&dirs, &database);
    let url = format!("http://{}", service.address());

    let output = tokio::task::block_in_place(|| run_client("grpc-web", &url, TOKEN, &dirs.workspace));
    assert_demo_flow(&output);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("gRPC-Web (HTTP/1.1)"),
        "the gRPC-Web variant ran"
    );

    // The refusal reaches an HTTP/1.1 client as the typed status, not as a broken pipe.
    let refused = tokio::task::block_in_place(|| run_client("grpc-web", &url, "not-the-token", &dirs.workspace));
    assert_eq!(refused.status.code(), Some(1), "a wrong token fails the client");
    let said = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(said.contains("unauthenticated"), "{said}");
    service.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_client_answers_a_real_permission_request_by_option_kind_not_label() {
    installed_client();
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let service = start_service_playing(&dirs, &database, "permission_real_labels.json");
    let addr = service.address().to_string();

    let output = tokio::task::block_in_place(|| run_client("grpc", &addr, TOKEN, &dirs.workspace));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the client failed: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("(allow_once): INTERACTION_STATE_DELIVERED"),
        "the permission is answered with its allow_once option:\n{stdout}"
    );
    assert!(stdout.contains("with no gap and no duplicate"), "{stdout}");
    service.stop();
}
