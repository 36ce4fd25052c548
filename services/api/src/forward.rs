//! Calls for an execution another replica owns, forwarded one hop to that replica's
//! internal listener (`docs/scale-out.md` §4). The owner's own handler answers, so every
//! status, `ErrorInfo` and body is a local call's; this side only carries the call there
//! and back. The fleet token proves to the owner that the caller is a replica, which
//! vouches for the tenant it names.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cursor_runner_executions::{EngineError, ErrorKind, Metrics, Reason};
use opentelemetry::propagation::Injector;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use tonic_types::StatusExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::pb::runner_service_client::RunnerServiceClient;
use crate::status::{ERROR_DOMAIN, to_status};

/// Metadata naming the tenant a forwarded call is for (trusted only with the fleet token).
pub const FORWARDED_TENANT_METADATA: &str = "x-cursor-runner-tenant";
/// Shortest fleet token accepted: 32 characters (e.g. `openssl rand -hex 16`).
pub const MIN_FLEET_TOKEN_CHARS: usize = 32;
/// Largest fleet token file read.
pub const MAX_FLEET_TOKEN_FILE_BYTES: u64 = 4096;
/// How long opening a connection to an owner may take.
pub const FORWARD_CONNECT_LIMIT: Duration = Duration::from_secs(2);
/// While a forwarded call is open, the owner is pinged this often (HTTP/2 PING)…
pub const FORWARD_PING_EVERY: Duration = Duration::from_secs(2);
/// …and an owner that answers no ping within this is given up on (`OWNER_UNREACHABLE`):
/// a frozen owner keeps its TCP connection open, so only its silence tells.
pub const FORWARD_PING_LIMIT: Duration = Duration::from_secs(3);
/// How long a forwarded call may run when its caller set no deadline (longer than any
/// call's own bounds, e.g. a close's stop ladder).
pub const FORWARD_WAIT_LIMIT: Duration = Duration::from_secs(120);
/// Owners whose connections are kept; past it they are all dropped and reopened on use.
pub const MAX_FORWARD_TARGETS: usize = 64;
/// Trace context carried to the owner, so its span is a child of this replica's.
const TRACE_CONTEXT_KEYS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// The secret every replica of a fleet shares (`--fleet-token-file`).
pub struct FleetToken {
    value: MetadataValue<tonic::metadata::Ascii>,
    digest: [u8; 32],
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
    /// The token in `path`, surrounding whitespace ignored: at least
    /// [`MIN_FLEET_TOKEN_CHARS`] visible ASCII characters.
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
        Self::new(text.trim()).map_err(error)
    }

    fn new(token: &str) -> Result<Self, String> {
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the token must be visible ASCII characters only".into());
        }
        if token.len() < MIN_FLEET_TOKEN_CHARS {
            return Err(format!("the token has fewer than {MIN_FLEET_TOKEN_CHARS} characters"));
        }
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| "the token is not a valid header value".to_owned())?;
        Ok(Self {
            value,
            digest: Sha256::digest(token.as_bytes()).into(),
        })
    }

    /// Whether an `authorization` header value presents this token (compared in constant
    /// time, by digest).
    pub(crate) fn presented_in(&self, header: Option<&str>) -> bool {
        let Some(token) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        let presented: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        crate::auth::constant_time_eq(&presented, &self.digest)
    }
}

/// The owner a call goes to.
pub(crate) struct Owner {
    pub name: String,
    pub address: String,
}

/// Carries calls to their executions' owners, over one connection per owner.
pub struct Forwarder {
    token: Arc<FleetToken>,
    channels: Mutex<HashMap<String, Channel>>,
    metrics: Arc<Metrics>,
}

impl Forwarder {
    pub fn new(token: Arc<FleetToken>, metrics: Arc<Metrics>) -> Self {
        Self {
            token,
            channels: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    fn channel(&self, address: &str) -> Result<Channel, Status> {
        let mut channels = self.channels.lock();
        if let Some(channel) = channels.get(address) {
            return Ok(channel.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| to_status(EngineError::internal(format!("owner address `{address}`: {e}"))))?
            .connect_timeout(FORWARD_CONNECT_LIMIT)
            .http2_keep_alive_interval(FORWARD_PING_EVERY)
            .keep_alive_timeout(FORWARD_PING_LIMIT)
            .tcp_nodelay(true);
        if channels.len() >= MAX_FORWARD_TARGETS {
            channels.clear();
        }
        let channel = endpoint.connect_lazy();
        channels.insert(address.to_owned(), channel.clone());
        Ok(channel)
    }

    /// Sends `request` (already admitted here: authenticated, within bounds) for
    /// `tenant_id` to `owner` with `rpc`, and returns the owner's answer as it gave it. An
    /// owner that does not answer is `OWNER_UNREACHABLE`.
    pub(crate) async fn forward<T, R, F, Fut>(
        &self,
        owner: Owner,
        tenant_id: &str,
        request: Request<T>,
        rpc: F,
    ) -> Result<Response<R>, Status>
    where
        F: FnOnce(RunnerServiceClient<Channel>, Request<T>) -> Fut,
        Fut: Future<Output = Result<Response<R>, Status>>,
    {
        let unreachable = |detail: &str| {
            to_status(
                EngineError::new(
                    ErrorKind::Unavailable,
                    Reason::OwnerUnreachable,
                    format!(
                        "execution's owner, replica `{}`, did not answer the forwarded call: {detail}",
                        owner.name
                    ),
                )
                .with("owner_replica", owner.name.as_str())
                .retry_after(cursor_runner_executions::error::OWNER_UNREACHABLE_RETRY_AFTER),
            )
        };
        let client = RunnerServiceClient::new(self.channel(&owner.address)?);
        let deadline = caller_deadline(request.metadata()).unwrap_or(FORWARD_WAIT_LIMIT);
        let mut outgoing = Request::new(request.into_inner());
        outgoing.set_timeout(deadline);
        let metadata = outgoing.metadata_mut();
        metadata.insert("authorization", self.token.value.clone());
        let tenant = tenant_id
            .parse()
            .map_err(|_| to_status(EngineError::internal("the tenant id is not a header value")))?;
        metadata.insert(FORWARDED_TENANT_METADATA, tenant);
        let context = tracing::Span::current().context();
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&context, &mut TraceContext(metadata)));
        let answer = rpc(client, outgoing).await;
        self.metrics
            .call_forwarded(answer.as_ref().map_or_else(is_ours, |_| true));
        match answer {
            Ok(response) => Ok(Response::new(response.into_inner())),
            // The owner's own answer: what a local call gets, untouched.
            Err(status) if is_ours(&status) => Err(Status::with_details(
                status.code(),
                status.message(),
                status.details().to_vec().into(),
            )),
            Err(status) => {
                tracing::warn!(owner = %owner.name, code = ?status.code(), "a forwarded call got no answer from its owner");
                Err(unreachable(&format!("{:?}", status.code())))
            }
        }
    }
}

/// Whether a status is this service's own (its `ErrorInfo` names our domain), not the
/// transport's.
fn is_ours(status: &Status) -> bool {
    status
        .get_error_details()
        .error_info()
        .is_some_and(|info| info.domain == ERROR_DOMAIN)
}

/// The deadline the caller gave (`grpc-timeout`: up to 8 digits and a unit).
fn caller_deadline(metadata: &MetadataMap) -> Option<Duration> {
    let text = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.saturating_mul(3600)),
        "M" => Duration::from_secs(amount.saturating_mul(60)),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Writes trace context into a forwarded call's metadata.
struct TraceContext<'a>(&'a mut MetadataMap);

impl Injector for TraceContext<'_> {
    fn set(&mut self, key: &str, value: String) {
        if TRACE_CONTEXT_KEYS.contains(&key)
            && let (Ok(key), Ok(value)) = (
                tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
                MetadataValue::try_from(value),
            )
        {
            self.0.insert(key, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_token_needs_at_least_its_minimum_of_visible_ascii_characters() {
        let shortest = "t".repeat(MIN_FLEET_TOKEN_CHARS);
        assert!(FleetToken::new(&shortest).is_ok());
        assert!(FleetToken::new(&shortest[1..]).is_err());
        assert!(FleetToken::new(&format!("{} x", &shortest)).is_err(), "a space");
        assert!(FleetToken::new(&format!("{shortest}é")).is_err(), "non-ASCII");
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

    #[test]
    fn the_callers_deadline_is_read_from_grpc_timeout() {
        let read = |value: &str| {
            let mut metadata = MetadataMap::new();
            metadata.insert("grpc-timeout", value.parse().unwrap());
            caller_deadline(&metadata)
        };
        assert_eq!(read("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(read("2S"), Some(Duration::from_secs(2)));
        assert_eq!(read("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(read("99999999n"), Some(Duration::from_nanos(99_999_999)));
        for malformed in ["m", "123456789m", "12x", "-1S"] {
            assert_eq!(read(malformed), None, "{malformed}");
        }
        assert_eq!(caller_deadline(&MetadataMap::new()), None);
    }
}
