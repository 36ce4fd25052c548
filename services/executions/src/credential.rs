//! Credential admission: at most one credential, explicitly bound to the provider and
//! to the control-plane session the execution serves, reaches the agent. Everything
//! is checked before anything is launched.

use cursor_runner_activity::{MIN_REDACTED_SECRET_CHARS, Redactor};
pub use cursor_runner_supervisor::Secret;
use cursor_runner_supervisor::{BoundCredential, CredentialName};

use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::mcp::McpServer;
use cursor_runner_pool::agent_profile::{AgentProfile, ResolvedProfile};
use cursor_runner_pool::launch_secrets;

/// The only provider this service binds credentials for.
pub const PROVIDER: &str = "cursor";

/// A credential as the control plane presents it.
#[derive(Debug, Clone)]
pub struct CredentialBinding {
    pub provider: String,
    pub session_id: String,
    pub credential_name: String,
    pub secret: Secret,
    /// Unix milliseconds; a binding past it is stale.
    pub expires_at_ms: Option<i64>,
}

impl CredentialBinding {
    /// Admits the binding for an execution serving `control_session_id` at `now_ms`,
    /// under the operator's agent `profile` if it names one: its provider may then also
    /// be the profile's name, and its variable one of the profile's `credential_variables`
    /// (when the profile lists any, only those).
    pub fn admit(
        self,
        control_session_id: &str,
        now_ms: i64,
        profile: Option<&AgentProfile>,
    ) -> Result<BoundCredential, EngineError> {
        if self.provider != PROVIDER && profile.is_none_or(|p| p.name != self.provider) {
            return Err(EngineError::invalid(
                Reason::CredentialWrongProvider,
                format!(
                    "the credential is bound to provider `{}`, not `{PROVIDER}`",
                    self.provider
                ),
            ));
        }
        if self.session_id.is_empty() || self.session_id != control_session_id {
            return Err(EngineError::invalid(
                Reason::CredentialWrongSession,
                "the credential is not bound to this execution's control_session_id",
            ));
        }
        let listed = profile.map(|p| p.credential_variables.as_slice()).unwrap_or_default();
        let name = if listed.is_empty() {
            CredentialName::parse(&self.credential_name)
        } else {
            listed
                .contains(&self.credential_name)
                .then(|| CredentialName::parse(&self.credential_name))
                .map(|cursor| cursor.unwrap_or_else(|| CredentialName::Profile(self.credential_name.clone())))
        };
        let name = name.ok_or_else(|| {
            let allowed = if listed.is_empty() {
                "CURSOR_API_KEY or CURSOR_AUTH_TOKEN".to_owned()
            } else {
                listed.join(", ")
            };
            EngineError::invalid(
                Reason::CredentialUnbound,
                format!(
                    "`{}` is not a credential an agent may receive ({allowed})",
                    self.credential_name
                ),
            )
        })?;
        if self.secret.expose().is_empty() {
            return Err(EngineError::invalid(
                Reason::CredentialMissing,
                format!("the binding names {} but carries no secret", name.as_str()),
            ));
        }
        // A secret the agent cannot be given, or one the redactor would not search for,
        // is refused rather than handed over unprotected.
        let secret = self.secret.expose();
        if secret.contains('\0') {
            return Err(EngineError::invalid(
                Reason::CredentialMalformed,
                format!("the secret bound as {} holds a NUL byte", name.as_str()),
            ));
        }
        if secret.chars().count() < MIN_REDACTED_SECRET_CHARS {
            return Err(EngineError::invalid(
                Reason::CredentialMalformed,
                format!(
                    "the secret bound as {} is under {MIN_REDACTED_SECRET_CHARS} characters: too short to be kept out of the agent's output",
                    name.as_str()
                ),
            ));
        }
        if self.expires_at_ms.is_some_and(|expiry| expiry <= now_ms) {
            return Err(EngineError::precondition(
                Reason::CredentialStale,
                "the credential binding has expired",
            ));
        }
        Ok(BoundCredential {
            name,
            secret: self.secret,
        })
    }
}

/// What nothing derived from an agent's output may carry (events, errors, records, logs):
/// what its launch handed it (the bound credential, the agent profile's secret-file
/// values) and the values of its MCP servers' headers and environment.
pub(crate) fn redactor_for(
    credential: Option<&BoundCredential>,
    agent: Option<&ResolvedProfile>,
    mcp_servers: &[McpServer],
) -> Redactor {
    Redactor::new(launch_secrets(credential, agent).chain(mcp_servers.iter().flat_map(McpServer::secret_values)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding() -> CredentialBinding {
        CredentialBinding {
            provider: "cursor".into(),
            session_id: "run-1".into(),
            credential_name: "CURSOR_API_KEY".into(),
            secret: Secret::new("key-0123456789"),
            expires_at_ms: Some(2_000),
        }
    }

    #[test]
    fn admission_table() {
        type Edit = fn(&mut CredentialBinding);
        let cases: Vec<(&str, Edit, Option<Reason>)> = vec![
            ("valid", |_| {}, None),
            ("no expiry", |b| b.expires_at_ms = None, None),
            (
                "wrong provider",
                |b| b.provider = "claude".into(),
                Some(Reason::CredentialWrongProvider),
            ),
            (
                "wrong session",
                |b| b.session_id = "run-2".into(),
                Some(Reason::CredentialWrongSession),
            ),
            (
                "no session",
                |b| b.session_id.clear(),
                Some(Reason::CredentialWrongSession),
            ),
            (
                "unbound name",
                |b| b.credential_name = "OPENAI_API_KEY".into(),
                Some(Reason::CredentialUnbound),
            ),
            (
                "missing secret",
                |b| b.secret = Secret::new(""),
                Some(Reason::CredentialMissing),
            ),
            (
                "a NUL in the secret",
                |b| b.secret = Secret::new("key-0123\u{0}456789"),
                Some(Reason::CredentialMalformed),
            ),
            (
                "a secret one character under the redactor's bound",
                |b| b.secret = Secret::new("k".repeat(MIN_REDACTED_SECRET_CHARS - 1)),
                Some(Reason::CredentialMalformed),
            ),
            (
                "a secret at the redactor's bound",
                |b| b.secret = Secret::new("k".repeat(MIN_REDACTED_SECRET_CHARS)),
                None,
            ),
            (
                "expired",
                |b| b.expires_at_ms = Some(1_000),
                Some(Reason::CredentialStale),
            ),
            (
                "expiring now",
                |b| b.expires_at_ms = Some(1_500),
                Some(Reason::CredentialStale),
            ),
        ];
        for (what, edit, expected) in cases {
            let mut b = binding();
            edit(&mut b);
            let got = b.admit("run-1", 1_500, None);
            match expected {
                None => assert_eq!(got.unwrap().name, CredentialName::CursorApiKey, "{what}"),
                Some(reason) => assert_eq!(got.unwrap_err().reason, reason, "{what}"),
            }
        }
    }

    #[test]
    fn refusals_never_carry_the_secret() {
        let mut b = binding();
        b.provider = "other".into();
        let error = b.admit("run-1", 0, None).unwrap_err();
        assert!(!format!("{error:?} {error}").contains("key-1"));
    }

    fn profile(variables: &[&str]) -> AgentProfile {
        AgentProfile {
            name: "sdk".into(),
            command: cursor_runner_supervisor::AgentCommand::from_argv(&["/bin/agent".into()]).unwrap(),
            env: Default::default(),
            credential_variables: variables.iter().map(|v| (*v).to_owned()).collect(),
            authenticate: None,
            ask_modes: Vec::new(),
        }
    }

    #[test]
    fn a_profile_admits_its_own_credential_variables_and_only_those() {
        let listed = profile(&["OPENAI_API_KEY"]);
        let mut b = binding();
        b.provider = "sdk".into();
        b.credential_name = "OPENAI_API_KEY".into();
        let bound = b.clone().admit("run-1", 0, Some(&listed)).unwrap();
        assert_eq!(bound.name, CredentialName::Profile("OPENAI_API_KEY".into()));
        assert_eq!(
            b.clone().admit("run-1", 0, None).unwrap_err().reason,
            Reason::CredentialWrongProvider,
            "the profile's name is a provider only under that profile"
        );
        b.credential_name = "CURSOR_API_KEY".into();
        assert_eq!(
            b.admit("run-1", 0, Some(&listed)).unwrap_err().reason,
            Reason::CredentialUnbound,
            "a profile that lists variables admits only those"
        );
        let cursor_names = binding().admit("run-1", 0, Some(&profile(&[]))).unwrap();
        assert_eq!(cursor_names.name, CredentialName::CursorApiKey);
    }
}
