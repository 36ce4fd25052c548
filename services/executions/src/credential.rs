//! Credential admission: at most one credential, explicitly bound to the provider and
//! to the control-plane session the execution serves, reaches the agent. Everything
//! is checked before anything is launched.

use cursor_runner_activity::Redactor;
pub use cursor_runner_supervisor::Secret;
use cursor_runner_supervisor::{BoundCredential, CredentialName};

use crate::error::{EngineError, Reason};
use crate::mcp::McpServer;

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
    /// Admits the binding for an execution serving `control_session_id` at `now_ms`.
    pub fn admit(self, control_session_id: &str, now_ms: i64) -> Result<BoundCredential, EngineError> {
        if self.provider != PROVIDER {
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
        let name = CredentialName::parse(&self.credential_name).ok_or_else(|| {
            EngineError::invalid(
                Reason::CredentialUnbound,
                format!(
                    "`{}` is not a credential an agent may receive (CURSOR_API_KEY or CURSOR_AUTH_TOKEN)",
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
/// the bound credential and the values of its MCP servers' headers and environment.
pub(crate) fn redactor_for(credential: Option<&BoundCredential>, mcp_servers: &[McpServer]) -> Redactor {
    Redactor::new(
        credential
            .map(|c| (c.name.as_str().to_owned(), c.secret.expose().to_owned()))
            .into_iter()
            .chain(mcp_servers.iter().flat_map(McpServer::secret_values)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding() -> CredentialBinding {
        CredentialBinding {
            provider: "cursor".into(),
            session_id: "run-1".into(),
            credential_name: "CURSOR_API_KEY".into(),
            secret: Secret::new("key-1"),
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
            let got = b.admit("run-1", 1_500);
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
        let error = b.admit("run-1", 0).unwrap_err();
        assert!(!format!("{error:?} {error}").contains("key-1"));
    }
}
