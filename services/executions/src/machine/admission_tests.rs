//! `StartTurn`'s admission, table-style: every turn phase × start variant × drain × queue
//! with the effects it must give, then the queued replacement's life.

use std::time::Duration;

use cursor_runner_activity::TurnFailureReason;
use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::interaction::InteractionReason;
use cursor_runner_domain::prompt::{Prompt, PromptBlock, PromptCapabilities};
use cursor_runner_store::ExecutionRecord;
use tokio::time::Instant;

use super::turn::*;

const TURN: &str = "turn-1";
const GRACE: Duration = Duration::from_secs(15);
const REPLACED: CancelCause = CancelCause::Interrupted(TurnFailureReason::ReplacedByNewTurn);

fn prompt(text: &str) -> Prompt {
    Prompt::new(vec![PromptBlock::Text(text.into())]).unwrap()
}

fn image_prompt() -> Prompt {
    let png = b"\x89PNG\r\n\x1a\n".to_vec();
    Prompt::new(vec![PromptBlock::Image {
        data: png,
        mime_type: "image/png".into(),
        uri: None,
    }])
    .unwrap()
}

fn workspace_refusal() -> EngineError {
    EngineError::precondition(Reason::WorkspacePolicy, "hooks in the workspace")
}

/// The execution a start is admitted against.
struct Execution {
    record: ExecutionRecord,
    draining: bool,
    active_turn: Option<&'static str>,
}

impl Execution {
    fn idle() -> Self {
        Self {
            record: ExecutionRecord::default(),
            draining: false,
            active_turn: None,
        }
    }

    fn with_turn() -> Self {
        Self {
            active_turn: Some(TURN),
            ..Self::idle()
        }
    }

    fn facts(&self) -> StartFacts<'_> {
        StartFacts {
            record: &self.record,
            capabilities: PromptCapabilities::default(),
            draining: self.draining,
            active_turn: self.active_turn,
        }
    }
}

/// Feeds `input`, then `workspace` whenever the machine asks for the check: every
/// effect in order, the checks included.
fn decide(
    admission: &mut Admission,
    execution: &Execution,
    input: StartInput,
    workspace: Result<(), EngineError>,
) -> Vec<StartEffect> {
    let mut effects = admission.handle(input, execution.facts());
    if effects.last() == Some(&StartEffect::CheckWorkspace) {
        effects.extend(admission.handle(StartInput::WorkspaceChecked(workspace), execution.facts()));
    }
    effects
}

fn start(admission: &mut Admission, execution: &Execution, replace_active: bool) -> Vec<StartEffect> {
    let input = StartInput::StartTurn {
        prompt: prompt("go"),
        replace_active,
    };
    decide(admission, execution, input, Ok(()))
}

fn refused_with(effects: &[StartEffect]) -> (Starter, Reason) {
    match effects {
        [StartEffect::Refuse(starter, refusal)] => (*starter, refusal.reason),
        [StartEffect::CheckWorkspace, StartEffect::Refuse(starter, refusal)] => (*starter, refusal.reason),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The phase the turn in progress is in, as admission sees the execution.
#[derive(Debug, Clone, Copy)]
enum InProgress {
    None,
    Running,
    Cancelling,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expected {
    /// `[CheckWorkspace, Start { Caller, .. }]`.
    Starts,
    /// `[CheckWorkspace, Queue, Cancel(replacement)]`.
    Queues,
    /// `[Refuse(Caller, reason)]`, the workspace never read.
    Refused(Reason),
}

#[test]
fn every_turn_phase_and_start_variant_gives_the_documented_effects() {
    use Expected::*;
    use InProgress::{Cancelling, Running};
    // Admission sees a turn in progress alike in both phases; what the replacement's cancel
    // does to each is the turn machine's (the next test).
    let table = [
        // (turn in progress, replace_active, draining, a replacement queued) → expected
        (InProgress::None, false, false, false, Starts),
        (InProgress::None, true, false, false, Starts),
        (InProgress::None, false, true, false, Refused(Reason::Draining)),
        (InProgress::None, true, true, false, Refused(Reason::Draining)),
        (Running, false, false, false, Refused(Reason::TurnActive)),
        (Running, false, true, false, Refused(Reason::Draining)),
        (Running, true, false, false, Queues),
        // A drain refuses a replacement before it touches the turn in progress.
        (Running, true, true, false, Refused(Reason::Draining)),
        (Running, false, false, true, Refused(Reason::TurnActive)),
        (Running, false, true, true, Refused(Reason::Draining)),
        (Running, true, false, true, Refused(Reason::TurnActive)),
        (Running, true, true, true, Refused(Reason::Draining)),
        (Cancelling, false, false, false, Refused(Reason::TurnActive)),
        (Cancelling, false, true, false, Refused(Reason::Draining)),
        (Cancelling, true, false, false, Queues),
        // The drain's own cancel keeps its reason: no replacement relabels it.
        (Cancelling, true, true, false, Refused(Reason::Draining)),
        (Cancelling, true, false, true, Refused(Reason::TurnActive)),
    ];
    for (in_progress, replace_active, draining, queued, expected) in table {
        let case = format!("{in_progress:?} replace_active={replace_active} draining={draining} queued={queued}");
        let execution = Execution {
            draining,
            ..match in_progress {
                InProgress::None => Execution::idle(),
                Running | Cancelling => Execution::with_turn(),
            }
        };
        let mut admission = Admission::default();
        if queued {
            let ahead = Execution::with_turn();
            assert_eq!(start(&mut admission, &ahead, true).len(), 3, "{case}");
        }
        let effects = start(&mut admission, &execution, replace_active);
        match expected {
            Starts => assert!(
                matches!(
                    &effects[..],
                    [
                        StartEffect::CheckWorkspace,
                        StartEffect::Start {
                            starter: Starter::Caller,
                            ..
                        }
                    ]
                ),
                "{case}: {effects:?}"
            ),
            Queues => assert_eq!(
                effects,
                [
                    StartEffect::CheckWorkspace,
                    StartEffect::Queue,
                    StartEffect::Cancel(REPLACED)
                ],
                "{case}"
            ),
            Refused(reason) => match &effects[..] {
                [StartEffect::Refuse(Starter::Caller, refusal)] => assert_eq!(refusal.reason, reason, "{case}"),
                other => panic!("{case}: expected a refusal without a workspace check, got {other:?}"),
            },
        }
        assert_eq!(
            admission.has_queued(),
            queued || expected == Queues,
            "{case}: what is queued"
        );
    }
}

#[test]
fn a_refused_plain_start_names_the_turn_in_progress() {
    let effects = start(&mut Admission::default(), &Execution::with_turn(), false);
    match &effects[..] {
        [StartEffect::Refuse(Starter::Caller, refusal)] => {
            assert_eq!(refusal.reason, Reason::TurnActive);
            assert!(refusal.metadata.contains(&("turn_id".into(), TURN.into())));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_replacement_s_cancel_interrupts_a_running_turn_and_relabels_one_being_cancelled() {
    let t0 = Instant::now();
    let mut running = Turn::running(Some(7), None, t0);
    assert_eq!(
        running.cancel(REPLACED, t0, GRACE),
        [
            TurnEffect::SendCancel,
            TurnEffect::EndPending(InteractionReason::parse("replaced_by_new_turn").unwrap())
        ]
    );
    let mut cancelling = Turn::running(Some(7), None, t0);
    cancelling.cancel(CancelCause::Caller, t0, GRACE);
    assert!(cancelling.cancel(REPLACED, t0, GRACE).is_empty());
    assert_eq!(
        cancelling.phase().interrupted_by(),
        Some(TurnFailureReason::ReplacedByNewTurn)
    );
}

#[test]
fn content_the_agent_does_not_take_is_refused_before_the_drain_or_the_turn_in_progress() {
    for draining in [false, true] {
        for replace_active in [false, true] {
            let execution = Execution {
                draining,
                ..Execution::with_turn()
            };
            let input = StartInput::StartTurn {
                prompt: image_prompt(),
                replace_active,
            };
            let mut admission = Admission::default();
            let effects = decide(&mut admission, &execution, input, Ok(()));
            let case = format!("draining={draining} replace_active={replace_active}");
            match &effects[..] {
                [StartEffect::Refuse(Starter::Caller, refusal)] => {
                    assert_eq!(refusal.reason, Reason::PromptContentUnsupported, "{case}")
                }
                other => panic!("{case}: expected a refusal that leaves the turn alone, got {other:?}"),
            }
            assert!(!admission.has_queued(), "{case}");
        }
    }
}

#[test]
fn a_start_gets_the_execution_s_tightest_bound_once_the_workspace_passes() {
    let deadline = Duration::from_secs(600);
    let cases = [
        (None, None, 0, None),
        (
            Some(deadline),
            None,
            0,
            Some((deadline, TurnFailureReason::DeadlineExceeded)),
        ),
        (
            Some(deadline),
            Some(Duration::from_secs(100)),
            40_000,
            Some((Duration::from_secs(60), TurnFailureReason::BudgetExhausted)),
        ),
    ];
    for (turn_deadline, max_active, active_ms, bound) in cases {
        let mut execution = Execution::idle();
        execution.record.limits.turn_deadline = turn_deadline;
        execution.record.limits.max_active = max_active;
        execution.record.active_ms = active_ms;
        let effects = start(&mut Admission::default(), &execution, false);
        assert_eq!(
            effects,
            [
                StartEffect::CheckWorkspace,
                StartEffect::Start {
                    starter: Starter::Caller,
                    prompt: prompt("go"),
                    bound
                }
            ],
            "{turn_deadline:?} {max_active:?} {active_ms}"
        );
    }
}

#[test]
fn a_start_past_its_bounds_is_refused_after_the_workspace_check() {
    let mut used_turns = Execution::idle();
    used_turns.record.limits.max_turns = Some(3);
    used_turns.record.turn_count = 3;
    let mut used_time = Execution::idle();
    used_time.record.limits.max_active = Some(Duration::from_secs(1));
    used_time.record.active_ms = 1_000;
    for execution in [used_turns, used_time] {
        let effects = start(&mut Admission::default(), &execution, false);
        assert_eq!(effects[0], StartEffect::CheckWorkspace);
        assert_eq!(refused_with(&effects), (Starter::Caller, Reason::BudgetExhausted));
        let input = StartInput::StartTurn {
            prompt: prompt("go"),
            replace_active: false,
        };
        let refused = decide(&mut Admission::default(), &execution, input, Err(workspace_refusal()));
        assert_eq!(
            refused_with(&refused),
            (Starter::Caller, Reason::WorkspacePolicy),
            "the workspace is refused before the bounds"
        );
    }
}

#[test]
fn a_replacement_the_workspace_refuses_leaves_the_turn_in_progress_alone_and_queues_nothing() {
    let mut admission = Admission::default();
    let input = StartInput::StartTurn {
        prompt: prompt("go"),
        replace_active: true,
    };
    let effects = decide(&mut admission, &Execution::with_turn(), input, Err(workspace_refusal()));
    assert_eq!(
        effects,
        [
            StartEffect::CheckWorkspace,
            StartEffect::Refuse(Starter::Caller, workspace_refusal())
        ]
    );
    assert!(!admission.has_queued());
    assert_eq!(
        start(&mut admission, &Execution::with_turn(), true).len(),
        3,
        "the next replacement is not told another one waits"
    );
}

#[test]
fn a_second_replacement_is_refused_naming_the_running_turn_and_the_first_one_stays_queued() {
    let mut admission = Admission::default();
    start(&mut admission, &Execution::with_turn(), true);
    let effects = start(&mut admission, &Execution::with_turn(), true);
    match &effects[..] {
        [StartEffect::Refuse(Starter::Caller, refusal)] => {
            assert_eq!(refusal.reason, Reason::TurnActive);
            assert!(refusal.message.contains("already waiting to replace"), "{refusal}");
            assert!(
                refusal.metadata.contains(&("turn_id".into(), TURN.into())),
                "{refusal:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(admission.has_queued());
}

#[test]
fn the_queued_replacement_starts_once_the_interrupted_turn_settles() {
    let mut admission = Admission::default();
    let input = StartInput::StartTurn {
        prompt: prompt("instead"),
        replace_active: true,
    };
    decide(&mut admission, &Execution::with_turn(), input, Ok(()));
    let mut settled = Execution::idle();
    settled.record.limits.turn_deadline = Some(Duration::from_secs(60));
    let effects = decide(&mut admission, &settled, StartInput::TurnSettled, Ok(()));
    assert_eq!(
        effects,
        [
            StartEffect::CheckWorkspace,
            StartEffect::Start {
                starter: Starter::Queued,
                prompt: prompt("instead"),
                bound: Some((Duration::from_secs(60), TurnFailureReason::DeadlineExceeded)),
            }
        ]
    );
    assert!(!admission.has_queued());
    assert!(
        admission.handle(StartInput::TurnSettled, settled.facts()).is_empty(),
        "it starts once"
    );
}

#[test]
fn a_queued_replacement_is_admitted_afresh_when_the_turn_settles() {
    // What may change while the replaced turn settles: a drain begins, the workspace, the bounds.
    type Case = (fn(&mut Execution), Result<(), EngineError>, Reason);
    let refusals: [Case; 3] = [
        (|e| e.draining = true, Ok(()), Reason::Draining),
        (|_| {}, Err(workspace_refusal()), Reason::WorkspacePolicy),
        (
            |e| {
                e.record.limits.max_turns = Some(1);
                e.record.turn_count = 1;
            },
            Ok(()),
            Reason::BudgetExhausted,
        ),
    ];
    for (settled_into, workspace, reason) in refusals {
        let mut admission = Admission::default();
        let input = StartInput::StartTurn {
            prompt: prompt("go"),
            replace_active: true,
        };
        let effects = decide(&mut admission, &Execution::with_turn(), input, Ok(()));
        assert_eq!(effects.len(), 3, "queued: {effects:?}");
        let mut settled = Execution::idle();
        settled_into(&mut settled);
        let effects = decide(&mut admission, &settled, StartInput::TurnSettled, workspace);
        assert_eq!(refused_with(&effects), (Starter::Queued, reason));
        assert!(!admission.has_queued());
    }
}

#[test]
fn a_replacement_the_bounds_already_refuse_is_refused_before_the_running_turn_is_touched() {
    let mut admission = Admission::default();
    let mut used_up = Execution::with_turn();
    used_up.record.limits.max_turns = Some(1);
    used_up.record.turn_count = 1;
    let input = StartInput::StartTurn {
        prompt: prompt("instead"),
        replace_active: true,
    };
    let effects = decide(&mut admission, &used_up, input, Ok(()));
    assert_eq!(refused_with(&effects), (Starter::Caller, Reason::BudgetExhausted));
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, StartEffect::Cancel(_) | StartEffect::Queue)),
        "the running turn is left alone: {effects:?}"
    );
    assert!(!admission.has_queued());
}

#[test]
fn a_turn_settling_with_nothing_queued_starts_nothing() {
    let mut admission = Admission::default();
    assert!(
        admission
            .handle(StartInput::TurnSettled, Execution::idle().facts())
            .is_empty()
    );
    assert!(
        admission
            .handle(StartInput::WorkspaceChecked(Ok(())), Execution::idle().facts())
            .is_empty(),
        "a check nobody asked for starts nothing"
    );
}
