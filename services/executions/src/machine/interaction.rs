//! One durable interaction, from the agent's request to its end, as a state machine.
//!
//! Its rules, each an ordering of effects the tests assert:
//! - persist before expose: the row and `runtime_request.created` commit together before
//!   anyone can answer, and a request that cannot be recorded is answered `cancelled`;
//! - an answer is recorded `answered` before it is written to the agent, and `delivered`
//!   only after the write is flushed; a failed write expires it with `delivery: unknown`;
//! - an interaction still pending when its turn ends is answered `cancelled` on the wire,
//!   then recorded by its kind's rule, never replayable;
//! - every agent request gets exactly one response, and a caller exactly one reply.

use std::time::Duration;

use cursor_runner_activity::{ActivityPayload, InteractionKind, Redactor, RuntimeRequestResolved};
use cursor_runner_domain::error::{EngineError, Reason};
use cursor_runner_domain::interaction::{
    ApprovalPolicy, InteractionAnswer, InteractionReason, PersistedRequest, cancelled_result,
};
use cursor_runner_domain::state::{Delivery, InteractionState};
use cursor_runner_store::{InteractionRecord, StoreError, TurnId, Write};
use serde_json::Value;
use tokio::time::Instant;

use super::Now;
use crate::call_key::{CallKey, stored_interaction};
use crate::interaction_row::{self, not_pending};

/// Why an interaction ends while still pending: its turn settled or was cancelled, or it
/// waited past the execution's limit and is handed off durably.
pub(crate) type EndReason = InteractionReason;

/// Who answered: a human through `AnswerInteraction`, or the execution's approval policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnsweredBy {
    Human,
    Policy(ApprovalPolicy),
}

impl AnsweredBy {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Human => "human",
            Self::Policy(_) => "policy",
        }
    }
}

/// What a commit the machine asked for came to.
// Transient: a handful per step (and one per pending interaction), never stored in bulk.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Committed {
    Landed,
    /// Refused by a compare-and-set: `current` is the row as it is now (if it exists).
    Moved {
        current: Option<InteractionRecord>,
    },
    /// The agent reused the native request id of an interaction of this process.
    Duplicate,
    /// The caller's request id was claimed already (by an earlier call with it, or another
    /// request): nothing landed, and the call's wrapper tells the caller what the key holds.
    KeyTaken,
    Failed(EngineError),
}

// Transient: a handful per step (and one per pending interaction), never stored in bulk.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Input {
    /// A caller's answer.
    Answer {
        etag: String,
        request_id: String,
        answer: InteractionAnswer,
        /// The call's key: claimed with `answered` (unless claimed before), completed with
        /// `delivered`.
        key: Option<CallKey>,
    },
    /// The turn is over for it: answer `cancelled`, record the end.
    End(EndReason),
    /// What the last `Commit` came to.
    Committed(Committed),
    /// Whether the last `Respond` reached the pipe (written and flushed).
    Written(bool),
}

/// What the runtime does, in order. `Commit` and `Respond` are always last: their outcome
/// comes back as an input before anything else happens.
// Transient: a handful per step (and one per pending interaction), never stored in bulk.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Effect {
    Commit {
        writes: Vec<Write>,
        events: Vec<(Option<TurnId>, ActivityPayload)>,
    },
    /// Answer the agent's request (the handle stays with the runtime).
    Respond(Value),
    /// The caller's result.
    Reply(Result<InteractionRecord, EngineError>),
    /// A provider notice on the execution's stream.
    Notice {
        category: &'static str,
        summary: String,
    },
    Observe(Observation),
    /// A named point where the crash-window tests hold or kill the service.
    Failpoint(&'static str),
    /// The execution cannot go on (the store failed, or another owner holds it).
    Stop(EngineError),
}

/// What the metrics learn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Observation {
    /// A write refused because the generation moved on (`what` was being written).
    Fenced(&'static str),
    StaleEtag,
    /// From the answer's arrival to its flushed pipe write.
    DeliveredAfter(Duration),
    /// How long an interaction that just ended had been pending.
    Waited {
        kind: InteractionKind,
        state: InteractionState,
        waited: Duration,
    },
}

/// An answer on its way to the agent.
#[derive(Debug, Clone)]
struct AnswerInFlight {
    answered: InteractionRecord,
    key: Option<CallKey>,
    outcome: Value,
    answered_by: AnsweredBy,
    arrived: Instant,
}

// Transient: a handful per step (and one per pending interaction), never stored in bulk.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Stage {
    /// Its row and `created` are being committed; `denial` is the policy's answer, if any.
    Opening {
        denial: Option<(Value, ApprovalPolicy)>,
    },
    Pending,
    /// `answered` is being committed.
    Recording(AnswerInFlight),
    /// The answer is being written to the agent.
    Writing(AnswerInFlight),
    /// `cancelled` is being written to the agent because the turn is over for it.
    Cancelling(EndReason),
    /// Its end is being committed; `reply` goes to the caller once it is.
    Ending {
        ended: InteractionRecord,
        reply: Option<Result<InteractionRecord, EngineError>>,
        answered_by: Option<AnsweredBy>,
    },
    Ended,
}

#[derive(Debug, Clone)]
pub(crate) struct Interaction {
    /// The row as last committed (or being committed, while opening).
    record: InteractionRecord,
    /// The request as the agent sent it: answers are mapped through it.
    persisted: PersistedRequest,
    /// When a question or plan is handed off durably if still unanswered.
    handoff_at: Instant,
    /// The secrets handed to the agent: an outcome names the agent's own ids, which may
    /// quote them, and is stored and returned only redacted (the agent gets it verbatim).
    redactor: Redactor,
    stage: Stage,
}

impl Interaction {
    /// A validated request bound to the running turn: its row and `created` event commit
    /// together (`created` carries what the stream shows), and only then may it be answered.
    pub(crate) fn open(
        record: InteractionRecord,
        persisted: PersistedRequest,
        created: ActivityPayload,
        policy: ApprovalPolicy,
        handoff_at: Instant,
        redactor: Redactor,
    ) -> (Self, Vec<Effect>) {
        let denial = match (&persisted, policy) {
            (PersistedRequest::Permission(p), ApprovalPolicy::DenyAll) => Some((p.policy_denial(), policy)),
            _ => None,
        };
        let effects = vec![
            Effect::Failpoint("interaction_before_persist"),
            Effect::Commit {
                writes: vec![Write::InsertInteraction(record.clone())],
                events: vec![(Some(record.turn_id.clone()), created)],
            },
        ];
        let interaction = Self {
            record,
            persisted,
            handoff_at,
            redactor,
            stage: Stage::Opening { denial },
        };
        (interaction, effects)
    }

    pub(crate) fn record(&self) -> &InteractionRecord {
        &self.record
    }

    pub(crate) fn kind(&self) -> InteractionKind {
        self.persisted.kind()
    }

    pub(crate) fn handoff_at(&self) -> Instant {
        self.handoff_at
    }

    /// Waiting for an answer (or for its turn to end).
    pub(crate) fn is_pending(&self) -> bool {
        matches!(self.stage, Stage::Pending)
    }

    /// Nothing more will happen to it.
    pub(crate) fn is_ended(&self) -> bool {
        matches!(self.stage, Stage::Ended)
    }

    pub(crate) fn handle(&mut self, input: Input, now: Now) -> Vec<Effect> {
        let stage = std::mem::replace(&mut self.stage, Stage::Ended);
        let (stage, effects) = match (stage, input) {
            (Stage::Opening { denial }, Input::Committed(committed)) => self.opened(denial, committed, now),
            (
                Stage::Pending,
                Input::Answer {
                    etag,
                    request_id,
                    answer,
                    key,
                },
            ) => self.answer(&etag, &request_id, &answer, key, now),
            (Stage::Pending, Input::End(reason)) => {
                (Stage::Cancelling(reason), vec![Effect::Respond(cancelled_result())])
            }
            (Stage::Recording(delivery), Input::Committed(committed)) => self.recorded(delivery, committed),
            (Stage::Writing(delivery), Input::Written(written)) => self.written(delivery, written, now),
            (Stage::Cancelling(reason), Input::Written(written)) => self.cancelled(reason, written, now),
            (
                Stage::Ending {
                    ended,
                    reply,
                    answered_by,
                },
                Input::Committed(committed),
            ) => self.ended(ended, reply, answered_by, committed, now),
            // Anything else is not this stage's business: an answer to an interaction that
            // is no longer pending is refused by its state, and nothing else changes.
            (stage, Input::Answer { .. }) => {
                let refusal = Effect::Reply(Err(not_pending(&self.record)));
                (stage, vec![refusal])
            }
            (stage, _) => (stage, Vec::new()),
        };
        self.stage = stage;
        effects
    }

    fn opened(
        &mut self,
        denial: Option<(Value, ApprovalPolicy)>,
        committed: Committed,
        now: Now,
    ) -> (Stage, Vec<Effect>) {
        let cancelled = Effect::Respond(cancelled_result());
        match committed {
            Committed::Landed => match denial {
                // The policy answers at once, without a human; the tool must not run.
                Some((outcome, policy)) => self.record_answer(outcome, None, None, AnsweredBy::Policy(policy), now),
                None => (Stage::Pending, Vec::new()),
            },
            // The agent reused a request id of this process: never answer two requests
            // through one identity.
            Committed::Duplicate => {
                let summary = format!(
                    "`{}` reused request id {} of this process; answered `cancelled`",
                    method(self.kind()),
                    self.record.native_request_id
                );
                let notice = Effect::Notice {
                    category: "duplicate_request_id",
                    summary,
                };
                (Stage::Ended, vec![cancelled, notice])
            }
            // The insert is fenced by the execution's generation: another owner holds it.
            Committed::Moved { .. } => (
                Stage::Ended,
                vec![
                    cancelled,
                    Effect::Observe(Observation::Fenced("interaction")),
                    Effect::Stop(StoreError::Fenced.into()),
                ],
            ),
            Committed::Failed(e) => (Stage::Ended, vec![cancelled, Effect::Stop(e)]),
            // Its insert claims no key.
            Committed::KeyTaken => (Stage::Ended, vec![cancelled, Effect::Stop(StoreError::KeyTaken.into())]),
        }
    }

    fn answer(
        &mut self,
        etag: &str,
        request_id: &str,
        answer: &InteractionAnswer,
        key: Option<CallKey>,
        now: Now,
    ) -> (Stage, Vec<Effect>) {
        if etag != self.record.etag {
            let refusal = EngineError::precondition(Reason::StaleEtag, "the etag is not the interaction's current one");
            return (
                Stage::Pending,
                vec![Effect::Observe(Observation::StaleEtag), Effect::Reply(Err(refusal))],
            );
        }
        match self.persisted.outcome_for(answer) {
            Ok(outcome) => {
                let answer = (request_id.to_owned(), answer.fingerprint());
                self.record_answer(outcome, Some(answer), key, AnsweredBy::Human, now)
            }
            Err(invalid) => (Stage::Pending, vec![Effect::Reply(Err(invalid))]),
        }
    }

    /// Commits `answered` (compare-and-set from `pending`) before anything reaches the agent.
    fn record_answer(
        &mut self,
        outcome: Value,
        answer: Option<(String, String)>,
        key: Option<CallKey>,
        answered_by: AnsweredBy,
        now: Now,
    ) -> (Stage, Vec<Effect>) {
        let mut answered = self.record.clone();
        answered.state = InteractionState::Answered;
        let mut stored = outcome.clone();
        self.redactor.redact_json(&mut stored);
        answered.outcome = Some(stored);
        (answered.answer_request_id, answered.answer_fingerprint) = answer.unzip();
        answered.reason = match answered_by {
            AnsweredBy::Policy(policy) => Some(InteractionReason::ApprovalPolicy(policy)),
            AnsweredBy::Human => None,
        };
        answered.updated_at_ms = now.ms;
        let write = match interaction_row::write(InteractionState::Pending, &answered) {
            Ok(write) => write,
            Err(e) => return (Stage::Pending, vec![fail(answered_by, e)]),
        };
        let claim = key.as_ref().and_then(CallKey::claim_write);
        let delivery = AnswerInFlight {
            answered,
            key,
            outcome,
            answered_by,
            arrived: now.instant,
        };
        let commit = Effect::Commit {
            writes: std::iter::once(write).chain(claim).collect(),
            events: Vec::new(),
        };
        (Stage::Recording(delivery), vec![commit])
    }

    fn recorded(&mut self, delivery: AnswerInFlight, committed: Committed) -> (Stage, Vec<Effect>) {
        let by = delivery.answered_by;
        match committed {
            Committed::Landed => {
                self.record = delivery.answered.clone();
                let respond = Effect::Respond(delivery.outcome.clone());
                (
                    Stage::Writing(delivery),
                    vec![Effect::Failpoint("answer_recorded_before_pipe_write"), respond],
                )
            }
            // Still pending, so the compare-and-set failed on the execution's generation:
            // another owner holds it now. Nothing reaches this agent.
            Committed::Moved { current: Some(current) } if current.state == InteractionState::Pending => (
                Stage::Ended,
                vec![
                    Effect::Observe(Observation::Fenced("answer")),
                    fail(by, StoreError::Fenced.into()),
                ],
            ),
            Committed::Moved { current } => {
                let current = current.unwrap_or(delivery.answered);
                (Stage::Ended, vec![fail(by, not_pending(&current))])
            }
            Committed::Duplicate => (Stage::Ended, vec![fail(by, StoreError::Duplicate.into())]),
            Committed::Failed(e) => (Stage::Ended, vec![fail(by, e)]),
            // Nothing landed and nothing reached the agent: it waits for its answer still.
            Committed::KeyTaken => (Stage::Pending, vec![fail(by, StoreError::KeyTaken.into())]),
        }
    }

    /// `delivered` (with `resolved`) once the write is flushed; if it failed the process is
    /// gone: `expired` with `delivery: unknown`, never claimed delivered.
    fn written(&mut self, delivery: AnswerInFlight, written: bool, now: Now) -> (Stage, Vec<Effect>) {
        let AnswerInFlight {
            answered,
            key,
            outcome,
            answered_by,
            arrived,
        } = delivery;
        let mut settled = answered;
        settled.updated_at_ms = now.ms;
        let mut effects = Vec::new();
        let (event, reply) = if written {
            effects.push(Effect::Observe(Observation::DeliveredAfter(
                now.instant.saturating_duration_since(arrived),
            )));
            effects.push(Effect::Failpoint("answer_written_before_delivered"));
            settled.state = InteractionState::Delivered;
            settled.delivery = Some(Delivery::PipeWritten);
            let resolved = ActivityPayload::RuntimeRequestResolved(RuntimeRequestResolved {
                interaction_id: settled.id.to_string(),
                kind: settled.kind,
                turn_id: settled.turn_id.to_string(),
                outcome,
                delivery: "pipe_written".into(),
                answered_by: answered_by.as_str().into(),
            });
            (resolved, Ok(settled.clone()))
        } else {
            settled.state = InteractionState::Expired;
            settled.delivery = Some(Delivery::Unknown);
            settled.reason = Some(InteractionReason::ProviderProcessLost);
            (interaction_row::ended(&settled, true), Err(not_pending(&settled)))
        };
        // The call's outcome is stored with the row that makes it true.
        let completion = key
            .filter(|_| written)
            .map(|key| key.completion_write(stored_interaction(&settled.id)));
        match interaction_row::write(InteractionState::Answered, &settled) {
            Ok(write) => {
                effects.push(Effect::Commit {
                    writes: std::iter::once(write).chain(completion).collect(),
                    events: vec![(Some(settled.turn_id.clone()), event)],
                });
                let ending = Stage::Ending {
                    ended: settled,
                    reply: Some(reply),
                    answered_by: Some(answered_by),
                };
                (ending, effects)
            }
            Err(e) => (Stage::Ended, vec![fail(answered_by, e)]),
        }
    }

    /// The turn is over for a pending interaction: recorded by its kind's rule (a
    /// permission `cancelled`; a question or plan `expired`, with the full request for a
    /// durable hand-off), never replayable.
    fn cancelled(&mut self, reason: EndReason, written: bool, now: Now) -> (Stage, Vec<Effect>) {
        let mut ended = self.record.clone();
        ended.state = self.persisted.state_when_turn_ends();
        ended.outcome = Some(cancelled_result());
        ended.reason = Some(reason);
        ended.delivery = Some(if written {
            Delivery::PipeWritten
        } else {
            Delivery::NotSent
        });
        ended.replay_allowed = false;
        ended.updated_at_ms = now.ms;
        match interaction_row::write(InteractionState::Pending, &ended) {
            Ok(write) => {
                let commit = Effect::Commit {
                    writes: vec![write],
                    events: vec![(Some(ended.turn_id.clone()), interaction_row::ended(&ended, true))],
                };
                let ending = Stage::Ending {
                    ended,
                    reply: None,
                    answered_by: None,
                };
                (ending, vec![commit])
            }
            Err(e) => (Stage::Ended, vec![Effect::Stop(e)]),
        }
    }

    fn ended(
        &mut self,
        ended: InteractionRecord,
        reply: Option<Result<InteractionRecord, EngineError>>,
        answered_by: Option<AnsweredBy>,
        committed: Committed,
        now: Now,
    ) -> (Stage, Vec<Effect>) {
        let mut effects = Vec::new();
        let outcome = match committed {
            Committed::Landed => {
                let waited = Duration::from_millis((now.ms - ended.created_at_ms).max(0) as u64);
                effects.push(Effect::Observe(Observation::Waited {
                    kind: ended.kind,
                    state: ended.state,
                    waited,
                }));
                self.record = ended;
                reply
            }
            // Someone else ended it meanwhile (a takeover, a restart's recovery): it said so.
            Committed::Moved { .. } => reply,
            Committed::Duplicate => Some(Err(StoreError::Duplicate.into())),
            Committed::KeyTaken => Some(Err(StoreError::KeyTaken.into())),
            Committed::Failed(e) => Some(Err(e)),
        };
        match (outcome, answered_by) {
            (Some(Ok(record)), Some(AnsweredBy::Human)) => effects.push(Effect::Reply(Ok(record))),
            (Some(Err(e)), Some(by)) => effects.push(fail(by, e)),
            (Some(Err(e)), None) => effects.push(Effect::Stop(e)),
            _ => {}
        }
        (Stage::Ended, effects)
    }
}

/// A failure on an answer's way: the caller's result for a human's answer; for the
/// policy's (nobody waits on it) the execution stops, as on any failed write.
fn fail(answered_by: AnsweredBy, e: EngineError) -> Effect {
    match answered_by {
        AnsweredBy::Human => Effect::Reply(Err(e)),
        AnsweredBy::Policy(_) => Effect::Stop(e),
    }
}

/// The agent method an interaction of `kind` arrives on, for notices.
fn method(kind: InteractionKind) -> &'static str {
    use cursor_runner_acp::methods;
    match kind {
        InteractionKind::Question => methods::ASK_QUESTION,
        InteractionKind::Plan => methods::CREATE_PLAN,
        InteractionKind::Permission => methods::SESSION_REQUEST_PERMISSION,
    }
}
