//! Bearer-token authentication: a tokens file maps token digests to tenants. The
//! caller's tenant comes from its token, never from request metadata; the file is
//! re-read when it changes, so tokens rotate without a restart.
//!
//! File format (JSON): `{"tokens": [{"tenant_id": "acme", "sha256": "<hex of sha256(token)>", "role": "tenant"}]}`
//! — only digests are stored. `role` is `tenant` (default) or `admin`.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::SystemTime;

use cursor_runner_executions::{EngineError, ErrorKind, Reason};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tonic::Status;

use crate::status::to_status;

/// Largest tokens file read.
pub const MAX_TOKENS_FILE_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    #[default]
    Tenant,
    Admin,
}

/// Who is calling, as established by their token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant_id: String,
    pub role: Role,
}

#[derive(Debug, Clone, Deserialize)]
struct Entry {
    tenant_id: String,
    sha256: String,
    #[serde(default)]
    role: Role,
}

#[derive(Debug, Deserialize)]
struct TokensFile {
    tokens: Vec<Entry>,
}

/// What tells a changed tokens file: modification time, size and inode (a rename).
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(metadata: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    metadata.modified().ok().map(|m| (m, metadata.len(), metadata.ino()))
}

struct Loaded {
    stamp: Stamp,
    entries: Vec<([u8; 32], Caller)>,
}

/// Token authentication backed by a file.
pub struct TokenAuth {
    path: PathBuf,
    loaded: Mutex<Loaded>,
}

#[derive(Debug, thiserror::Error)]
#[error("the tokens file {path} is unusable: {reason}")]
pub struct TokensFileError {
    path: String,
    reason: String,
}

impl TokenAuth {
    pub fn from_file(path: impl Into<PathBuf>) -> Result<Self, TokensFileError> {
        let path = path.into();
        let loaded = load(&path)?;
        Ok(Self {
            path,
            loaded: Mutex::new(loaded),
        })
    }

    /// The caller a `authorization: Bearer <token>` value names.
    pub fn authenticate(&self, header: Option<&str>) -> Result<Caller, Status> {
        let refuse = |message: &str| {
            to_status(EngineError::new(
                ErrorKind::Unauthenticated,
                Reason::Unauthenticated,
                message,
            ))
        };
        let token = header
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| refuse("a bearer token is required"))?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        self.reload_if_changed(&mut loaded);
        // Compare against every entry without stopping early: timing says nothing.
        let mut found = None;
        for (known, caller) in &loaded.entries {
            if constant_time_eq(known, &digest) {
                found = Some(caller.clone());
            }
        }
        found.ok_or_else(|| refuse("the bearer token is not valid"))
    }

    fn reload_if_changed(&self, loaded: &mut Loaded) {
        let current = std::fs::metadata(&self.path).ok().and_then(|m| stamp(&m));
        if current != loaded.stamp {
            match load(&self.path) {
                Ok(fresh) => *loaded = fresh,
                // Keep serving with the last good tokens rather than locking everyone out.
                Err(e) => tracing::error!(error = %e, "reloading the tokens file failed; keeping the previous tokens"),
            }
        }
    }
}

fn load(path: &PathBuf) -> Result<Loaded, TokensFileError> {
    let error = |reason: String| TokensFileError {
        path: path.display().to_string(),
        reason,
    };
    let metadata = std::fs::metadata(path).map_err(|e| error(e.to_string()))?;
    if metadata.len() > MAX_TOKENS_FILE_BYTES {
        return Err(error(format!("larger than {MAX_TOKENS_FILE_BYTES} bytes")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
    let file: TokensFile = serde_json::from_str(&text).map_err(|e| error(e.to_string()))?;
    let mut entries = Vec::with_capacity(file.tokens.len());
    for entry in file.tokens {
        let bytes = hex::decode(entry.sha256.trim()).map_err(|e| error(format!("a sha256 is not hex: {e}")))?;
        let digest: [u8; 32] = bytes.try_into().map_err(|_| error("a sha256 is not 32 bytes".into()))?;
        if entry.tenant_id.trim().is_empty() {
            return Err(error("an entry has no tenant_id".into()));
        }
        entries.push((
            digest,
            Caller {
                tenant_id: entry.tenant_id,
                role: entry.role,
            },
        ));
    }
    Ok(Loaded {
        stamp: stamp(&metadata),
        entries,
    })
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &std::path::Path, tokens: &[(&str, &str)]) -> PathBuf {
        let entries: Vec<serde_json::Value> = tokens
            .iter()
            .map(|(tenant, token)| {
                serde_json::json!({"tenant_id": tenant, "sha256": hex::encode(Sha256::digest(token.as_bytes()))})
            })
            .collect();
        let path = dir.join("tokens.json");
        std::fs::write(&path, serde_json::json!({"tokens": entries}).to_string()).unwrap();
        path
    }

    #[test]
    fn a_token_names_its_tenant_and_anything_else_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let auth = TokenAuth::from_file(file(dir.path(), &[("acme", "tok-a"), ("globex", "tok-b")])).unwrap();
        assert_eq!(auth.authenticate(Some("Bearer tok-b")).unwrap().tenant_id, "globex");
        for header in [
            None,
            Some("Bearer "),
            Some("tok-a"),
            Some("Bearer tok-c"),
            Some("Basic tok-a"),
        ] {
            assert_eq!(
                auth.authenticate(header).unwrap_err().code(),
                tonic::Code::Unauthenticated,
                "{header:?}"
            );
        }
    }

    #[test]
    fn an_unusable_file_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        std::fs::write(&path, r#"{"tokens":[{"tenant_id":"a","sha256":"zz"}]}"#).unwrap();
        assert!(TokenAuth::from_file(&path).is_err());
        assert!(TokenAuth::from_file(dir.path().join("missing.json")).is_err());
    }
}
