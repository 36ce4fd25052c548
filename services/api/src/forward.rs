//! Calls for an execution another replica owns, forwarded one hop to that replica's
//! internal listener (`docs/scale-out.md` §4). The owner's own handler answers, so every
//! status, `ErrorInfo` and body is a local call's; this side only carries the call there
//! and back. The fleet token proves to the owner that the caller is a replica, which
//! vouches for the tenant it names (`auth::FleetToken`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cursor_runner_executions::{EngineError, ErrorKind, Metrics, Reason};
use opentelemetry::propagation::Injector;
use parking_lot::Mutex;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Response, Status};
use tonic_types::StatusExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::auth::{FORWARDED_OWNER_METADATA, FORWARDED_TENANT_METADATA, FleetToken};
use crate::pb::runner_service_client::RunnerServiceClient;
use crate::status::{ERROR_DOMAIN, to_status};

/// How long opening a connection to an owner may take, resolving its name included.
pub const FORWARD_CONNECT_LIMIT: Duration = Duration::from_secs(2);
/// While a forwarded call is open, the owner is pinged this often (HTTP/2 PING)…
pub const FORWARD_PING_EVERY: Duration = Duration::from_secs(2);
/// …and an owner that answers no ping within this is given up on (`OWNER_UNREACHABLE`):
/// a frozen owner keeps its TCP connection open, so only its silence tells.
pub const FORWARD_PING_LIMIT: Duration = Duration::from_secs(3);
/// Owners whose connections are kept; past it they are all dropped and reopened on use.
pub const MAX_FORWARD_TARGETS: usize = 64;
/// Trace context carried to the owner, so its span is a child of this replica's.
const TRACE_CONTEXT_KEYS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// The owner a call goes to.
pub(crate) struct Owner {
    pub name: String,
    pub address: String,
}

/// Carries calls to their executions' owners, over one connection per owner.
pub struct Forwarder {
    token: Arc<FleetToken>,
    tls: Option<ForwardTls>,
    channels: Mutex<HashMap<String, Channel>>,
    metrics: Arc<Metrics>,
}

/// How a replica verifies the others' internal listeners when they serve TLS: the CA that
/// signed their certificates, and the name those certificates carry (the same for every
/// replica: owners are dialled by IP).
#[derive(Clone)]
pub struct ForwardTls {
    pub ca_pem: String,
    pub domain: String,
}

impl Forwarder {
    pub fn new(token: Arc<FleetToken>, tls: Option<ForwardTls>, metrics: Arc<Metrics>) -> Self {
        Self {
            token,
            tls,
            channels: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// The connection to the owner at `address`, opened lazily; a name is resolved first,
    /// within [`FORWARD_CONNECT_LIMIT`] (a resolver that does not answer must not hold the
    /// call), and again whenever a call to it failed.
    async fn channel(&self, address: &str) -> Result<Channel, String> {
        if let Some(channel) = self.channels.lock().get(address) {
            return Ok(channel.clone());
        }
        let resolved = tokio::time::timeout(FORWARD_CONNECT_LIMIT, tokio::net::lookup_host(address))
            .await
            .map_err(|_| format!("resolving `{address}` took longer than {FORWARD_CONNECT_LIMIT:?}"))?
            .map_err(|e| format!("resolving `{address}`: {e}"))?
            .next()
            .ok_or_else(|| format!("`{address}` resolves to no address"))?;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{resolved}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(FORWARD_CONNECT_LIMIT)
            .http2_keep_alive_interval(FORWARD_PING_EVERY)
            .keep_alive_timeout(FORWARD_PING_LIMIT)
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            let config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&tls.ca_pem))
                .domain_name(tls.domain.clone());
            endpoint = endpoint.tls_config(config).map_err(|e| e.to_string())?;
        }
        let channel = endpoint.connect_lazy();
        let mut channels = self.channels.lock();
        if channels.len() >= MAX_FORWARD_TARGETS {
            channels.clear();
        }
        channels.insert(address.to_owned(), channel.clone());
        Ok(channel)
    }

    /// Sends `request` (already admitted here: authenticated, within bounds) for
    /// `tenant_id` to `owner` with `rpc`, and returns the owner's answer as it gave it. An
    /// owner that does not answer is `OWNER_UNREACHABLE`. `spent`: how much of the caller's
    /// deadline has gone already.
    pub(crate) async fn forward<T, R, F, Fut>(
        &self,
        owner: Owner,
        tenant_id: &str,
        request: Request<T>,
        spent: Duration,
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
        let channel = match self.channel(&owner.address).await {
            Ok(channel) => channel,
            Err(detail) => {
                self.metrics.call_forwarded(false);
                tracing::warn!(owner = %owner.name, %detail, "a call could not be forwarded to its owner");
                return Err(unreachable(&detail));
            }
        };
        // The owner's server bounds no answer: neither does this hop (the caller's own
        // client bounds what it takes, as from the owner directly).
        let client = RunnerServiceClient::new(channel).max_decoding_message_size(usize::MAX);
        let deadline = caller_deadline(request.metadata());
        let mut outgoing = Request::new(request.into_inner());
        if let Some(deadline) = deadline {
            outgoing.set_timeout(deadline.saturating_sub(spent));
        }
        let metadata = outgoing.metadata_mut();
        metadata.insert("authorization", self.token.authorization());
        let for_owner = owner
            .name
            .parse()
            .map_err(|_| to_status(EngineError::internal("the owner's name is not a header value")))?;
        metadata.insert(FORWARDED_OWNER_METADATA, for_owner);
        let tenant = hex::encode(tenant_id.as_bytes())
            .parse()
            .map_err(|_| to_status(EngineError::internal("a hex tenant id is a header value")))?;
        metadata.insert(FORWARDED_TENANT_METADATA, tenant);
        let context = tracing::Span::current().context();
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&context, &mut TraceContext(metadata)));
        let answer = rpc(client, outgoing).await;
        let hop_failed = answer.as_ref().err().and_then(hop_failure);
        self.metrics.call_forwarded(hop_failed.is_none());
        match (answer, hop_failed) {
            (Ok(response), _) => Ok(Response::new(response.into_inner())),
            // The owner's own answer: what a local call gets, untouched.
            (Err(status), None) => Err(Status::with_details(
                status.code(),
                status.message(),
                status.details().to_vec().into(),
            )),
            (Err(status), Some(detail)) => {
                // The next call opens (and resolves) the connection anew.
                self.channels.lock().remove(&owner.address);
                tracing::warn!(owner = %owner.name, code = ?status.code(), %detail, "a forwarded call got no answer from its owner");
                Err(unreachable(&detail))
            }
        }
    }
}

/// Why a forwarded call's status is no answer of its owner's handler, if it is not: the
/// transport's (no `ErrorInfo` of ours), or the owner's listener refusing this replica
/// itself (a fleet token it does not accept, a tenant it cannot read). A call admitted here
/// was authenticated here; the owner's handlers never refuse it for who the caller is.
fn hop_failure(status: &Status) -> Option<String> {
    match status.get_error_details().error_info() {
        Some(info) if info.domain == ERROR_DOMAIN => match Reason::parse(&info.reason) {
            Some(Reason::Unauthenticated | Reason::TenantRequired | Reason::PermissionDenied) => Some(format!(
                "its internal listener refused this replica ({}: do the fleet tokens match?)",
                info.reason
            )),
            // Another replica answered at the owner's address (it took the address over).
            Some(Reason::OwnerUnreachable) => Some(status.message().to_owned()),
            _ => None,
        },
        _ => Some(format!("{:?}", status.code())),
    }
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
