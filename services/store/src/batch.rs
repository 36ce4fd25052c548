//! A batch: one execution's row writes and the events they produce, committed together
//! in one transaction or not at all.

use crate::records::*;
use cursor_runner_domain::state::{ExecutionState, InteractionState};

/// Writes that land together with the events they produce, or not at all: each write
/// compare-and-sets as its single-statement counterpart does, and the events append
/// fenced by their generation. A settlement that touches several rows is one batch, so a
/// crash can never leave part of it behind (a turn `running` under a `lost` execution, a
/// row settled without its event).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    pub writes: Vec<Write>,
    /// One execution's events of one generation, in sequence order.
    pub events: Vec<EventRecord>,
}

/// One write of a [`Batch`]: an insert fenced by the execution's generation, or a
/// compare-and-set.
// A batch holds a handful of writes, built once per step and never kept in bulk: boxing the
// execution's record would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// As [`Store::insert_turn`](crate::Store::insert_turn).
    InsertTurn(TurnRecord),
    /// As [`Store::insert_interaction`](crate::Store::insert_interaction).
    InsertInteraction(InteractionRecord),
    /// As [`Store::update_execution`](crate::Store::update_execution).
    Execution {
        expected_state: ExecutionState,
        record: ExecutionRecord,
    },
    /// As [`Store::settle_turn`](crate::Store::settle_turn).
    SettleTurn(TurnRecord),
    /// As [`Store::transition_interaction`](crate::Store::transition_interaction).
    Interaction {
        expected_state: InteractionState,
        record: InteractionRecord,
    },
    /// Claims a free idempotency key for this incarnation, as
    /// [`Store::claim_idempotency`](crate::Store::claim_idempotency) does; a key that is
    /// taken (by any operation) fails the whole batch with
    /// [`StoreError::KeyTaken`](crate::StoreError::KeyTaken). It lets a call's first
    /// commit be its claim: nothing the call does is exposed before that commit.
    ClaimIdempotency {
        key: IdempotencyKey,
        digest: String,
        token: ClaimToken,
    },
    /// Completes this incarnation's claim, as
    /// [`Store::complete_idempotency`](crate::Store::complete_idempotency) does: the
    /// outcome is stored in the transaction that makes it true.
    CompleteIdempotency {
        key: IdempotencyKey,
        response: serde_json::Value,
    },
}

impl Write {
    /// Whether it claims or completes an idempotency key.
    pub fn is_idempotency(&self) -> bool {
        matches!(self, Self::ClaimIdempotency { .. } | Self::CompleteIdempotency { .. })
    }
}
