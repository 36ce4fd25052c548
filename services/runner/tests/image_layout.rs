//! The container image's root filesystem, without a Docker engine: `deploy/rootfs.sh` (the
//! script `deploy/Dockerfile` runs with DEST=/) lays it out into a directory, and the service
//! is started from there the way the image starts it — `cursor-runner serve` configured by
//! `CURSOR_RUNNER_*` environment only, the embedded store in the laid-out state dir — and
//! answers `cursor-runner healthcheck`, the image's `HEALTHCHECK`, from the laid-out binary.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cursor_runner_e2e::{ServiceDirs, WAIT, connect, fake_agent, proto, scenario};
use cursor_runner_supervisor::distribution::Platform;
use cursor_runner_supervisor::distribution::synthetic::ArchiveBuilder;

const BINARY: &str = "usr/local/bin/cursor-runner";
const CONFIG_DIR: &str = "etc/cursor-runner";
const STATE_DIR: &str = "var/lib/cursor-runner";

fn rootfs_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/rootfs.sh")
}

/// `deploy/rootfs.sh ARGS… DEST` with the test's binary as the release binary.
fn rootfs(dest: &Path, args: &[&str]) -> Output {
    Command::new("bash")
        .arg(rootfs_script())
        .args(args)
        .arg(dest)
        .env("CURSOR_RUNNER_BIN", env!("CARGO_BIN_EXE_cursor-runner"))
        .env_remove("CURSOR_DISTRIBUTION_MANIFEST")
        .env_remove("CURSOR_DISTRIBUTION_ARCHIVE")
        .output()
        .expect("bash runs deploy/rootfs.sh")
}

#[track_caller]
fn assert_success(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Every path under `root`, relative, sorted: the layout is exactly what rootfs.sh promises.
fn tree(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(root).unwrap().display().to_string());
            if path.is_dir() && !path.is_symlink() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// A command of the laid-out binary, with no `CURSOR_RUNNER_*` setting inherited from
/// the test's own environment.
fn laid_out(root: &Path) -> Command {
    let mut command = Command::new(root.join(BINARY));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CURSOR_RUNNER_") {
            command.env_remove(name);
        }
    }
    command
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The image's health check: `cursor-runner healthcheck`, its address from the environment.
fn healthcheck(root: &Path, address: &str, service: Option<&str>) -> Output {
    let mut command = laid_out(root);
    command
        .args(["healthcheck", "--timeout-secs", "3"])
        .env("CURSOR_RUNNER_HEALTHCHECK_ADDR", address);
    if let Some(service) = service {
        command.args(["--service", service]);
    }
    command.output().expect("cursor-runner healthcheck")
}

/// Kills the service if the test fails half-way.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_laid_out_service_starts_from_its_root_and_answers_the_health_check() {
    let dirs = ServiceDirs::new();
    let root = dirs.root.path().join("rootfs");

    assert_success(&rootfs(&root, &[]), "deploy/rootfs.sh");
    // Idempotent: a second run over the same directory succeeds and changes nothing.
    let first = tree(&root);
    assert_success(&rootfs(&root, &[]), "deploy/rootfs.sh, again");
    assert_eq!(tree(&root), first);
    assert_eq!(
        first,
        [
            "etc",
            "etc/cursor-runner",
            "usr",
            "usr/local",
            "usr/local/bin",
            "usr/local/bin/cursor-runner",
            "var",
            "var/lib",
            "var/lib/cursor-runner",
        ],
        "the binary, the config dir, the state dir, and nothing else"
    );
    assert_eq!(mode(&root.join(BINARY)), 0o755);
    assert_eq!(mode(&root.join(CONFIG_DIR)), 0o700);
    assert_eq!(mode(&root.join(STATE_DIR)), 0o700);
    assert_eq!(
        std::fs::read(root.join(BINARY)).unwrap(),
        std::fs::read(env!("CARGO_BIN_EXE_cursor-runner")).unwrap()
    );
    // Modes are put back, not only set at creation.
    std::fs::set_permissions(root.join(STATE_DIR), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_success(&rootfs(&root, &[]), "deploy/rootfs.sh over a loosened state dir");
    assert_eq!(mode(&root.join(STATE_DIR)), 0o700);

    // `serve` as the image's ENTRYPOINT runs it: flags from the environment only.
    let address = format!("127.0.0.1:{}", free_port());
    let agent = format!(
        "{} --scenario {} --record {}",
        fake_agent().display(),
        scenario("demo.json").display(),
        dirs.record.display()
    );
    let state_dir = root.join(STATE_DIR);
    let mut service = Serving(
        laid_out(&root)
            .arg("serve")
            .env("CURSOR_RUNNER_LISTEN", &address)
            .env("CURSOR_RUNNER_STATE_DIR", &state_dir)
            .env("CURSOR_RUNNER_AGENT_COMMAND", &agent)
            .env("CURSOR_RUNNER_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("the laid-out cursor-runner serve"),
    );

    // A readiness probe: retried until SERVING, within the bound every test wait has.
    let deadline = Instant::now() + WAIT;
    let ready = loop {
        let probe = healthcheck(&root, &address, None);
        if probe.status.success() || Instant::now() >= deadline {
            break probe;
        }
        assert!(service.0.try_wait().unwrap().is_none(), "the laid-out service exited");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_success(&ready, "cursor-runner healthcheck (cursor_runner.v1.RunnerService)");
    assert_eq!(String::from_utf8_lossy(&ready.stdout).trim(), "SERVING");
    // The liveness probe asks about the server as a whole.
    assert_success(
        &healthcheck(&root, &address, Some("")),
        "cursor-runner healthcheck --service ''",
    );
    assert!(
        state_dir.join("cursor-runner.db").is_file(),
        "the embedded store lives in the laid-out state dir"
    );

    // An agent starts from the layout: its parent (agent-init in its own PID namespace, or
    // the service itself where namespaces are not permitted) is the laid-out binary.
    let mut client = connect(address.parse().unwrap(), Some(cursor_runner_e2e::TENANT)).await;
    let execution = client
        .create_execution(proto::CreateExecutionRequest {
            request_id: "image-1".into(),
            workspace: dirs.workspace.display().to_string(),
            ..Default::default()
        })
        .await
        .expect("CreateExecution")
        .into_inner()
        .execution
        .expect("execution");
    let pid = execution.pid.expect("the agent's pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let parent = status
        .lines()
        .find_map(|line| line.strip_prefix("PPid:"))
        .expect("PPid")
        .trim()
        .to_owned();
    assert_eq!(
        std::fs::read_link(format!("/proc/{parent}/exe")).unwrap(),
        std::fs::canonicalize(root.join(BINARY)).unwrap()
    );
    client
        .close_execution(proto::CloseExecutionRequest {
            request_id: "image-2".into(),
            execution_id: execution.execution_id,
        })
        .await
        .expect("CloseExecution");
    drop(client);

    // SIGTERM, as the container runtime stops it: a drain, then exit 0.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(service.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + WAIT;
    let exit = loop {
        if let Some(status) = service.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the laid-out service never exited");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "a drain exits 0: {exit:?}");
    let gone = healthcheck(&root, &address, None);
    assert_eq!(gone.status.code(), Some(1), "nothing serves any more");
}

#[test]
fn a_pinned_distribution_is_materialized_verified_and_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rootfs");
    let archive = dir.path().join("cursor.tar.gz");
    let manifest = dir.path().join("cursor.json");
    ArchiveBuilder::minimal(b"#!/bin/sh\n").write_tar_gz(&archive).unwrap();
    let platform = Platform::current().expect("a supported platform").as_str();
    let pin = Command::new(env!("CARGO_BIN_EXE_cursor-runner"))
        .args([
            "distribution",
            "pin",
            "--version",
            "2026.01.02-abc",
            "--platform",
            platform,
        ])
        .arg("--archive")
        .arg(&archive)
        .arg("--out")
        .arg(&manifest)
        .output()
        .unwrap();
    assert_success(&pin, "cursor-runner distribution pin");
    let (manifest_arg, archive_arg) = (manifest.to_str().unwrap(), archive.to_str().unwrap());
    let pinned = ["--manifest", manifest_arg, "--archive", archive_arg];

    // Half a pin is refused before anything is laid out.
    let half = rootfs(&root, &["--manifest", manifest_arg]);
    assert_eq!(half.status.code(), Some(2), "{}", String::from_utf8_lossy(&half.stderr));
    assert!(!root.exists());

    assert_success(&rootfs(&root, &pinned), "deploy/rootfs.sh with a pinned distribution");
    let closure = root.join("opt/cursor/2026.01.02-abc");
    assert!(closure.join("node").is_file() && closure.join("index.js").is_file());
    assert_eq!(mode(&closure.join("index.js")) & 0o222, 0, "the closure is read-only");
    let installed = root.join(CONFIG_DIR).join("distribution.json");
    assert_eq!(std::fs::read(&installed).unwrap(), std::fs::read(&manifest).unwrap());
    assert_eq!(mode(&installed), 0o444);
    let layout = tree(&root);
    assert!(
        layout.iter().all(|path| {
            path.starts_with("opt/cursor/2026.01.02-abc/")
                || [
                    "etc",
                    "etc/cursor-runner",
                    "etc/cursor-runner/distribution.json",
                    "opt",
                    "opt/cursor",
                    "opt/cursor/2026.01.02-abc",
                    "usr",
                    "usr/local",
                    "usr/local/bin",
                    "usr/local/bin/cursor-runner",
                    "var",
                    "var/lib",
                    "var/lib/cursor-runner",
                ]
                .contains(&path.as_str())
        }),
        "nothing but the layout (no staging left behind): {layout:?}"
    );

    // Again: the closure is verified where it is, not materialized over.
    let again = rootfs(&root, &pinned);
    assert_success(&again, "deploy/rootfs.sh, again");
    assert!(String::from_utf8_lossy(&again.stdout).contains("verified"));
    assert_eq!(tree(&root), layout);

    // The laid-out binary accepts the laid-out distribution, as `serve` would use it, with
    // isolation active (agent users provisioned, as the image's build does): never
    // silently degraded.
    cursor_runner_e2e::agent_users::agent_users();
    let doctor = laid_out(&root)
        .arg("doctor")
        .env("CURSOR_RUNNER_DISTRIBUTION_MANIFEST", &installed)
        .env("CURSOR_RUNNER_DISTRIBUTION_DIR", &closure)
        .output()
        .unwrap();
    assert_success(&doctor, "cursor-runner doctor on the laid-out distribution");
    assert!(
        String::from_utf8_lossy(&doctor.stdout)
            .lines()
            .any(|line| line.starts_with("ok") && line.contains("distribution")),
        "{}",
        String::from_utf8_lossy(&doctor.stdout)
    );
    assert!(
        String::from_utf8_lossy(&doctor.stdout)
            .lines()
            .any(|line| line.starts_with("ok") && line.contains("agent uid separation")),
        "isolation is active: {}",
        String::from_utf8_lossy(&doctor.stdout)
    );

    // A closure altered after the fact fails the next run: never silently kept.
    let index = closure.join("index.js");
    std::fs::set_permissions(&index, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&index, "tampered").unwrap();
    let tampered = rootfs(&root, &pinned);
    assert!(!tampered.status.success(), "a tampered closure must fail the layout");
    assert!(
        String::from_utf8_lossy(&tampered.stderr).contains("index.js"),
        "{}",
        String::from_utf8_lossy(&tampered.stderr)
    );
}

/// What the agent needs from the image besides the layout, by Debian package: TLS roots
/// for Cursor's API and the workspaces' remotes, Git for the workspaces, and a Node
/// runtime (an unpinned agent, MCP servers started with `node`).
const RUNTIME_PACKAGES: [&str; 3] = ["ca-certificates", "git", "nodejs"];

/// `deploy/Dockerfile`'s runtime stage (no Docker engine runs here, so it is read, not
/// built): one `apt-get install` there names every package of [`RUNTIME_PACKAGES`].
#[test]
fn the_runtime_image_installs_ca_certificates_git_and_a_node_runtime() {
    let dockerfile = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/Dockerfile"))
        .expect("deploy/Dockerfile");
    let runtime = dockerfile.split_once(" AS runtime").expect("a stage named runtime").1;
    // Instructions, with line continuations joined.
    let joined = runtime.replace("\\\n", " ");
    let installs: Vec<&str> = joined
        .lines()
        .filter(|line| line.starts_with("RUN ") && line.contains("apt-get install"))
        .collect();
    let missing: Vec<&str> = RUNTIME_PACKAGES
        .into_iter()
        .filter(|package| {
            !installs
                .iter()
                .any(|run| run.split_whitespace().any(|word| word == *package))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the runtime stage installs none of {missing:?}; its apt-get installs: {installs:?}"
    );
}
