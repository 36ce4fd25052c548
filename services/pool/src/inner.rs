//! The pool's shared core: its configuration, its bookkeeping behind one lock, and what
//! reserving, parking and failing do to them.

use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::{Notify, oneshot};

use crate::book::*;
use crate::config::*;
use crate::observer::PoolObserver;
use crate::profile::{Fingerprinter, ProfileKey};
use crate::slot::*;
use crate::slot::{Handoff, IdleEnd, IdleProcess, IdleRules};
use crate::ticket::SlotRegistry;
use crate::ticket::*;
use crate::warm::*;
use cursor_runner_activity::Redactor;
use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::state::SlotState;
use cursor_runner_supervisor::agent_users::AgentUsers;

/// How often the replenisher looks at every profile even when nothing woke it.
pub(crate) const REPLENISH_TICK: Duration = Duration::from_secs(1);

pub(crate) struct PoolInner {
    pub(crate) config: PoolConfig,
    pub(crate) launch: Arc<LaunchSettings>,
    pub(crate) fingerprints: Fingerprinter,
    pub(crate) metrics: Arc<dyn PoolObserver>,
    pub(crate) state: Mutex<PoolState>,
    /// Capacity was freed, a slot became idle, or a profile needs replenishing.
    pub(crate) changed: Arc<Notify>,
}

pub(crate) enum Attempt {
    Handoff(Handoff<WarmParts>),
    Cold(ColdStart),
    Wait,
}

/// A slot reserved in `warming` for one execution.
pub struct ColdStart {
    pub(crate) pool: Weak<PoolInner>,
    pub(crate) ticket: SlotTicket,
    pub(crate) launch_as: LaunchAs,
}

impl ColdStart {
    /// Launches and `initialize`s the reserved slot's process. A failure counts against
    /// the profile's restart intensity and ends the slot.
    pub async fn start(self) -> Result<WarmProcess, StartFailure> {
        let ColdStart {
            pool,
            mut ticket,
            launch_as,
        } = self;
        let Some(pool) = pool.upgrade() else {
            return Err(StartFailure {
                error: EngineError::internal("the pool is gone"),
                process: None,
                initialized: None,
            });
        };
        let started = crate::slot::start_process(&pool.launch, &mut ticket, launch_as).await;
        pool.metrics.process_started(started.as_ref().ok().map(|s| s.timings));
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
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, PoolState> {
        self.state.lock()
    }

    /// One look at the pool for a lease, under the lock: what the book decides, with a
    /// ticket for a slot to start.
    pub(crate) fn attempt(
        self: &Arc<Self>,
        state: &mut PoolState,
        key: &ProfileKey,
        profile_id: &str,
        launch_as: &LaunchAs,
        home: Option<&std::path::Path>,
    ) -> Result<Attempt, EngineError> {
        let plan = state.plan_lease(key, profile_id, launch_as, home.is_some(), &self.config, Instant::now())?;
        let slot_id = match plan {
            LeasePlan::Handoff(handoff) => return Ok(Attempt::Handoff(handoff)),
            LeasePlan::Wait => return Ok(Attempt::Wait),
            LeasePlan::Start(slot_id) => slot_id,
        };
        let mut ticket = self.ticket(slot_id, profile_id.to_owned());
        if let Some(home) = home {
            ticket.home = home.to_path_buf();
        }
        Ok(Attempt::Cold(ColdStart {
            pool: Arc::downgrade(self),
            ticket,
            launch_as: launch_as.clone(),
        }))
    }

    pub(crate) fn ticket(self: &Arc<Self>, slot_id: String, profile_id: String) -> SlotTicket {
        let home = self.launch.state_dir.join("homes").join(&slot_id);
        let registry: Weak<dyn SlotRegistry> = Arc::downgrade(self) as Weak<dyn SlotRegistry>;
        let identity = self.launch.agent_users.as_ref().and_then(AgentUsers::take);
        SlotTicket::new(registry, slot_id, profile_id, home, identity)
    }

    /// Makes a slot idle and starts watching it.
    pub(crate) fn park_idle(self: &Arc<Self>, state: &mut PoolState, idle: IdleProcess, parts: WarmParts) {
        let slot_id = parts.ticket.slot_id.clone();
        let profile_id = parts.ticket.profile_id.clone();
        let (handoff_tx, handoff_rx) = oneshot::channel();
        state.park(&slot_id, parts.sessions_served, handoff_tx);
        let rules = IdleRules {
            recycle_at: Instant::now() + self.config.idle_ttl,
            probe_interval: self.config.probe_interval,
            probe_timeout: self.config.probe_timeout,
            stop_grace: self.launch.stop_grace,
            redactor: {
                let launch_as = state.profiles.get(&profile_id).map(|p| &p.launch_as);
                Redactor::new(launch_secrets(
                    launch_as.and_then(|l| l.credential.as_ref()),
                    launch_as.and_then(|l| l.agent.as_deref()),
                ))
            },
        };
        let pool = Arc::downgrade(self);
        self.changed.notify_waiters();
        tokio::spawn(async move {
            let (ending, parts) = crate::slot::watch_idle(idle, parts, handoff_rx, rules).await;
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

    /// Records an agent failure now, under the pool's restart intensity.
    pub(crate) fn record_failure(&self, state: &mut PoolState, profile_id: &str, cause: Reason, message: &str) {
        state.record_failure(profile_id, cause, message, self.config.intensity, Instant::now());
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
