//! The domain crate does no I/O: nothing in its dependency tree is a runtime, a database
//! driver, an RPC framework or a process library.

use std::process::Command;

/// Crates whose presence under the domain would mean it can do I/O.
const RUNTIME_CRATES: [&str; 6] = ["tokio", "sqlx", "tonic", "nix", "hyper", "mio"];

#[test]
fn the_domain_crate_depends_on_no_runtime_database_rpc_or_process_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let tree = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "cursor-runner-domain",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(tree.status.success(), "{}", String::from_utf8_lossy(&tree.stderr));
    let tree = String::from_utf8(tree.stdout).unwrap();
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(crates.contains(&"cursor-runner-domain"), "{tree}");
    let found: Vec<&&str> = RUNTIME_CRATES.iter().filter(|c| crates.contains(c)).collect();
    assert!(found.is_empty(), "the domain crate pulls in {found:?}:\n{tree}");
}
