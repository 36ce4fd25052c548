//! The one way a turn's row settles: its terminal state, cause and usage, and the
//! terminal event that says so.

use cursor_runner_activity::{ActivityPayload, TurnEnding, TurnSettled};
use cursor_runner_domain::settlement::TurnEnd;
use cursor_runner_domain::state::TurnState;
use cursor_runner_store::TurnRecord;

use crate::attempts;

/// What a turn's normalizer closes its open items as when the turn ends in `state`.
pub(crate) fn normalizer_ending(state: TurnState) -> TurnEnding {
    match state {
        TurnState::Completed | TurnState::Running => TurnEnding::Completed,
        TurnState::Cancelled => TurnEnding::Cancelled,
        TurnState::Interrupted => TurnEnding::Interrupted,
        TurnState::Failed => TurnEnding::Failed,
    }
}

/// `record` settled as `end` says at `ended_at_ms`, and its terminal event (`end` already
/// [redacted](TurnEnd::redacted)). The usage is what the normalizer's `closing` payloads report.
pub(crate) fn settled(
    mut record: TurnRecord,
    end: TurnEnd,
    closing: &[ActivityPayload],
    ended_at_ms: i64,
) -> (TurnRecord, ActivityPayload) {
    let TurnEnd {
        state,
        stop_reason,
        failure,
        message,
    } = end;
    record.state = state;
    record.stop_reason = stop_reason.clone();
    record.failure_reason = failure.map(|f| f.as_str().to_owned());
    record.failure_message = message.clone();
    record.ended_at_ms = Some(ended_at_ms);
    record.usage = attempts::usage_column(closing.iter().find_map(|p| match p {
        ActivityPayload::UsageReported(usage) => Some(usage),
        _ => None,
    }));
    let settled = TurnSettled {
        turn_id: record.id.to_string(),
        stop_reason,
        failure_reason: failure,
        message,
    };
    let terminal = match state {
        TurnState::Completed | TurnState::Running => ActivityPayload::TurnCompleted(settled),
        TurnState::Cancelled => ActivityPayload::TurnCancelled(settled),
        TurnState::Interrupted => ActivityPayload::TurnInterrupted(settled),
        TurnState::Failed => ActivityPayload::TurnFailed(settled),
    };
    (record, terminal)
}

/// How long a settled turn ran, in milliseconds.
pub(crate) fn ran_ms(record: &TurnRecord) -> i64 {
    (record.ended_at_ms.unwrap_or(record.started_at_ms) - record.started_at_ms).max(0)
}
