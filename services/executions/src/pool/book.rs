//! The pool's bookkeeping: profiles, slots and their states, capacity and eviction —
//! every slot state change goes through `PoolState::transition`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio::time::Instant;

use super::config::*;
use super::intensity::FailureWindow;
use super::profile::ProfileKey;
use super::slot::Handoff;
use super::warm::*;
use crate::metrics::Metrics;
use cursor_runner_domain::error::Reason;
use cursor_runner_domain::state::{ProfileHealth, ProfileOrigin, SlotState};

pub(super) struct PoolState {
    pub(super) metrics: Arc<Metrics>,
    pub(super) draining: bool,
    pub(super) profiles: HashMap<String, Profile>,
    pub(super) slots: HashMap<String, Slot>,
}

pub(super) struct Profile {
    pub(super) key: ProfileKey,
    /// Held in memory only, to start this profile's processes.
    pub(super) launch_as: LaunchAs,
    pub(super) configured: bool,
    pub(super) min_idle: usize,
    pub(super) last_lease: Instant,
    pub(super) health: ProfileHealth,
    pub(super) quarantine: Option<Quarantine>,
    pub(super) failures: FailureWindow,
    /// Background starts that failed in a row (the backoff exponent).
    pub(super) failed_starts: u32,
    pub(super) next_start_at: Instant,
    /// Idle slot ids, oldest first.
    pub(super) idle: VecDeque<String>,
}

pub(super) struct Quarantine {
    pub(super) cause: Reason,
    pub(super) message: String,
    pub(super) until: Instant,
}

pub(super) struct Slot {
    pub(super) profile_id: String,
    /// Fixed at reservation, so the slot's metric series is the same from start to end.
    pub(super) origin: ProfileOrigin,
    pub(super) state: SlotState,
    pub(super) since: Instant,
    pub(super) pid: Option<u32>,
    pub(super) sessions_served: u32,
    /// While idle: the way to take the process from its watch. Dropping it recycles.
    pub(super) handoff: Option<Handoff<WarmParts>>,
}

/// Reasons that are the agent's fault and count against the restart intensity.
pub(super) fn counts_as_failure(reason: Reason) -> bool {
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
    pub(super) fn new(key: ProfileKey, launch_as: LaunchAs, configured: bool, min_idle: usize, now: Instant) -> Self {
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

    pub(super) fn expire_quarantine(&mut self, now: Instant) {
        if self.quarantine.as_ref().is_some_and(|q| q.until <= now) {
            tracing::info!(profile_id = %self.key.id(), "quarantine window passed");
            self.heal();
        }
    }

    pub(super) fn heal(&mut self) {
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
    pub(super) fn transition(&mut self, slot_id: &str, next: SlotState) {
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
    pub(super) fn recycle(&mut self, slot_id: &str) {
        if self.slots.get(slot_id).is_some_and(|s| s.state == SlotState::Idle) {
            self.transition(slot_id, SlotState::Draining);
        }
    }

    pub(super) fn live_count(&self, profile_id: Option<&str>) -> usize {
        self.slots
            .values()
            .filter(|s| profile_id.is_none_or(|p| s.profile_id == p))
            .filter(|s| matches!(s.state, SlotState::Warming | SlotState::Idle | SlotState::Leased))
            .count()
    }

    pub(super) fn has_capacity(&self, profile_id: &str, config: &PoolConfig) -> bool {
        self.live_count(Some(profile_id)) < config.max_per_profile && self.live_count(None) < config.max_processes
    }

    /// With the node full, stops the oldest idle slot of another profile so this one
    /// can start. `false` if that would not make room.
    pub(super) fn evict_for(&mut self, profile_id: &str, config: &PoolConfig) -> bool {
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
    pub(super) fn reserve_slot(&mut self, profile_id: &str) -> String {
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
        slot_id
    }
}
