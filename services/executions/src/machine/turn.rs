//! The running turn, as a state machine: where it is (serving its prompt, or cancelled and
//! waiting for the agent to settle it) and what each cancel, timer and prompt result does.
//!
//! One enum for the phase instead of a deadline, a bound and a cause kept side by side, so
//! a turn cannot be both, and what the service cancelled it for travels with the cancel.
//!
//! Before a turn exists, [`Admission`] decides whether a `StartTurn` may start one, and
//! holds a `replace_active` start until the turn it replaces has settled.

use std::time::Duration;

use cursor_runner_activity::TurnFailureReason;
use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::prompt::{Prompt, PromptCapabilities};
use cursor_runner_domain::settlement::{Loss, PromptOutcome, TurnEnd, interruption_message, prompt_end};
use cursor_runner_domain::state::TurnState;
use cursor_runner_store::ExecutionRecord;
use tokio::time::Instant;

use super::interaction::EndReason;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnPhase {
    /// Serving the prompt; its bound before spend (deadline, budget), until it fires.
    Running {
        bound: Option<(Instant, TurnFailureReason)>,
    },
    /// `session/cancel` sent: the agent has until `grace_ends` to settle the turn. When
    /// the service, not the caller, cancelled it, a `cancelled` stop settles it
    /// `interrupted` with `interrupted_by`.
    Cancelling {
        grace_ends: Instant,
        interrupted_by: Option<TurnFailureReason>,
    },
}

impl TurnPhase {
    pub(crate) fn is_running(&self) -> bool {
        matches!(self, Self::Running { .. })
    }

    /// When the cancel grace ends, while cancelling.
    pub(crate) fn grace_ends(&self) -> Option<Instant> {
        match self {
            Self::Cancelling { grace_ends, .. } => Some(*grace_ends),
            Self::Running { .. } => None,
        }
    }

    /// The bound before spend, while running.
    pub(crate) fn bound(&self) -> Option<(Instant, TurnFailureReason)> {
        match self {
            Self::Running { bound } => *bound,
            Self::Cancelling { .. } => None,
        }
    }

    pub(crate) fn interrupted_by(&self) -> Option<TurnFailureReason> {
        match self {
            Self::Cancelling { interrupted_by, .. } => *interrupted_by,
            Self::Running { .. } => None,
        }
    }
}

/// Who or what cancels a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelCause {
    /// `CancelTurn`.
    Caller,
    /// The service stopped it; it settles `interrupted` with this reason (a bound before
    /// spend, the idle watchdog, a replacement, a drain).
    Interrupted(TurnFailureReason),
    /// Its questions waited past the execution's limit and were handed off durably.
    Handoff,
    /// Configuration that would load code appeared in the workspace.
    WorkspacePolicy,
}

impl CancelCause {
    /// The reason the turn's pending interactions end with.
    pub(crate) fn interaction_reason(self) -> EndReason {
        match self {
            Self::Caller => EndReason::TurnCancelled,
            Self::Interrupted(reason) => EndReason::Interrupted(reason),
            Self::Handoff => EndReason::DurableHandoff,
            Self::WorkspacePolicy => EndReason::WorkspacePolicy,
        }
    }

    fn interrupted_by(self) -> Option<TurnFailureReason> {
        match self {
            Self::Interrupted(reason) => Some(reason),
            Self::Caller | Self::Handoff | Self::WorkspacePolicy => None,
        }
    }

    /// Whether it acts on a turn that is being cancelled already: the caller's cancel is
    /// idempotent and a replacement turns a caller's cancel into an interruption; the
    /// service's own timers and policies act only on a turn that still runs.
    fn acts_while_cancelling(self) -> bool {
        matches!(
            self,
            Self::Caller | Self::Interrupted(TurnFailureReason::ReplacedByNewTurn)
        )
    }
}

/// What the runtime does for the turn, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnEffect {
    /// `session/cancel` to the agent.
    SendCancel,
    /// Answer every pending interaction `cancelled` and record its end with this reason.
    EndPending(EndReason),
    /// Settle the turn: its closing events, its row and the execution in one batch.
    Settle(TurnEnd),
    /// Stop the agent, which did not settle a cancelled turn in time.
    StopAgent,
    /// Settle everything live as lost, in one batch (the execution ends).
    SettleLoss(Loss),
}

/// The reason an interaction still pending when its turn settles ends with.
pub(crate) fn pending_reason_at_settle(state: TurnState) -> EndReason {
    if state == TurnState::Cancelled {
        EndReason::TurnCancelled
    } else {
        EndReason::TurnSettled
    }
}

/// The running turn's lifecycle. The caller holds the turn's record, normalizer and span.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Turn {
    /// Our JSON-RPC id of the turn's `session/prompt` (none if it could not be sent).
    prompt_request_id: Option<i64>,
    phase: TurnPhase,
}

impl Turn {
    /// A turn whose prompt went out at `now`, bounded by `bound` (how long, and why).
    pub(crate) fn running(
        prompt_request_id: Option<i64>,
        bound: Option<(Duration, TurnFailureReason)>,
        now: Instant,
    ) -> Self {
        Self {
            prompt_request_id,
            phase: TurnPhase::Running {
                bound: bound.map(|(limit, reason)| (now + limit, reason)),
            },
        }
    }

    pub(crate) fn phase(&self) -> TurnPhase {
        self.phase
    }

    /// Cancels the turn: a running one starts cancelling, with `grace` to settle.
    pub(crate) fn cancel(&mut self, cause: CancelCause, now: Instant, grace: Duration) -> Vec<TurnEffect> {
        match &mut self.phase {
            TurnPhase::Running { .. } => {
                self.phase = TurnPhase::Cancelling {
                    grace_ends: now + grace,
                    interrupted_by: cause.interrupted_by(),
                };
                vec![
                    TurnEffect::SendCancel,
                    TurnEffect::EndPending(cause.interaction_reason()),
                ]
            }
            TurnPhase::Cancelling { interrupted_by, .. } => {
                // The first grace stands; a replacement makes a caller's cancel an interruption.
                if cause.acts_while_cancelling() && cause.interrupted_by().is_some() {
                    *interrupted_by = cause.interrupted_by();
                }
                Vec::new()
            }
        }
    }

    /// The bound before spend is due: cancelled, settling `interrupted` with its reason.
    pub(crate) fn bound_reached(&mut self, now: Instant, grace: Duration) -> Vec<TurnEffect> {
        match self.phase.bound() {
            Some((at, reason)) if at <= now => self.cancel(CancelCause::Interrupted(reason), now, grace),
            _ => Vec::new(),
        }
    }

    /// The agent answered `request_id`: if it is this turn's prompt, the turn settles as
    /// the answer and the service's cause say.
    pub(crate) fn prompt_answered(&self, request_id: i64, outcome: PromptOutcome<'_>) -> Vec<TurnEffect> {
        if self.prompt_request_id != Some(request_id) {
            return Vec::new();
        }
        vec![TurnEffect::Settle(prompt_end(outcome, self.phase.interrupted_by()))]
    }

    /// The cancel grace ran out: the agent is stopped and everything settles as lost.
    pub(crate) fn grace_ran_out(&self, grace: Duration) -> Vec<TurnEffect> {
        if self.phase.is_running() {
            return Vec::new();
        }
        let cause = self.phase.interrupted_by();
        let ladder = format!("the agent did not settle within {grace:?} of the cancel; it was stopped");
        let message = match cause {
            Some(cause) => format!("{}; {ladder}", interruption_message(cause)),
            None => ladder,
        };
        vec![
            TurnEffect::StopAgent,
            TurnEffect::EndPending(EndReason::TurnSettled),
            TurnEffect::SettleLoss(Loss::CancelTimedOut { cause, message }),
        ]
    }
}

/// Whose `StartTurn` an admission answers: the call in hand, or the replacement queued
/// until the turn it replaces settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Starter {
    Caller,
    Queued,
}

/// What a start is admitted against, read off the execution as each input arrives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StartFacts<'a> {
    /// The execution as it stands: its limits, turns and active time bound the next turn.
    pub(crate) record: &'a ExecutionRecord,
    pub(crate) capabilities: PromptCapabilities,
    pub(crate) draining: bool,
    /// The turn in progress (running, or cancelled and not yet settled).
    pub(crate) active_turn: Option<&'a str>,
}

#[derive(Debug)]
pub(crate) enum StartInput {
    StartTurn {
        prompt: Prompt,
        replace_active: bool,
    },
    /// What the workspace check the machine asked for found.
    WorkspaceChecked(Result<(), EngineError>),
    /// The turn in progress settled on its prompt's answer.
    TurnSettled,
}

/// What the runtime does for a start, in order. `CheckWorkspace` is always last: its
/// outcome comes back as `WorkspaceChecked` before anything else happens.
#[derive(Debug, PartialEq)]
pub(crate) enum StartEffect {
    /// Check the workspace policy (it reads the workspace: I/O).
    CheckWorkspace,
    Refuse(Starter, EngineError),
    /// Hold the caller's reply until the queued replacement starts or is refused.
    Queue,
    /// Cancel the turn in progress (through the turn's own machine).
    Cancel(CancelCause),
    /// Record the turn and send its prompt, bounded by `bound`; the result goes to `starter`.
    Start {
        starter: Starter,
        prompt: Prompt,
        bound: Option<(Duration, TurnFailureReason)>,
    },
}

/// A start waiting on its workspace check.
#[derive(Debug)]
enum Checking {
    /// `replace_active` over a turn in progress: queued once the workspace passes.
    Replacement(Prompt),
    Start(Starter, Prompt),
}

/// `StartTurn`'s admission: draining, a turn in progress, a `replace_active` start queued
/// behind the turn it cancels, the workspace policy and the bounds before spend.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    /// The prompt of a `replace_active` start, started once the replaced turn settles.
    queued: Option<Prompt>,
    checking: Option<Checking>,
}

impl Admission {
    pub(crate) fn has_queued(&self) -> bool {
        self.queued.is_some()
    }

    pub(crate) fn handle(&mut self, input: StartInput, facts: StartFacts<'_>) -> Vec<StartEffect> {
        match input {
            StartInput::StartTurn {
                prompt,
                replace_active: true,
            } if facts.active_turn.is_some() => self.replace(prompt, facts),
            StartInput::StartTurn { prompt, .. } => self.admit(Starter::Caller, prompt, facts),
            StartInput::WorkspaceChecked(checked) => match (self.checking.take(), checked) {
                (None, _) => Vec::new(),
                (Some(Checking::Replacement(_)), Err(refusal)) => vec![StartEffect::Refuse(Starter::Caller, refusal)],
                (Some(Checking::Start(starter, _)), Err(refusal)) => vec![StartEffect::Refuse(starter, refusal)],
                (Some(Checking::Replacement(prompt)), Ok(())) => {
                    // The bounds only tighten while the replaced turn runs: one that already
                    // refuses the next turn refuses it before the running one is touched.
                    if let Err(exhausted) = next_turn(facts.record) {
                        return vec![StartEffect::Refuse(Starter::Caller, exhausted)];
                    }
                    self.queued = Some(prompt);
                    vec![
                        StartEffect::Queue,
                        StartEffect::Cancel(CancelCause::Interrupted(TurnFailureReason::ReplacedByNewTurn)),
                    ]
                }
                (Some(Checking::Start(starter, prompt)), Ok(())) => match next_turn(facts.record) {
                    Ok(bound) => vec![StartEffect::Start { starter, prompt, bound }],
                    Err(exhausted) => vec![StartEffect::Refuse(starter, exhausted)],
                },
            },
            StartInput::TurnSettled => match self.queued.take() {
                Some(prompt) => self.admit(Starter::Queued, prompt, facts),
                None => Vec::new(),
            },
        }
    }

    /// One replacement at a time, on content the agent takes, never during a drain:
    /// everything that does not wait on the turn in progress settling is checked before
    /// it is touched, in a plain start's order, so a refused replacement leaves it
    /// running; the bounds are checked after the workspace (as for a plain start) and again
    /// at the queued start.
    fn replace(&mut self, prompt: Prompt, facts: StartFacts<'_>) -> Vec<StartEffect> {
        let refused = if let Err(refused) = refused_outright(&prompt, facts) {
            refused
        } else if self.queued.is_some() {
            let refused = EngineError::precondition(
                Reason::TurnActive,
                "another turn is already waiting to replace the running one",
            );
            match facts.active_turn {
                Some(turn_id) => refused.with("turn_id", turn_id),
                None => refused,
            }
        } else {
            self.checking = Some(Checking::Replacement(prompt));
            return vec![StartEffect::CheckWorkspace];
        };
        vec![StartEffect::Refuse(Starter::Caller, refused)]
    }

    /// A turn starts only on content the agent takes, outside a drain, with no turn in
    /// progress, in a workspace the policy admits and within the execution's bounds —
    /// refused in that order.
    fn admit(&mut self, starter: Starter, prompt: Prompt, facts: StartFacts<'_>) -> Vec<StartEffect> {
        let refused = if let Err(refused) = refused_outright(&prompt, facts) {
            refused
        } else if let Some(turn_id) = facts.active_turn {
            EngineError::precondition(Reason::TurnActive, format!("turn `{turn_id}` is still running"))
                .with("turn_id", turn_id)
        } else {
            self.checking = Some(Checking::Start(starter, prompt));
            return vec![StartEffect::CheckWorkspace];
        };
        vec![StartEffect::Refuse(starter, refused)]
    }
}

/// What refuses any start, whatever the turn in progress: content the agent does not
/// take, then a drain.
fn refused_outright(prompt: &Prompt, facts: StartFacts<'_>) -> Result<(), EngineError> {
    prompt.check_supported(facts.capabilities)?;
    if facts.draining {
        return Err(EngineError::new(
            ErrorKind::Unavailable,
            Reason::Draining,
            "the service is draining: it starts no new turns",
        ));
    }
    Ok(())
}

/// Whether the execution's limits let it start another turn, and that turn's bound.
fn next_turn(record: &ExecutionRecord) -> Result<Option<(Duration, TurnFailureReason)>, EngineError> {
    let active_used = Duration::from_millis(u64::try_from(record.active_ms).unwrap_or(0));
    record.limits.next_turn(record.turn_count, active_used)
}
