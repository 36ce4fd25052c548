//! What to launch and with which environment. The environment is built from nothing:
//! nothing of the service's own environment (credentials, proxies, `NODE_OPTIONS`…)
//! reaches the agent.

use std::path::{Path, PathBuf};

/// The only `PATH` an agent sees.
pub const FIXED_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The agent executable and its fixed arguments. A development command is launched
/// through the same code path as a pinned Cursor distribution and reported `unpinned`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl AgentCommand {
    /// Splits a command line on whitespace (no shell, no quoting: an operator-owned
    /// setting, never caller input).
    pub fn parse(command_line: &str) -> Result<Self, LaunchError> {
        let mut words = command_line.split_whitespace();
        let program = words.next().ok_or(LaunchError::EmptyCommand)?;
        Ok(Self {
            program: PathBuf::from(program),
            args: words.map(str::to_owned).collect(),
        })
    }

    /// How events and metrics name this launch's distribution.
    pub fn distribution_label(&self) -> &'static str {
        "unpinned"
    }
}

/// Everything needed to start one agent process.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub command: AgentCommand,
    pub workspace: PathBuf,
    /// A private directory for this process's HOME and XDG directories.
    pub private_home: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the agent command is empty")]
    EmptyCommand,
    #[error("workspace `{0}` is not an existing directory")]
    WorkspaceMissing(String),
    #[error("preparing the agent's private home failed: {0}")]
    PrivateHome(String),
    #[error("spawning the agent failed: {0}")]
    Spawn(String),
}

impl LaunchSpec {
    /// The complete environment of the agent, in order.
    pub fn environment(&self) -> Vec<(String, String)> {
        let home = self.private_home.display().to_string();
        let sub = |name: &str| self.private_home.join(name).display().to_string();
        vec![
            ("HOME".into(), home),
            ("XDG_CONFIG_HOME".into(), sub(".config")),
            ("XDG_DATA_HOME".into(), sub(".local/share")),
            ("XDG_CACHE_HOME".into(), sub(".cache")),
            ("CURSOR_CONFIG_DIR".into(), sub(".cursor")),
            ("CURSOR_DATA_DIR".into(), sub(".cursor-data")),
            ("NODE_DISABLE_COMPILE_CACHE".into(), "1".into()),
            ("AGENT_CLI_CREDENTIAL_STORE".into(), "memory".into()),
            ("NO_OPEN_BROWSER".into(), "1".into()),
            ("PATH".into(), FIXED_PATH.into()),
        ]
    }

    pub(crate) fn prepare(&self) -> Result<(), LaunchError> {
        if !self.workspace.is_dir() {
            return Err(LaunchError::WorkspaceMissing(self.workspace.display().to_string()));
        }
        create_private_dir(&self.private_home)
    }
}

fn create_private_dir(path: &Path) -> Result<(), LaunchError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| LaunchError::PrivateHome(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_splits_into_program_and_args() {
        let c = AgentCommand::parse("/bin/fake --scenario x.json").unwrap();
        assert_eq!(c.program, PathBuf::from("/bin/fake"));
        assert_eq!(c.args, ["--scenario", "x.json"]);
        assert!(matches!(AgentCommand::parse("  "), Err(LaunchError::EmptyCommand)));
    }

    #[test]
    fn the_environment_names_no_credential() {
        let spec = LaunchSpec {
            command: AgentCommand::parse("x").unwrap(),
            workspace: "/".into(),
            private_home: "/tmp/h".into(),
        };
        let names: Vec<_> = spec.environment().into_iter().map(|(k, _)| k).collect();
        assert!(!names.iter().any(|n| n.contains("KEY") || n.contains("TOKEN")));
    }
}
