//! The service's own environment (credentials, proxies, loader and Node hooks, its
//! database URL) never reaches an agent: the agent's environment is built from nothing.

use cursor_runner_e2e::*;
use serde_json::Value;

const CANARIES: [(&str, &str); 7] = [
    ("CURSOR_API_KEY", "canary-api-key"),
    ("CURSOR_AUTH_TOKEN", "canary-auth-token"),
    ("NODE_OPTIONS", "--require=/canary/hook.js"),
    ("NODE_PATH", "/canary/node_modules"),
    ("LD_PRELOAD", "/canary/libhook.so"),
    ("HTTP_PROXY", "http://canary.invalid:3128"),
    ("DATABASE_URL", "postgres://canary:canary@canary.invalid/db"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_own_environment_never_reaches_an_agent() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let service = ServiceProcess::start(ServiceSettings {
        binary: std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario: "env_report.json",
        record: &dirs.record,
        env: CANARIES.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        args: Vec::new(),
    });
    let mut client = service.client().await;
    let (_execution, _turn, mut events) = begin_turn_at(&mut client, &dirs.workspace, Default::default()).await;
    events.until_turn_settles().await;
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dirs.workspace.join("env.json")).unwrap()).unwrap();
    let mut names: Vec<&str> = report["env"].as_object().unwrap().keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, CLOSED_AGENT_ENVIRONMENT);
    let text = report.to_string();
    for (name, value) in CANARIES {
        assert!(!text.contains(value), "{name} leaked into the agent: {text}");
    }
    let argv: Vec<String> = serde_json::from_value(report["argv"].clone()).unwrap();
    assert_eq!(
        argv,
        [
            fake_agent().display().to_string(),
            "--scenario".into(),
            scenario("env_report.json").display().to_string(),
            "--record".into(),
            dirs.record.display().to_string(),
        ],
        "the argv is exactly the configured one"
    );
    service.stop();
    database.drop_database().await;
}

/// Cursor reads user-level MCP servers from `~/.cursor/mcp.json`: the service's own must
/// stay invisible to agents, and only the operator's allowlist (`--mcp-servers`) reaches
/// `session/new`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_allowlisted_mcp_servers_reach_an_agent_and_the_services_own_user_config_is_invisible() {
    let database = TestDatabase::create(Backend::Sqlite).await;
    let dirs = ServiceDirs::new();
    let service_home = dirs.root.path().join("service-home");
    std::fs::create_dir_all(service_home.join(".cursor")).unwrap();
    std::fs::write(
        service_home.join(".cursor/mcp.json"),
        r#"{"mcpServers": {"ambient": {"command": "/usr/bin/ambient-mcp"}}}"#,
    )
    .unwrap();
    let allowlist = dirs.root.path().join("mcp-servers.json");
    std::fs::write(
        &allowlist,
        r#"{"servers": [{"name": "docs", "command": "/opt/mcp/docs", "args": ["--read-only"]}]}"#,
    )
    .unwrap();
    let service = ServiceProcess::start(ServiceSettings {
        binary: std::path::Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
        database_url: &database.url,
        state_dir: dirs.root.path(),
        scenario: "env_report.json",
        record: &dirs.record,
        env: vec![("HOME".into(), service_home.display().to_string())],
        args: vec!["--mcp-servers".into(), allowlist.display().to_string()],
    });
    let mut client = service.client().await;
    let settings = proto::CreateExecutionRequest {
        mcp_servers: vec!["docs".into()],
        ..Default::default()
    };
    let (_execution, _turn, mut events) = begin_turn_at(&mut client, &dirs.workspace, settings).await;
    events.until_turn_settles().await;
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dirs.workspace.join("env.json")).unwrap()).unwrap();
    assert_eq!(report["user_mcp_config_visible"], false);
    let agent_home = report["env"]["HOME"].as_str().unwrap();
    assert!(
        !agent_home.starts_with(&service_home.display().to_string()),
        "the agent's home {agent_home} is its own"
    );
    let record = std::fs::read_to_string(&dirs.record).unwrap();
    let opened: Value = record
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|m| m["method"] == "session/new")
        .unwrap();
    assert_eq!(
        opened["params"]["mcpServers"],
        serde_json::json!([{"name": "docs", "command": "/opt/mcp/docs", "args": ["--read-only"], "env": []}])
    );
    service.stop();
    database.drop_database().await;
}
