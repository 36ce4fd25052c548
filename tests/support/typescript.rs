//! The TypeScript client (`deploy/clients/typescript`), installed on first use so the
//! README's one test command works on a fresh machine: `npm ci` from the committed
//! lockfile, once, under a file lock (tests run as parallel processes).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::workspace_root;

/// Packages the client's scripts need at run time.
const NEEDED: [&str; 4] = ["@grpc/grpc-js", "@connectrpc/connect-node", "tsx", "typescript"];

pub fn client_dir() -> PathBuf {
    workspace_root().join("deploy/clients/typescript")
}

fn installed(dir: &Path) -> bool {
    NEEDED
        .iter()
        .all(|package| dir.join("node_modules").join(package).is_dir())
}

/// The client's directory, with `node` present and its dependencies installed (by
/// `npm ci --ignore-scripts` when they are missing). Fails with what to do otherwise.
pub fn installed_client() -> PathBuf {
    let dir = client_dir();
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "`node` (v20 or newer) and npm are required to run the TypeScript client: {node:?}"
    );
    if let Err(why) = crate::npm::ci_once(&dir, installed, || {}) {
        panic!("installing the TypeScript client failed ({why}): run `npm ci --prefix deploy/clients/typescript`");
    }
    dir
}

/// `tests/benches/node-agent`: minimal agents on the official `@agentclientprotocol/sdk`
/// (a real Node ACP runtime), installed like the client when missing.
pub fn installed_node_agent() -> PathBuf {
    let dir = workspace_root().join("tests/benches/node-agent");
    let ready = |dir: &Path| dir.join("node_modules/@agentclientprotocol/sdk").is_dir();
    if let Err(why) = crate::npm::ci_once(&dir, ready, || {}) {
        panic!("installing the SDK agent failed ({why}): run `npm ci --prefix tests/benches/node-agent`");
    }
    dir
}
