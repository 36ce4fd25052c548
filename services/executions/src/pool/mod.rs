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

mod book;
mod config;
mod handle;
mod inner;
mod intensity;
mod profile;
mod replenish;
mod slot;
mod status;
mod ticket;
mod warm;
pub(crate) use config::LaunchAs;
pub use config::{LaunchSettings, PoolConfig, WarmProfile};
pub use handle::{MAX_LEASE_WAIT, POOL_RETRY_HINT};
pub(crate) use handle::{Pool, Reservation};
pub use intensity::{BACKOFF_BASE, BACKOFF_MAX, RestartIntensity};
pub use profile::FINGERPRINT_DISPLAY_CHARS;
pub use slot::IDLE_PROBE_METHOD;
pub(crate) use slot::exit_message;
pub use status::{PoolStatus, ProfileStatus, SlotStatus};
pub(crate) use ticket::SlotTicket;
pub(crate) use warm::WarmProcess;
