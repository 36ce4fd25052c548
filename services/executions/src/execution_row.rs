//! The one way an execution's row is written after it exists: a compare-and-set on its
//! generation and its state, after the execution state machine admits the change — so
//! the machine of `state.rs` is the one that runs, not only the one that is tested.

use cursor_runner_store::{ExecutionRecord, Store, Write};

use cursor_runner_domain::error::EngineError;
use cursor_runner_domain::state::ExecutionState;

/// Checks that `from → record.state` is an execution transition (or no change of state).
pub(crate) fn check_transition(from: ExecutionState, record: &ExecutionRecord) -> Result<ExecutionState, EngineError> {
    let to = record.state;
    if from == to || from.can_become(to) {
        Ok(to)
    } else {
        Err(EngineError::internal(format!(
            "execution `{}`: {from} → {to} is not a transition of the execution state machine",
            record.id
        )))
    }
}

/// Writes `record` if its row is still at its generation and in `from`, after
/// [`check_transition`]. `Ok(false)`: it was not; nothing was written.
pub(crate) async fn save(
    store: &dyn Store,
    from: ExecutionState,
    record: &ExecutionRecord,
) -> Result<bool, EngineError> {
    check_transition(from, record)?;
    Ok(store.update_execution(from, record).await?)
}

/// `record` as a batch write from `from` (compare-and-set on state and generation), after
/// [`check_transition`]; with the state the row will be in.
pub(crate) fn write(from: ExecutionState, record: &ExecutionRecord) -> Result<(Write, ExecutionState), EngineError> {
    let to = check_transition(from, record)?;
    let write = Write::Execution {
        expected_state: from,
        record: record.clone(),
    };
    Ok((write, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: ExecutionState) -> ExecutionRecord {
        ExecutionRecord {
            id: "e-1".into(),
            state,
            ..ExecutionRecord::default()
        }
    }

    #[test]
    fn only_transitions_of_the_machine_or_no_change_pass_the_check() {
        for &from in ExecutionState::ALL {
            for &to in ExecutionState::ALL {
                let checked = check_transition(from, &record(to));
                assert_eq!(checked.is_ok(), from == to || from.can_become(to), "{from} → {to}");
            }
        }
    }
}
