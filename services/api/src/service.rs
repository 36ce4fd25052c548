//! `RunnerService`: each method reads the tenant, translates the request, calls the
//! engine, and translates the result.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cursor_runner_executions::credential::{CredentialBinding, Secret};
use cursor_runner_executions::prompt::Prompt;
use cursor_runner_executions::{
    AnswerCommand, AnswerTarget, ConfigRequest, CreateExecutionCommand, Engine, EngineError, Reason, RequestMeta,
    Route, StreamItem,
};
use prost::Message;
use sha2::{Digest, Sha256};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::bounds::Bounded;
use crate::convert;
use crate::forward::{Forwarder, Owner};
use crate::pb;
use crate::status::to_status;

mod placement;

/// Request metadata naming the caller's tenant (authentication replaces it later).
pub const TENANT_METADATA: &str = "x-tenant-id";

pub struct RunnerApi {
    engine: Arc<Engine>,
    /// Carries calls for executions other replicas own to them; `None`: such calls are
    /// answered here (refused, naming the owner), as on the internal listener, whose
    /// calls were forwarded once already.
    forwarder: Option<Arc<Forwarder>>,
}

impl RunnerApi {
    pub fn new(engine: Arc<Engine>, forwarder: Option<Arc<Forwarder>>) -> Self {
        Self { engine, forwarder }
    }

    /// The replica that answers a call for `execution_id`, when it is not this one.
    async fn owner_of(&self, tenant_id: &str, execution_id: &str) -> Option<(Arc<Forwarder>, Owner)> {
        let forwarder = self.forwarder.as_ref().filter(|_| !execution_id.is_empty())?;
        elsewhere(forwarder, self.engine.route(tenant_id, &execution_id.into()).await)
    }

    /// The replica that opens the tenant's recorded `session_id` (where its history is),
    /// when it is not this one.
    async fn session_owner(&self, tenant_id: &str, session_id: &str) -> Option<(Arc<Forwarder>, Owner)> {
        let forwarder = self.forwarder.as_ref().filter(|_| !session_id.is_empty())?;
        elsewhere(forwarder, self.engine.session_route(tenant_id, session_id).await)
    }
}

/// The forwarder and the owner when `route` leads elsewhere.
fn elsewhere(forwarder: &Arc<Forwarder>, route: Route) -> Option<(Arc<Forwarder>, Owner)> {
    match route {
        Route::Here => None,
        Route::Owner { name, address } => Some((forwarder.clone(), Owner { name, address })),
    }
}

/// Returns the owner's answer to the call when another replica owns its execution.
macro_rules! answered_by_owner {
    ($self:ident, $request:ident, $tenant_id:expr, $execution_id:expr, $rpc:ident) => {
        if let Some((forwarder, owner)) = $self.owner_of(&$tenant_id, &$execution_id).await {
            return forwarder
                .forward(
                    owner,
                    &$tenant_id,
                    $request,
                    Duration::ZERO,
                    |mut client, request| async move { client.$rpc(request).await },
                )
                .await;
        }
    };
}

/// The caller's tenant: from its token when authentication is on (metadata is then
/// ignored), else from the `x-tenant-id` metadata.
fn tenant<T>(request: &Request<T>) -> Result<String, Status> {
    if let Some(caller) = request.extensions().get::<crate::auth::Caller>() {
        return Ok(caller.tenant_id.clone());
    }
    let refuse = |message: &str| {
        to_status(EngineError::new(
            cursor_runner_executions::ErrorKind::InvalidArgument,
            Reason::TenantRequired,
            message,
        ))
    };
    let value = request
        .metadata()
        .get(TENANT_METADATA)
        .ok_or_else(|| refuse("the x-tenant-id metadata is required"))?;
    let tenant = value.to_str().map_err(|_| refuse("x-tenant-id must be ASCII"))?.trim();
    if let Some(problem) = crate::auth::tenant_id_problem(tenant) {
        return Err(refuse(&format!("x-tenant-id is unusable: {problem}")));
    }
    Ok(tenant.to_owned())
}

/// The caller's tenant, once the request's fields are within their bounds.
fn admit<T: Bounded>(request: &Request<T>) -> Result<String, Status> {
    let tenant_id = tenant(request)?;
    request.get_ref().check_bounds()?;
    Ok(tenant_id)
}

/// A digest of the request body without its `request_id`, to tell a retry from reuse.
fn meta<M: Message + Clone>(tenant_id: String, request_id: &str, body: &M, clear: impl FnOnce(&mut M)) -> RequestMeta {
    let mut without_id = body.clone();
    clear(&mut without_id);
    RequestMeta {
        tenant_id,
        request_id: request_id.to_owned(),
        request_digest: hex::encode(Sha256::digest(without_id.encode_to_vec())),
    }
}

/// A credential as the control plane binds it (the secret stays in memory only).
fn credential_binding(c: pb::CredentialBinding) -> Result<CredentialBinding, Status> {
    let expires_at_ms = match c.expire_time {
        // A Timestamp's nanos are 0..1e9 (google.protobuf.Timestamp); anything else is
        // not a time.
        Some(t) if !(0..1_000_000_000).contains(&t.nanos) => {
            return Err(to_status(EngineError::invalid(
                Reason::InvalidArgument,
                format!("credential.expire_time has nanos {}, outside 0..1e9", t.nanos),
            )));
        }
        Some(t) => Some(t.seconds.saturating_mul(1000) + i64::from(t.nanos / 1_000_000)),
        None => None,
    };
    Ok(CredentialBinding {
        provider: c.provider,
        session_id: c.session_id,
        credential_name: c.credential_name,
        secret: Secret::new(c.secret),
        expires_at_ms,
    })
}

fn non_empty(value: String) -> Option<String> {
    (!value.is_empty()).then_some(value)
}

fn required(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(to_status(EngineError::invalid(
            Reason::InvalidArgument,
            format!("{field} is required"),
        )));
    }
    Ok(())
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::StreamEventsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::runner_service_server::RunnerService for RunnerApi {
    async fn create_execution(
        &self,
        request: Request<pb::CreateExecutionRequest>,
    ) -> Result<Response<pb::CreateExecutionResponse>, Status> {
        let tenant_id = admit(&request)?;
        let session_id = request.get_ref().load_session_id.clone();
        if let Some((forwarder, owner)) = self.session_owner(&tenant_id, &session_id).await {
            return forwarder
                .forward(
                    owner,
                    &tenant_id,
                    request,
                    Duration::ZERO,
                    |mut client, request| async move { client.create_execution(request).await },
                )
                .await;
        }
        // Kept to place the call on another replica if this one has no room for it; never
        // a session's load, which opens only where the session's history is.
        let placeable = (self.forwarder.is_some() && session_id.is_empty())
            .then(|| (request.metadata().clone(), request.get_ref().clone(), Instant::now()));
        let body = request.into_inner();
        // The secret never enters the idempotency digest (rows keep digests only, but a
        // digest of a secret is still derived from it).
        let meta = meta(tenant_id.clone(), &body.request_id, &body, |b| {
            b.request_id.clear();
            if let Some(credential) = b.credential.as_mut() {
                credential.secret.clear();
            }
        });
        let credential = body.credential.map(credential_binding).transpose()?;
        let record = self
            .engine
            .create_execution(
                meta,
                CreateExecutionCommand {
                    workspace: body.workspace,
                    approval_policy: convert::approval_policy(body.approval_policy)?,
                    interaction_wait_limit: body.interaction_wait_limit.map(convert::duration).transpose()?,
                    control_session_id: body.control_session_id,
                    credential,
                    lease_wait: body.lease_wait.map(convert::duration).transpose()?,
                    session: ConfigRequest {
                        model: non_empty(body.model),
                        parameters: body.model_parameters,
                        mode: non_empty(body.mode),
                    },
                    load_session_id: non_empty(body.load_session_id),
                    mcp_servers: body.mcp_servers,
                    limits: convert::limits(body.limits)?,
                    agent_profile: non_empty(body.agent_profile),
                },
            )
            .await;
        match (record, placeable) {
            (Ok(record), _) => Ok(Response::new(pb::CreateExecutionResponse {
                execution: Some(convert::execution(record)),
            })),
            (Err(refusal), Some(call)) => self.placed_elsewhere(&tenant_id, call, refusal).await,
            (Err(refusal), None) => Err(to_status(refusal)),
        }
    }

    async fn get_execution(
        &self,
        request: Request<pb::GetExecutionRequest>,
    ) -> Result<Response<pb::GetExecutionResponse>, Status> {
        let tenant_id = admit(&request)?;
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        let record = self
            .engine
            .get_execution(&tenant_id, &body.execution_id.as_str().into())
            .await
            .map_err(to_status)?;
        let owner = self
            .engine
            .execution_owner(&tenant_id, &body.execution_id.as_str().into())
            .await
            .map_err(to_status)?;
        let mut execution = convert::execution(record);
        execution.owner_replica = owner.name;
        execution.owner_incarnation = owner.incarnation;
        Ok(Response::new(pb::GetExecutionResponse {
            execution: Some(execution),
        }))
    }

    async fn list_executions(
        &self,
        request: Request<pb::ListExecutionsRequest>,
    ) -> Result<Response<pb::ListExecutionsResponse>, Status> {
        let tenant_id = admit(&request)?;
        let body = request.into_inner();
        let (page, next) = self
            .engine
            .list_executions(&tenant_id, i64::from(body.page_size), &body.page_token)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::ListExecutionsResponse {
            executions: page.into_iter().map(convert::execution).collect(),
            next_page_token: next,
        }))
    }

    async fn close_execution(
        &self,
        request: Request<pb::CloseExecutionRequest>,
    ) -> Result<Response<pb::CloseExecutionResponse>, Status> {
        let tenant_id = admit(&request)?;
        let execution_id = request.get_ref().execution_id.clone();
        answered_by_owner!(self, request, tenant_id, execution_id, close_execution);
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        let meta = meta(tenant_id, &body.request_id, &body, |b| b.request_id.clear());
        let record = self
            .engine
            .close_execution(meta, &body.execution_id.as_str().into())
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::CloseExecutionResponse {
            execution: Some(convert::execution(record)),
        }))
    }

    async fn start_turn(
        &self,
        request: Request<pb::StartTurnRequest>,
    ) -> Result<Response<pb::StartTurnResponse>, Status> {
        let tenant_id = admit(&request)?;
        let execution_id = request.get_ref().execution_id.clone();
        answered_by_owner!(self, request, tenant_id, execution_id, start_turn);
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        let meta = meta(tenant_id, &body.request_id, &body, |b| b.request_id.clear());
        let blocks = body
            .prompt
            .iter()
            .cloned()
            .map(convert::prompt_block)
            .collect::<Result<Vec<_>, _>>()?;
        let prompt = Prompt::new(blocks).map_err(to_status)?;
        let turn = self
            .engine
            .start_turn(meta, &body.execution_id.as_str().into(), prompt, body.replace_active)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::StartTurnResponse {
            turn: Some(convert::turn(turn)),
        }))
    }

    async fn cancel_turn(
        &self,
        request: Request<pb::CancelTurnRequest>,
    ) -> Result<Response<pb::CancelTurnResponse>, Status> {
        let tenant_id = admit(&request)?;
        let execution_id = request.get_ref().execution_id.clone();
        answered_by_owner!(self, request, tenant_id, execution_id, cancel_turn);
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        required("turn_id", &body.turn_id)?;
        let meta = meta(tenant_id, &body.request_id, &body, |b| b.request_id.clear());
        let turn = self
            .engine
            .cancel_turn(meta, &body.execution_id.as_str().into(), &body.turn_id)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::CancelTurnResponse {
            turn: Some(convert::turn(turn)),
        }))
    }

    type StreamEventsStream = EventStream;

    async fn stream_events(
        &self,
        request: Request<pb::StreamEventsRequest>,
    ) -> Result<Response<Self::StreamEventsStream>, Status> {
        let tenant_id = admit(&request)?;
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        let items = self
            .engine
            .stream_events(&tenant_id, &body.execution_id.as_str().into(), body.after_sequence)
            .await
            .map_err(to_status)?;
        let stream = tokio_stream::wrappers::ReceiverStream::new(items);
        let stream = tokio_stream::StreamExt::map(stream, |item| {
            let frame = match item.map_err(to_status)? {
                StreamItem::Event(event) => pb::stream_events_response::Frame::Event(convert::event(event)),
                StreamItem::CaughtUp { head_sequence } => {
                    pb::stream_events_response::Frame::CaughtUp(pb::CaughtUp { head_sequence })
                }
                StreamItem::Heartbeat { head_sequence } => {
                    pb::stream_events_response::Frame::Heartbeat(pb::Heartbeat {
                        head_sequence,
                        time: Some(convert::timestamp(chrono::Utc::now().timestamp_millis())),
                    })
                }
            };
            Ok(pb::StreamEventsResponse { frame: Some(frame) })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn ack_events(
        &self,
        request: Request<pb::AckEventsRequest>,
    ) -> Result<Response<pb::AckEventsResponse>, Status> {
        let tenant_id = admit(&request)?;
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        let acked = self
            .engine
            .ack_events(&tenant_id, &body.execution_id.as_str().into(), body.through_sequence)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::AckEventsResponse { acked_sequence: acked }))
    }

    async fn list_turns(
        &self,
        request: Request<pb::ListTurnsRequest>,
    ) -> Result<Response<pb::ListTurnsResponse>, Status> {
        let tenant_id = admit(&request)?;
        let body = request.into_inner();
        let execution = self
            .engine
            .get_execution(&tenant_id, &body.execution_id.as_str().into())
            .await
            .map_err(to_status)?;
        let (page, next, total) = self
            .engine
            .list_turns(
                &tenant_id,
                &body.execution_id.as_str().into(),
                i64::from(body.page_size),
                &body.page_token,
            )
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::ListTurnsResponse {
            turns: page.into_iter().map(convert::turn).collect(),
            next_page_token: next,
            usage_total: Some(convert::usage_total(&total, execution.active_ms)),
        }))
    }

    async fn list_interactions(
        &self,
        request: Request<pb::ListInteractionsRequest>,
    ) -> Result<Response<pb::ListInteractionsResponse>, Status> {
        let tenant_id = admit(&request)?;
        let body = request.into_inner();
        let state = pb::InteractionState::try_from(body.state).map_err(|_| {
            to_status(EngineError::invalid(
                Reason::InvalidArgument,
                "unknown interaction state",
            ))
        })?;
        let (page, next) = self
            .engine
            .list_interactions(
                &tenant_id,
                (!body.execution_id.is_empty()).then_some(body.execution_id.into()),
                convert::interaction_state_name(state).map(|s| s.as_str().to_owned()),
                i64::from(body.page_size),
                &body.page_token,
            )
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::ListInteractionsResponse {
            interactions: page.into_iter().map(convert::interaction).collect(),
            next_page_token: next,
        }))
    }

    async fn get_interaction(
        &self,
        request: Request<pb::GetInteractionRequest>,
    ) -> Result<Response<pb::GetInteractionResponse>, Status> {
        let tenant_id = admit(&request)?;
        let body = request.into_inner();
        required("interaction_id", &body.interaction_id)?;
        let record = self
            .engine
            .get_interaction(&tenant_id, &body.interaction_id.as_str().into())
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::GetInteractionResponse {
            interaction: Some(convert::interaction(record)),
        }))
    }

    async fn get_capabilities(
        &self,
        request: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::GetCapabilitiesResponse>, Status> {
        admit(&request)?;
        let capabilities = cursor_runner_executions::capabilities::capabilities_here(&self.engine.agent_isolation())
            .into_iter()
            .map(|entry| pb::Capability {
                availability: match entry.availability.as_str() {
                    "available" => pb::CapabilityAvailability::Available,
                    "unsupported" => pb::CapabilityAvailability::Unsupported,
                    "policy_disabled" => pb::CapabilityAvailability::PolicyDisabled,
                    _ => pb::CapabilityAvailability::Unspecified,
                } as i32,
                detail_level: match entry.detail.as_str() {
                    "summary" => pb::CapabilityDetailLevel::Summary,
                    "structured" => pb::CapabilityDetailLevel::Structured,
                    _ => pb::CapabilityDetailLevel::Unspecified,
                } as i32,
                qualification: match entry.qualification.as_str() {
                    "verified_here" => pb::CapabilityQualification::VerifiedHere,
                    _ => pb::CapabilityQualification::Unverified,
                } as i32,
                evidence: entry.evidence_text(),
                name: entry.row,
                table: entry.table,
                reason: entry.reason,
            })
            .collect();
        Ok(Response::new(pb::GetCapabilitiesResponse { capabilities }))
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let tenant_id = admit(&request)?;
        let body = request.into_inner();
        let (page, next) = self
            .engine
            .list_sessions(&tenant_id, i64::from(body.page_size), &body.page_token)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::ListSessionsResponse {
            sessions: page.into_iter().map(convert::recorded_session).collect(),
            next_page_token: next,
        }))
    }

    async fn recover_execution(
        &self,
        request: Request<pb::RecoverExecutionRequest>,
    ) -> Result<Response<pb::RecoverExecutionResponse>, Status> {
        let tenant_id = admit(&request)?;
        let execution_id = request.get_ref().execution_id.clone();
        answered_by_owner!(self, request, tenant_id, execution_id, recover_execution);
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        let meta = meta(tenant_id, &body.request_id, &body, |b| {
            b.request_id.clear();
            if let Some(credential) = b.credential.as_mut() {
                credential.secret.clear();
            }
        });
        let credential = body.credential.map(credential_binding).transpose()?;
        let record = self
            .engine
            .recover_execution(
                meta,
                &body.execution_id.as_str().into(),
                &body.control_session_id,
                credential,
            )
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::RecoverExecutionResponse {
            execution: Some(convert::execution(record)),
        }))
    }

    async fn list_models(
        &self,
        request: Request<pb::ListModelsRequest>,
    ) -> Result<Response<pb::ListModelsResponse>, Status> {
        let tenant_id = admit(&request)?;
        let execution_id = request.get_ref().execution_id.clone();
        answered_by_owner!(self, request, tenant_id, execution_id, list_models);
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        let catalog = self
            .engine
            .list_models(&tenant_id, &body.execution_id.as_str().into())
            .await
            .map_err(to_status)?;
        Ok(Response::new(convert::model_catalog(catalog)))
    }

    async fn set_model(&self, request: Request<pb::SetModelRequest>) -> Result<Response<pb::SetModelResponse>, Status> {
        let tenant_id = admit(&request)?;
        let execution_id = request.get_ref().execution_id.clone();
        answered_by_owner!(self, request, tenant_id, execution_id, set_model);
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        required("model", &body.model)?;
        let meta = meta(tenant_id, &body.request_id, &body, |b| b.request_id.clear());
        let change = ConfigRequest {
            model: Some(body.model),
            parameters: body.model_parameters,
            mode: None,
        };
        let record = self
            .engine
            .configure_session(meta, &body.execution_id.as_str().into(), change)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::SetModelResponse {
            execution: Some(convert::execution(record)),
        }))
    }

    async fn set_mode(&self, request: Request<pb::SetModeRequest>) -> Result<Response<pb::SetModeResponse>, Status> {
        let tenant_id = admit(&request)?;
        let execution_id = request.get_ref().execution_id.clone();
        answered_by_owner!(self, request, tenant_id, execution_id, set_mode);
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        required("mode", &body.mode)?;
        let meta = meta(tenant_id, &body.request_id, &body, |b| b.request_id.clear());
        let change = ConfigRequest {
            mode: Some(body.mode),
            ..ConfigRequest::default()
        };
        let record = self
            .engine
            .configure_session(meta, &body.execution_id.as_str().into(), change)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::SetModeResponse {
            execution: Some(convert::execution(record)),
        }))
    }

    async fn set_config_option(
        &self,
        request: Request<pb::SetConfigOptionRequest>,
    ) -> Result<Response<pb::SetConfigOptionResponse>, Status> {
        let tenant_id = admit(&request)?;
        let execution_id = request.get_ref().execution_id.clone();
        answered_by_owner!(self, request, tenant_id, execution_id, set_config_option);
        let body = request.into_inner();
        required("execution_id", &body.execution_id)?;
        let meta = meta(tenant_id, &body.request_id, &body, |b| b.request_id.clear());
        let record = self
            .engine
            .set_config_option(meta, &body.execution_id.as_str().into(), body.config_id, body.value)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::SetConfigOptionResponse {
            execution: Some(convert::execution(record)),
        }))
    }

    async fn answer_interaction(
        &self,
        request: Request<pb::AnswerInteractionRequest>,
    ) -> Result<Response<pb::AnswerInteractionResponse>, Status> {
        let tenant_id = admit(&request)?;
        let body = request.get_ref();
        required("interaction_id", &body.interaction_id)?;
        required("etag", &body.etag)?;
        let answer = convert::interaction_answer(body.answer.clone())?;
        // Pending on an actor here, it needs no read to find its way.
        let target = match self.engine.pending_here(&tenant_id, &body.interaction_id) {
            Some(execution_id) => AnswerTarget::PendingHere { execution_id },
            None => {
                let record = self
                    .engine
                    .get_interaction(&tenant_id, &body.interaction_id.as_str().into())
                    .await
                    .map_err(to_status)?;
                answered_by_owner!(self, request, tenant_id, record.execution_id, answer_interaction);
                AnswerTarget::Read(Box::new(record))
            }
        };
        let body = request.into_inner();
        let meta = RequestMeta::answer(tenant_id, body.request_id, &body.interaction_id, &answer);
        let record = self
            .engine
            .answer_interaction(
                meta,
                target,
                AnswerCommand {
                    interaction_id: body.interaction_id.into(),
                    etag: body.etag,
                    answer,
                },
            )
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::AnswerInteractionResponse {
            interaction: Some(convert::interaction(record)),
        }))
    }
}
