//! The label sets and histogram buckets of the service's metrics: small closed sets,
//! never an execution, turn, interaction or tenant id.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::histogram::Histogram;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: &'static str,
}

/// A pool slot's state and its profile's origin (`configured` by the operator or
/// `learned` from a `CreateExecution`): the profile id itself names a tenant and a
/// credential digest, an unbounded set that `GetPoolStatus` reports instead.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlotLabels {
    pub state: &'static str,
    pub profile: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FamilyLabel {
    pub family: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindStateLabels {
    pub kind: &'static str,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnsweredByLabel {
    pub answered_by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabel {
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseKindLabel {
    /// `warm` (an idle slot) or `cold` (a process started for the lease).
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhatLabel {
    pub what: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpdateFieldLabels {
    /// A known `sessionUpdate` kind (a closed set).
    pub update_kind: &'static str,
    /// The field's name, reduced to `[A-Za-z0-9_]`, at most 64 characters; past
    /// [`MAX_UNCONSUMED_FIELD_SERIES`] distinct ones, `other`.
    pub field: String,
}

/// Distinct named (update kind, field) series `cursor_runner_unconsumed_fields_total` may
/// grow to (field names come from the agent, so the label set is bounded here); past it,
/// one `other` series per update kind.
pub const MAX_UNCONSUMED_FIELD_SERIES: usize = 128;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DistributionLabel {
    /// `pinned` or `unpinned`: never the digest itself.
    pub distribution: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabel {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// `spawn` (the process started) or `initialize` (its ACP handshake).
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabel {
    pub version: &'static str,
}

/// A turn's terminal states (`state` of the turn metrics).
pub(super) const SETTLED_STATES: [&str; 4] = ["completed", "cancelled", "interrupted", "failed"];
/// Interaction kinds and terminal states (`kind`, `state` of the interaction metrics).
pub(super) const INTERACTION_KINDS: [&str; 3] = ["question", "plan", "permission"];
pub(super) const INTERACTION_END_STATES: [&str; 3] = ["delivered", "cancelled", "expired"];

/// Turn durations, seconds: from a quick answer to hours of work.
pub(super) const TURN_BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0,
];
/// How long an interaction waited for a human, seconds.
pub(super) const WAIT_BUCKETS: [f64; 11] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0,
];
/// Short internal latencies (store operations, pipe writes), seconds.
pub(super) const FAST_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.0,
];
/// Events between an execution's head and the control plane's acknowledgement.
pub(super) const LAG_BUCKETS: [f64; 10] = [0.0, 1.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0, 100000.0];

pub(super) fn turn_histogram() -> Histogram {
    Histogram::new(TURN_BUCKETS.iter().copied())
}

pub(super) fn lease_histogram() -> Histogram {
    Histogram::new(LEASE_BUCKETS.iter().copied())
}

pub(super) fn wait_histogram() -> Histogram {
    Histogram::new(WAIT_BUCKETS.iter().copied())
}

pub(super) fn fast_histogram() -> Histogram {
    Histogram::new(FAST_BUCKETS.iter().copied())
}

/// Lease latency buckets, seconds: a warm lease takes milliseconds, a cold one (a Node
/// runtime starting) up to tens of seconds.
pub(super) const LEASE_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];
