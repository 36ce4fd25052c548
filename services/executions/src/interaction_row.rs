//! The one way an interaction's row changes state: a compare-and-set on its state and
//! generation (and its execution's), after the interaction state machine admits it.

use cursor_runner_activity::{ActivityPayload, RuntimeRequestEnded};
use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::state::InteractionState;
use cursor_runner_store::{InteractionRecord, Store, Write};

/// Checks that `from → record.state` is a documented interaction transition. Every
/// durable write of an interaction's state goes through [`transition`], so the state
/// machine of `state.rs` is the one that runs, not only the one that is tested.
pub fn check_transition(from: InteractionState, record: &InteractionRecord) -> Result<InteractionState, EngineError> {
    let to = record.state;
    if from.can_become(to) {
        Ok(to)
    } else {
        Err(EngineError::internal(format!(
            "interaction `{}`: {from} → {to} is not a transition of the interaction state machine",
            record.id
        )))
    }
}

/// Compare-and-sets an interaction from `from` to `record.state` (same generation),
/// after [`check_transition`]. `Ok(false)`: the row was no longer in `from`.
pub async fn transition(
    store: &dyn Store,
    from: InteractionState,
    record: &InteractionRecord,
) -> Result<bool, EngineError> {
    check_transition(from, record)?;
    Ok(store.transition_interaction(from, record).await?)
}

/// `record` as a batch write from `from` (compare-and-set on state and generation), after
/// [`check_transition`].
pub(crate) fn write(from: InteractionState, record: &InteractionRecord) -> Result<Write, EngineError> {
    check_transition(from, record)?;
    Ok(Write::Interaction {
        expected_state: from,
        record: record.clone(),
    })
}

/// The event that says an interaction ended (`cancelled`, or else `expired`), with the
/// full request when `with_request` (for a durable hand-off).
pub(crate) fn ended(record: &InteractionRecord, with_request: bool) -> ActivityPayload {
    let ended = RuntimeRequestEnded {
        interaction_id: record.id.to_string(),
        kind: record.kind,
        turn_id: record.turn_id.to_string(),
        reason: record.reason.map(|r| r.as_str().to_owned()).unwrap_or_default(),
        replay_allowed: false,
        delivery: record.delivery.map(|d| d.as_str().to_owned()).unwrap_or_default(),
        request: with_request.then(|| record.request.clone()),
    };
    if record.state == InteractionState::Cancelled {
        ActivityPayload::RuntimeRequestCancelled(ended)
    } else {
        ActivityPayload::RuntimeRequestExpired(ended)
    }
}

/// The refusal of an answer to an interaction that is no longer pending.
pub(crate) fn not_pending(record: &InteractionRecord) -> EngineError {
    let refusal = EngineError::precondition(
        Reason::InteractionNotPending,
        format!("interaction `{}` is {}", record.id, record.state),
    )
    .with("state", record.state.as_str());
    // Whether an answer reached the agent is part of why it can no longer be answered.
    match record.delivery {
        Some(delivery) => refusal.with("delivery", delivery.as_str()),
        None => refusal,
    }
}

/// A pending question of execution `e-1`, turn `turn-1`, for unit tests to vary.
#[cfg(test)]
pub(crate) fn pending_question() -> InteractionRecord {
    InteractionRecord {
        id: "i-1".into(),
        execution_id: "e-1".into(),
        tenant_id: "t".into(),
        generation: cursor_runner_store::Generation::FIRST,
        turn_id: "turn-1".into(),
        native_request_id: "0".into(),
        kind: cursor_runner_activity::InteractionKind::Question,
        state: InteractionState::Pending,
        etag: "etag-1".into(),
        request: serde_json::json!({}),
        outcome: None,
        answer_request_id: None,
        answer_fingerprint: None,
        reason: None,
        delivery: None,
        replay_allowed: false,
        created_at_ms: 1_000,
        updated_at_ms: 1_000,
    }
}

#[cfg(test)]
mod transition_tests {
    use super::*;

    fn record(state: InteractionState) -> InteractionRecord {
        InteractionRecord {
            state,
            ..pending_question()
        }
    }

    #[test]
    fn only_documented_transitions_pass_the_check_every_other_pair_is_refused() {
        for &from in InteractionState::ALL {
            for &to in InteractionState::ALL {
                let checked = check_transition(from, &record(to));
                assert_eq!(checked.is_ok(), from.can_become(to), "{from} → {to}");
            }
        }
    }
}
