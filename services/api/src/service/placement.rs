//! Placement at the edge: a `CreateExecution` this replica has no room for is sent on to
//! the replicas the engine names, one at a time, until one takes it.

use std::time::Instant;

use cursor_runner_executions::placement::WarmKey;
use cursor_runner_executions::{EngineError, Reason};
use tonic::{Request, Response, Status};

use super::RunnerApi;
use crate::forward::Owner;
use crate::pb;
use crate::status::to_status;

impl RunnerApi {
    /// A `CreateExecution` this replica refused for want of room, sent as it came to the
    /// replicas the engine names (warm first, then the least loaded) until one takes it;
    /// the fleet's refusal when each had no room, or this replica's own when there is
    /// nobody to ask. A replica that does not answer ends the search: the call may have run
    /// there, so its caller retries it under the same `request_id` rather than hear nothing
    /// was created.
    /// `received`: when the call arrived (its deadline counts from then).
    pub(super) async fn placed_elsewhere(
        &self,
        tenant_id: &str,
        (metadata, body, received): (tonic::metadata::MetadataMap, pb::CreateExecutionRequest, Instant),
        refusal: EngineError,
    ) -> Result<Response<pb::CreateExecutionResponse>, Status> {
        let targets = self
            .engine
            .placement_targets(&refusal, &warm_key(tenant_id, &body))
            .await;
        let Some(forwarder) = self.forwarder.as_ref().filter(|_| !targets.is_empty()) else {
            return Err(to_status(refusal));
        };
        for target in &targets {
            let request = Request::from_parts(metadata.clone(), tonic::Extensions::default(), body.clone());
            let owner = Owner {
                name: target.name.clone(),
                address: target.address.clone(),
            };
            let placed = forwarder
                .forward(
                    owner,
                    tenant_id,
                    request,
                    received.elapsed(),
                    |mut client, request| async move { client.create_execution(request).await },
                )
                .await;
            match placed {
                Err(status) if no_room_there(&status) => continue,
                answered => return answered,
            }
        }
        Err(to_status(cursor_runner_executions::fleet_full(targets.len())))
    }
}

/// The warm key of the processes a `CreateExecution` may lease: the tenant's, with the
/// agent profile and credential it names.
fn warm_key(tenant_id: &str, body: &pb::CreateExecutionRequest) -> WarmKey {
    fn named(name: &str) -> Option<&str> {
        (!name.is_empty()).then_some(name)
    }
    let credential = body.credential.as_ref().map(|c| c.credential_name.as_str());
    WarmKey::of(tenant_id, named(&body.agent_profile), credential.and_then(named))
}

/// Whether a replica the call was placed on had no room either.
fn no_room_there(status: &Status) -> bool {
    use tonic_types::StatusExt;
    status
        .get_error_details()
        .error_info()
        .and_then(|info| Reason::parse(&info.reason))
        .is_some_and(cursor_runner_executions::for_want_of_room)
}
