//! What a warm slot is for: a pool profile is (distribution, tenant, credential
//! fingerprint). A slot launched for one profile never serves another, because the
//! credential entered its environment at launch.

use cursor_runner_domain::placement::WarmKey;
use cursor_runner_supervisor::{BoundCredential, CredentialName};

use crate::config::LaunchAs;
use sha2::{Digest, Sha256};

/// Hex characters of a credential fingerprint shown in `GetPoolStatus`.
pub const FINGERPRINT_DISPLAY_CHARS: usize = 16;

/// The identity of a profile. Holds a keyed digest of the secret, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProfileKey {
    pub distribution: String,
    pub tenant_id: String,
    pub credential: Option<CredentialFingerprint>,
    /// The operator's agent profile: its name and a keyed digest of its definition and
    /// values as read at admission, so a changed profile (or a rotated secret file)
    /// never reuses a process launched under the old one.
    pub agent: Option<AgentFingerprint>,
}

/// An agent profile's name and keyed digest (never a value).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentFingerprint {
    pub name: String,
    digest: [u8; 32],
}

/// A credential's name and a digest of its secret under this service's random key:
/// equal secrets have equal fingerprints within one service lifetime, and the digest
/// cannot be tested against guesses by anyone without the key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CredentialFingerprint {
    pub name: CredentialName,
    digest: [u8; 32],
}

impl CredentialFingerprint {
    pub fn display(&self) -> String {
        hex::encode(self.digest)[..FINGERPRINT_DISPLAY_CHARS].to_owned()
    }
}

impl std::fmt::Debug for CredentialFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.name.as_str(), self.display())
    }
}

/// Fingerprints credentials with a key that lives only in this process's memory.
pub struct Fingerprinter {
    key: [u8; 32],
}

impl Fingerprinter {
    /// A fresh random key (two v4 UUIDs: 244 random bits).
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self { key }
    }

    pub fn fingerprint(&self, credential: &BoundCredential) -> CredentialFingerprint {
        let mut hasher = Sha256::new();
        hasher.update(self.key);
        hasher.update(credential.name.as_str().as_bytes());
        hasher.update([0u8]);
        hasher.update(credential.secret.expose().as_bytes());
        CredentialFingerprint {
            name: credential.name.clone(),
            digest: hasher.finalize().into(),
        }
    }

    pub fn key(&self, distribution: &str, tenant_id: &str, launch_as: &LaunchAs) -> ProfileKey {
        ProfileKey {
            distribution: distribution.to_owned(),
            tenant_id: tenant_id.to_owned(),
            credential: launch_as.credential.as_ref().map(|c| self.fingerprint(c)),
            agent: launch_as.agent.as_ref().map(|agent| {
                let mut hasher = Sha256::new();
                hasher.update(self.key);
                hasher.update(agent.profile.name.as_bytes());
                hasher.update([0u8]);
                hasher.update(agent.identity_bytes());
                AgentFingerprint {
                    name: agent.profile.name.clone(),
                    digest: hasher.finalize().into(),
                }
            }),
        }
    }
}

impl ProfileKey {
    /// The fleet-wide key placement compares (the tenant and the names of the agent profile
    /// and credential; never the secret's digest, which only this process can compute).
    pub fn warm_key(&self) -> WarmKey {
        WarmKey::of(
            &self.tenant_id,
            self.agent.as_ref().map(|agent| agent.name.as_str()),
            self.credential.as_ref().map(|credential| credential.name.as_str()),
        )
    }

    /// A short stable id for status and logs (no secret material beyond the keyed
    /// fingerprint).
    pub fn id(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.distribution.as_bytes());
        hasher.update([0u8]);
        hasher.update(self.tenant_id.as_bytes());
        hasher.update([0u8]);
        if let Some(credential) = &self.credential {
            hasher.update(credential.name.as_str().as_bytes());
            hasher.update(credential.digest);
        }
        if let Some(agent) = &self.agent {
            hasher.update([1u8]);
            hasher.update(agent.name.as_bytes());
            hasher.update(agent.digest);
        }
        format!("profile-{}", &hex::encode(hasher.finalize())[..12])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cursor_runner_supervisor::Secret;

    fn with(credential: Option<&BoundCredential>) -> LaunchAs {
        LaunchAs {
            credential: credential.cloned(),
            agent: None,
        }
    }

    fn agent(argv0: &str, value: &str) -> LaunchAs {
        let file =
            format!(r#"{{"profiles": {{"sdk": {{"argv": ["{argv0}"], "env": {{"K": {{"value": "{value}"}}}}}}}}}}"#);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        std::fs::write(&path, file).unwrap();
        let profiles = crate::agent_profile::AgentProfiles::from_file(&path).unwrap();
        LaunchAs {
            credential: None,
            agent: Some(std::sync::Arc::new(profiles.get("sdk").unwrap().resolve().unwrap())),
        }
    }

    #[test]
    fn an_agent_profile_is_part_of_the_key_with_its_definition_and_values() {
        let f = Fingerprinter::random();
        let base = f.key("unpinned", "acme", &agent("/bin/a", "1"));
        assert_eq!(base, f.key("unpinned", "acme", &agent("/bin/a", "1")));
        for other in [
            f.key("unpinned", "acme", &LaunchAs::default()),
            f.key("unpinned", "acme", &agent("/bin/b", "1")),
            f.key("unpinned", "acme", &agent("/bin/a", "2")),
        ] {
            assert_ne!(base, other);
            assert_ne!(base.id(), other.id());
        }
        assert!(!format!("{base:?}").contains("\"1\""));
    }

    fn credential(name: CredentialName, secret: &str) -> BoundCredential {
        BoundCredential {
            name,
            secret: Secret::new(secret),
        }
    }

    #[test]
    fn the_same_credential_names_the_same_profile_and_any_difference_another() {
        let f = Fingerprinter::random();
        let a = credential(CredentialName::CursorApiKey, "key-a");
        let base = f.key("sha256:d", "acme", &with(Some(&a)));
        assert_eq!(base, f.key("sha256:d", "acme", &with(Some(&a.clone()))));
        let others = [
            f.key(
                "sha256:d",
                "acme",
                &with(Some(&credential(CredentialName::CursorApiKey, "key-b"))),
            ),
            f.key(
                "sha256:d",
                "acme",
                &with(Some(&credential(CredentialName::CursorAuthToken, "key-a"))),
            ),
            f.key("sha256:d", "globex", &with(Some(&a))),
            f.key("sha256:e", "acme", &with(Some(&a))),
            f.key("sha256:d", "acme", &LaunchAs::default()),
        ];
        for other in others {
            assert_ne!(base, other);
            assert_ne!(base.id(), other.id());
        }
    }

    #[test]
    fn neither_the_fingerprint_nor_the_id_shows_the_secret() {
        let f = Fingerprinter::random();
        let secret = "sk-live-0123456789abcdef";
        let key = f.key(
            "unpinned",
            "acme",
            &with(Some(&credential(CredentialName::CursorApiKey, secret))),
        );
        let shown = format!("{key:?} {}", key.id());
        assert!(!shown.contains(secret), "{shown}");
        assert_eq!(key.credential.unwrap().display().len(), FINGERPRINT_DISPLAY_CHARS);
    }

    #[test]
    fn fingerprints_depend_on_the_services_key() {
        let c = credential(CredentialName::CursorApiKey, "key-a");
        assert_ne!(
            Fingerprinter::random().fingerprint(&c),
            Fingerprinter::random().fingerprint(&c)
        );
    }
}
