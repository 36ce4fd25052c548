//! Real ACP agents nobody here wrote, for the conformance suite: installed on first use
//! from the committed, exactly pinned lockfile (`tests/conformance/peers/`) into
//! `target/acp-peers`, once, under a file lock (tests run as parallel processes). When the
//! npm registry cannot be reached the suite is skipped loudly — except under CI, which
//! reaches it, where that is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::workspace_root;

/// The SDK's example agent (streaming text, tool calls, one permission request).
const SDK_EXAMPLE_AGENT: &str = "node_modules/@agentclientprotocol/sdk/dist/examples/agent.js";

/// `@zed-industries/codex-acp`'s Rust binary, from its per-platform package (the
/// package's own `bin/codex-acp.js` only finds and spawns it; the service launches the
/// binary itself, so the stop ladder reaches the agent, not a wrapper).
fn codex_acp_binary() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("node_modules/@zed-industries/codex-acp-linux-{arch}/bin/codex-acp")
}

fn install_dir() -> PathBuf {
    workspace_root().join("target/acp-peers")
}

fn pinned() -> PathBuf {
    workspace_root().join("tests/conformance/peers")
}

/// `@agentclientprotocol/sdk`'s example agent as an argv-ready command line (`node` and the
/// script, both absolute), or `None` when the registry is unreachable outside CI.
pub fn sdk_example_agent() -> Option<String> {
    let dir = installed()?;
    let node = which("node").expect("`node` (v20 or newer) runs the ACP peers");
    Some(format!("{} {}", node.display(), dir.join(SDK_EXAMPLE_AGENT).display()))
}

/// `@zed-industries/codex-acp`'s binary (absolute), or `None` when the registry is
/// unreachable outside CI.
pub fn codex_acp() -> Option<PathBuf> {
    Some(installed()?.join(codex_acp_binary()))
}

fn installed() -> Option<PathBuf> {
    let dir = install_dir();
    // Every pinned peer, so a cache laid down before a peer was added is installed again.
    let ready = |dir: &Path| dir.join(SDK_EXAMPLE_AGENT).is_file() && dir.join(codex_acp_binary()).is_file();
    let lay_down_the_pinned_list = || {
        std::fs::create_dir_all(&dir).expect("target/acp-peers");
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(pinned().join(file), dir.join(file)).expect("the pinned peer list");
        }
    };
    if let Err(why) = crate::npm::ci_once(&dir, ready, lay_down_the_pinned_list) {
        assert!(
            std::env::var_os("CI").is_none(),
            "installing the ACP peers failed under CI: {why}"
        );
        eprintln!("SKIPPED: the ACP peers could not be installed (is the npm registry reachable?): {why}");
        return None;
    }
    make_readable_by_agents(&dir);
    Some(dir)
}

/// Agents run under uids of their own: the installed tree must be theirs to read.
fn make_readable_by_agents(dir: &Path) {
    let _ = Command::new("chmod").args(["-R", "a+rX"]).arg(dir).status();
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
