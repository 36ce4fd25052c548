//! What to launch and with which environment. The environment is built from nothing:
//! nothing of the service's own environment (credentials, proxies, `NODE_OPTIONS`…)
//! reaches the agent.

use std::path::{Path, PathBuf};

use crate::agent_users::{AgentIdentity, give_to};
use crate::distribution::{PlatformPin, VerifyMode, verify};

/// The only `PATH` an agent sees.
pub const FIXED_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The only arguments a pinned Cursor is ever launched with (never `--force`,
/// `--trust` or `--approve-mcps`).
pub const CURSOR_ARGS: [&str; 3] = ["--disable-project-configs", "--disable-auto-update", "acp"];

/// The agent executable and its fixed arguments. A development command is launched
/// through the same code path as a pinned Cursor distribution and reported `unpinned`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The verified closure this command runs from, when it is a pinned Cursor.
    pub distribution: Option<PinnedDistribution>,
}

/// A materialized Cursor distribution and the pin it must still match at every launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedDistribution {
    pub closure_dir: PathBuf,
    pub pin: PlatformPin,
    /// `Quick` (file set, sizes, modes) before each launch; `Full` re-hashes everything.
    pub verify_mode: VerifyMode,
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
            distribution: None,
        })
    }

    /// An operator's argv array (an agent profile): no splitting, no quoting, no shell.
    pub fn from_argv(argv: &[String]) -> Result<Self, LaunchError> {
        let (program, args) = argv.split_first().ok_or(LaunchError::EmptyCommand)?;
        Ok(Self {
            program: PathBuf::from(program),
            args: args.to_vec(),
            distribution: None,
        })
    }

    /// `<closure>/node <closure>/index.js --disable-project-configs --disable-auto-update acp`.
    pub fn pinned(distribution: PinnedDistribution) -> Self {
        let closure = &distribution.closure_dir;
        let mut args = vec![closure.join(&distribution.pin.entrypoint).display().to_string()];
        args.extend(CURSOR_ARGS.iter().map(|a| (*a).to_owned()));
        Self {
            program: closure.join(&distribution.pin.executable),
            args,
            distribution: Some(distribution),
        }
    }

    /// How events and metrics name this launch's distribution: the closure digest, or
    /// `unpinned` for a development command.
    pub fn distribution_label(&self) -> String {
        match &self.distribution {
            Some(d) => format!("sha256:{}", d.pin.closure_sha256),
            None => "unpinned".into(),
        }
    }

    /// Re-checks a pinned closure right before a launch; a development command passes.
    pub fn verify_before_launch(&self) -> Result<(), LaunchError> {
        match &self.distribution {
            None => Ok(()),
            Some(d) => verify(&d.closure_dir, &d.pin, d.verify_mode)
                .map(|_| ())
                .map_err(|e| LaunchError::DistributionUnverified(e.to_string())),
        }
    }
}

/// The only credential variables an agent may receive: Cursor's two, or one an
/// operator's agent profile names (`credential_variables`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CredentialName {
    CursorApiKey,
    CursorAuthToken,
    /// A variable named by the operator's agent profile the execution runs under.
    Profile(String),
}

impl CredentialName {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "CURSOR_API_KEY" => Some(Self::CursorApiKey),
            "CURSOR_AUTH_TOKEN" => Some(Self::CursorAuthToken),
            _ => None,
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::CursorApiKey => "CURSOR_API_KEY",
            Self::CursorAuthToken => "CURSOR_AUTH_TOKEN",
            Self::Profile(name) => name,
        }
    }
}

/// A secret value. Its `Debug` never shows it, so it cannot leak through a log line
/// or an error that formats the structure holding it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that needs it: the agent's environment.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// The one credential explicitly bound to a launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundCredential {
    pub name: CredentialName,
    pub secret: Secret,
}

/// Everything needed to start one agent process. No workspace: a process is launched
/// (possibly ahead of time, for the warm pool) in its private home, and the workspace
/// enters it only with `session/new`, right after the workspace policy is re-checked.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub command: AgentCommand,
    /// A private directory for this process's HOME and XDG directories, and its working
    /// directory.
    pub private_home: PathBuf,
    /// At most one credential; nothing else of the kind ever enters.
    pub credential: Option<BoundCredential>,
    /// The operator's extra variables (an agent profile's `env`: literal values and
    /// secret files read at admission), after the fixed ones and before the credential,
    /// which wins over an entry of the same name. Never in argv, never logged.
    pub extra_env: Vec<(String, Secret)>,
    /// The unprivileged account the agent runs as (`None`: the service's own, when the
    /// service cannot switch uids).
    pub identity: Option<AgentIdentity>,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the agent command is empty")]
    EmptyCommand,
    #[error("preparing the agent's private home failed: {0}")]
    PrivateHome(String),
    #[error("spawning the agent failed: {0}")]
    Spawn(String),
    #[error("the Cursor distribution no longer matches its pin: {0}")]
    DistributionUnverified(String),
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
        .into_iter()
        .chain(
            self.extra_env
                .iter()
                .filter(|(name, _)| self.credential.as_ref().is_none_or(|c| c.name.as_str() != name))
                .map(|(name, value)| (name.clone(), value.expose().to_owned())),
        )
        .chain(
            self.credential
                .iter()
                .map(|c| (c.name.as_str().to_owned(), c.secret.expose().to_owned())),
        )
        .collect()
    }

    pub(crate) fn prepare(&self) -> Result<(), LaunchError> {
        self.command.verify_before_launch()?;
        create_private_dir(&self.private_home)?;
        // The home is the agent's own (0700): a kept home may have been another uid's.
        // Its parent must let the agent through to it, and list nothing.
        if let Some(identity) = self.identity {
            let home_error = |e: std::io::Error| LaunchError::PrivateHome(e.to_string());
            if let Some(parent) = self.private_home.parent() {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o711)).map_err(home_error)?;
            }
            give_to(&self.private_home, identity).map_err(home_error)?;
        }
        Ok(())
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
            identity: None,
            command: AgentCommand::parse("x").unwrap(),
            private_home: "/tmp/h".into(),
            credential: None,
            extra_env: Vec::new(),
        };
        let names: Vec<_> = spec.environment().into_iter().map(|(k, _)| k).collect();
        assert!(!names.iter().any(|n| n.contains("KEY") || n.contains("TOKEN")));
    }

    #[test]
    fn a_bound_credential_enters_under_its_name_only() {
        let spec = LaunchSpec {
            identity: None,
            command: AgentCommand::parse("x").unwrap(),
            private_home: "/tmp/h".into(),
            credential: Some(BoundCredential {
                name: CredentialName::CursorAuthToken,
                secret: Secret::new("tok-123"),
            }),
            extra_env: Vec::new(),
        };
        let env = spec.environment();
        assert_eq!(env.iter().filter(|(_, v)| v == "tok-123").count(), 1);
        assert!(env.contains(&("CURSOR_AUTH_TOKEN".to_owned(), "tok-123".to_owned())));
        assert!(!format!("{spec:?}").contains("tok-123"), "Debug never shows the secret");
    }

    #[test]
    fn extra_variables_enter_after_the_fixed_ones_and_the_bound_credential_wins() {
        let spec = LaunchSpec {
            identity: None,
            command: AgentCommand::from_argv(&["/bin/agent".into(), "--flag with space".into()]).unwrap(),
            private_home: "/tmp/h".into(),
            credential: Some(BoundCredential {
                name: CredentialName::Profile("OPENAI_API_KEY".into()),
                secret: Secret::new("bound"),
            }),
            extra_env: vec![
                ("LOG_LEVEL".into(), Secret::new("info")),
                ("OPENAI_API_KEY".into(), Secret::new("from-file")),
            ],
        };
        assert_eq!(spec.command.args, ["--flag with space"], "an argv array is never split");
        let env = spec.environment();
        assert!(env.contains(&("LOG_LEVEL".to_owned(), "info".to_owned())));
        assert!(env.contains(&("OPENAI_API_KEY".to_owned(), "bound".to_owned())));
        assert!(!env.iter().any(|(_, v)| v == "from-file"));
        assert!(!format!("{spec:?}").contains("from-file"), "Debug never shows a value");
    }
}
