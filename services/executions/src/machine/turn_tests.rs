//! The turn machine, table-style: every phase × input with the effects it must give.

use std::time::Duration;

use cursor_runner_activity::TurnFailureReason;
use cursor_runner_domain::interaction::InteractionReason;
use cursor_runner_domain::settlement::{Loss, PromptOutcome, TurnEnd};
use cursor_runner_domain::state::TurnState;
use tokio::time::Instant;

use super::turn::*;

const GRACE: Duration = Duration::from_secs(15);
const PROMPT: i64 = 7;

fn running(t0: Instant) -> Turn {
    Turn::running(
        Some(PROMPT),
        Some((Duration::from_secs(60), TurnFailureReason::DeadlineExceeded)),
        t0,
    )
}

fn cancelling(t0: Instant, cause: CancelCause) -> Turn {
    let mut turn = running(t0);
    turn.cancel(cause, t0, GRACE);
    turn
}

fn settled(effects: &[TurnEffect]) -> &TurnEnd {
    match effects {
        [TurnEffect::Settle(end)] => end,
        other => panic!("expected one settlement, got {other:?}"),
    }
}

#[test]
fn a_running_turn_has_its_bound_and_no_grace_or_cause() {
    let t0 = Instant::now();
    let phase = running(t0).phase();
    assert!(phase.is_running());
    assert_eq!(
        phase.bound(),
        Some((t0 + Duration::from_secs(60), TurnFailureReason::DeadlineExceeded))
    );
    assert_eq!((phase.grace_ends(), phase.interrupted_by()), (None, None));
}

#[test]
fn cancelling_a_running_turn_sends_the_cancel_ends_its_interactions_and_starts_the_grace() {
    let t0 = Instant::now();
    let table = [
        (CancelCause::Caller, "turn_cancelled", None),
        (CancelCause::Handoff, "durable_handoff", None),
        (CancelCause::WorkspacePolicy, "workspace_policy", None),
        (
            CancelCause::Interrupted(TurnFailureReason::AgentIdle),
            "agent_idle",
            Some(TurnFailureReason::AgentIdle),
        ),
        (
            CancelCause::Interrupted(TurnFailureReason::ServiceDraining),
            "service_draining",
            Some(TurnFailureReason::ServiceDraining),
        ),
    ];
    for (cause, reason, interrupted_by) in table {
        let mut turn = running(t0);
        let effects = turn.cancel(cause, t0, GRACE);
        assert_eq!(
            effects,
            [
                TurnEffect::SendCancel,
                TurnEffect::EndPending(InteractionReason::parse(reason).unwrap())
            ],
            "{cause:?}"
        );
        let phase = turn.phase();
        assert_eq!(phase.grace_ends(), Some(t0 + GRACE));
        assert_eq!(phase.bound(), None, "the bound is dropped once cancelled");
        assert_eq!(phase.interrupted_by(), interrupted_by);
    }
}

#[test]
fn a_turn_being_cancelled_keeps_its_grace_and_sends_nothing_again() {
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(5);
    let causes = [
        CancelCause::Caller,
        CancelCause::Handoff,
        CancelCause::WorkspacePolicy,
        CancelCause::Interrupted(TurnFailureReason::AgentIdle),
        CancelCause::Interrupted(TurnFailureReason::ReplacedByNewTurn),
    ];
    for first in causes {
        for second in causes {
            let mut turn = cancelling(t0, first);
            assert!(
                turn.cancel(second, later, GRACE).is_empty(),
                "{first:?} then {second:?}"
            );
            assert_eq!(turn.phase().grace_ends(), Some(t0 + GRACE));
        }
    }
}

#[test]
fn a_replacement_turns_a_cancel_already_under_way_into_an_interruption() {
    let t0 = Instant::now();
    let replaced = CancelCause::Interrupted(TurnFailureReason::ReplacedByNewTurn);
    let mut turn = cancelling(t0, CancelCause::Caller);
    turn.cancel(replaced, t0, GRACE);
    assert_eq!(
        turn.phase().interrupted_by(),
        Some(TurnFailureReason::ReplacedByNewTurn)
    );
    // The service's own timers do not rewrite why a turn is being cancelled.
    let mut turn = cancelling(t0, CancelCause::Caller);
    turn.cancel(CancelCause::Interrupted(TurnFailureReason::AgentIdle), t0, GRACE);
    assert_eq!(turn.phase().interrupted_by(), None);
}

#[test]
fn the_bound_cancels_a_running_turn_only_once_it_is_due() {
    let t0 = Instant::now();
    let mut turn = running(t0);
    assert!(turn.bound_reached(t0 + Duration::from_secs(59), GRACE).is_empty());
    let due = t0 + Duration::from_secs(60);
    let effects = turn.bound_reached(due, GRACE);
    assert_eq!(
        effects,
        [
            TurnEffect::SendCancel,
            TurnEffect::EndPending(InteractionReason::parse("deadline_exceeded").unwrap())
        ]
    );
    assert_eq!(turn.phase().interrupted_by(), Some(TurnFailureReason::DeadlineExceeded));
    assert!(
        turn.bound_reached(due, GRACE).is_empty(),
        "a cancelled turn has no bound"
    );
    let mut unbounded = Turn::running(Some(PROMPT), None, t0);
    assert!(unbounded.bound_reached(due, GRACE).is_empty());
}

#[test]
fn only_the_turn_s_own_prompt_settles_it() {
    let t0 = Instant::now();
    let turn = running(t0);
    assert!(
        turn.prompt_answered(PROMPT + 1, PromptOutcome::Stopped(Some("end_turn")))
            .is_empty()
    );
    let unsent = Turn::running(None, None, t0);
    assert!(unsent.prompt_answered(PROMPT, PromptOutcome::Stopped(None)).is_empty());
    let end = turn.prompt_answered(PROMPT, PromptOutcome::Stopped(Some("end_turn")));
    assert_eq!(settled(&end).state, TurnState::Completed);
}

#[test]
fn a_cancelled_stop_settles_cancelled_for_the_caller_and_interrupted_for_the_service() {
    let t0 = Instant::now();
    let stop = || PromptOutcome::Stopped(Some("cancelled"));
    let by_caller = cancelling(t0, CancelCause::Caller);
    assert_eq!(
        settled(&by_caller.prompt_answered(PROMPT, stop())).state,
        TurnState::Cancelled
    );
    let by_service = cancelling(t0, CancelCause::Interrupted(TurnFailureReason::ServiceDraining));
    let end = by_service.prompt_answered(PROMPT, stop());
    assert_eq!(settled(&end).state, TurnState::Interrupted);
    assert_eq!(settled(&end).failure, Some(TurnFailureReason::ServiceDraining));
}

#[test]
fn when_the_grace_runs_out_the_agent_is_stopped_and_everything_settles_lost_saying_why() {
    let t0 = Instant::now();
    assert!(
        running(t0).grace_ran_out(GRACE).is_empty(),
        "a running turn has no grace"
    );
    let turn = cancelling(t0, CancelCause::Interrupted(TurnFailureReason::DeadlineExceeded));
    let effects = turn.grace_ran_out(GRACE);
    match &effects[..] {
        [
            TurnEffect::StopAgent,
            TurnEffect::EndPending(InteractionReason::TurnSettled),
            TurnEffect::SettleLoss(Loss::CancelTimedOut { cause, message }),
        ] => {
            assert_eq!(*cause, Some(TurnFailureReason::DeadlineExceeded));
            assert!(message.starts_with("cancelled at the turn's deadline; "), "{message}");
            assert!(message.contains("did not settle within 15s"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let by_caller = cancelling(t0, CancelCause::Caller).grace_ran_out(GRACE);
    assert!(matches!(
        &by_caller[2],
        TurnEffect::SettleLoss(Loss::CancelTimedOut { cause: None, message }) if message.starts_with("the agent did not settle")
    ));
}

#[test]
fn interactions_pending_at_settlement_end_as_cancelled_only_with_a_cancelled_turn() {
    for state in [
        TurnState::Completed,
        TurnState::Failed,
        TurnState::Interrupted,
        TurnState::Cancelled,
    ] {
        let expected = if state == TurnState::Cancelled {
            "turn_cancelled"
        } else {
            "turn_settled"
        };
        assert_eq!(pending_reason_at_settle(state).as_str(), expected, "{state}");
    }
}
