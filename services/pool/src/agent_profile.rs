//! Agent profiles: how an operator launches, configures and authenticates an ACP agent
//! other than (or besides) the default `--agent-command`. A JSON file, re-read when it
//! changes (modification time, size, inode), named by `CreateExecution.agent_profile`:
//!
//! ```json
//! {"profiles": {"sdk-example": {
//!     "argv": ["/usr/bin/node", "/opt/x/agent.js"],
//!     "env": {"LOG_LEVEL": {"value": "info"}, "OPENAI_API_KEY": {"file": "/run/secrets/openai"}},
//!     "credential_variables": ["OPENAI_API_KEY"],
//!     "authenticate": {"method_id": "openai-api-key"},
//!     "ask_mode": "default"}}}      // or ["default", "readonly"]: modes in which it asks
//! ```
//!
//! Secret files are read at admission (every `CreateExecution`), so a rotated file is
//! used from the next execution on; their values enter only the agent's environment and
//! the execution's redactor (never argv, logs, errors or events).

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use cursor_runner_supervisor::{AgentCommand, Secret};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use cursor_runner_domain::error::{EngineError, Reason};

/// Longest profile name (and variable name) a profile file may use.
pub const MAX_PROFILE_NAME_BYTES: usize = 128;
/// Largest secret file a profile may name.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Variables the launcher sets itself; a profile may not replace them.
const RESERVED_VARIABLES: &[&str] = &[
    "HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "CURSOR_CONFIG_DIR",
    "CURSOR_DATA_DIR",
    "NODE_DISABLE_COMPILE_CACHE",
    "AGENT_CLI_CREDENTIAL_STORE",
    "NO_OPEN_BROWSER",
    "PATH",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfilesFile {
    profiles: BTreeMap<String, RawProfile>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    argv: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, EnvSource>,
    #[serde(default)]
    credential_variables: Vec<String>,
    #[serde(default)]
    authenticate: Option<Authenticate>,
    #[serde(default)]
    ask_mode: Option<AskMode>,
}

/// One mode id, or several (the first is set at start; a change may pick any other).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash)]
#[serde(untagged)]
enum AskMode {
    One(String),
    Many(Vec<String>),
}

/// Where one extra variable's value comes from.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum EnvSource {
    /// A literal (not secret) value.
    Value(String),
    /// A file holding a secret, read at admission; one trailing newline is dropped.
    File(PathBuf),
}

/// The ACP `authenticate` call to make when the agent advertises the method.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct Authenticate {
    pub method_id: String,
}

/// One profile as the operator wrote it (no secret values: files are named, not read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentProfile {
    pub name: String,
    pub command: AgentCommand,
    pub env: BTreeMap<String, EnvSource>,
    pub credential_variables: Vec<String>,
    pub authenticate: Option<Authenticate>,
    /// The agent's own modes in which it asks before running a tool (a permission
    /// request), the first set before the first prompt. Empty: none is known, and the
    /// profile cannot run under an approval policy (every policy needs the agent to ask).
    pub ask_modes: Vec<String>,
}

/// A profile ready to launch: its secret files read. Its `Debug` shows no value.
#[derive(Clone)]
pub struct ResolvedProfile {
    pub profile: Arc<AgentProfile>,
    /// Every extra variable in name order, literal and secret alike.
    pub env: Vec<(String, Secret)>,
    /// The names and values read from secret files, for the redactor.
    pub secrets: Vec<(String, String)>,
}

impl std::fmt::Debug for ResolvedProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedProfile")
            .field("profile", &self.profile.name)
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

impl ResolvedProfile {
    /// What tells two launches of this profile apart: its definition and every value.
    /// Hashed by the pool under its own random key, never shown.
    pub fn identity_bytes(&self) -> Vec<u8> {
        let p = &self.profile;
        let mut hasher = Sha256::new();
        for part in std::iter::once(p.command.program.display().to_string())
            .chain(p.command.args.iter().cloned())
            .chain(["\u{1}".to_owned()])
            .chain(self.env.iter().flat_map(|(k, v)| [k.clone(), v.expose().to_owned()]))
            .chain(["\u{1}".to_owned()])
            .chain(p.credential_variables.iter().cloned())
            .chain([
                p.authenticate.as_ref().map(|a| a.method_id.clone()).unwrap_or_default(),
                p.ask_modes.join("\u{1}"),
            ])
        {
            hasher.update(part.as_bytes());
            hasher.update([0u8]);
        }
        hasher.finalize().to_vec()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the agent profiles file {path} is unusable: {reason}")]
pub struct ProfilesFileError {
    path: String,
    reason: String,
}

/// What tells a changed file: modification time, size and inode (a rename).
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(path).ok()?;
    metadata.modified().ok().map(|m| (m, metadata.len(), metadata.ino()))
}

struct Loaded {
    stamp: Stamp,
    profiles: HashMap<String, Arc<AgentProfile>>,
}

/// The operator's agent profiles, re-read when the file changes; an unusable new
/// version is logged and the last good one kept.
pub struct AgentProfiles {
    path: PathBuf,
    loaded: Mutex<Loaded>,
}

impl std::fmt::Debug for AgentProfiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentProfiles").field("path", &self.path).finish()
    }
}

impl AgentProfiles {
    /// Loads the file; an unusable file is refused at start.
    pub fn from_file(path: impl Into<PathBuf>) -> Result<Self, ProfilesFileError> {
        let path = path.into();
        let loaded = load(&path)?;
        Ok(Self {
            path,
            loaded: Mutex::new(loaded),
        })
    }

    /// The named profile, from the file as it is now.
    pub fn get(&self, name: &str) -> Result<Arc<AgentProfile>, EngineError> {
        let mut loaded = self.loaded.lock();
        if stamp(&self.path) != loaded.stamp {
            match load(&self.path) {
                Ok(fresh) => *loaded = fresh,
                Err(e) => tracing::error!(error = %e, "reloading the agent profiles failed; keeping the previous ones"),
            }
        }
        loaded.profiles.get(name).cloned().ok_or_else(|| unknown(name))
    }
}

pub fn unknown(name: &str) -> EngineError {
    EngineError::precondition(
        Reason::AgentProfileUnknown,
        format!("no agent profile `{name}` in this runner's --agent-profiles"),
    )
    .with("agent_profile", name)
}

impl AgentProfile {
    /// Reads the profile's secret files. A missing, unreadable, empty or oversized file
    /// is refused naming the profile and the variable, never a value.
    pub fn resolve(self: &Arc<Self>) -> Result<ResolvedProfile, EngineError> {
        let mut env = Vec::with_capacity(self.env.len());
        let mut secrets = Vec::new();
        for (name, source) in &self.env {
            let value = match source {
                EnvSource::Value(value) => value.clone(),
                EnvSource::File(path) => {
                    let value = read_secret(path).map_err(|why| {
                        EngineError::precondition(
                            Reason::AgentProfileSecretUnreadable,
                            format!("agent profile `{}`: the secret file of {name} {why}", self.name),
                        )
                        .with("agent_profile", self.name.clone())
                        .with("variable", name.clone())
                    })?;
                    secrets.push((name.clone(), value.clone()));
                    value
                }
            };
            env.push((name.clone(), Secret::new(value)));
        }
        Ok(ResolvedProfile {
            profile: self.clone(),
            env,
            secrets,
        })
    }
}

fn read_secret(path: &Path) -> Result<String, &'static str> {
    let metadata = std::fs::metadata(path).map_err(|_| "cannot be read")?;
    if metadata.len() > MAX_SECRET_FILE_BYTES {
        return Err("is over 64 KiB");
    }
    let text = std::fs::read_to_string(path).map_err(|_| "cannot be read")?;
    let value = text.strip_suffix('\n').unwrap_or(&text);
    let value = value.strip_suffix('\r').unwrap_or(value);
    if value.is_empty() {
        return Err("is empty");
    }
    Ok(value.to_owned())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PROFILE_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
}

fn load(path: &Path) -> Result<Loaded, ProfilesFileError> {
    let error = |reason: String| ProfilesFileError {
        path: path.display().to_string(),
        reason,
    };
    let stamp = stamp(path);
    let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
    let file: ProfilesFile = serde_json::from_str(&text).map_err(|e| error(e.to_string()))?;
    let mut profiles = HashMap::new();
    for (name, raw) in file.profiles {
        let profile = check(&name, raw).map_err(|reason| error(format!("profile `{name}`: {reason}")))?;
        profiles.insert(name, Arc::new(profile));
    }
    Ok(Loaded { stamp, profiles })
}

fn check(name: &str, raw: RawProfile) -> Result<AgentProfile, String> {
    if name.is_empty() || name.len() > MAX_PROFILE_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(format!("a profile name has 1 to {MAX_PROFILE_NAME_BYTES} bytes"));
    }
    let command = AgentCommand::from_argv(&raw.argv).map_err(|_| "argv is empty".to_owned())?;
    if !command.program.is_absolute() {
        return Err("argv[0] must be an absolute path".into());
    }
    for variable in raw.env.keys().chain(&raw.credential_variables) {
        if !valid_name(variable) {
            return Err(format!("`{variable}` is not a variable name"));
        }
        if RESERVED_VARIABLES.contains(&variable.as_str()) {
            return Err(format!("{variable} is set by the launcher"));
        }
    }
    if let Some(EnvSource::File(path)) = raw
        .env
        .values()
        .find(|s| matches!(s, EnvSource::File(p) if !p.is_absolute()))
    {
        return Err(format!("secret file {} must be an absolute path", path.display()));
    }
    if raw.authenticate.as_ref().is_some_and(|a| a.method_id.is_empty()) {
        return Err("authenticate.method_id is empty".into());
    }
    let ask_modes = match raw.ask_mode {
        None => Vec::new(),
        Some(AskMode::One(mode)) => vec![mode],
        Some(AskMode::Many(modes)) => modes,
    };
    if ask_modes.iter().any(String::is_empty) {
        return Err("ask_mode names an empty mode".into());
    }
    Ok(AgentProfile {
        name: name.to_owned(),
        command,
        env: raw.env,
        credential_variables: raw.credential_variables,
        authenticate: raw.authenticate,
        ask_modes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("profiles.json");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_profile_names_its_argv_env_credential_variables_and_authentication() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("openai");
        std::fs::write(&secret, "sk-file-1\n").unwrap();
        let path = write(
            dir.path(),
            &serde_json::json!({"profiles": {"sdk": {
                "argv": ["/usr/bin/node", "/opt/x/agent.js", "--a b"],
                "env": {"LOG_LEVEL": {"value": "info"}, "OPENAI_API_KEY": {"file": secret}},
                "credential_variables": ["OPENAI_API_KEY"],
                "authenticate": {"method_id": "openai-api-key"},
                "ask_mode": "default"}}})
            .to_string(),
        );
        let profiles = AgentProfiles::from_file(&path).unwrap();
        let profile = profiles.get("sdk").unwrap();
        assert_eq!(profile.command.args, ["/opt/x/agent.js", "--a b"]);
        let resolved = profile.resolve().unwrap();
        let env: Vec<_> = resolved.env.iter().map(|(k, v)| (k.as_str(), v.expose())).collect();
        assert_eq!(env, [("LOG_LEVEL", "info"), ("OPENAI_API_KEY", "sk-file-1")]);
        assert_eq!(
            resolved.secrets,
            [("OPENAI_API_KEY".to_owned(), "sk-file-1".to_owned())]
        );
        assert!(!format!("{resolved:?}").contains("sk-file-1"));
    }

    #[test]
    fn an_unknown_profile_is_a_precondition_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), r#"{"profiles": {}}"#);
        let error = AgentProfiles::from_file(&path).unwrap().get("nope").unwrap_err();
        assert_eq!(error.reason, Reason::AgentProfileUnknown);
        assert!(error.metadata.contains(&("agent_profile".into(), "nope".into())));
    }

    #[test]
    fn a_missing_secret_file_is_refused_naming_the_profile_and_variable() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            r#"{"profiles": {"p": {"argv": ["/bin/x"], "env": {"KEY": {"file": "/nonexistent/key"}}}}}"#,
        );
        let error = AgentProfiles::from_file(&path)
            .unwrap()
            .get("p")
            .unwrap()
            .resolve()
            .unwrap_err();
        assert_eq!(error.reason, Reason::AgentProfileSecretUnreadable);
        assert!(error.metadata.contains(&("variable".into(), "KEY".into())));
        assert!(error.message.contains("`p`"), "{}", error.message);
    }

    #[test]
    fn a_changed_file_is_re_read_and_a_broken_one_keeps_the_last_good_profiles() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), r#"{"profiles": {"a": {"argv": ["/bin/a"]}}}"#);
        let profiles = AgentProfiles::from_file(&path).unwrap();
        assert!(profiles.get("a").is_ok());
        // A different size is a change even within the same mtime tick.
        std::fs::write(&path, r#"{"profiles": {"bb": {"argv": ["/bin/b"]}}}"#).unwrap();
        assert!(profiles.get("bb").is_ok());
        assert_eq!(profiles.get("a").unwrap_err().reason, Reason::AgentProfileUnknown);
        std::fs::write(&path, "{not json").unwrap();
        assert!(profiles.get("bb").is_ok());
    }

    #[test]
    fn unusable_profiles_are_refused_at_load() {
        let cases = [
            r#"{"profiles": {"p": {"argv": []}}}"#,
            r#"{"profiles": {"p": {"argv": ["relative"]}}}"#,
            r#"{"profiles": {"p": {"argv": ["/bin/x"], "env": {"PATH": {"value": "/x"}}}}}"#,
            r#"{"profiles": {"p": {"argv": ["/bin/x"], "env": {"A B": {"value": "x"}}}}}"#,
            r#"{"profiles": {"p": {"argv": ["/bin/x"], "env": {"K": {"file": "rel"}}}}}"#,
            r#"{"profiles": {"p": {"argv": ["/bin/x"], "unknown": 1}}}"#,
            r#"{"profiles": {"p": {"argv": ["/bin/x"], "authenticate": {"method_id": ""}}}}"#,
        ];
        let dir = tempfile::tempdir().unwrap();
        for case in cases {
            let path = write(dir.path(), case);
            assert!(AgentProfiles::from_file(&path).is_err(), "{case}");
        }
    }
}
