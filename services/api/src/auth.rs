//! Bearer-token authentication: a tokens file maps token digests to tenants. The
//! caller's tenant comes from its token, never from request metadata; the file is
//! re-read when it changes, so tokens rotate without a restart.
//!
//! File format (JSON): `{"tokens": [{"tenant_id": "acme", "sha256": "<hex of sha256(token)>", "role": "tenant"}]}`
//! — only digests are stored. `role` is `tenant` (default) or `admin`. An entry may name
//! a client certificate instead of a token: `"client_cert_sha256": "<hex of sha256(DER)>"`
//! (`openssl x509 -in client.pem -outform der | sha256sum`); a connection whose TLS
//! handshake verified that certificate against `--tls-client-ca` is that caller.
//!
//! [`AuthLayer`] applies it in front of every service: health stays open for probes,
//! `AdminService` needs the `admin` role, and everything else (the runner service and
//! reflection) needs a valid token or certificate.

use parking_lot::Mutex;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use cursor_runner_executions::{EngineError, ErrorKind, Reason};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tonic::Status;

use crate::status::to_status;

/// Largest tokens file read.
pub const MAX_TOKENS_FILE_BYTES: u64 = 1024 * 1024;
/// Longest tenant id accepted.
pub const MAX_TENANT_ID_CHARS: usize = 128;
/// Metadata naming the tenant a forwarded call is for, its UTF-8 bytes in hex, so the
/// owner acts for exactly the tenant the forwarding replica authenticated (trusted only
/// with the fleet token).
pub const FORWARDED_TENANT_METADATA: &str = "x-cursor-runner-tenant-hex";
/// Metadata naming the replica a forwarded call is for: a replica that is not it (one that
/// took over the owner's address) turns the call away as the owner's unreachability.
pub const FORWARDED_OWNER_METADATA: &str = "x-cursor-runner-owner";
/// Shortest fleet token accepted: 32 characters (e.g. `openssl rand -hex 16`).
pub const MIN_FLEET_TOKEN_CHARS: usize = 32;
/// Most tokens a fleet token file holds (one per line: the first is sent, each is
/// accepted, so a token is rotated without a window in which replicas refuse each other).
pub const MAX_FLEET_TOKENS: usize = 4;
/// Largest fleet token file read.
pub const MAX_FLEET_TOKEN_FILE_BYTES: u64 = 4096;

/// What is wrong with a tenant id, if anything: it has 1 to [`MAX_TENANT_ID_CHARS`]
/// characters, no surrounding whitespace and no control characters (one rule for tokens
/// files and forwarded calls, so a tenant keeps its exact name across a hop).
pub fn tenant_id_problem(tenant_id: &str) -> Option<&'static str> {
    if tenant_id.is_empty() || tenant_id.chars().count() > MAX_TENANT_ID_CHARS {
        Some("a tenant id has 1 to 128 characters")
    } else if tenant_id.trim() != tenant_id {
        Some("a tenant id has no surrounding whitespace")
    } else if tenant_id.chars().any(char::is_control) {
        Some("a tenant id has no control characters")
    } else {
        None
    }
}

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
#[serde(deny_unknown_fields)]
struct Entry {
    tenant_id: String,
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    client_cert_sha256: Option<String>,
    #[serde(default)]
    role: Role,
}

/// What an entry recognizes its caller by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential {
    Token([u8; 32]),
    ClientCert([u8; 32]),
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
    entries: Vec<(Credential, Caller)>,
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

    /// The caller a `authorization: Bearer <token>` value names, else the one whose
    /// client certificate the connection's TLS handshake verified.
    pub fn authenticate(&self, header: Option<&str>, client_cert_sha256: Option<&[u8; 32]>) -> Result<Caller, Status> {
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
            .filter(|t| !t.is_empty());
        let presented = match (token, client_cert_sha256) {
            (Some(token), _) => Credential::Token(Sha256::digest(token.as_bytes()).into()),
            (None, Some(cert)) => Credential::ClientCert(*cert),
            (None, None) => return Err(refuse("a bearer token or a client certificate is required")),
        };
        let mut loaded = self.loaded.lock();
        self.reload_if_changed(&mut loaded);
        // Compare against every entry without stopping early: timing says nothing.
        let mut found = None;
        for (known, caller) in &loaded.entries {
            let same = match (known, &presented) {
                (Credential::Token(a), Credential::Token(b))
                | (Credential::ClientCert(a), Credential::ClientCert(b)) => constant_time_eq(a, b),
                _ => false,
            };
            if same {
                found = Some(caller.clone());
            }
        }
        found.ok_or_else(|| match presented {
            Credential::Token(_) => refuse("the bearer token is not valid"),
            Credential::ClientCert(_) => refuse("the client certificate names no caller"),
        })
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
    let digest = |hex_text: &str| -> Result<[u8; 32], TokensFileError> {
        let bytes = hex::decode(hex_text.trim()).map_err(|e| error(format!("a digest is not hex: {e}")))?;
        bytes.try_into().map_err(|_| error("a digest is not 32 bytes".into()))
    };
    for entry in file.tokens {
        let credential = match (&entry.sha256, &entry.client_cert_sha256) {
            (Some(token), None) => Credential::Token(digest(token)?),
            (None, Some(cert)) => Credential::ClientCert(digest(cert)?),
            _ => {
                return Err(error(
                    "each entry names exactly one of sha256 and client_cert_sha256".into(),
                ));
            }
        };
        if let Some(problem) = tenant_id_problem(&entry.tenant_id) {
            return Err(error(format!("an entry's tenant_id is unusable: {problem}")));
        }
        entries.push((
            credential,
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

/// The secret every replica of a fleet shares (`--fleet-token-file`): the token this replica
/// sends, and every token it accepts (the file's lines, the sent one first).
pub struct FleetToken {
    value: tonic::metadata::AsciiMetadataValue,
    accepted: Vec<[u8; 32]>,
}

impl std::fmt::Debug for FleetToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetToken(<redacted>)")
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the fleet token file {path} is unusable: {reason}")]
pub struct FleetTokenError {
    path: String,
    reason: String,
}

impl FleetToken {
    /// The tokens in `path`, one per line (blank lines and surrounding whitespace
    /// ignored), at most [`MAX_FLEET_TOKENS`], each at least [`MIN_FLEET_TOKEN_CHARS`]
    /// visible ASCII characters: the first is sent, each is accepted.
    pub fn from_file(path: &Path) -> Result<Self, FleetTokenError> {
        let error = |reason: String| FleetTokenError {
            path: path.display().to_string(),
            reason,
        };
        let metadata = std::fs::metadata(path).map_err(|e| error(e.to_string()))?;
        if metadata.len() > MAX_FLEET_TOKEN_FILE_BYTES {
            return Err(error(format!("larger than {MAX_FLEET_TOKEN_FILE_BYTES} bytes")));
        }
        let text = std::fs::read_to_string(path).map_err(|_| error("it is not UTF-8 text".into()))?;
        Self::new(text.lines().map(str::trim).filter(|line| !line.is_empty())).map_err(error)
    }

    fn new<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let tokens: Vec<&str> = tokens.into_iter().collect();
        let Some(sent) = tokens.first() else {
            return Err("it holds no token".into());
        };
        if tokens.len() > MAX_FLEET_TOKENS {
            return Err(format!("it holds more than {MAX_FLEET_TOKENS} tokens"));
        }
        for token in &tokens {
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err("a token must be visible ASCII characters only".into());
            }
            if token.len() < MIN_FLEET_TOKEN_CHARS {
                return Err(format!("a token has fewer than {MIN_FLEET_TOKEN_CHARS} characters"));
            }
        }
        let value = format!("Bearer {sent}")
            .parse()
            .map_err(|_| "the token is not a valid header value".to_owned())?;
        Ok(Self {
            value,
            accepted: tokens.iter().map(|t| Sha256::digest(t.as_bytes()).into()).collect(),
        })
    }

    /// The `authorization` value a forwarded call presents it in.
    pub(crate) fn authorization(&self) -> tonic::metadata::AsciiMetadataValue {
        self.value.clone()
    }

    /// Whether an `authorization` header value presents one of the accepted tokens
    /// (compared in constant time, by digest, against each).
    pub(crate) fn presented_in(&self, header: Option<&str>) -> bool {
        let Some(token) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        let presented: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        self.accepted
            .iter()
            .fold(false, |found, accepted| found | constant_time_eq(&presented, accepted))
    }
}

/// Path prefixes of the services, as the layer routes them.
const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";
const ADMIN_PREFIX: &str = "/cursor_runner.v1.AdminService/";

/// Who a listener lets in.
#[derive(Clone)]
enum Gate {
    /// The public listener: callers by token or certificate; `None`: everyone, naming
    /// their tenant in `x-tenant-id`.
    Callers(Option<Arc<TokenAuth>>),
    /// The internal listener of the replica named `me`: replicas presenting the fleet
    /// token, each call naming the tenant it forwards for and the replica it is for.
    Fleet { token: Arc<FleetToken>, me: Arc<str> },
}

/// Authentication in front of every service (a tower layer on the HTTP requests, so
/// nothing served can skip it). Without a tokens file every call passes and runner
/// calls name their tenant in `x-tenant-id` (development, loopback only).
#[derive(Clone)]
pub struct AuthLayer {
    gate: Gate,
}

impl AuthLayer {
    pub fn new(auth: Option<Arc<TokenAuth>>) -> Self {
        Self {
            gate: Gate::Callers(auth),
        }
    }

    /// The internal listener's, on the replica named `me`: only replicas of the fleet,
    /// forwarding calls for `me`.
    pub fn fleet(token: Arc<FleetToken>, me: &str) -> Self {
        Self {
            gate: Gate::Fleet { token, me: me.into() },
        }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            gate: self.gate.clone(),
        }
    }
}

#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    gate: Gate,
}

/// Decides one request: `Ok` with the caller recorded in its extensions, or the refusal.
fn admit<B>(auth: Option<&TokenAuth>, request: &mut http::Request<B>) -> Result<(), Status> {
    let path = request.uri().path();
    let Some(auth) = auth else { return Ok(()) };
    if path.starts_with(HEALTH_PREFIX) {
        return Ok(());
    }
    let admin_call = path.starts_with(ADMIN_PREFIX);
    let header = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let certificate = request
        .extensions()
        .get::<crate::tls::ConnectionInfo>()
        .and_then(|info| info.client_cert_sha256);
    let caller = auth.authenticate(header, certificate.as_ref())?;
    if admin_call {
        require_admin(&caller)?;
    }
    request.extensions_mut().insert(caller);
    Ok(())
}

/// Decides one forwarded call: the fleet token, the replica it is for (this one, `me`),
/// and the tenant it is forwarded for.
fn admit_forwarded<B>(token: &FleetToken, me: &str, request: &mut http::Request<B>) -> Result<(), Status> {
    let headers = request.headers();
    let header = |name| headers.get(name).and_then(|v: &http::HeaderValue| v.to_str().ok());
    if !token.presented_in(header(http::header::AUTHORIZATION.as_str())) {
        return Err(to_status(EngineError::new(
            ErrorKind::Unauthenticated,
            Reason::Unauthenticated,
            "the internal listener takes only calls forwarded by replicas with the fleet token",
        )));
    }
    let owner = header(FORWARDED_OWNER_METADATA).unwrap_or_default();
    if owner != me {
        return Err(to_status(
            EngineError::new(
                ErrorKind::Unavailable,
                Reason::OwnerUnreachable,
                format!("the call was forwarded to replica `{owner}`, but its address now leads to replica `{me}`"),
            )
            .with("owner_replica", owner)
            .retry_after(cursor_runner_executions::error::OWNER_UNREACHABLE_RETRY_AFTER),
        ));
    }
    let tenant = header(FORWARDED_TENANT_METADATA)
        .and_then(|hex_text| hex::decode(hex_text).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|tenant| tenant_id_problem(tenant).is_none())
        .ok_or_else(|| {
            to_status(EngineError::invalid(
                Reason::TenantRequired,
                format!("a forwarded call names its tenant's UTF-8 bytes in hex in {FORWARDED_TENANT_METADATA}"),
            ))
        })?;
    request.extensions_mut().insert(Caller {
        tenant_id: tenant,
        role: Role::Tenant,
    });
    Ok(())
}

/// Request body read (and dropped) before a refusal is sent. A client still writing its
/// request when the connection closes sees a broken pipe instead of the refusal (Node's
/// gRPC-Web over HTTP/1.1 does), so a small body is consumed first; a larger one is not
/// worth reading for a caller who is not let in.
pub const MAX_REFUSED_BODY_BYTES: usize = 64 * 1024;

impl<S, B> tower::Service<http::Request<B>> for AuthService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>> + Send,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let admitted = match &self.gate {
            Gate::Callers(auth) => admit(auth.as_deref(), &mut request),
            Gate::Fleet { token, me } => admit_forwarded(token, me, &mut request),
        };
        match admitted {
            Ok(()) => Box::pin(self.inner.call(request)),
            Err(refusal) => Box::pin(async move {
                use http_body_util::BodyExt;
                let _ = http_body_util::Limited::new(request.into_body(), MAX_REFUSED_BODY_BYTES)
                    .collect()
                    .await;
                Ok(refusal.into_http())
            }),
        }
    }
}

pub(crate) fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// With authentication on, an admin call needs an admin token: a tenant's valid
/// token is `PERMISSION_DENIED` (it is authenticated, just not allowed).
pub(crate) fn require_admin(caller: &Caller) -> Result<(), Status> {
    if caller.role == Role::Admin {
        Ok(())
    } else {
        Err(to_status(EngineError::new(
            cursor_runner_executions::ErrorKind::PermissionDenied,
            Reason::PermissionDenied,
            "this call needs an admin token",
        )))
    }
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
        assert_eq!(
            auth.authenticate(Some("Bearer tok-b"), None).unwrap().tenant_id,
            "globex"
        );
        for header in [
            None,
            Some("Bearer "),
            Some("tok-a"),
            Some("Bearer tok-c"),
            Some("Basic tok-a"),
        ] {
            assert_eq!(
                auth.authenticate(header, None).unwrap_err().code(),
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

    #[test]
    fn a_fleet_token_needs_at_least_its_minimum_of_visible_ascii_characters() {
        let shortest = "t".repeat(MIN_FLEET_TOKEN_CHARS);
        assert!(FleetToken::new([shortest.as_str()]).is_ok());
        assert!(FleetToken::new([&shortest[1..]]).is_err());
        assert!(
            FleetToken::new([format!("{} x", &shortest).as_str()]).is_err(),
            "a space"
        );
        assert!(FleetToken::new([format!("{shortest}é").as_str()]).is_err(), "non-ASCII");
        assert!(FleetToken::new([]).is_err(), "none");
    }

    #[test]
    fn a_fleet_token_file_sends_its_first_token_and_accepts_each_up_to_its_bound() {
        let tokens: Vec<String> = (0..=MAX_FLEET_TOKENS)
            .map(|i| format!("{i}").repeat(MIN_FLEET_TOKEN_CHARS))
            .collect();
        let bearer = |token: &str| format!("Bearer {token}");
        let rotating = FleetToken::new(tokens[..2].iter().map(String::as_str)).unwrap();
        assert_eq!(rotating.authorization(), bearer(&tokens[0]).as_str());
        assert!(rotating.presented_in(Some(&bearer(&tokens[0]))));
        assert!(rotating.presented_in(Some(&bearer(&tokens[1]))));
        assert!(!rotating.presented_in(Some(&bearer(&tokens[2]))));
        assert!(FleetToken::new(tokens[..MAX_FLEET_TOKENS].iter().map(String::as_str)).is_ok());
        assert!(FleetToken::new(tokens.iter().map(String::as_str)).is_err());
    }

    #[test]
    fn a_tenant_id_has_one_rule_for_tokens_files_and_forwarded_calls() {
        let longest = "t".repeat(MAX_TENANT_ID_CHARS);
        for good in ["acme", "acmé-ü", longest.as_str(), "a b"] {
            assert_eq!(tenant_id_problem(good), None, "{good:?}");
        }
        for bad in ["", " acme", "acme ", "ac\nme", &format!("{longest}t")] {
            assert!(tenant_id_problem(bad).is_some(), "{bad:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(TokenAuth::from_file(file(dir.path(), &[(" padded ", "tok-a")])).is_err());
    }

    #[test]
    fn a_fleet_token_file_is_read_trimmed_and_refused_past_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet-token");
        let token = "f".repeat(MIN_FLEET_TOKEN_CHARS);
        std::fs::write(&path, format!("{token}\n")).unwrap();
        let loaded = FleetToken::from_file(&path).unwrap();
        assert!(loaded.presented_in(Some(&format!("Bearer {token}"))));
        assert!(!loaded.presented_in(Some(&format!("Bearer {token}x"))));
        assert!(!loaded.presented_in(Some(&token)), "not a bearer value");
        assert!(!loaded.presented_in(None));
        assert!(!format!("{loaded:?}").contains(&token), "Debug never shows it");
        let bound = usize::try_from(MAX_FLEET_TOKEN_FILE_BYTES).unwrap();
        std::fs::write(&path, "f".repeat(bound)).unwrap();
        assert!(FleetToken::from_file(&path).is_ok());
        std::fs::write(&path, "f".repeat(bound + 1)).unwrap();
        let refused = FleetToken::from_file(&path).unwrap_err().to_string();
        assert!(refused.contains("larger than"), "{refused}");
    }
}
