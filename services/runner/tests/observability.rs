//! `cursor-runner healthcheck` as a probe runs it, and `serve --metrics-listen`
//! as Prometheus scrapes it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use cursor_runner_e2e::{Backend, ServiceDirs, ServiceProcess, ServiceSettings, TestDatabase};

fn free_address() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn healthcheck(addr: SocketAddr) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
        .args(["healthcheck", "--addr", &addr.to_string(), "--timeout-secs", "3"])
        .output()
        .unwrap()
}

/// A plain HTTP/1.1 GET; returns the head and the body.
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stream = loop {
        match TcpStream::connect(addr) {
            Ok(stream) => break stream,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(25));
            }
            Err(e) => panic!("nothing listens on {addr}: {e}"),
        }
    };
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (head.to_owned(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_exits_0_when_serving_and_1_when_nothing_serves() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let metrics_address = free_address();
    let service = ServiceProcess::start(ServiceSettings {
        binary: std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario: "demo.json",
        record: &dirs.record,
        env: vec![("CURSOR_RUNNER_METRICS_LISTEN".to_owned(), metrics_address.to_string())],
        args: Vec::new(),
    });
    let _client = service.client().await;

    let serving = healthcheck(service.address);
    assert_eq!(
        serving.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&serving.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&serving.stdout).trim(), "SERVING");

    let (head, body) = get(metrics_address, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(body.contains("# TYPE cursor_runner_turns_started counter"), "{body}");
    assert!(body.contains("cursor_runner_executions_live 0"), "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    service.stop();

    let nothing = healthcheck(free_address());
    assert_eq!(nothing.status.code(), Some(1));
}
