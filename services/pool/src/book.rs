//! The pool's bookkeeping and its decisions: profiles, slots and their states, capacity
//! and eviction, which idle slot a lease takes, returns, drain, and the restart intensity
//! that quarantines a profile. No I/O: the pool acts on what these decide, and every slot
//! state change goes through `PoolState::transition`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio::time::Instant;

use crate::config::*;
use crate::intensity::{FailureWindow, RestartIntensity, backoff};
use crate::observer::PoolObserver;
use crate::profile::ProfileKey;
use crate::slot::Handoff;
use crate::warm::*;
use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::placement::{self, WarmKey};
use cursor_runner_domain::state::{ProfileHealth, ProfileOrigin, SlotState};

pub(crate) struct PoolState {
    pub(crate) metrics: Arc<dyn PoolObserver>,
    pub(crate) draining: bool,
    pub(crate) profiles: HashMap<String, Profile>,
    pub(crate) slots: HashMap<String, Slot>,
}

pub(crate) struct Profile {
    pub(crate) key: ProfileKey,
    /// Held in memory only, to start this profile's processes.
    pub(crate) launch_as: LaunchAs,
    pub(crate) configured: bool,
    pub(crate) min_idle: usize,
    pub(crate) last_lease: Instant,
    pub(crate) health: ProfileHealth,
    pub(crate) quarantine: Option<Quarantine>,
    pub(crate) failures: FailureWindow,
    /// Background starts that failed in a row (the backoff exponent).
    pub(crate) failed_starts: u32,
    pub(crate) next_start_at: Instant,
    /// Idle slot ids, oldest first.
    pub(crate) idle: VecDeque<String>,
}

pub(crate) struct Quarantine {
    pub(crate) cause: Reason,
    pub(crate) message: String,
    pub(crate) until: Instant,
}

pub(crate) struct Slot {
    pub(crate) profile_id: String,
    /// Fixed at reservation, so the slot's metric series is the same from start to end.
    pub(crate) origin: ProfileOrigin,
    pub(crate) state: SlotState,
    pub(crate) since: Instant,
    pub(crate) pid: Option<u32>,
    pub(crate) sessions_served: u32,
    /// While idle: the way to take the process from its watch. Dropping it recycles.
    pub(crate) handoff: Option<Handoff<WarmParts>>,
}

impl PoolState {
    /// The warm keys of the healthy profiles holding an idle slot, as this replica
    /// publishes them (none while draining: nothing new is placed on it).
    pub(crate) fn warm_keys(&self) -> Vec<WarmKey> {
        if self.draining {
            return Vec::new();
        }
        placement::published(
            self.profiles
                .values()
                .filter(|profile| !profile.idle.is_empty() && profile.health == ProfileHealth::Healthy)
                .map(|profile| profile.key.warm_key()),
        )
    }
}

/// Reasons that are the agent's fault and count against the restart intensity.
pub(crate) fn counts_as_failure(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::AgentExited
            | Reason::AgentUnresponsive
            | Reason::AuthRequired
            | Reason::ProtocolError
            | Reason::AgentLaunchFailed
    )
}

impl Profile {
    pub(crate) fn new(key: ProfileKey, launch_as: LaunchAs, configured: bool, min_idle: usize, now: Instant) -> Self {
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

    pub(crate) fn expire_quarantine(&mut self, now: Instant) {
        if self.quarantine.as_ref().is_some_and(|q| q.until <= now) {
            tracing::info!(profile_id = %self.key.id(), "quarantine window passed");
            self.heal();
        }
    }

    pub(crate) fn heal(&mut self) {
        if self.health == ProfileHealth::Quarantined {
            debug_assert!(ProfileHealth::Quarantined.can_become(ProfileHealth::Healthy));
            self.health = ProfileHealth::Healthy;
        }
        self.quarantine = None;
        self.failures.clear();
        self.failed_starts = 0;
        self.next_start_at = Instant::now();
    }

    /// A background start failed: the next waits out a backoff that grows with each
    /// failure in a row (`jitter` in [0, 1)).
    pub(crate) fn start_failed(&mut self, now: Instant, jitter: f64) {
        self.failed_starts += 1;
        self.next_start_at = now + backoff(self.failed_starts, jitter);
    }
}

/// What one look at the pool decided for a lease.
pub(crate) enum LeasePlan {
    /// The oldest idle slot of the profile, now `leased`: its process comes through this hand-off.
    Handoff(Handoff<WarmParts>),
    /// A new slot in `warming`, reserved for the caller to start.
    Start(String),
    /// No capacity, even by evicting: wait for some.
    Wait,
}

impl PoolState {
    pub(crate) fn new(metrics: Arc<dyn PoolObserver>, profiles: HashMap<String, Profile>) -> Self {
        Self {
            metrics,
            draining: false,
            profiles,
            slots: HashMap::new(),
        }
    }

    /// The one place a slot changes state.
    pub(crate) fn transition(&mut self, slot_id: &str, next: SlotState) {
        let Some(slot) = self.slots.get_mut(slot_id) else {
            return;
        };
        if !slot.state.can_become(next) {
            tracing::error!(slot_id, from = %slot.state, to = %next, "illegal slot transition ignored");
            debug_assert!(false, "illegal slot transition {} -> {next}", slot.state);
            return;
        }
        let stopped = next == SlotState::Stopped;
        self.metrics
            .slot_moved(slot.origin, Some(slot.state), (!stopped).then_some(next));
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
    pub(crate) fn recycle(&mut self, slot_id: &str) {
        if self.slots.get(slot_id).is_some_and(|s| s.state == SlotState::Idle) {
            self.transition(slot_id, SlotState::Draining);
        }
    }

    pub(crate) fn live_count(&self, profile_id: Option<&str>) -> usize {
        self.slots
            .values()
            .filter(|s| profile_id.is_none_or(|p| s.profile_id == p))
            .filter(|s| matches!(s.state, SlotState::Warming | SlotState::Idle | SlotState::Leased))
            .count()
    }

    pub(crate) fn has_capacity(&self, profile_id: &str, config: &PoolConfig) -> bool {
        self.live_count(Some(profile_id)) < config.max_per_profile && self.live_count(None) < config.max_processes
    }

    /// With the node full, stops the oldest idle slot of another profile so this one
    /// can start. `false` if that would not make room.
    pub(crate) fn evict_for(&mut self, profile_id: &str, config: &PoolConfig) -> bool {
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

    /// A new slot in `warming` for `profile_id`; its id.
    pub(crate) fn reserve_slot(&mut self, profile_id: &str) -> String {
        let slot_id = format!("slot-{}", uuid::Uuid::now_v7());
        let origin = ProfileOrigin::of(self.profiles.get(profile_id).is_some_and(|p| p.configured));
        self.metrics.slot_moved(origin, None, Some(SlotState::Warming));
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
        slot_id
    }

    /// One look at the pool for a lease of `key`'s profile (learned now if new): refused
    /// while draining or quarantined; else the oldest idle slot (none when the lease brings
    /// a recorded session's home: no warm slot was launched in it); else a new slot if
    /// there is capacity, evicting another profile's oldest idle slot if need be; else wait.
    pub(crate) fn plan_lease(
        &mut self,
        key: &ProfileKey,
        profile_id: &str,
        launch_as: &LaunchAs,
        own_home: bool,
        config: &PoolConfig,
        now: Instant,
    ) -> Result<LeasePlan, EngineError> {
        if self.draining {
            return Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::Draining,
                "the service is draining: it takes no new executions",
            ));
        }
        let profile = self
            .profiles
            .entry(profile_id.to_owned())
            .or_insert_with(|| Profile::new(key.clone(), launch_as.clone(), false, config.min_idle, now));
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
        let idle: Vec<String> = if own_home {
            Vec::new()
        } else {
            profile.idle.iter().cloned().collect()
        };
        for slot_id in idle {
            let Some(handoff) = self.slots.get_mut(&slot_id).and_then(|s| s.handoff.take()) else {
                continue;
            };
            self.transition(&slot_id, SlotState::Leased);
            return Ok(LeasePlan::Handoff(handoff));
        }
        if !self.has_capacity(profile_id, config) && !self.evict_for(profile_id, config) {
            return Ok(LeasePlan::Wait);
        }
        Ok(LeasePlan::Start(self.reserve_slot(profile_id)))
    }

    /// Whether a process of `profile_id` that served `sessions_served` sessions before the
    /// one ending now may serve another: not while draining, not past `sessions_per_process`,
    /// not for a quarantined (or forgotten) profile.
    pub(crate) fn accepts_return(&self, profile_id: &str, sessions_served: u32, config: &PoolConfig) -> bool {
        !self.draining
            && sessions_served + 1 < config.sessions_per_process
            && self
                .profiles
                .get(profile_id)
                .is_some_and(|p| p.health == ProfileHealth::Healthy)
    }

    /// Makes a slot idle, reachable through `handoff`, the newest of its profile's idle slots.
    pub(crate) fn park(&mut self, slot_id: &str, sessions_served: u32, handoff: Handoff<WarmParts>) {
        self.transition(slot_id, SlotState::Idle);
        let Some(slot) = self.slots.get_mut(slot_id) else {
            return;
        };
        slot.sessions_served = sessions_served;
        slot.handoff = Some(handoff);
        let profile_id = slot.profile_id.clone();
        if let Some(profile) = self.profiles.get_mut(&profile_id) {
            profile.idle.push_back(slot_id.to_owned());
        }
    }

    /// Stops leasing and stops every idle slot; leased ones end with their executions.
    pub(crate) fn drain(&mut self) {
        self.draining = true;
        let idle: Vec<String> = self
            .slots
            .iter()
            .filter(|(_, s)| s.state == SlotState::Idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            self.recycle(&id);
        }
    }

    /// Records an agent failure of a profile at `now`. Past the restart intensity a
    /// healthy profile is quarantined for the intensity's window and its idle slots
    /// stopped; `true` when this failure quarantined it. Failures that are not the
    /// agent's fault do not count.
    pub(crate) fn record_failure(
        &mut self,
        profile_id: &str,
        cause: Reason,
        message: &str,
        intensity: RestartIntensity,
        now: Instant,
    ) -> bool {
        if !counts_as_failure(cause) {
            return false;
        }
        self.metrics.failed(cause);
        let Some(profile) = self.profiles.get_mut(profile_id) else {
            return false;
        };
        let tripped = profile.failures.record(intensity, now);
        if !tripped || profile.health != ProfileHealth::Healthy {
            return false;
        }
        debug_assert!(ProfileHealth::Healthy.can_become(ProfileHealth::Quarantined));
        profile.health = ProfileHealth::Quarantined;
        profile.quarantine = Some(Quarantine {
            cause,
            message: message.to_owned(),
            until: now + intensity.window,
        });
        self.metrics.quarantined();
        tracing::warn!(
            profile_id,
            cause = cause.as_str(),
            %message,
            "profile quarantined after {} failures within {:?}",
            intensity.max_failures,
            intensity.window
        );
        let idle: Vec<String> = profile.idle.iter().cloned().collect();
        for id in idle {
            self.recycle(&id);
        }
        true
    }
}

#[cfg(test)]
#[path = "book_tests.rs"]
mod tests;
