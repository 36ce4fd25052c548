//! The pool as the engine holds it: reserve, give back, record failures, drain, report.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::{Notify, oneshot};

use crate::book::*;
use crate::config::*;
use crate::inner::*;
use crate::observer::PoolObserver;
use crate::profile::Fingerprinter;
use crate::replenish::*;
use crate::slot::IdleProcess;
use crate::status::*;
use crate::warm::*;
use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::placement::WarmKey;
use cursor_runner_domain::state::SlotState;

/// The retry hint of a `RESOURCE_EXHAUSTED` refusal.
pub const POOL_RETRY_HINT: Duration = Duration::from_secs(1);

/// The longest `lease_wait` a `CreateExecution` may ask for.
pub const MAX_LEASE_WAIT: Duration = Duration::from_secs(300);

/// What `reserve` found.
pub enum Reservation {
    /// An idle slot, taken.
    Warm(Box<WarmProcess>),
    /// Capacity for a new process, started by [`ColdStart::start`].
    Cold(ColdStart),
}

/// The pool. Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

impl Pool {
    /// Starts the pool and its replenisher (which ends with the pool).
    pub fn start(config: PoolConfig, launch: LaunchSettings, metrics: Arc<dyn PoolObserver>) -> Self {
        let launch = Arc::new(launch);
        let fingerprints = Fingerprinter::random();
        let distribution = launch.agent_command.distribution_label();
        let now = Instant::now();
        let mut profiles = HashMap::new();
        for warm in &config.warm_profiles {
            let launch_as = LaunchAs {
                credential: warm.credential.clone(),
                agent: None,
            };
            let key = fingerprints.key(&distribution, &warm.tenant_id, &launch_as);
            profiles.insert(key.id(), Profile::new(key, launch_as, true, warm.min_idle, now));
        }
        let inner = Arc::new(PoolInner {
            config,
            launch,
            fingerprints,
            metrics: metrics.clone(),
            state: Mutex::new(PoolState::new(metrics, profiles)),
            changed: Arc::new(Notify::new()),
        });
        tokio::spawn(replenish(Arc::downgrade(&inner), inner.changed.clone()));
        Self { inner }
    }

    /// Takes an idle slot of the caller's profile, or reserves capacity for a new
    /// process; with no capacity, waits up to `wait` for some. With `home` (a recorded
    /// session's), always a new process launched in that home. Refusals change nothing:
    /// `DRAINING`, `PROFILE_QUARANTINED` (with the agent's own reason as `cause`),
    /// `POOL_EXHAUSTED`.
    pub async fn reserve(
        &self,
        tenant_id: &str,
        launch_as: LaunchAs,
        wait: Duration,
        home: Option<PathBuf>,
    ) -> Result<Reservation, EngineError> {
        let inner = &self.inner;
        let distribution = match &launch_as.agent {
            Some(agent) => agent.profile.command.distribution_label(),
            None => inner.launch.agent_command.distribution_label(),
        };
        let key = inner.fingerprints.key(&distribution, tenant_id, &launch_as);
        let profile_id = key.id();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let attempt = {
                let mut state = inner.lock();
                inner.attempt(&mut state, &key, &profile_id, &launch_as, home.as_deref())?
            };
            match attempt {
                Attempt::Handoff(handoff) => {
                    let (reply, arrived) = oneshot::channel();
                    if handoff.send(reply).is_ok()
                        && let Ok((idle, parts)) = arrived.await
                    {
                        inner.metrics.leased(true);
                        return Ok(Reservation::Warm(Box::new(WarmProcess {
                            process: idle.process,
                            connection: idle.connection,
                            inbound: idle.inbound,
                            timings: parts.timings,
                            initialized: parts.initialized,
                            sessions_served: parts.sessions_served,
                            ticket: parts.ticket,
                        })));
                    }
                    // It died or was recycled in the meantime; its ticket ends it. Try again.
                }
                Attempt::Cold(cold) => {
                    inner.metrics.leased(false);
                    return Ok(Reservation::Cold(cold));
                }
                Attempt::Wait => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return Err(EngineError::new(
                            ErrorKind::ResourceExhausted,
                            Reason::PoolExhausted,
                            format!(
                                "no agent process is available: at most {} per profile and {} on this node",
                                inner.config.max_per_profile, inner.config.max_processes
                            ),
                        )
                        .retry_after(POOL_RETRY_HINT));
                    }
                }
            }
        }
    }

    /// Whether a process of `profile_id` that served `sessions_served` sessions before
    /// the one ending now may serve another.
    pub fn accepts_return(&self, profile_id: &str, sessions_served: u32) -> bool {
        self.inner
            .lock()
            .accepts_return(profile_id, sessions_served, &self.inner.config)
    }

    /// Puts a process whose session ended cleanly back to idle, if its profile allows
    /// another session on it; otherwise hands it back to be stopped.
    pub fn give_back(&self, warm: WarmProcess) -> Result<(), Box<WarmProcess>> {
        let inner = &self.inner;
        let mut state = inner.lock();
        if !state.accepts_return(&warm.ticket.profile_id, warm.sessions_served, &inner.config) {
            return Err(Box::new(warm));
        }
        let WarmProcess {
            process,
            connection,
            inbound,
            timings,
            initialized,
            sessions_served,
            ticket,
        } = warm;
        inner.park_idle(
            &mut state,
            IdleProcess {
                process,
                connection,
                inbound,
            },
            WarmParts {
                ticket,
                timings,
                initialized,
                sessions_served: sessions_served + 1,
            },
        );
        Ok(())
    }

    /// Records an agent failure (a failed start, a dead or unresponsive process) of a
    /// profile; past the restart intensity the profile is quarantined.
    pub fn record_failure(&self, profile_id: &str, cause: Reason, message: &str) {
        let mut state = self.inner.lock();
        self.inner.record_failure(&mut state, profile_id, cause, message);
    }

    /// Ends a quarantine now. `false` if no such profile exists.
    pub fn clear_quarantine(&self, profile_id: &str) -> bool {
        let inner = &self.inner;
        let mut state = inner.lock();
        let Some(profile) = state.profiles.get_mut(profile_id) else {
            return false;
        };
        profile.heal();
        drop(state);
        tracing::info!(profile_id, "quarantine cleared by an operator");
        inner.changed.notify_waiters();
        true
    }

    /// Stops leasing and stops every idle slot; leased ones end with their executions.
    pub fn drain(&self) {
        self.inner.lock().drain();
        self.inner.changed.notify_waiters();
    }

    /// Waits until every slot has stopped, at most `limit`.
    pub async fn stopped(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.inner.lock().slots.is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// The warm keys this replica holds an idle process for, to publish for placement.
    pub fn warm_keys(&self) -> Vec<WarmKey> {
        self.inner.lock().warm_keys()
    }

    pub fn status(&self) -> PoolStatus {
        let inner = &self.inner;
        let now = Instant::now();
        let mut state = inner.lock();
        let PoolState {
            draining,
            profiles,
            slots,
            ..
        } = &mut *state;
        let mut out: Vec<ProfileStatus> = profiles
            .iter_mut()
            .map(|(id, profile)| {
                profile.expire_quarantine(now);
                let mut own: Vec<SlotStatus> = slots
                    .iter()
                    .filter(|(_, s)| s.profile_id == *id)
                    .map(|(slot_id, s)| SlotStatus {
                        slot_id: slot_id.clone(),
                        state: s.state,
                        pid: s.pid,
                        age: now.saturating_duration_since(s.since),
                        sessions_served: s.sessions_served,
                    })
                    .collect();
                own.sort_by(|a, b| a.slot_id.cmp(&b.slot_id));
                ProfileStatus {
                    profile_id: id.clone(),
                    tenant_id: profile.key.tenant_id.clone(),
                    distribution: profile.key.distribution.clone(),
                    credential_name: profile.key.credential.as_ref().map(|c| c.name.as_str().to_owned()),
                    agent_profile: profile.key.agent.as_ref().map(|a| a.name.clone()),
                    credential_fingerprint: profile.key.credential.as_ref().map(|c| c.display()),
                    configured: profile.configured,
                    min_idle: profile.min_idle,
                    health: profile.health,
                    quarantine_reason: profile.quarantine.as_ref().map(|q| q.cause),
                    quarantine_message: profile.quarantine.as_ref().map(|q| q.message.clone()),
                    quarantine_remaining: profile
                        .quarantine
                        .as_ref()
                        .map(|q| q.until.saturating_duration_since(now)),
                    failures_in_window: profile.failures.count(inner.config.intensity, now),
                    oldest_idle_age: own.iter().filter(|s| s.state == SlotState::Idle).map(|s| s.age).max(),
                    slots: own,
                }
            })
            .collect();
        out.sort_by(|a, b| a.profile_id.cmp(&b.profile_id));
        PoolStatus {
            draining: *draining,
            max_processes: inner.config.max_processes,
            max_per_profile: inner.config.max_per_profile,
            intensity: inner.config.intensity,
            profiles: out,
        }
    }
}
