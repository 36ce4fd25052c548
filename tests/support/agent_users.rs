//! Agents under their own uids in every end-to-end test that runs as root (CI does): the
//! accounts are provisioned once per host with the runner's own `setup-agent-users`, and
//! the directories a test shares with its agents are opened up just enough for them.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cursor_runner_supervisor::agent_users::AgentUsers;

/// Accounts the suite provisions: enough for every test process running at once.
pub const TEST_AGENT_USERS: u32 = 64;

/// The host's agent accounts, provisioned first if need be; `None` when not root (agents
/// then run as the test's own uid).
pub fn agent_users() -> Option<AgentUsers> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    if AgentUsers::discover().count() < TEST_AGENT_USERS as usize {
        let lock_file = std::fs::File::create(std::env::temp_dir().join("cursor-runner-setup-agent-users.lock"))
            .expect("the provisioning lock file");
        let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .expect("the provisioning lock");
        if AgentUsers::discover().count() < TEST_AGENT_USERS as usize {
            let status = std::process::Command::new(crate::agent_init())
                .args(["setup-agent-users", "--count", &TEST_AGENT_USERS.to_string()])
                .status()
                .expect("cursor-runner setup-agent-users");
            assert!(status.success(), "provisioning the agent users failed");
        }
    }
    Some(AgentUsers::discover())
}

/// `dir` may be passed through (not listed) by agents.
pub fn traversable(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).expect("chmod 0711");
}

/// `dir` is writable by agents (a test's workspace; operators use the `cursor-agents` group).
pub fn shared_with_agents(dir: &Path) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).expect("chmod 0777");
}

/// An empty file agents may append to (the fake agent's `--record` file).
pub fn appendable_by_agents(file: &Path) {
    std::fs::write(file, b"").expect("the record file");
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o666)).expect("chmod 0666");
}
