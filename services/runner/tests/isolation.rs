//! What isolates agents, as the real `serve` has it when run as root with agent users:
//! every layer reported in force, and the non-dumpable one shown to hold.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use cursor_runner_e2e::*;
use cursor_runner_executions::capabilities::AGENT_ISOLATION;
use nix::libc;

/// `CAP_SYS_PTRACE` (linux/capability.h), which the libc crate does not name. A process
/// of the service's uid holding every capability the service holds but this one meets no
/// barrier to the service's memory except the dumpable flag.
const CAP_SYS_PTRACE: libc::c_ulong = 19;

/// After `exec`, `command` runs without `CAP_SYS_PTRACE`: dropped from the bounding set
/// (root's permitted set after exec is the bounding set; the inheritable set is empty).
fn without_cap_sys_ptrace(command: &mut Command) {
    // SAFETY: prctl(2) is async-signal-safe and nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Opens `/proc/<pid>/mem` for reading (the ptrace attach check, as `process_vm_readv`)
/// as a peer: root, without `CAP_SYS_PTRACE`. Reads nothing: opening is the check.
fn memory_opened_by_a_peer(pid: u32) -> Output {
    let mut dd = Command::new("dd");
    dd.arg(format!("if=/proc/{pid}/mem")).args(["count=0", "status=none"]);
    without_cap_sys_ptrace(&mut dd);
    dd.output().expect("dd")
}

fn service(dirs: &ServiceDirs) -> ServiceProcess {
    assert!(
        nix::unistd::geteuid().is_root(),
        "serve isolates agents only as root: run the suite as root (CI does)"
    );
    ServiceProcess::start_with(
        ServiceSettings {
            binary: Path::new(env!("CARGO_BIN_EXE_cursor-runner")),
            database_url: "",
            state_dir: dirs.root.path(),
            scenario: "demo.json",
            record: &dirs.record,
            env: Vec::new(),
            args: Vec::new(),
        },
        // So that a peer without CAP_SYS_PTRACE holds all the service holds.
        without_cap_sys_ptrace,
    )
}

/// A dumpable process with the service's uid and capabilities: the peer opens its memory,
/// so only the dumpable flag tells it from the service.
struct DumpableSibling(Child);

impl DumpableSibling {
    fn start() -> Self {
        let mut sleep = Command::new("sleep");
        sleep.arg("600").stdout(Stdio::null());
        without_cap_sys_ptrace(&mut sleep);
        Self(sleep.spawn().expect("sleep"))
    }
}

impl Drop for DumpableSibling {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_is_non_dumpable_so_a_peer_of_its_uid_without_cap_sys_ptrace_cannot_open_its_memory() {
    let dirs = ServiceDirs::new();
    let service = service(&dirs);
    service.client().await; // listening: past the start-up that makes it non-dumpable

    let sibling = DumpableSibling::start();
    let control = memory_opened_by_a_peer(sibling.0.id());
    assert!(
        control.status.success(),
        "the peer opens a dumpable sibling's memory: {control:?}"
    );

    let refused = memory_opened_by_a_peer(service.child.id());
    assert!(
        !refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("Permission denied"),
        "the service's memory was opened: {refused:?}"
    );
    service.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_service_with_agent_users_reports_every_isolation_layer_in_force() {
    let dirs = ServiceDirs::new();
    let service = service(&dirs);
    let mut client = service.client().await;
    let capabilities = client
        .get_capabilities(proto::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    let isolation = capabilities
        .iter()
        .find(|c| c.name == AGENT_ISOLATION)
        .expect("the agent isolation capability");
    assert_eq!(
        (isolation.availability, isolation.detail_level),
        (
            proto::CapabilityAvailability::Available as i32,
            proto::CapabilityDetailLevel::Structured as i32
        ),
        "{}",
        isolation.reason
    );
    let health = tonic_health::pb::health_client::HealthClient::new(
        tonic::transport::Channel::from_shared(format!("http://{}", service.address()))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    )
    .check(tonic_health::pb::HealthCheckRequest {
        service: cursor_runner_api::AGENT_ISOLATION_HEALTH_NAME.into(),
    })
    .await
    .unwrap()
    .into_inner()
    .status;
    assert_eq!(
        health,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    service.stop();
}
