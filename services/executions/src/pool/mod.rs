//! The supervised pool of agent processes.
//!
//! A slot is one launched, `initialize`d process with no session, kept for one
//! profile (distribution, tenant, credential fingerprint): the credential entered its
//! environment at launch, so a slot never serves another tenant or credential. Idle
//! slots are kept warm per profile (`min_idle`), replenished in the background with a
//! jittered backoff, recycled after a TTL, probed for liveness, and replaced when they
//! die. Failed starts and crashes count against the profile's restart intensity;
//! past it the profile is quarantined and new executions for it fail fast with the
//! agent's own typed reason until the window passes or an operator clears it.
//!
//! Slot states follow [`SlotState`] (`warming → idle → leased → draining → stopped`);
//! every change goes through `PoolState::transition`.

mod config;
mod intensity;
mod profile;
mod slot;
mod ticket;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use cursor_runner_acp::{AcpConnection, InboundStream};
use cursor_runner_supervisor::AgentProcess;
use tokio::sync::{Notify, oneshot};

pub(crate) use config::LaunchAs;
pub use config::{LaunchSettings, PoolConfig, WarmProfile};
pub use intensity::{BACKOFF_BASE, BACKOFF_MAX, RestartIntensity};
pub use profile::FINGERPRINT_DISPLAY_CHARS;
pub use slot::IDLE_PROBE_METHOD;
pub(crate) use slot::{StartFailure, StartTimings, exit_message};
pub(crate) use ticket::SlotTicket;

use crate::credential::redactor_for;
use crate::error::{EngineError, ErrorKind, Reason};
use crate::metrics::Metrics;
use crate::state::{ProfileHealth, ProfileOrigin, SlotState};
use cursor_runner_supervisor::agent_users::AgentUsers;
use intensity::FailureWindow;
use profile::{Fingerprinter, ProfileKey};
use slot::{Handoff, IdleEnd, IdleProcess, IdleRules};
use ticket::SlotRegistry;

/// The retry hint of a `RESOURCE_EXHAUSTED` refusal.
pub const POOL_RETRY_HINT: Duration = Duration::from_secs(1);
/// The longest `lease_wait` a `CreateExecution` may ask for.
pub const MAX_LEASE_WAIT: Duration = Duration::from_secs(300);
/// How often the replenisher looks at every profile even when nothing woke it.
const REPLENISH_TICK: Duration = Duration::from_secs(1);

/// A process leased to an execution (or on its way to one).
pub(crate) struct WarmProcess {
    pub process: AgentProcess,
    pub connection: AcpConnection,
    pub inbound: InboundStream,
    pub timings: StartTimings,
    /// What `initialize` answered (the agent's capabilities).
    pub initialized: serde_json::Value,
    /// Sessions this process served before this one.
    pub sessions_served: u32,
    /// Dropped last: the slot's bookkeeping ends when the process does.
    pub ticket: SlotTicket,
}

/// What `reserve` found.
pub(crate) enum Reservation {
    /// An idle slot, taken.
    Warm(Box<WarmProcess>),
    /// Capacity for a new process, started by [`ColdStart::start`].
    Cold(ColdStart),
}

/// A slot reserved in `warming` for one execution.
pub(crate) struct ColdStart {
    pool: Weak<PoolInner>,
    ticket: SlotTicket,
    launch_as: LaunchAs,
}

/// One profile in `GetPoolStatus`.
#[derive(Debug, Clone)]
pub struct ProfileStatus {
    pub profile_id: String,
    pub tenant_id: String,
    pub distribution: String,
    pub credential_name: Option<String>,
    /// The operator's agent profile its processes run under.
    pub agent_profile: Option<String>,
    pub credential_fingerprint: Option<String>,
    /// Kept warm by the operator's configuration (else learned from a `CreateExecution`).
    pub configured: bool,
    pub min_idle: usize,
    pub health: ProfileHealth,
    pub quarantine_reason: Option<Reason>,
    pub quarantine_message: Option<String>,
    /// How much longer the quarantine lasts.
    pub quarantine_remaining: Option<Duration>,
    pub failures_in_window: usize,
    pub oldest_idle_age: Option<Duration>,
    pub slots: Vec<SlotStatus>,
}

impl ProfileStatus {
    pub fn count(&self, state: SlotState) -> usize {
        self.slots.iter().filter(|s| s.state == state).count()
    }
}

#[derive(Debug, Clone)]
pub struct SlotStatus {
    pub slot_id: String,
    pub state: SlotState,
    pub pid: Option<u32>,
    /// Time in the current state.
    pub age: Duration,
    pub sessions_served: u32,
}

#[derive(Debug, Clone)]
pub struct PoolStatus {
    pub draining: bool,
    pub max_processes: usize,
    pub max_per_profile: usize,
    pub intensity: RestartIntensity,
    pub profiles: Vec<ProfileStatus>,
}

/// The pool. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    config: PoolConfig,
    launch: Arc<LaunchSettings>,
    fingerprints: Fingerprinter,
    metrics: Arc<Metrics>,
    state: Mutex<PoolState>,
    /// Capacity was freed, a slot became idle, or a profile needs replenishing.
    changed: Arc<Notify>,
}

struct PoolState {
    metrics: Arc<Metrics>,
    draining: bool,
    profiles: HashMap<String, Profile>,
    slots: HashMap<String, Slot>,
}

struct Profile {
    key: ProfileKey,
    /// Held in memory only, to start this profile's processes.
    launch_as: LaunchAs,
    configured: bool,
    min_idle: usize,
    last_lease: Instant,
    health: ProfileHealth,
    quarantine: Option<Quarantine>,
    failures: FailureWindow,
    /// Background starts that failed in a row (the backoff exponent).
    failed_starts: u32,
    next_start_at: Instant,
    /// Idle slot ids, oldest first.
    idle: VecDeque<String>,
}

struct Quarantine {
    cause: Reason,
    message: String,
    until: Instant,
}

struct Slot {
    profile_id: String,
    /// Fixed at reservation, so the slot's metric series is the same from start to end.
    origin: ProfileOrigin,
    state: SlotState,
    since: Instant,
    pid: Option<u32>,
    sessions_served: u32,
    /// While idle: the way to take the process from its watch. Dropping it recycles.
    handoff: Option<Handoff<WarmParts>>,
}

/// What travels with an idle process: its slot and its history.
struct WarmParts {
    ticket: SlotTicket,
    timings: StartTimings,
    initialized: serde_json::Value,
    sessions_served: u32,
}

/// Reasons that are the agent's fault and count against the restart intensity.
fn counts_as_failure(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::AgentExited
            | Reason::AgentUnresponsive
            | Reason::AuthRequired
            | Reason::ProtocolError
            | Reason::AgentLaunchFailed
    )
}

enum Attempt {
    Handoff(Handoff<WarmParts>),
    Cold(ColdStart),
    Wait,
}

impl Pool {
    /// Starts the pool and its replenisher (which ends with the pool).
    pub(crate) fn start(config: PoolConfig, launch: LaunchSettings, metrics: Arc<Metrics>) -> Self {
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
            state: Mutex::new(PoolState {
                metrics,
                draining: false,
                profiles,
                slots: HashMap::new(),
            }),
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
    pub(crate) async fn reserve(
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
                        inner.metrics.pool_lease(true);
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
                    inner.metrics.pool_lease(false);
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
    pub(crate) fn accepts_return(&self, profile_id: &str, sessions_served: u32) -> bool {
        let state = self.inner.lock();
        self.inner.accepts_return(&state, profile_id, sessions_served)
    }

    /// Puts a process whose session ended cleanly back to idle, if its profile allows
    /// another session on it; otherwise hands it back to be stopped.
    pub(crate) fn give_back(&self, warm: WarmProcess) -> Result<(), Box<WarmProcess>> {
        let inner = &self.inner;
        let mut state = inner.lock();
        if !inner.accepts_return(&state, &warm.ticket.profile_id, warm.sessions_served) {
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
    pub(crate) fn record_failure(&self, profile_id: &str, cause: Reason, message: &str) {
        let mut state = self.inner.lock();
        self.inner.record_failure(&mut state, profile_id, cause, message);
    }

    /// Ends a quarantine now. `false` if no such profile exists.
    pub(crate) fn clear_quarantine(&self, profile_id: &str) -> bool {
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
    pub(crate) fn drain(&self) {
        let inner = &self.inner;
        let mut state = inner.lock();
        state.draining = true;
        let idle: Vec<String> = state
            .slots
            .iter()
            .filter(|(_, s)| s.state == SlotState::Idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            state.recycle(&id);
        }
        drop(state);
        inner.changed.notify_waiters();
    }

    /// Waits until every slot has stopped, at most `limit`.
    pub(crate) async fn stopped(&self, limit: Duration) {
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

    pub(crate) fn status(&self) -> PoolStatus {
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

impl ColdStart {
    /// Launches and `initialize`s the reserved slot's process. A failure counts against
    /// the profile's restart intensity and ends the slot.
    pub(crate) async fn start(self) -> Result<WarmProcess, StartFailure> {
        let ColdStart {
            pool,
            mut ticket,
            launch_as,
        } = self;
        let Some(pool) = pool.upgrade() else {
            return Err(StartFailure {
                error: EngineError::internal("the pool is gone"),
                process: None,
            });
        };
        let started = slot::start_process(&pool.launch, &mut ticket, launch_as).await;
        pool.metrics
            .pool_process_started(started.as_ref().ok().map(|s| (s.timings.spawn, s.timings.initialize)));
        let mut state = pool.lock();
        match started {
            Ok(started) => {
                if let Some(slot) = state.slots.get_mut(&ticket.slot_id) {
                    slot.pid = Some(started.process.pid());
                }
                state.transition(&ticket.slot_id, SlotState::Leased);
                drop(state);
                Ok(WarmProcess {
                    process: started.process,
                    connection: started.connection,
                    inbound: started.inbound,
                    timings: started.timings,
                    initialized: started.initialized,
                    sessions_served: 0,
                    ticket,
                })
            }
            Err(failure) => {
                pool.record_failure(
                    &mut state,
                    &ticket.profile_id,
                    failure.error.reason,
                    &failure.error.message,
                );
                Err(failure)
            }
        }
    }
}

impl PoolInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One look at the pool for a lease, under the lock.
    fn attempt(
        self: &Arc<Self>,
        state: &mut PoolState,
        key: &ProfileKey,
        profile_id: &str,
        launch_as: &LaunchAs,
        home: Option<&std::path::Path>,
    ) -> Result<Attempt, EngineError> {
        let now = Instant::now();
        if state.draining {
            return Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::Draining,
                "the service is draining: it takes no new executions",
            ));
        }
        let min_idle = self.config.min_idle;
        let profile = state
            .profiles
            .entry(profile_id.to_owned())
            .or_insert_with(|| Profile::new(key.clone(), launch_as.clone(), false, min_idle, now));
        profile.last_lease = now;
        profile.expire_quarantine(now);
        if let Some(quarantine) = &profile.quarantine {
            let remaining = quarantine.until.saturating_duration_since(now);
            return Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::ProfileQuarantined,
                format!(
                    "this profile is quarantined for {remaining:?} after repeated agent failures; the last: {}",
                    quarantine.message
                ),
            )
            .with("cause", quarantine.cause.as_str())
            .retry_after(remaining));
        }
        // A recorded session's home is its own: no warm slot was launched in it.
        let idle: Vec<String> = match home {
            Some(_) => Vec::new(),
            None => profile.idle.iter().cloned().collect(),
        };
        for slot_id in idle {
            let Some(handoff) = state.slots.get_mut(&slot_id).and_then(|s| s.handoff.take()) else {
                continue;
            };
            state.transition(&slot_id, SlotState::Leased);
            return Ok(Attempt::Handoff(handoff));
        }
        if !state.has_capacity(profile_id, &self.config) && !state.evict_for(profile_id, &self.config) {
            return Ok(Attempt::Wait);
        }
        let mut ticket = state.reserve_slot(self, profile_id);
        if let Some(home) = home {
            ticket.home = home.to_path_buf();
        }
        Ok(Attempt::Cold(ColdStart {
            pool: Arc::downgrade(self),
            ticket,
            launch_as: launch_as.clone(),
        }))
    }

    fn ticket(self: &Arc<Self>, slot_id: String, profile_id: String) -> SlotTicket {
        let home = self.launch.state_dir.join("homes").join(&slot_id);
        let registry: Weak<dyn SlotRegistry> = Arc::downgrade(self) as Weak<dyn SlotRegistry>;
        let identity = self.launch.agent_users.as_ref().and_then(AgentUsers::take);
        SlotTicket::new(registry, slot_id, profile_id, home, identity)
    }

    fn accepts_return(&self, state: &PoolState, profile_id: &str, sessions_served: u32) -> bool {
        !state.draining
            && sessions_served + 1 < self.config.sessions_per_process
            && state
                .profiles
                .get(profile_id)
                .is_some_and(|p| p.health == ProfileHealth::Healthy)
    }

    /// Makes a slot idle and starts watching it.
    fn park_idle(self: &Arc<Self>, state: &mut PoolState, idle: IdleProcess, parts: WarmParts) {
        let slot_id = parts.ticket.slot_id.clone();
        let profile_id = parts.ticket.profile_id.clone();
        let (handoff_tx, handoff_rx) = oneshot::channel();
        state.transition(&slot_id, SlotState::Idle);
        if let Some(slot) = state.slots.get_mut(&slot_id) {
            slot.sessions_served = parts.sessions_served;
            slot.handoff = Some(handoff_tx);
        }
        if let Some(profile) = state.profiles.get_mut(&profile_id) {
            profile.idle.push_back(slot_id);
        }
        let rules = IdleRules {
            recycle_at: Instant::now() + self.config.idle_ttl,
            probe_interval: self.config.probe_interval,
            probe_timeout: self.config.probe_timeout,
            stop_grace: self.launch.stop_grace,
            redactor: {
                let launch_as = state.profiles.get(&profile_id).map(|p| &p.launch_as);
                redactor_for(
                    launch_as.and_then(|l| l.credential.as_ref()),
                    launch_as.and_then(|l| l.agent.as_deref()),
                    &[],
                )
            },
        };
        let pool = Arc::downgrade(self);
        self.changed.notify_waiters();
        tokio::spawn(async move {
            let (ending, parts) = slot::watch_idle(idle, parts, handoff_rx, rules).await;
            // Handed off: the lease owns the process and its ticket now.
            let Some(WarmParts { ticket, .. }) = parts else { return };
            let failure = match ending {
                IdleEnd::HandedOff | IdleEnd::Recycled => None,
                IdleEnd::Died { message } => Some((Reason::AgentExited, message)),
                IdleEnd::Unresponsive => Some((
                    Reason::AgentUnresponsive,
                    "the idle agent did not answer the liveness probe".to_owned(),
                )),
            };
            if let Some((cause, message)) = failure
                && let Some(pool) = pool.upgrade()
            {
                tracing::warn!(slot_id = %ticket.slot_id, %message, "an idle agent failed; it is replaced");
                let mut state = pool.lock();
                pool.record_failure(&mut state, &ticket.profile_id, cause, &message);
            }
            drop(ticket);
        });
    }

    fn record_failure(&self, state: &mut PoolState, profile_id: &str, cause: Reason, message: &str) {
        if !counts_as_failure(cause) {
            return;
        }
        let now = Instant::now();
        self.metrics.pool_failure(cause);
        let Some(profile) = state.profiles.get_mut(profile_id) else {
            return;
        };
        let tripped = profile.failures.record(self.config.intensity, now);
        let mut recycle = Vec::new();
        if tripped && profile.health == ProfileHealth::Healthy {
            debug_assert!(ProfileHealth::Healthy.can_become(ProfileHealth::Quarantined));
            profile.health = ProfileHealth::Quarantined;
            profile.quarantine = Some(Quarantine {
                cause,
                message: message.to_owned(),
                until: now + self.config.intensity.window,
            });
            self.metrics.pool_quarantined();
            tracing::warn!(
                profile_id,
                cause = cause.as_str(),
                %message,
                "profile quarantined after {} failures within {:?}",
                self.config.intensity.max_failures,
                self.config.intensity.window
            );
            recycle = profile.idle.iter().cloned().collect();
        }
        for id in recycle {
            state.recycle(&id);
        }
    }
}

impl SlotRegistry for PoolInner {
    fn slot_ended(&self, slot_id: &str) {
        let mut state = self.lock();
        if let Some(slot) = state.slots.get(slot_id) {
            if matches!(slot.state, SlotState::Idle | SlotState::Leased) {
                state.transition(slot_id, SlotState::Draining);
            }
            state.transition(slot_id, SlotState::Stopped);
        }
        drop(state);
        self.changed.notify_waiters();
    }
}

impl PoolInner {
    /// Starts what profiles need to keep their idle minimum, forgets learned profiles
    /// nobody leased from for a while, and says when to look again.
    fn replenish_once(self: &Arc<Self>) -> Instant {
        let now = Instant::now();
        let mut next = now + REPLENISH_TICK;
        let mut state = self.lock();
        if state.draining {
            return next;
        }
        let forgotten: Vec<String> = state
            .profiles
            .iter()
            .filter(|(id, p)| {
                !p.configured
                    && now.saturating_duration_since(p.last_lease) >= self.config.profile_ttl
                    && !state
                        .slots
                        .values()
                        .any(|s| s.profile_id == **id && s.state != SlotState::Idle)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in forgotten {
            let idle: Vec<String> = state.profiles[&id].idle.iter().cloned().collect();
            for slot_id in idle {
                state.recycle(&slot_id);
            }
            state.profiles.remove(&id);
            tracing::info!(profile_id = %id, "forgot an unused profile and its credential");
        }
        let ids: Vec<String> = state.profiles.keys().cloned().collect();
        for id in ids {
            let Some(profile) = state.profiles.get_mut(&id) else {
                continue;
            };
            profile.expire_quarantine(now);
            if profile.health != ProfileHealth::Healthy {
                continue;
            }
            if profile.next_start_at > now {
                next = next.min(profile.next_start_at);
                continue;
            }
            let wanted = profile.min_idle;
            let launch_as = profile.launch_as.clone();
            let warm = state
                .slots
                .values()
                .filter(|s| s.profile_id == id && matches!(s.state, SlotState::Idle | SlotState::Warming))
                .count();
            for _ in warm..wanted {
                if !state.has_capacity(&id, &self.config) {
                    break;
                }
                let ticket = state.reserve_slot(self, &id);
                tokio::spawn(warm_up(Arc::downgrade(self), ticket, launch_as.clone()));
            }
        }
        next
    }
}

/// Starts a process for the pool (no execution is waiting for it).
async fn warm_up(pool: Weak<PoolInner>, mut ticket: SlotTicket, launch_as: LaunchAs) {
    let Some(launch) = pool.upgrade().map(|p| p.launch.clone()) else {
        return;
    };
    let started = slot::start_process(&launch, &mut ticket, launch_as).await;
    let Some(pool) = pool.upgrade() else { return };
    pool.metrics
        .pool_process_started(started.as_ref().ok().map(|s| (s.timings.spawn, s.timings.initialize)));
    let mut started = match started {
        Ok(started) => started,
        Err(failure) => {
            tracing::warn!(slot_id = %ticket.slot_id, error = %failure.error, "warming an agent failed");
            let mut state = pool.lock();
            if let Some(profile) = state.profiles.get_mut(&ticket.profile_id) {
                profile.failed_starts += 1;
                let delay = intensity::backoff(profile.failed_starts, fastrand::f64());
                profile.next_start_at = Instant::now() + delay;
            }
            pool.record_failure(
                &mut state,
                &ticket.profile_id,
                failure.error.reason,
                &failure.error.message,
            );
            return;
        }
    };
    {
        let mut state = pool.lock();
        if !state.draining {
            if let Some(slot) = state.slots.get_mut(&ticket.slot_id) {
                slot.pid = Some(started.process.pid());
            }
            if let Some(profile) = state.profiles.get_mut(&ticket.profile_id) {
                profile.failed_starts = 0;
            }
            let (timings, initialized) = (started.timings, started.initialized);
            pool.park_idle(
                &mut state,
                IdleProcess {
                    process: started.process,
                    connection: started.connection,
                    inbound: started.inbound,
                },
                WarmParts {
                    ticket,
                    timings,
                    initialized,
                    sessions_served: 0,
                },
            );
            return;
        }
    }
    // The pool began draining while this process started.
    started.connection.close_stdin().await;
    started.process.stop(pool.launch.stop_grace).await;
}

/// The replenisher. Holds the pool only weakly, so it ends with the pool.
async fn replenish(pool: Weak<PoolInner>, changed: Arc<Notify>) {
    loop {
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let Some(next) = pool.upgrade().map(|inner| inner.replenish_once()) else {
            return;
        };
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(next)) => {}
        }
    }
}

impl Profile {
    fn new(key: ProfileKey, launch_as: LaunchAs, configured: bool, min_idle: usize, now: Instant) -> Self {
        Self {
            key,
            launch_as,
            configured,
            min_idle,
            last_lease: now,
            health: ProfileHealth::Healthy,
            quarantine: None,
            failures: FailureWindow::default(),
            failed_starts: 0,
            next_start_at: now,
            idle: VecDeque::new(),
        }
    }

    fn expire_quarantine(&mut self, now: Instant) {
        if self.quarantine.as_ref().is_some_and(|q| q.until <= now) {
            tracing::info!(profile_id = %self.key.id(), "quarantine window passed");
            self.heal();
        }
    }

    fn heal(&mut self) {
        if self.health == ProfileHealth::Quarantined {
            debug_assert!(ProfileHealth::Quarantined.can_become(ProfileHealth::Healthy));
            self.health = ProfileHealth::Healthy;
        }
        self.quarantine = None;
        self.failures.clear();
        self.failed_starts = 0;
        self.next_start_at = Instant::now();
    }
}

impl PoolState {
    /// The one place a slot changes state.
    fn transition(&mut self, slot_id: &str, next: SlotState) {
        let Some(slot) = self.slots.get_mut(slot_id) else {
            return;
        };
        if !slot.state.can_become(next) {
            tracing::error!(slot_id, from = %slot.state, to = %next, "illegal slot transition ignored");
            debug_assert!(false, "illegal slot transition {} -> {next}", slot.state);
            return;
        }
        let stopped = next == SlotState::Stopped;
        self.metrics.pool_slot_moved(
            slot.origin.as_str(),
            Some(slot.state.as_str()),
            (!stopped).then_some(next.as_str()),
        );
        slot.state = next;
        slot.since = Instant::now();
        if next != SlotState::Idle {
            slot.handoff = None;
            let profile_id = slot.profile_id.clone();
            if let Some(profile) = self.profiles.get_mut(&profile_id) {
                profile.idle.retain(|id| id != slot_id);
            }
        }
        if stopped {
            self.slots.remove(slot_id);
        }
    }

    /// Stops an idle slot: its watch sees the hand-off channel close.
    fn recycle(&mut self, slot_id: &str) {
        if self.slots.get(slot_id).is_some_and(|s| s.state == SlotState::Idle) {
            self.transition(slot_id, SlotState::Draining);
        }
    }

    fn live_count(&self, profile_id: Option<&str>) -> usize {
        self.slots
            .values()
            .filter(|s| profile_id.is_none_or(|p| s.profile_id == p))
            .filter(|s| matches!(s.state, SlotState::Warming | SlotState::Idle | SlotState::Leased))
            .count()
    }

    fn has_capacity(&self, profile_id: &str, config: &PoolConfig) -> bool {
        self.live_count(Some(profile_id)) < config.max_per_profile && self.live_count(None) < config.max_processes
    }

    /// With the node full, stops the oldest idle slot of another profile so this one
    /// can start. `false` if that would not make room.
    fn evict_for(&mut self, profile_id: &str, config: &PoolConfig) -> bool {
        if self.live_count(Some(profile_id)) >= config.max_per_profile {
            return false;
        }
        let victim = self
            .slots
            .iter()
            .filter(|(_, s)| s.state == SlotState::Idle && s.profile_id != profile_id)
            .min_by_key(|(_, s)| s.since)
            .map(|(id, _)| id.clone());
        match victim {
            Some(id) => {
                tracing::info!(slot_id = %id, "evicting an idle slot of another profile");
                self.recycle(&id);
                true
            }
            None => false,
        }
    }

    fn reserve_slot(&mut self, pool: &Arc<PoolInner>, profile_id: &str) -> SlotTicket {
        let slot_id = format!("slot-{}", uuid::Uuid::now_v7());
        let origin = ProfileOrigin::of(self.profiles.get(profile_id).is_some_and(|p| p.configured));
        self.metrics
            .pool_slot_moved(origin.as_str(), None, Some(SlotState::Warming.as_str()));
        self.slots.insert(
            slot_id.clone(),
            Slot {
                profile_id: profile_id.to_owned(),
                origin,
                state: SlotState::Warming,
                since: Instant::now(),
                pid: None,
                sessions_served: 0,
                handoff: None,
            },
        );
        pool.ticket(slot_id, profile_id.to_owned())
    }
}
