//! The supervised pool of agent processes, and what bringing one to ready takes:
//! launching it (`LaunchSettings`, an operator's `agent_profile`), its wire capture
//! from the first byte, and the `initialize` half of the ACP handshake. It never sees
//! the engine's configuration, and reports what it does through a [`PoolObserver`].
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
//! Slot states follow `SlotState` (`warming → idle → leased → draining → stopped`);
//! every change goes through `PoolState::transition`.

pub mod agent_profile;
mod book;
mod config;
mod handle;
pub mod handshake;
mod inner;
mod intensity;
mod observer;
mod profile;
mod replenish;
mod slot;
mod status;
mod ticket;
mod warm;
pub mod wire_capture;

pub use config::{LaunchAs, LaunchSettings, PoolConfig, WarmProfile, launch_secrets};
pub use handle::{MAX_LEASE_WAIT, POOL_RETRY_HINT, Pool, Reservation};
pub use inner::ColdStart;
pub use intensity::{BACKOFF_BASE, BACKOFF_MAX, RestartIntensity};
pub use observer::PoolObserver;
pub use profile::FINGERPRINT_DISPLAY_CHARS;
pub use slot::{FailedHandshake, FailedProcess, IDLE_PROBE_METHOD, StartFailure, StartTimings, exit_message};
pub use status::{PoolStatus, ProfileStatus, SlotStatus};
pub use ticket::SlotTicket;
pub use warm::WarmProcess;

#[cfg(test)]
mod test_support;
