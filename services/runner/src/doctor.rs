//! `cursor-runner doctor`: what this host offers and lacks, with an exit status; and
//! `doctor --probe`: a credential-free probe of the agent through the same launcher the
//! service uses, written as JSON so an operator can record what a Cursor build offers.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use cursor_runner_acp::methods;
use cursor_runner_acp::{AcpConnection, AcpError};
use cursor_runner_supervisor::distribution::{Platform, VerifyMode};
use cursor_runner_supervisor::isolation::{AgentIsolation, IsolationLayer};
use cursor_runner_supervisor::workspace_policy::WorkspacePolicy;
use cursor_runner_supervisor::workspace_watch::WorkspaceWatcher;
use cursor_runner_supervisor::{AgentCommand, AgentProcess, LaunchSpec, PinnedDistribution};
use serde_json::{Value, json};

/// Bound on reaching the database.
const DATABASE_CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on each probe call: a probe must never hang.
const PROBE_CALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(clap::Args)]
pub struct DoctorArgs {
    /// The agent command line to probe (a development agent), or use a pinned distribution.
    #[arg(long, env = "CURSOR_RUNNER_AGENT_COMMAND")]
    agent_command: Option<String>,
    #[arg(long, env = "CURSOR_RUNNER_DISTRIBUTION_MANIFEST", requires = "distribution_dir")]
    distribution_manifest: Option<PathBuf>,
    #[arg(long, env = "CURSOR_RUNNER_DISTRIBUTION_DIR")]
    distribution_dir: Option<PathBuf>,
    #[command(flatten)]
    database: crate::database_url::DatabaseArgs,
    /// Run the credential-free probe of the agent and write its result as JSON.
    #[arg(long)]
    probe: bool,
    /// Where the probe's JSON goes (default: stdout).
    #[arg(long, requires = "probe")]
    out: Option<PathBuf>,
}

struct Check {
    name: &'static str,
    ok: bool,
    required: bool,
    detail: String,
}

pub async fn run(args: DoctorArgs, url_on_command_line: bool) -> anyhow::Result<bool> {
    if args.probe {
        let command = agent_command(&args)?.context("--probe needs --agent-command or a distribution")?;
        let report = probe(command).await?;
        let text = serde_json::to_string_pretty(&report)?;
        match &args.out {
            Some(path) => std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?,
            None => println!("{text}"),
        }
        return Ok(true);
    }
    let mut checks = Vec::new();
    let platform = Platform::current();
    checks.push(Check {
        name: "platform",
        ok: platform.is_ok(),
        required: true,
        detail: platform
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|e| e.to_string()),
    });
    match agent_command(&args) {
        Ok(Some(command)) => checks.push(Check {
            name: "distribution",
            ok: command.verify_before_launch().is_ok(),
            required: true,
            detail: command.distribution_label(),
        }),
        Ok(None) => checks.push(Check {
            name: "distribution",
            ok: false,
            required: false,
            detail: "no agent configured".into(),
        }),
        Err(e) => checks.push(Check {
            name: "distribution",
            ok: false,
            required: true,
            detail: e.to_string(),
        }),
    }
    let watcher = WorkspaceWatcher::global();
    checks.push(Check {
        name: "workspace watch (inotify)",
        ok: watcher.is_ok(),
        required: false,
        detail: watcher
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| "one shared instance".into()),
    });
    let enterprise = WorkspacePolicy::default().enterprise_hooks;
    checks.push(Check {
        name: "enterprise hooks file absent",
        ok: std::fs::symlink_metadata(&enterprise).is_err(),
        required: true,
        detail: enterprise.display().to_string(),
    });
    let namespaces = cursor_runner_supervisor::pid_namespaces_available();
    checks.push(Check {
        name: "lifetime guardian: PID namespaces",
        ok: namespaces,
        required: false,
        detail: if namespaces {
            "each agent under agent-init as PID 1 of its own namespace".into()
        } else {
            "unavailable (no root / CAP_SYS_ADMIN): parent-death signal, process group, subreaper and ledger only"
                .into()
        },
    });
    let private_proc = namespaces && cursor_runner_supervisor::private_proc_available();
    checks.push(Check {
        name: "agent sight: private /proc",
        ok: private_proc,
        required: false,
        detail: if private_proc {
            "each agent's namespace mounts a fresh /proc: it sees its own processes only".into()
        } else {
            "unavailable: agents see the host's processes and their command lines in /proc".into()
        },
    });
    let subreaper = nix::sys::prctl::get_child_subreaper().is_ok();
    checks.push(Check {
        name: "lifetime guardian: child subreaper",
        ok: subreaper,
        required: false,
        detail: "orphaned descendants are re-parented to the service and reaped".into(),
    });
    let root = nix::unistd::geteuid().is_root();
    let users = cursor_runner_supervisor::agent_users::AgentUsers::discover().count();
    checks.push(Check {
        name: "agent uid separation",
        ok: root && users > 0,
        // As root the service refuses to run agents as root: provisioned users are required.
        required: root,
        detail: match (root, users) {
            (true, 0) => "no agent users: run `cursor-runner setup-agent-users --count N`".into(),
            (true, n) => format!("{n} agent users (cursor-agent-*), one uid per agent process"),
            (false, _) => "unavailable: not root, so agents run as the service's own uid".into(),
        },
    });
    // `serve` marks itself non-dumpable exactly when it runs agents under their own uids.
    let separate_uids = root && users > 0;
    let isolation = AgentIsolation {
        separate_uids,
        pid_namespace: namespaces,
        private_proc,
        non_dumpable: separate_uids,
    };
    checks.push(Check {
        name: "service non-dumpable",
        ok: isolation.non_dumpable,
        required: false,
        detail: if isolation.non_dumpable {
            "serve marks itself non-dumpable: no process of its uid without CAP_SYS_PTRACE reads its memory".into()
        } else {
            format!(
                "not set (serve sets it only with agent uid separation): {}",
                IsolationLayer::NonDumpable.missing_means()
            )
        },
    });
    checks.push(Check {
        name: "agent isolation",
        ok: isolation.is_complete(),
        required: false,
        detail: isolation.reason(),
    });
    if let Some(url) = &args.database.url(url_on_command_line)? {
        let store = tokio::time::timeout(DATABASE_CHECK_TIMEOUT, cursor_runner_store::connect(url)).await;
        let (ok, detail) = match store {
            Ok(Ok(store)) => (true, store.backend().to_owned()),
            Ok(Err(e)) => (false, e.to_string()),
            Err(_) => (false, format!("no answer within {DATABASE_CHECK_TIMEOUT:?}")),
        };
        checks.push(Check {
            name: "database",
            ok,
            required: true,
            detail,
        });
        if url.starts_with("postgres") && !crate::database_url::has_password(url) {
            checks.push(Check {
                name: "database requires a password",
                ok: false,
                required: false,
                detail: "the URL has no password: if the server trusts local connections, an agent on this host could connect too".into(),
            });
        }
    }
    for check in &checks {
        let mark = match (check.ok, check.required) {
            (true, _) => "ok  ",
            (false, true) => "FAIL",
            (false, false) => "warn",
        };
        println!("{mark} {:<30} {}", check.name, check.detail);
    }
    Ok(checks.iter().all(|c| c.ok || !c.required))
}

fn agent_command(args: &DoctorArgs) -> anyhow::Result<Option<AgentCommand>> {
    Ok(
        match (&args.agent_command, &args.distribution_manifest, &args.distribution_dir) {
            (Some(command), _, _) => Some(AgentCommand::parse(command)?),
            (None, Some(manifest), Some(dir)) => {
                let pin = crate::distribution::load_pin(manifest, crate::distribution::platform(None)?)?;
                Some(AgentCommand::pinned(PinnedDistribution {
                    closure_dir: std::fs::canonicalize(dir)?,
                    pin,
                    verify_mode: VerifyMode::Full,
                }))
            }
            _ => None,
        },
    )
}

/// `initialize`, then the methods whose answers tell what this build offers without a
/// credential: `session/new`, `session/list`, `cursor/list_available_models` (expected
/// `-32000` auth required) and `session/fork`, `session/resume` (expected `-32601`).
async fn probe(command: AgentCommand) -> anyhow::Result<Value> {
    let scratch = tempfile::tempdir()?;
    let workspace = scratch.path().join("workspace");
    std::fs::create_dir_all(&workspace)?;
    let spec = LaunchSpec {
        identity: None,
        command: command.clone(),
        private_home: scratch.path().join("home"),
        credential: None,
        extra_env: Vec::new(),
    };
    let (mut process, stdin, stdout) = AgentProcess::spawn(&spec)?;
    let (connection, _inbound) = AcpConnection::spawn(stdin, stdout);
    let cwd = workspace.display().to_string();
    let calls: [(&str, Value); 6] = [
        (
            methods::INITIALIZE,
            json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}}),
        ),
        (methods::SESSION_NEW, json!({"cwd": cwd, "mcpServers": []})),
        (methods::SESSION_LIST, json!({"cwd": cwd})),
        (methods::LIST_AVAILABLE_MODELS, json!({})),
        (methods::SESSION_FORK, json!({"sessionId": "probe", "cwd": cwd})),
        (
            methods::SESSION_RESUME,
            json!({"sessionId": "probe", "cwd": cwd, "mcpServers": []}),
        ),
    ];
    let mut results = serde_json::Map::new();
    for (method, params) in calls {
        let outcome = match tokio::time::timeout(PROBE_CALL_TIMEOUT, connection.request(method, params)).await {
            Err(_) => json!({"outcome": "timeout"}),
            Ok(Ok(result)) => json!({"outcome": "result", "result": result}),
            Ok(Err(AcpError::Rpc(e))) => json!({"outcome": "error", "code": e.code, "message": e.message}),
            Ok(Err(e)) => json!({"outcome": "failed", "message": e.to_string()}),
        };
        results.insert(method.to_owned(), outcome);
    }
    connection.close_stdin().await;
    let exit = process.stop(Duration::from_secs(5)).await;
    Ok(json!({
        "schemaVersion": 1,
        "distribution": command.distribution_label(),
        "program": command.program.display().to_string(),
        "calls": results,
        "exit": {"exitCode": exit.exit_code, "signal": exit.signal},
    }))
}
