//! `deploy/grafana/cursor-runner.json` names only metrics the service really exposes:
//! every metric selected by a panel query is in a live scrape of `serve
//! --metrics-listen` (as its `# TYPE` family, with the suffix its type gives its
//! samples), and every family the scrape holds has a panel.
//!
//! Labelled families (`Family<…>` in `prometheus-client`) print nothing until a label
//! value is first used, so the run provokes each: a scripted turn whose question is
//! answered, a refused answer (a wrong etag: `STALE_ETAG`, a fenced `etag` write), a
//! refused launch, an agent killed under its execution (a pool failure, an agent exit),
//! and a short store outage (store errors). The outage needs PostgreSQL. A second
//! service, whose agent sends fields the normalizer does not read
//! (`extra_fields.json`), runs one turn for the unconsumed-field counter.
//!
//! A service that has only just started already exposes every series the dashboard
//! queries (closed label sets at zero), so no panel starts empty. Scrapes ask for
//! OpenMetrics, as Prometheus does (without it, `/metrics` serves the text format 0.0.4).
//!
//! The alerting rules (`deploy/prometheus/alerts.yaml`) are held to the same scrape:
//! every metric an alert expression selects is in a fresh one, and promtool checks and
//! unit-tests the rules.
//!
//! The ignored `capture_for_the_dashboard_picture` drives a longer demo load and writes
//! the scrapes it took to `$DASHBOARD_DATA` (`docs/dashboard/make.sh` renders them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cursor_runner_e2e::*;
use serde_json::{Value, json};

const DASHBOARD: &str = "deploy/grafana/cursor-runner.json";
/// The Prometheus alerting rules, and their `promtool test rules` file.
const ALERTS: &str = "deploy/prometheus/alerts.yaml";
const ALERT_TESTS: &str = "deploy/prometheus/alerts.test.yaml";

#[test]
fn the_extractor_keeps_metric_names_and_drops_functions_keywords_labels_and_variables() {
    let expr = r#"histogram_quantile(0.99, sum by (le, kind) (rate(a_seconds_bucket{instance=~"$instance",x="}{"}[$__rate_interval])))
        / on (kind) group_left (state) sum without (le) (b_total offset 5m) > bool 1e-3 or c_gauge and ${var} unless topk(3, d)"#;
    let names: Vec<String> = selected_metrics(expr).into_iter().collect();
    assert_eq!(names, ["a_seconds_bucket", "b_total", "c_gauge", "d"]);
}

/// Each queried metric the exposition cannot resolve, with its panels and why.
fn missing_from(exposed: &Exposition, queried: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    queried
        .iter()
        .filter_map(|(name, panels)| {
            exposed
                .resolve(name)
                .err()
                .map(|why| format!("{name} (panels: {}): {why}", panels.join(", ")))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_in_a_live_scrape() {
    let dashboard = dashboard();
    check_layout(&dashboard);
    let queried = queried_metrics(&dashboard);
    assert!(
        queried.len() >= 20,
        "too few metrics found in the dashboard: {queried:?}"
    );

    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let service = start(&database, &dirs, "demo.json", Vec::new());
    let mut client = service.client().await;
    let metrics = service.metrics_address();

    // A scripted turn whose question is answered, after one refused answer.
    let (execution, _turn, mut events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    let mut stale = one_question_answer(&created, "answer-0", "option-1");
    stale.etag = "not-the-interactions-etag".into();
    assert_refused(
        client.answer_interaction(stale).await,
        tonic::Code::FailedPrecondition,
        "STALE_ETAG",
    );
    client
        .answer_interaction(one_question_answer(&created, "answer-1", "option-1"))
        .await
        .expect("AnswerInteraction");
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");

    // A launch refused at admission.
    let refused = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "create-refused".into(),
            workspace: dirs.root.path().join("no-such-workspace").display().to_string(),
            ..Default::default()
        })
        .await;
    assert!(refused.is_err(), "a missing workspace launches nothing");

    // An agent that dies under its execution.
    let lost = create_in(&mut client, &dirs.root.path().join("workspace-2"), "create-2").await;
    kill_agent(&lost);
    execution_in_state(&mut client, &lost.execution_id, proto::ExecutionState::Lost).await;

    // A store outage: store operations fail until it ends.
    database.set_unreachable(true).await;
    let deadline = Instant::now() + WAIT;
    while !scrape_metrics(metrics).contains("cursor_runner_store_errors_total{") {
        assert!(Instant::now() < deadline, "no store error counted during the outage");
        let _ = client
            .get_execution(proto::GetExecutionRequest {
                execution_id: execution.execution_id.clone(),
            })
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    database.set_unreachable(false).await;

    let text = scrape_metrics(metrics);
    drop(events);
    service.stop();
    database.drop_database().await;

    // A build that sends fields nothing reads.
    let database = TestDatabase::create(Backend::Sqlite).await;
    let extra_dirs = ServiceDirs::new();
    let extra = start(&database, &extra_dirs, "extra_fields.json", Vec::new());
    let mut client = extra.client().await;
    let extra_metrics = extra.metrics_address();
    let (_, _, mut events) = begin_turn_at(&mut client, &extra_dirs.workspace, Default::default()).await;
    events.until_turn_settles().await;
    let text = text + &scrape_metrics(extra_metrics);
    drop(events);
    extra.stop();

    let exposed = Exposition::parse(&text);
    let missing = missing_from(&exposed, &queried);
    assert!(
        missing.is_empty(),
        "dashboard metrics missing from the scrape:\n  {}\n\nscrape:\n{text}",
        missing.join("\n  ")
    );

    let covered: BTreeSet<&str> = queried.keys().filter_map(|name| exposed.family_of(name)).collect();
    let unpanelled: Vec<&String> = exposed
        .families
        .keys()
        .filter(|family| !covered.contains(family.as_str()))
        .collect();
    assert!(
        unpanelled.is_empty(),
        "families the service exposes that no panel of {DASHBOARD} shows: {unpanelled:?}"
    );
}

/// A service that has done nothing yet already exposes every series the dashboard
/// queries (closed label sets at zero): no panel starts as "no data", and `rate()` sees
/// a counter's first increment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_in_a_fresh_scrape() {
    let queried = queried_metrics(&dashboard());
    let text = fresh_scrape().await;
    let exposed = Exposition::parse(&text);
    let missing = missing_from(&exposed, &queried);
    assert!(
        missing.is_empty(),
        "{} of {} dashboard metrics are not in a fresh scrape:\n  {}\n\nscrape:\n{text}",
        missing.len(),
        queried.len(),
        missing.join("\n  ")
    );
}

/// Every metric an alert rule selects is in a fresh scrape: a renamed or dropped
/// metric fails here, instead of leaving an alert that can never fire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_an_alert_rule_queries_is_in_a_fresh_scrape() {
    let rules = alert_expressions();
    let text = fresh_scrape().await;
    let exposed = Exposition::parse(&text);
    let mut missing = Vec::new();
    for (alert, expr) in &rules {
        let selected = selected_metrics(expr);
        assert!(!selected.is_empty(), "{alert} selects no metric: {expr}");
        for name in selected {
            if let Err(why) = exposed.resolve(&name) {
                missing.push(format!("{alert}: {name}: {why}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "alert metrics missing from a fresh scrape:\n  {}\n\nscrape:\n{text}",
        missing.join("\n  ")
    );
}

/// `promtool check rules` (syntax, PromQL, templates) and `promtool test rules` (each
/// alert against synthetic series) pass on the shipped rules.
#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = promtool::promtool("the_alert_rules_pass_promtool_check_and_their_unit_tests") else {
        return;
    };
    for (what, file) in [("check", ALERTS), ("test", ALERT_TESTS)] {
        let output = std::process::Command::new(&promtool)
            .args([what, "rules"])
            .arg(workspace_root().join(file))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "promtool {what} rules {file}: {:?}\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// `(alert name, expr)` of every rule in [`ALERTS`]. Each `expr:` is one plain line (no
/// block scalar), which this reads without a YAML parser; promtool checks the YAML itself.
fn alert_expressions() -> Vec<(String, String)> {
    let path = workspace_root().join(ALERTS);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rules = Vec::new();
    let mut alert = None;
    for line in text.lines().map(str::trim) {
        assert!(
            !line.starts_with("- record:"),
            "{ALERTS}: recording rules are not checked here: {line}"
        );
        if let Some(name) = line.strip_prefix("- alert:") {
            alert = Some(name.trim().to_owned());
        } else if let Some(expr) = line.strip_prefix("expr:") {
            let expr = expr.trim();
            assert!(
                !expr.is_empty() && !expr.starts_with(['|', '>', '"', '\'']),
                "{ALERTS}: write each expr as one plain line: {line}"
            );
            let name = alert
                .take()
                .unwrap_or_else(|| panic!("{ALERTS}: an expr outside an alert: {line}"));
            rules.push((name, expr.to_owned()));
        }
    }
    assert!(rules.len() >= 6, "too few alert rules found in {ALERTS}: {rules:?}");
    rules
}

/// `GET /metrics` of a service that has just started and done nothing else.
async fn fresh_scrape() -> String {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let service = start(&database, &dirs, "demo.json", Vec::new());
    let _client = service.client().await;
    let metrics = service.metrics_address();
    let text = scrape_metrics(metrics);
    service.stop();
    text
}

/// Not a check: drives a demo load for ~30 s, scraping `/metrics` every second, and
/// writes the scrapes to `$DASHBOARD_DATA` for `docs/dashboard/render.html`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "captures the data of docs/dashboard; run by docs/dashboard/make.sh"]
async fn capture_for_the_dashboard_picture() {
    let out = PathBuf::from(std::env::var("DASHBOARD_DATA").expect("DASHBOARD_DATA: where to write the scrapes"));
    let seconds: u64 = std::env::var("DASHBOARD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let database = TestDatabase::create(Backend::Postgres).await;
    let dirs = ServiceDirs::new();
    let args = [
        "--pool-min-idle",
        "2",
        "--event-retention-secs",
        "1",
        "--retention-sweep-secs",
        "5",
    ];
    let service = start(
        &database,
        &dirs,
        "demo.json",
        args.iter().map(|a| a.to_string()).collect(),
    );
    let _ = service.client().await;
    let metrics = service.metrics_address();

    let started = Instant::now();
    let load_until = started + Duration::from_secs(seconds);
    let scraper = std::thread::spawn(move || {
        let mut scrapes = Vec::new();
        let mut next = Instant::now();
        while next < load_until + Duration::from_secs(2) {
            let text = scrape_metrics(metrics);
            scrapes.push((started.elapsed().as_secs_f64(), samples(&text)));
            next += Duration::from_secs(1);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        scrapes
    });

    let mut workers = Vec::new();
    for worker in 0..3u64 {
        let client = service.client().await;
        let root = dirs.root.path().to_owned();
        workers.push(tokio::spawn(load(worker, client, root, load_until, started)));
    }
    // One incident half-way: a short store outage.
    tokio::time::sleep(Duration::from_secs(seconds * 2 / 3)).await;
    database.set_unreachable(true).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    database.set_unreachable(false).await;
    // A worker still waiting on a turn the outage broke is not waited for.
    for worker in workers {
        let left = (load_until + Duration::from_secs(3)).saturating_duration_since(Instant::now());
        let abort = worker.abort_handle();
        if tokio::time::timeout(left, worker).await.is_err() {
            abort.abort();
        }
    }
    let scrapes = scraper.join().expect("the scraper");
    // Not a drain: it would give the turns the outage left hanging their whole deadline.
    service.kill();
    database.drop_database().await;

    let series: BTreeSet<&String> = scrapes.iter().flat_map(|(_, s)| s.keys()).collect();
    let data = json!({
        "about": "Scrapes of GET /metrics of `cursor-runner serve --metrics-listen --pool-min-idle 2 \
                  --event-retention-secs 1 --retention-sweep-secs 5` (fake agent, demo.json \
                  scenario, PostgreSQL store) under a demo load: 3 workers each creating executions, \
                  running a turn whose question is answered after a pause (some after a refused stale-etag \
                  answer, some after a refused empty prompt), maybe a second turn, acking and closing; \
                  refused launches (a missing workspace); one agent killed under its execution past \
                  half-way; a 1.5 s store outage two thirds in. \
                  Written by services/runner/tests/dashboard.rs (capture_for_the_dashboard_picture).",
        "captured_at_unix": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
        "version": env!("CARGO_PKG_VERSION"),
        "series": series,
        "scrapes": scrapes
            .iter()
            .map(|(t, s)| json!({
                "t": (t * 1000.0).round() / 1000.0,
                "values": series.iter().map(|name| s.get(*name).copied()).collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>(),
    });
    std::fs::write(&out, serde_json::to_string(&data).unwrap() + "\n").expect("writing the data");
    eprintln!(
        "{} scrapes of {} series -> {}",
        scrapes.len(),
        series.len(),
        out.display()
    );
}

/// One load worker: executions with one or two turns each until `until`; the number
/// of turns it started. A failure (the store outage, the killed agent) ends an
/// execution, not the worker.
async fn load(worker: u64, mut client: Client, root: PathBuf, until: Instant, started: Instant) -> u64 {
    let mut random = Lcg(worker * 7919 + 17);
    let mut turns = 0;
    let mut killed = false;
    let mut k = 0u64;
    while Instant::now() < until {
        k += 1;
        let workspace = root.join(format!("ws-{worker}-{k}"));
        std::fs::create_dir_all(&workspace).unwrap();
        let request = move |what: &str| format!("{what}-{worker}-{k}");
        // A refused launch now and then.
        if random.below(6) == 0 {
            let _ = client
                .create_execution(proto::CreateExecutionRequest {
                    request_id: request("missing"),
                    workspace: root.join("missing").display().to_string(),
                    ..Default::default()
                })
                .await;
        }
        let Ok(execution) = client
            .create_execution(proto::CreateExecutionRequest {
                request_id: request("create"),
                workspace: workspace.display().to_string(),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner().execution.expect("execution"))
        else {
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        };
        let id = execution.execution_id.clone();
        // Once, past half-way: the agent of worker 0 dies under its execution.
        if worker == 0 && !killed && started.elapsed() > (until - started) / 2 {
            killed = true;
            kill_agent(&execution);
        }
        let run = tokio::spawn(one_execution(
            client.clone(),
            id.clone(),
            request,
            random.below(1 << 32),
        ));
        turns += run.await.unwrap_or(0);
        let _ = client
            .close_execution(proto::CloseExecutionRequest {
                request_id: request("close"),
                execution_id: id,
            })
            .await;
        tokio::time::sleep(Duration::from_millis(random.below(400))).await;
    }
    turns
}

/// A turn whose question is answered after a pause (demo.json's agent expects an
/// answer: a cancel would make it exit), maybe a second turn, then an ack of
/// everything; the number of turns started.
async fn one_execution(mut client: Client, id: String, request: impl Fn(&str) -> String, seed: u64) -> u64 {
    let mut random = Lcg(seed);
    let Ok(mut events) = Subscriber::open(&mut client, &id, 0).await else {
        return 0;
    };
    if random.below(5) == 0 {
        // A refused call: an empty prompt.
        let _ = client
            .start_turn(proto::StartTurnRequest {
                request_id: request("empty"),
                execution_id: id.clone(),
                ..Default::default()
            })
            .await;
    }
    let Ok(_turn) = start_turn(&mut client, &id, &request("turn-1")).await else {
        return 0;
    };
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    // A human takes a while to answer.
    tokio::time::sleep(Duration::from_millis(200 + random.below(2800))).await;
    if random.below(4) == 0 {
        let mut stale = one_question_answer(&created, &request("stale"), "option-1");
        stale.etag = "a-stale-etag".into();
        let _ = client.answer_interaction(stale).await;
    }
    let answer = one_question_answer(&created, &request("answer"), "option-1");
    if client.answer_interaction(answer).await.is_err() {
        return 1;
    }
    let mut last = events.until_turn_settles().await.last().unwrap().sequence;
    let mut turns = 1;
    if random.below(2) == 0 && start_turn(&mut client, &id, &request("turn-2")).await.is_ok() {
        turns += 1;
        last = events.until_turn_settles().await.last().unwrap().sequence;
    }
    let _ = client
        .ack_events(proto::AckEventsRequest {
            execution_id: id.clone(),
            through_sequence: last,
        })
        .await;
    turns
}

/// A small deterministic generator: the load is the same on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// `serve` with its `/metrics` listener (at [`ServiceProcess::metrics_address`]).
fn start(database: &TestDatabase, dirs: &ServiceDirs, scenario: &str, args: Vec<String>) -> ServiceProcess {
    ServiceProcess::start(ServiceSettings {
        binary: Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario,
        record: &dirs.record,
        env: vec![("CURSOR_RUNNER_METRICS_LISTEN".to_owned(), ANY_PORT.to_owned())],
        args,
    })
}

async fn create_in(client: &mut Client, workspace: &Path, request_id: &str) -> proto::Execution {
    std::fs::create_dir_all(workspace).unwrap();
    client
        .create_execution(proto::CreateExecutionRequest {
            request_id: request_id.into(),
            workspace: workspace.display().to_string(),
            ..Default::default()
        })
        .await
        .expect("CreateExecution")
        .into_inner()
        .execution
        .expect("execution")
}

/// SIGKILL to the execution's agent (its host pid, a child of the service this test started).
fn kill_agent(execution: &proto::Execution) {
    let pid = execution.pid.expect("a running execution has a pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
}

/// `series{labels}` → value, for every sample line of a scrape.
fn samples(scrape: &str) -> BTreeMap<String, f64> {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            (series.to_owned(), value.parse().expect("a numeric value"))
        })
        .collect()
}

/// The families (`# TYPE` lines) and sample names of one or more scrapes.
struct Exposition {
    families: BTreeMap<String, String>,
    sample_names: BTreeSet<String>,
}

impl Exposition {
    fn parse(text: &str) -> Self {
        let mut families = BTreeMap::new();
        let mut sample_names = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                    panic!("a malformed TYPE line: {line}");
                };
                families.insert(name.to_owned(), kind.to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                sample_names.insert(line[..end].to_owned());
            }
        }
        Self { families, sample_names }
    }

    /// The family a query's metric name selects samples of: the name itself for a gauge,
    /// `_total` of a counter, `_bucket` / `_count` / `_sum` of a histogram.
    fn family_of<'a>(&'a self, name: &str) -> Option<&'a str> {
        let typed = |family: &str, kinds: &[&str]| {
            self.families
                .get_key_value(family)
                .filter(|(_, kind)| kinds.contains(&kind.as_str()))
                .map(|(family, _)| family.as_str())
        };
        const SUFFIXES: [(&str, &[&str]); 4] = [
            ("_total", &["counter"]),
            ("_bucket", &["histogram", "gaugehistogram"]),
            ("_count", &["histogram", "summary"]),
            ("_sum", &["histogram", "summary"]),
        ];
        SUFFIXES
            .iter()
            .find_map(|(suffix, kinds)| name.strip_suffix(suffix).and_then(|stem| typed(stem, kinds)))
            .or_else(|| typed(name, &["gauge", "unknown", "info", "stateset"]))
    }

    fn resolve(&self, name: &str) -> Result<&str, String> {
        if let Some(family) = self.family_of(name) {
            return if self.sample_names.contains(name) {
                Ok(family)
            } else {
                Err(format!("family `{family}` is typed but has no `{name}` sample"))
            };
        }
        let stem = ["_total", "_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        Err(match self.families.get(stem).or_else(|| self.families.get(name)) {
            Some(kind) => format!("a {kind} family is not selected by this name"),
            None => "no such family".to_owned(),
        })
    }
}

fn dashboard() -> Value {
    let path = workspace_root().join(DASHBOARD);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every non-row panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in panels.as_array().into_iter().flatten() {
            if panel["type"] == "row" {
                walk(&panel["panels"], out);
            } else {
                out.push(panel);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Grafana's shape: a schema version, a `${datasource}` Prometheus variable every panel
/// uses, unique ids, panels inside the 24-column grid, a query in each panel.
fn check_layout(dashboard: &Value) {
    assert!(
        dashboard["schemaVersion"].as_i64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );
    assert!(dashboard["uid"].is_string() && dashboard["title"].is_string());
    let variables = dashboard["templating"]["list"].as_array().expect("templating.list");
    assert!(
        variables
            .iter()
            .any(|v| v["type"] == "datasource" && v["name"] == "datasource" && v["query"] == "prometheus"),
        "a `datasource` variable of type prometheus"
    );
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        assert!(
            ids.insert(panel["id"].as_i64().expect("a panel id")),
            "duplicate id {}",
            panel["id"]
        );
    }
    for panel in panels(dashboard) {
        let title = panel["title"].as_str().expect("a title");
        let grid = &panel["gridPos"];
        assert!(
            grid["x"].as_i64().unwrap() + grid["w"].as_i64().unwrap() <= 24,
            "{title} leaves the grid"
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().filter(|t| !t.is_empty());
        for target in targets.unwrap_or_else(|| panic!("{title} has no query")) {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{title}: a query without expr"));
            assert!(
                !expr.contains("__name__"),
                "{title}: select metrics by name, not by __name__"
            );
        }
    }
}

/// Each metric name a panel query or a query variable selects → the panels that do.
fn queried_metrics(dashboard: &Value) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for panel in panels(dashboard) {
        let title = panel["title"].as_str().unwrap_or_default().to_owned();
        for target in panel["targets"].as_array().into_iter().flatten() {
            for name in selected_metrics(target["expr"].as_str().unwrap_or_default()) {
                out.entry(name).or_default().push(title.clone());
            }
        }
    }
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or(variable["query"].as_str())
            .unwrap_or_default();
        // `label_values(metric, label)` and `query_result(expr)`: the metric or expression.
        let selected = match query.strip_prefix("label_values(") {
            Some(rest) => rest
                .split_once(',')
                .map_or(rest.trim_end_matches(')'), |(metric, _)| metric)
                .to_owned(),
            None => query.to_owned(),
        };
        for name in selected_metrics(&selected) {
            out.entry(name)
                .or_default()
                .push(format!("${}", variable["name"].as_str().unwrap_or_default()));
        }
    }
    for name in out.keys() {
        assert!(
            name.starts_with("cursor_runner_"),
            "a metric of another service: {name}"
        );
    }
    out
}

/// PromQL keywords: aggregation operators, binary operators and modifiers.
const KEYWORDS: [&str; 26] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "atan2",
];
/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names a PromQL expression selects: every identifier that is not a
/// function (followed by `(`), a keyword, a label (inside `{…}` or a `by (…)` list), a
/// range or duration (`[…]`), a number, a string or a Grafana `$variable`.
fn selected_metrics(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = BTreeSet::new();
    let mut label_list = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = past_string(&chars, i);
        } else if c == '{' {
            i = past_block(&chars, i, '}');
        } else if c == '[' {
            i = past_block(&chars, i, ']');
        } else if c == '(' && label_list {
            label_list = false;
            i = past_block(&chars, i, ')');
        } else if c == '$' {
            i += 1;
            if chars.get(i) == Some(&'{') {
                i = past_block(&chars, i, '}');
            } else {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            // Numbers, exponents and durations: 0.99, 1e-3, 5m, 0x1f.
            i += 1;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric()
                    || chars[i] == '.'
                    || (matches!(chars[i], '+' | '-') && matches!(chars[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if LABEL_LISTS.contains(&word.as_str()) {
                label_list = true;
            } else if next == Some(&'(') || KEYWORDS.contains(&word.as_str()) {
                // A function call or an operator.
            } else {
                out.insert(word);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The index just past the string literal starting at `start`.
fn past_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        if chars[i] == '\\' && quote != '`' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// The index just past the `close` matching the opener at `start` (strings inside skipped).
fn past_block(chars: &[char], start: usize, close: char) -> usize {
    let open = chars[start];
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = past_string(chars, i);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}
