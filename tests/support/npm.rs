//! `npm ci` from a committed lockfile, once per directory, under a file lock: tests run as
//! parallel processes, and a fresh machine must need nothing but the README's one command.

use std::path::Path;
use std::process::Command;

use sha2::{Digest, Sha256};

/// Makes `ready(dir)` true by running `npm ci --ignore-scripts` in `dir` once, after
/// `prepare` (which runs under the lock, e.g. to lay down the package files). `Err` carries
/// npm's own words when it failed.
pub fn ci_once(dir: &Path, ready: impl Fn(&Path) -> bool, prepare: impl FnOnce()) -> Result<(), String> {
    install_once(dir, &["ci"], ready, prepare)
}

/// [`ci_once`] with another npm command in place of `ci` (e.g. `install --no-save`, which
/// installs a committed lockfile's versions too but, unlike `ci`, lets an optional
/// dependency the registry never published be skipped).
pub fn install_once(
    dir: &Path,
    command: &[&str],
    ready: impl Fn(&Path) -> bool,
    prepare: impl FnOnce(),
) -> Result<(), String> {
    // Not `ready(dir)` alone: npm writes the tree file by file, so a package's entry point can
    // be there while its dependencies are still half-written by another test's install.
    let installed = dir.join("node_modules").join(INSTALLED_MARKER);
    let done = || installed.is_file() && ready(dir);
    if done() {
        return Ok(());
    }
    let key = hex::encode(Sha256::digest(dir.as_os_str().as_encoded_bytes()));
    let lock_file = std::fs::File::create(std::env::temp_dir().join(format!("cursor-runner-npm-{}.lock", &key[..16])))
        .expect("the install lock file");
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("the install lock");
    if done() {
        return Ok(());
    }
    prepare();
    let _ = std::fs::remove_file(&installed);
    let output = Command::new("npm")
        .args(command)
        .args(["--ignore-scripts", "--no-audit", "--no-fund", "--prefix"])
        .arg(dir)
        .output()
        .map_err(|e| format!("npm: {e}"))?;
    if output.status.success() && ready(dir) {
        std::fs::write(&installed, b"").map_err(|e| format!("marking {} installed: {e}", dir.display()))?;
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// Written in an install's `node_modules` once its npm command has finished and the tree is
/// ready (`npm ci` removes `node_modules` as it starts, and with it the mark).
const INSTALLED_MARKER: &str = ".cursor-runner-installed";
