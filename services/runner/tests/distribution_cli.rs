//! `cursor-runner distribution pin | materialize | verify`, as an operator runs them.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use cursor_runner_supervisor::distribution::synthetic::ArchiveBuilder;

fn runner(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
        .args(args)
        .output()
        .expect("cursor-runner runs")
}

#[test]
fn an_operator_pins_materializes_and_verifies_a_distribution() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    ArchiveBuilder::minimal(b"#!/bin/sh\n")
        .write_tar_gz(&dir.path().join("cursor.tar.gz"))
        .unwrap();

    let pin = runner(&[
        "distribution",
        "pin",
        "--archive",
        &path("cursor.tar.gz"),
        "--version",
        "v1",
        "--platform",
        "linux-x64",
        "--out",
        &path("manifest.json"),
    ]);
    assert!(pin.status.success(), "{}", String::from_utf8_lossy(&pin.stderr));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["platforms"]["linux-x64"]["executable"], "node");

    let installed = runner(&[
        "distribution",
        "materialize",
        "--manifest",
        &path("manifest.json"),
        "--archive",
        &path("cursor.tar.gz"),
        "--into",
        &path("closure"),
        "--platform",
        "linux-x64",
    ]);
    assert!(
        installed.status.success(),
        "{}",
        String::from_utf8_lossy(&installed.stderr)
    );
    let again = runner(&[
        "distribution",
        "materialize",
        "--manifest",
        &path("manifest.json"),
        "--archive",
        &path("cursor.tar.gz"),
        "--into",
        &path("closure"),
        "--platform",
        "linux-x64",
    ]);
    assert!(!again.status.success(), "an existing destination is never overwritten");

    let (manifest_path, closure) = (path("manifest.json"), path("closure"));
    let verify = |full: bool| {
        let mut args = vec![
            "distribution",
            "verify",
            "--manifest",
            &manifest_path,
            "--dir",
            &closure,
        ];
        args.extend(["--platform", "linux-x64"]);
        if full {
            args.push("--full");
        }
        runner(&args)
    };
    assert!(verify(true).status.success());
    let index = dir.path().join("closure/index.js");
    std::fs::set_permissions(&index, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&index, "tampered").unwrap();
    let tampered = verify(false);
    assert!(!tampered.status.success());
    assert!(
        String::from_utf8_lossy(&tampered.stderr).contains("index.js"),
        "the refusal names the file"
    );
}
