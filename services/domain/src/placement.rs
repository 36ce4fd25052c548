//! What placement knows of warm slots across the fleet: each replica publishes the warm
//! keys of the profiles it holds an idle agent process for, and a `CreateExecution` it has
//! no room for goes first to a replica holding a warm slot of its key.
//!
//! A warm key is coarse on purpose. A pool profile's own identity includes a digest of
//! the credential's secret under a key that never leaves its process, so two replicas
//! cannot compare it; the warm key names only what a request names (tenant, agent profile,
//! credential name) and is a plain digest of those. Two profiles that differ only in the
//! secret share a warm key: the replica a call is placed on then launches a new process,
//! as it would have anyway.

use sha2::{Digest, Sha256};

/// Warm keys one replica publishes at most; a replica with idle slots of more profiles
/// publishes the first ones in key order (placement is a preference, never a promise).
pub const MAX_PUBLISHED_WARM_KEYS: usize = 64;

/// Hex characters of a warm key's digest (128 bits).
const WARM_KEY_HEX_CHARS: usize = 32;

/// The fleet-wide name of the profiles a `CreateExecution` may lease a warm process of:
/// `warm-` and 32 hex characters. No secret goes into it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WarmKey(String);

impl WarmKey {
    /// The warm key of the tenant's executions with the named agent profile and credential.
    pub fn of(tenant_id: &str, agent_profile: Option<&str>, credential_name: Option<&str>) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"cursor-runner warm key v1\0");
        for part in [Some(tenant_id), agent_profile, credential_name] {
            match part {
                Some(value) => {
                    hasher.update([1u8]);
                    hasher.update(value.as_bytes());
                    hasher.update([0u8]);
                }
                None => hasher.update([0u8]),
            }
        }
        let digest = hex::encode(hasher.finalize());
        Self(format!("warm-{}", &digest[..WARM_KEY_HEX_CHARS]))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for WarmKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The keys a replica publishes of the `warm` ones it holds: each once, in key order, at
/// most [`MAX_PUBLISHED_WARM_KEYS`].
pub fn published(warm: impl IntoIterator<Item = WarmKey>) -> Vec<WarmKey> {
    let mut keys: Vec<WarmKey> = warm.into_iter().collect();
    keys.sort();
    keys.dedup();
    keys.truncate(MAX_PUBLISHED_WARM_KEYS);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warm_key_is_the_same_on_every_replica_and_differs_with_each_part_it_names() {
        let key = WarmKey::of("acme", Some("reviewer"), Some("CURSOR_API_KEY"));
        assert_eq!(key, WarmKey::of("acme", Some("reviewer"), Some("CURSOR_API_KEY")));
        let others = [
            WarmKey::of("globex", Some("reviewer"), Some("CURSOR_API_KEY")),
            WarmKey::of("acme", None, Some("CURSOR_API_KEY")),
            WarmKey::of("acme", Some("reviewer"), None),
            WarmKey::of("acme", Some("reviewer"), Some("CURSOR_AUTH_TOKEN")),
            // Parts never run into each other.
            WarmKey::of("acme", Some("reviewerCURSOR_API_KEY"), None),
            WarmKey::of("acme", Some(""), Some("reviewer")),
        ];
        for other in &others {
            assert_ne!(&key, other);
        }
        assert!(key.as_str().starts_with("warm-"));
        assert_eq!(key.as_str().len(), "warm-".len() + WARM_KEY_HEX_CHARS);
        assert!(key.as_str()["warm-".len()..].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn a_replica_publishes_each_warm_key_once_in_key_order_up_to_the_bound() {
        let key = |i: usize| WarmKey::of(&format!("tenant-{i}"), None, None);
        let at_bound: Vec<WarmKey> = (0..MAX_PUBLISHED_WARM_KEYS).map(key).collect();
        let mut sorted = at_bound.clone();
        sorted.sort();
        let twice = at_bound.iter().chain(&at_bound).cloned();
        assert_eq!(published(twice), sorted, "every key, once");

        let past_bound: Vec<WarmKey> = (0..=MAX_PUBLISHED_WARM_KEYS).map(key).collect();
        let mut expected = past_bound.clone();
        expected.sort();
        expected.truncate(MAX_PUBLISHED_WARM_KEYS);
        assert_eq!(
            published(past_bound),
            expected,
            "one past the bound: the first in key order"
        );
        assert!(published([]).is_empty());
    }
}
