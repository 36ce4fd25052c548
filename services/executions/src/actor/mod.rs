//! One execution's actor: it owns the agent process and its connection, and is the
//! only writer of the execution's turns, interactions and events. Commands from the
//! engine and messages from the agent are handled one at a time, so fences and state
//! transitions never race inside one replica; the store's compare-and-set updates
//! guard them across replicas and restarts.

mod checkpoint;
mod data;
mod inbound;
mod interactions;
mod launch;
mod lifecycle;
mod run;
mod session;
mod timers;
mod turns;

pub(crate) use data::{Command, ConfigChange, Reply, exited};
pub(crate) use launch::{Launch, fail_execution, launch};
