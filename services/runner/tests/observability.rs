//! `cursor-runner healthcheck` as a probe runs it, and `serve --metrics-listen`
//! as Prometheus scrapes it.

use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;

use cursor_runner_e2e::{
    ANY_PORT, Backend, ServiceDirs, ServiceProcess, ServiceSettings, TestDatabase, free_address, http_get, promtool,
};

fn healthcheck(addr: SocketAddr) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
        .args(["healthcheck", "--addr", &addr.to_string(), "--timeout-secs", "3"])
        .output()
        .unwrap()
}

/// What Prometheus sends by default: OpenMetrics first, the text format as a fallback.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

/// `serve` on `database` with its `/metrics` listener, once it listens.
fn serve_with_metrics(database: &TestDatabase, dirs: &ServiceDirs) -> (ServiceProcess, std::net::SocketAddr) {
    let service = ServiceProcess::start(ServiceSettings {
        binary: std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario: "demo.json",
        record: &dirs.record,
        env: vec![("CURSOR_RUNNER_METRICS_LISTEN".to_owned(), ANY_PORT.to_owned())],
        args: Vec::new(),
    });
    let metrics_address = service.metrics_address();
    (service, metrics_address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_exits_0_when_serving_and_1_when_nothing_serves() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let (service, metrics_address) = serve_with_metrics(&database, &dirs);
    let _client = service.client().await;

    let serving = healthcheck(service.address());
    assert_eq!(
        serving.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&serving.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&serving.stdout).trim(), "SERVING");

    let (head, body) = http_get(metrics_address, "/metrics", Some(PROMETHEUS_ACCEPT));
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

fn content_type(head: &str) -> String {
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no content-type in {head}"))
}

/// A scraper that does not ask for OpenMetrics (`text/plain`, `*/*` or no `Accept`: curl,
/// older Prometheus configurations, promtool) gets the Prometheus text format 0.0.4, and
/// `promtool check metrics` accepts it, lint included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_openmetrics_in_accept_metrics_are_the_text_format_promtool_accepts() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let (service, metrics_address) = serve_with_metrics(&database, &dirs);
    let _client = service.client().await;

    let mut scrapes = Vec::new();
    for accept in [None, Some("text/plain;version=0.0.4"), Some("*/*")] {
        let (head, body) = http_get(metrics_address, "/metrics", accept);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(
            content_type(&head),
            "text/plain; version=0.0.4; charset=utf-8",
            "Accept: {accept:?}"
        );
        assert!(
            body.contains("# TYPE cursor_runner_turns_started_total counter\n"),
            "a counter's TYPE names its samples: {body}"
        );
        assert!(!body.contains("# EOF"), "{body}");
        scrapes.push(body);
    }
    service.stop();

    let Some(promtool) =
        promtool::promtool("without_openmetrics_in_accept_metrics_are_the_text_format_promtool_accepts")
    else {
        return;
    };
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(scrapes[0].as_bytes()).unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {:?}\n{}{}",
        checked.status,
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}
