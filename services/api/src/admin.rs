//! `AdminService`: the pool's status, quarantine clearing, and draining. Behind the
//! admin role when token authentication is on (see `lib.rs`).

use std::sync::Arc;

use cursor_runner_executions::Engine;
use cursor_runner_executions::state::SlotState;
use tonic::{Request, Response, Status};

use crate::convert::{duration, std_duration_proto};
use crate::pb;
use crate::status::to_status;

pub struct AdminApi {
    engine: Arc<Engine>,
}

impl AdminApi {
    pub fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }
}

fn slot_state(state: SlotState) -> pb::SlotState {
    match state {
        SlotState::Warming => pb::SlotState::Warming,
        SlotState::Idle => pb::SlotState::Idle,
        SlotState::Leased => pb::SlotState::Leased,
        SlotState::Draining => pb::SlotState::Draining,
        SlotState::Stopped => pb::SlotState::Stopped,
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[tonic::async_trait]
impl pb::admin_service_server::AdminService for AdminApi {
    async fn get_pool_status(
        &self,
        _request: Request<pb::GetPoolStatusRequest>,
    ) -> Result<Response<pb::GetPoolStatusResponse>, Status> {
        let status = self.engine.pool_status();
        let profiles = status
            .profiles
            .into_iter()
            .map(|p| pb::PoolProfile {
                warming: count(p.count(SlotState::Warming)),
                idle: count(p.count(SlotState::Idle)),
                leased: count(p.count(SlotState::Leased)),
                draining: count(p.count(SlotState::Draining)),
                profile_id: p.profile_id,
                tenant_id: p.tenant_id,
                distribution: p.distribution,
                credential_name: p.credential_name.unwrap_or_default(),
                credential_fingerprint: p.credential_fingerprint.unwrap_or_default(),
                configured: p.configured,
                min_idle: count(p.min_idle),
                quarantined: p.quarantine_reason.is_some(),
                quarantine_reason: p.quarantine_reason.map(|r| r.as_str().to_owned()).unwrap_or_default(),
                quarantine_message: p.quarantine_message.unwrap_or_default(),
                quarantine_remaining: p.quarantine_remaining.map(std_duration_proto),
                restarts_in_window: count(p.failures_in_window),
                oldest_idle_age: p.oldest_idle_age.map(std_duration_proto),
                slots: p
                    .slots
                    .into_iter()
                    .map(|s| pb::PoolSlot {
                        slot_id: s.slot_id,
                        state: slot_state(s.state) as i32,
                        pid: s.pid,
                        age: Some(std_duration_proto(s.age)),
                        sessions_served: s.sessions_served,
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(pb::GetPoolStatusResponse {
            draining: status.draining,
            max_processes: count(status.max_processes),
            max_per_profile: count(status.max_per_profile),
            restart_intensity: status.intensity.max_failures,
            restart_window: Some(std_duration_proto(status.intensity.window)),
            profiles,
        }))
    }

    async fn drain(&self, request: Request<pb::DrainRequest>) -> Result<Response<pb::DrainResponse>, Status> {
        let deadline = request.into_inner().deadline.map(duration).transpose()?;
        tracing::warn!(?deadline, "drain requested through AdminService");
        let deadline = self.engine.begin_drain(deadline);
        Ok(Response::new(pb::DrainResponse {
            deadline: Some(std_duration_proto(deadline)),
        }))
    }

    async fn clear_quarantine(
        &self,
        request: Request<pb::ClearQuarantineRequest>,
    ) -> Result<Response<pb::ClearQuarantineResponse>, Status> {
        let body = request.into_inner();
        self.engine.clear_quarantine(&body.profile_id).map_err(to_status)?;
        Ok(Response::new(pb::ClearQuarantineResponse {}))
    }
}
