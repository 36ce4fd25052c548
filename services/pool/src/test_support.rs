//! Builders for the unit tests of the pool's decisions: a book with profiles and slots
//! in chosen states, and an observer that records what the pool reported.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;

use cursor_runner_domain::error::Reason;
use cursor_runner_domain::state::{ProfileOrigin, SlotState};

use crate::book::{PoolState, Profile};
use crate::config::{LaunchAs, PoolConfig};
use crate::observer::PoolObserver;
use crate::profile::{Fingerprinter, ProfileKey};
use crate::slot::StartTimings;

/// What the pool reported, one line per report.
#[derive(Default)]
pub(crate) struct Seen(Mutex<Vec<String>>);

impl Seen {
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock())
    }
}

impl PoolObserver for Seen {
    fn slot_moved(&self, origin: ProfileOrigin, from: Option<SlotState>, to: Option<SlotState>) {
        let from = from.map_or("new", SlotState::as_str);
        let to = to.map_or("gone", SlotState::as_str);
        self.0.lock().push(format!("{} {from}->{to}", origin.as_str()));
    }

    fn leased(&self, warm: bool) {
        self.0.lock().push(format!("leased warm={warm}"));
    }

    fn process_started(&self, ready: Option<StartTimings>) {
        self.0.lock().push(format!("started ready={}", ready.is_some()));
    }

    fn failed(&self, reason: Reason) {
        self.0.lock().push(format!("failed {}", reason.as_str()));
    }

    fn quarantined(&self) {
        self.0.lock().push("quarantined".to_owned());
    }
}

/// Two processes per profile, three on the node; a process may serve two sessions.
pub(crate) fn config() -> PoolConfig {
    PoolConfig {
        max_per_profile: 2,
        max_processes: 3,
        sessions_per_process: 2,
        ..PoolConfig::default()
    }
}

/// A pool's book with nothing in it yet, and what it reports.
pub(crate) struct Book {
    pub(crate) state: PoolState,
    pub(crate) seen: Arc<Seen>,
    fingerprints: Fingerprinter,
}

impl Book {
    pub(crate) fn new() -> Self {
        let seen = Arc::new(Seen::default());
        Self {
            state: PoolState::new(seen.clone(), HashMap::new()),
            seen,
            fingerprints: Fingerprinter::random(),
        }
    }

    /// The key of `tenant`'s profile (no credential, the default agent).
    pub(crate) fn key(&self, tenant: &str) -> (ProfileKey, String) {
        let key = self.fingerprints.key("unpinned", tenant, &LaunchAs::default());
        let id = key.id();
        (key, id)
    }

    /// `tenant`'s profile, known to the pool (an operator's when `configured`); its id.
    pub(crate) fn profile(&mut self, tenant: &str, configured: bool, min_idle: usize) -> String {
        let (key, id) = self.key(tenant);
        let profile = Profile::new(key, LaunchAs::default(), configured, min_idle, Instant::now());
        self.state.profiles.insert(id.clone(), profile);
        id
    }

    /// A slot of `profile_id` brought to `state` the way the pool would; its id.
    pub(crate) fn slot(&mut self, profile_id: &str, state: SlotState) -> String {
        let id = self.state.reserve_slot(profile_id);
        match state {
            SlotState::Warming => {}
            SlotState::Idle => {
                let (handoff, _) = oneshot::channel();
                self.state.park(&id, 0, handoff);
            }
            SlotState::Leased => self.state.transition(&id, SlotState::Leased),
            SlotState::Draining => {
                self.state.transition(&id, SlotState::Leased);
                self.state.transition(&id, SlotState::Draining);
            }
            SlotState::Stopped => self.state.transition(&id, SlotState::Stopped),
        }
        id
    }

    /// The state of a slot the book still holds.
    pub(crate) fn state_of(&self, slot_id: &str) -> Option<SlotState> {
        self.state.slots.get(slot_id).map(|s| s.state)
    }
}
