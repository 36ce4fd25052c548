//! What a warm slot is for: a pool profile is (distribution, tenant, credential
//! fingerprint). A slot launched for one profile never serves another, because the
//! credential entered its environment at launch.

use cursor_runner_supervisor::{BoundCredential, CredentialName};
use sha2::{Digest, Sha256};

/// Hex characters of a credential fingerprint shown in `GetPoolStatus`.
pub const FINGERPRINT_DISPLAY_CHARS: usize = 16;

/// Where a profile came from, as the bounded label of its slots' metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileOrigin {
    /// A warm profile in the operator's configuration.
    Configured,
    /// Learned from a `CreateExecution` that presented its credential.
    Learned,
}

impl ProfileOrigin {
    pub const ALL: [Self; 2] = [Self::Configured, Self::Learned];

    pub fn of(configured: bool) -> Self {
        if configured { Self::Configured } else { Self::Learned }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::Learned => "learned",
        }
    }
}

/// The identity of a profile. Holds a keyed digest of the secret, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProfileKey {
    pub distribution: String,
    pub tenant_id: String,
    pub credential: Option<CredentialFingerprint>,
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
            name: credential.name,
            digest: hasher.finalize().into(),
        }
    }

    pub fn key(&self, distribution: &str, tenant_id: &str, credential: Option<&BoundCredential>) -> ProfileKey {
        ProfileKey {
            distribution: distribution.to_owned(),
            tenant_id: tenant_id.to_owned(),
            credential: credential.map(|c| self.fingerprint(c)),
        }
    }
}

impl ProfileKey {
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
        format!("profile-{}", &hex::encode(hasher.finalize())[..12])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cursor_runner_supervisor::Secret;

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
        let base = f.key("sha256:d", "acme", Some(&a));
        assert_eq!(base, f.key("sha256:d", "acme", Some(&a.clone())));
        let others = [
            f.key(
                "sha256:d",
                "acme",
                Some(&credential(CredentialName::CursorApiKey, "key-b")),
            ),
            f.key(
                "sha256:d",
                "acme",
                Some(&credential(CredentialName::CursorAuthToken, "key-a")),
            ),
            f.key("sha256:d", "globex", Some(&a)),
            f.key("sha256:e", "acme", Some(&a)),
            f.key("sha256:d", "acme", None),
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
            Some(&credential(CredentialName::CursorApiKey, secret)),
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
