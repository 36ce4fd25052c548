//! The replenisher: keeps each profile's idle minimum warm with a jittered backoff,
//! forgets learned profiles nobody leases, recycles old idle slots.

use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::Notify;

use crate::book::PoolState;
use crate::config::*;
use crate::inner::*;
use crate::slot::IdleProcess;
use crate::ticket::*;
use crate::warm::*;
use cursor_runner_domain::state::{ProfileHealth, SlotState};

/// A slot the replenisher reserved in `warming` for a profile, to start in the background.
pub(crate) struct Warmup {
    pub(crate) slot_id: String,
    pub(crate) profile_id: String,
    pub(crate) launch_as: LaunchAs,
}

impl PoolState {
    /// Forgets the learned profiles nobody leased from for `profile_ttl` and that have
    /// no slot but idle ones (stopped with them; their credential leaves memory). Returns
    /// their ids.
    pub(crate) fn forget_unused(&mut self, profile_ttl: Duration, now: Instant) -> Vec<String> {
        let forgotten: Vec<String> = self
            .profiles
            .iter()
            .filter(|(id, p)| {
                !p.configured
                    && now.saturating_duration_since(p.last_lease) >= profile_ttl
                    && !self
                        .slots
                        .values()
                        .any(|s| s.profile_id == **id && s.state != SlotState::Idle)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &forgotten {
            let idle: Vec<String> = self.profiles[id].idle.iter().cloned().collect();
            for slot_id in idle {
                self.recycle(&slot_id);
            }
            self.profiles.remove(id);
            tracing::info!(profile_id = %id, "forgot an unused profile and its credential");
        }
        forgotten
    }

    /// Reserves the slots that bring each healthy profile past its backoff up to its idle
    /// minimum (idle and warming count), within capacity. Also returns when the earliest
    /// backoff still running ends.
    pub(crate) fn plan_warmups(&mut self, config: &PoolConfig, now: Instant) -> (Vec<Warmup>, Option<Instant>) {
        let mut starts = Vec::new();
        let mut backoff_ends: Option<Instant> = None;
        let ids: Vec<String> = self.profiles.keys().cloned().collect();
        for id in ids {
            let Some(profile) = self.profiles.get_mut(&id) else {
                continue;
            };
            profile.expire_quarantine(now);
            if profile.health != ProfileHealth::Healthy {
                continue;
            }
            if profile.next_start_at > now {
                backoff_ends = Some(backoff_ends.map_or(profile.next_start_at, |t| t.min(profile.next_start_at)));
                continue;
            }
            let wanted = profile.min_idle;
            let launch_as = profile.launch_as.clone();
            let warm = self
                .slots
                .values()
                .filter(|s| s.profile_id == id && matches!(s.state, SlotState::Idle | SlotState::Warming))
                .count();
            for _ in warm..wanted {
                if !self.has_capacity(&id, config) {
                    break;
                }
                starts.push(Warmup {
                    slot_id: self.reserve_slot(&id),
                    profile_id: id.clone(),
                    launch_as: launch_as.clone(),
                });
            }
        }
        (starts, backoff_ends)
    }
}

impl PoolInner {
    /// Starts what profiles need to keep their idle minimum, forgets learned profiles
    /// nobody leased from for a while, and says when to look again.
    pub(crate) fn replenish_once(self: &Arc<Self>) -> Instant {
        let now = Instant::now();
        let tick = now + REPLENISH_TICK;
        let mut state = self.lock();
        if state.draining {
            return tick;
        }
        state.forget_unused(self.config.profile_ttl, now);
        let (starts, backoff_ends) = state.plan_warmups(&self.config, now);
        for Warmup {
            slot_id,
            profile_id,
            launch_as,
        } in starts
        {
            let ticket = self.ticket(slot_id, profile_id);
            tokio::spawn(warm_up(Arc::downgrade(self), ticket, launch_as));
        }
        backoff_ends.map_or(tick, |ends| ends.min(tick))
    }
}

/// Starts a process for the pool (no execution is waiting for it).
pub(crate) async fn warm_up(pool: Weak<PoolInner>, mut ticket: SlotTicket, launch_as: LaunchAs) {
    let Some(launch) = pool.upgrade().map(|p| p.launch.clone()) else {
        return;
    };
    let started = crate::slot::start_process(&launch, &mut ticket, launch_as).await;
    let Some(pool) = pool.upgrade() else { return };
    pool.metrics.process_started(started.as_ref().ok().map(|s| s.timings));
    let mut started = match started {
        Ok(started) => started,
        Err(failure) => {
            tracing::warn!(slot_id = %ticket.slot_id, error = %failure.error, "warming an agent failed");
            let mut state = pool.lock();
            if let Some(profile) = state.profiles.get_mut(&ticket.profile_id) {
                profile.start_failed(Instant::now(), fastrand::f64());
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
pub(crate) async fn replenish(pool: Weak<PoolInner>, changed: Arc<Notify>) {
    loop {
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let Some(next) = pool.upgrade().map(|inner| inner.replenish_once()) else {
            return;
        };
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep_until(next) => {}
        }
    }
}

#[cfg(test)]
#[path = "replenish_tests.rs"]
mod tests;
