//! The Node ACP clients goal P1 is measured against, on the fake agent's flood: acpx (the
//! headless CLI, `exec` with each output format) and the official SDK's
//! `ClientSideConnection` (`tests/benches/anchors/sdk-client.mjs`). Their pinned packages
//! (`tests/benches/anchors/package-lock.json`) are installed under `target/perf/anchors` on
//! first use, never committed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::throughput::{CHUNK_TEXT, plain_flood};
use crate::{fake_agent, workspace_root};

/// One Node client driving the fake agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeClient {
    /// `acpx --format <format> --agent <the fake> exec go`.
    Acpx(&'static str),
    /// `sdk-client.mjs <the fake>`.
    Sdk,
}

impl NodeClient {
    /// Every client the bench measures.
    pub const ALL: [NodeClient; 4] = [Self::Acpx("json"), Self::Acpx("text"), Self::Acpx("quiet"), Self::Sdk];

    pub fn label(self) -> String {
        match self {
            Self::Acpx(format) => format!("acpx 0.19.1 --format {format}"),
            Self::Sdk => "@agentclientprotocol/sdk 1.9.0 ClientSideConnection".to_owned(),
        }
    }
}

/// The committed package files copied into the scratch directory (the script must sit
/// beside `node_modules` to resolve its imports).
const FILES: [&str; 3] = ["package.json", "package-lock.json", "sdk-client.mjs"];

/// The scratch directory with the anchors installed from the committed lockfile (the first
/// time, or when a committed file changed). `Err` says why they cannot run. Not `npm ci`:
/// acpx's `@openclaw/fs-safe` 0.12.0 names optional platform packages the registry never
/// had at that version, so no lockfile can list them and `npm ci` refuses it as out of
/// sync; `npm install --no-save` installs the lockfile's versions and skips those, as a
/// user's `npm install acpx` does.
pub fn installed() -> Result<PathBuf, String> {
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Err("`node` is not on PATH".to_owned());
    }
    let source = workspace_root().join("tests/benches/anchors");
    let dir = crate::perf_dir().join("anchors");
    let same = |name: &str, dir: &Path| std::fs::read(source.join(name)).ok() == std::fs::read(dir.join(name)).ok();
    let ready = |dir: &Path| {
        FILES.iter().all(|name| same(name, dir))
            && dir.join("node_modules/acpx/dist/cli.js").is_file()
            && dir.join("node_modules/@agentclientprotocol/sdk/package.json").is_file()
    };
    let prepare = || {
        std::fs::create_dir_all(&dir).expect("the anchors' scratch directory");
        for name in FILES {
            std::fs::copy(source.join(name), dir.join(name)).expect("copy the anchors' package files");
        }
    };
    crate::npm::install_once(&dir, &["install", "--no-save"], ready, prepare)
        .map_err(|npm| format!("npm install failed: {}", npm.trim()))?;
    Ok(dir)
}

/// One run of `client` (installed in `dir`) against the fake agent flooding `updates`
/// chunks: the wall time from spawn to exit, once every chunk's text is found in what the
/// client printed (acpx) or counted (the SDK script).
pub fn drive(dir: &Path, client: NodeClient, updates: usize) -> Result<Duration, String> {
    let scratch = tempfile::tempdir().expect("temp dir");
    let scenario = plain_flood(scratch.path(), updates);
    let agent = format!("{} --scenario {}", fake_agent().display(), scenario.display());
    let mut command = Command::new("node");
    match client {
        NodeClient::Acpx(format) => command
            .arg(dir.join("node_modules/acpx/dist/cli.js"))
            .args(["--format", format, "--agent", &agent, "exec", "go"]),
        NodeClient::Sdk => command.arg(dir.join("sdk-client.mjs")).args(agent.split(' ')),
    };
    // acpx keeps its configuration and sessions under $HOME: a throwaway one.
    command
        .current_dir(scratch.path())
        .env("HOME", scratch.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let output = command.output().map_err(|e| format!("node: {e}"))?;
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "{} exited {}: {}",
            client.label(),
            output.status,
            stderr.trim()
        ));
    }
    let seen = match client {
        NodeClient::Acpx(_) => stdout.matches(CHUNK_TEXT).count(),
        NodeClient::Sdk => stdout.trim().parse().unwrap_or(0),
    };
    if seen != updates {
        return Err(format!("{} saw {seen} of {updates} chunks", client.label()));
    }
    Ok(elapsed)
}
