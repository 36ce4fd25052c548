//! The interaction machine, table-style: each stage × input with the effects it must give,
//! and the ordering rules checked over every trace the machine can produce.

use std::time::Duration;

use cursor_runner_activity::{ActivityPayload, InteractionKind, Redactor, RuntimeRequestCreated};
use cursor_runner_domain::error::Reason;
use cursor_runner_domain::interaction::permission::PermissionOption;
use cursor_runner_domain::interaction::{
    ApprovalPolicy, InteractionAnswer, InteractionReason, PermissionRequest, PersistedRequest, QuestionRequest,
    Selection, cancelled_result,
};
use cursor_runner_domain::state::{Delivery, InteractionState};
use cursor_runner_store::{ClaimToken, IdempotencyKey, InteractionRecord, Write};
use serde_json::json;
use tokio::time::Instant;

use super::Now;
use super::interaction::*;
use crate::call_key::{CallKey, KeyProgress, stored_interaction};

fn now(at: Instant, ms: i64) -> Now {
    Now { instant: at, ms }
}

fn question() -> PersistedRequest {
    PersistedRequest::Question(
        serde_json::from_value::<QuestionRequest>(json!({
            "questions": [{"questionId": "question-1", "nativeId": "db", "prompt": "Which?", "allowMultiple": false,
                "options": [{"optionId": "option-1", "nativeId": "pg", "label": "PostgreSQL"}]}]
        }))
        .unwrap(),
    )
}

fn permission() -> PersistedRequest {
    PersistedRequest::Permission(PermissionRequest {
        session_id: "sess-1".into(),
        tool_call_id: "tc-1".into(),
        tool_call: json!({"title": "rm -rf target"}),
        options: ["allow_once", "reject_once"]
            .iter()
            .enumerate()
            .map(|(i, kind)| PermissionOption {
                option_id: format!("option-{}", i + 1),
                native_id: (*kind).into(),
                name: (*kind).into(),
                kind: (*kind).into(),
            })
            .collect(),
        withheld: Vec::new(),
    })
}

fn record(kind: InteractionKind) -> InteractionRecord {
    InteractionRecord {
        kind,
        ..crate::interaction_row::pending_question()
    }
}

fn created() -> ActivityPayload {
    ActivityPayload::RuntimeRequestCreated(RuntimeRequestCreated {
        interaction_id: "i-1".into(),
        kind: InteractionKind::Question,
        etag: "etag-1".into(),
        turn_id: "turn-1".into(),
        request: json!({}),
        tool_call_known: None,
        child_id: None,
    })
}

fn open_with(persisted: PersistedRequest, policy: ApprovalPolicy, t0: Instant) -> (Interaction, Vec<Effect>) {
    let kind = persisted.kind();
    let redactor = Redactor::new([("CURSOR_API_KEY".to_owned(), SECRET.to_owned())]);
    Interaction::open(
        record(kind),
        persisted,
        created(),
        policy,
        t0 + Duration::from_secs(60),
        redactor,
    )
}

/// A secret handed to the agent, which its native ids may quote.
const SECRET: &str = "sk-machine-canary-0001";

/// A question recorded and waiting for its answer.
fn pending_question(t0: Instant) -> Interaction {
    let (mut interaction, _) = open_with(question(), ApprovalPolicy::Ask, t0);
    assert!(
        interaction
            .handle(Input::Committed(Committed::Landed), now(t0, 1_000))
            .is_empty()
    );
    assert!(interaction.is_pending());
    interaction
}

fn good_answer() -> Input {
    Input::Answer {
        etag: "etag-1".into(),
        request_id: "answer-1".into(),
        answer: InteractionAnswer::Questions(vec![Selection {
            question_id: "question-1".into(),
            option_ids: vec!["option-1".into()],
        }]),
        key: Some(answer_key()),
    }
}

/// The key of the call answering, unclaimed: its claim rides in the `answered` commit.
fn answer_key() -> CallKey {
    let key = IdempotencyKey {
        tenant_id: "t".into(),
        operation: "AnswerInteraction".into(),
        request_id: "answer-1".into(),
    };
    CallKey::new(key, "digest".into(), ClaimToken::new(), KeyProgress::Unclaimed)
}

/// The interaction's row as a `Write` leaves it: (expected state, new state).
fn transition(write: &Write) -> (InteractionState, InteractionState) {
    match write {
        Write::Interaction { expected_state, record } => (*expected_state, record.state),
        other => panic!("not an interaction transition: {other:?}"),
    }
}

fn commit(effect: &Effect) -> (&[Write], Vec<&ActivityPayload>) {
    match effect {
        Effect::Commit { writes, events } => (writes, events.iter().map(|(_, e)| e).collect()),
        other => panic!("expected a commit, got {other:?}"),
    }
}

fn reply(effect: &Effect) -> &Result<InteractionRecord, cursor_runner_domain::error::EngineError> {
    match effect {
        Effect::Reply(result) => result,
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn refused_reason(effect: &Effect) -> Reason {
    reply(effect).as_ref().expect_err("a refusal").reason
}

#[test]
fn opening_commits_the_row_with_its_created_event_before_anything_can_reach_anyone() {
    let (interaction, effects) = open_with(question(), ApprovalPolicy::Ask, Instant::now());
    assert!(matches!(effects[0], Effect::Failpoint("interaction_before_persist")));
    let (writes, events) = commit(&effects[1]);
    assert!(matches!(writes, [Write::InsertInteraction(row)] if row.state == InteractionState::Pending));
    assert!(matches!(&events[..], [ActivityPayload::RuntimeRequestCreated(_)]));
    assert_eq!(effects.len(), 2);
    assert!(!interaction.is_pending(), "nobody can answer it before it is recorded");
}

#[test]
fn a_recorded_request_waits_for_its_answer_with_nothing_to_do() {
    let t0 = Instant::now();
    let interaction = pending_question(t0);
    assert_eq!(interaction.handoff_at(), t0 + Duration::from_secs(60));
    assert_eq!(interaction.kind(), InteractionKind::Question);
}

#[test]
fn a_request_that_cannot_be_recorded_is_answered_cancelled_and_ends() {
    let t0 = Instant::now();
    let table: [(Committed, &[&str]); 3] = [
        (Committed::Duplicate, &["respond", "notice"]),
        (Committed::Moved { current: None }, &["respond", "observe", "stop"]),
        (
            Committed::Failed(cursor_runner_domain::error::EngineError::internal("disk")),
            &["respond", "stop"],
        ),
    ];
    for (committed, expected) in table {
        let (mut interaction, _) = open_with(question(), ApprovalPolicy::Ask, t0);
        let effects = interaction.handle(Input::Committed(committed), now(t0, 1_000));
        assert_eq!(names(&effects), expected);
        assert!(matches!(&effects[0], Effect::Respond(v) if *v == cancelled_result()));
        assert!(interaction.is_ended());
    }
}

#[test]
fn under_deny_all_a_permission_is_recorded_answered_by_the_policy_before_the_agent_hears_it() {
    let t0 = Instant::now();
    let (mut interaction, _) = open_with(permission(), ApprovalPolicy::DenyAll, t0);
    let effects = interaction.handle(Input::Committed(Committed::Landed), now(t0, 1_001));
    let (writes, events) = commit(&effects[0]);
    assert_eq!(
        transition(&writes[0]),
        (InteractionState::Pending, InteractionState::Answered)
    );
    assert!(events.is_empty());
    match &writes[0] {
        Write::Interaction { record, .. } => {
            assert_eq!(
                record.reason.map(InteractionReason::as_str),
                Some("approval_policy_deny_all")
            );
            assert_eq!(record.answer_request_id, None);
        }
        _ => unreachable!(),
    }
    let effects = interaction.handle(Input::Committed(Committed::Landed), now(t0, 1_002));
    assert_eq!(names(&effects), ["failpoint", "respond"]);
    let effects = interaction.handle(Input::Written(true), now(t0, 1_003));
    let (_, events) = commit(effects.last().unwrap());
    assert!(matches!(&events[..], [ActivityPayload::RuntimeRequestResolved(r)] if r.answered_by == "policy"));
    let effects = interaction.handle(Input::Committed(Committed::Landed), now(t0, 1_004));
    assert_eq!(names(&effects), ["observe"], "nobody waits for the policy's answer");
}

#[test]
fn an_answer_is_recorded_then_written_then_delivered_and_only_then_acknowledged() {
    let t0 = Instant::now();
    let mut interaction = pending_question(t0);
    let effects = interaction.handle(good_answer(), now(t0, 2_000));
    let (writes, events) = commit(&effects[0]);
    assert_eq!(
        transition(&writes[0]),
        (InteractionState::Pending, InteractionState::Answered)
    );
    assert!(events.is_empty(), "nothing is exposed until the answer is delivered");
    assert!(
        matches!(&writes[1..], [Write::ClaimIdempotency { key, .. }] if key.request_id == "answer-1"),
        "the call's key is claimed with the answer, in one transaction"
    );
    let effects = interaction.handle(Input::Committed(Committed::Landed), now(t0, 2_001));
    assert_eq!(names(&effects), ["failpoint", "respond"]);
    let later = t0 + Duration::from_millis(7);
    let effects = interaction.handle(Input::Written(true), now(later, 2_007));
    assert_eq!(names(&effects), ["observe", "failpoint", "commit"]);
    assert!(matches!(
        effects[0],
        Effect::Observe(Observation::DeliveredAfter(d)) if d == Duration::from_millis(7)
    ));
    let (writes, events) = commit(&effects[2]);
    assert_eq!(
        transition(&writes[0]),
        (InteractionState::Answered, InteractionState::Delivered)
    );
    assert!(matches!(&events[..], [ActivityPayload::RuntimeRequestResolved(r)] if r.delivery == "pipe_written"));
    assert!(
        matches!(&writes[1..], [Write::CompleteIdempotency { response, .. }] if *response == stored_interaction(&interaction.record().id)),
        "the call's outcome is stored with the row that makes it true: {writes:?}"
    );
    let effects = interaction.handle(Input::Committed(Committed::Landed), now(later, 2_008));
    assert_eq!(names(&effects), ["observe", "reply"]);
    let delivered = reply(&effects[1]).as_ref().unwrap();
    assert_eq!(delivered.state, InteractionState::Delivered);
    assert_eq!(delivered.answer_request_id.as_deref(), Some("answer-1"));
    assert!(interaction.is_ended());
}

#[test]
fn an_answer_the_agent_cannot_read_expires_with_delivery_unknown_and_is_refused() {
    let t0 = Instant::now();
    let mut interaction = pending_question(t0);
    interaction.handle(good_answer(), now(t0, 2_000));
    interaction.handle(Input::Committed(Committed::Landed), now(t0, 2_001));
    let effects = interaction.handle(Input::Written(false), now(t0, 2_002));
    let (writes, events) = commit(&effects[0]);
    assert_eq!(
        transition(&writes[0]),
        (InteractionState::Answered, InteractionState::Expired)
    );
    match &events[..] {
        [ActivityPayload::RuntimeRequestExpired(e)] => {
            assert_eq!(
                (e.delivery.as_str(), e.reason.as_str()),
                ("unknown", "provider_process_lost")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(writes.len(), 1, "a refused call's key is not completed: it is released");
    let effects = interaction.handle(Input::Committed(Committed::Landed), now(t0, 2_003));
    assert_eq!(names(&effects), ["observe", "reply"]);
    assert_eq!(refused_reason(&effects[1]), Reason::InteractionNotPending);
}

#[test]
fn an_answer_whose_request_id_is_taken_reaches_no_agent_and_leaves_the_interaction_pending() {
    let t0 = Instant::now();
    let mut interaction = pending_question(t0);
    interaction.handle(good_answer(), now(t0, 2_000));
    let effects = interaction.handle(Input::Committed(Committed::KeyTaken), now(t0, 2_001));
    assert_eq!(names(&effects), ["reply"]);
    assert_eq!(refused_reason(&effects[0]), Reason::RequestInFlight);
    assert!(interaction.is_pending());
    assert_eq!(interaction.record().state, InteractionState::Pending);
    // The next answer is taken as if the first had never come.
    let effects = interaction.handle(good_answer(), now(t0, 2_002));
    assert_eq!(names(&effects), ["commit"]);
}

#[test]
fn a_refused_answer_leaves_the_interaction_pending_for_the_next_one() {
    let t0 = Instant::now();
    let stale = Input::Answer {
        etag: "etag-0".into(),
        request_id: "a".into(),
        answer: InteractionAnswer::Cancel,
        key: None,
    };
    let invalid = Input::Answer {
        etag: "etag-1".into(),
        request_id: "a".into(),
        answer: InteractionAnswer::Questions(vec![]),
        key: None,
    };
    for (input, expected, reason) in [
        (stale, vec!["observe", "reply"], Reason::StaleEtag),
        (invalid, vec!["reply"], Reason::AnswerInvalid),
    ] {
        let mut interaction = pending_question(t0);
        let effects = interaction.handle(input, now(t0, 2_000));
        assert_eq!(names(&effects), expected);
        assert_eq!(refused_reason(effects.last().unwrap()), reason);
        assert!(interaction.is_pending());
    }
}

#[test]
fn an_answer_whose_compare_and_set_fails_reaches_no_agent() {
    let t0 = Instant::now();
    let moved = |state| {
        let mut current = record(InteractionKind::Question);
        current.state = state;
        Committed::Moved { current: Some(current) }
    };
    // Still pending: the execution's generation moved on — another owner holds it.
    let mut interaction = pending_question(t0);
    interaction.handle(good_answer(), now(t0, 2_000));
    let effects = interaction.handle(Input::Committed(moved(InteractionState::Pending)), now(t0, 2_001));
    assert_eq!(names(&effects), ["observe", "reply"]);
    assert!(matches!(effects[0], Effect::Observe(Observation::Fenced("answer"))));
    // Ended meanwhile: refused naming the state it is in.
    let mut interaction = pending_question(t0);
    interaction.handle(good_answer(), now(t0, 2_000));
    let effects = interaction.handle(Input::Committed(moved(InteractionState::Expired)), now(t0, 2_001));
    assert_eq!(names(&effects), ["reply"]);
    let refusal = reply(&effects[0]).as_ref().unwrap_err();
    assert_eq!(refusal.reason, Reason::InteractionNotPending);
    assert!(refusal.metadata.contains(&("state".into(), "expired".into())));
    assert!(interaction.is_ended());
}

#[test]
fn when_its_turn_ends_an_interaction_is_answered_cancelled_then_recorded_by_its_kind() {
    let t0 = Instant::now();
    let table = [
        (question(), true, InteractionState::Expired, "pipe_written"),
        (question(), false, InteractionState::Expired, "not_sent"),
        (permission(), true, InteractionState::Cancelled, "pipe_written"),
    ];
    for (persisted, written, state, delivery) in table {
        let (mut interaction, _) = open_with(persisted, ApprovalPolicy::Ask, t0);
        interaction.handle(Input::Committed(Committed::Landed), now(t0, 1_000));
        let effects = interaction.handle(
            Input::End(InteractionReason::parse("turn_cancelled").unwrap()),
            now(t0, 1_500),
        );
        assert!(matches!(&effects[..], [Effect::Respond(v)] if *v == cancelled_result()));
        let effects = interaction.handle(Input::Written(written), now(t0, 1_501));
        let (writes, events) = commit(&effects[0]);
        assert_eq!(transition(&writes[0]), (InteractionState::Pending, state));
        let Write::Interaction { record, .. } = &writes[0] else {
            unreachable!()
        };
        assert_eq!(record.delivery.map(Delivery::as_str), Some(delivery));
        assert_eq!(record.reason.map(InteractionReason::as_str), Some("turn_cancelled"));
        assert!(!record.replay_allowed);
        assert_eq!(events.len(), 1);
        let effects = interaction.handle(Input::Committed(Committed::Landed), now(t0, 1_502));
        match &effects[..] {
            [Effect::Observe(Observation::Waited { waited, .. })] => assert_eq!(*waited, Duration::from_millis(502)),
            other => panic!("{other:?}"),
        }
        assert!(interaction.is_ended());
    }
}

#[test]
fn an_answer_to_an_interaction_that_is_not_pending_is_refused_by_its_state() {
    let t0 = Instant::now();
    let mut interaction = pending_question(t0);
    interaction.handle(good_answer(), now(t0, 2_000));
    // Recording: the first answer is on its way.
    let effects = interaction.handle(good_answer(), now(t0, 2_000));
    assert_eq!(refused_reason(&effects[0]), Reason::InteractionNotPending);
    interaction.handle(Input::Committed(Committed::Landed), now(t0, 2_001));
    interaction.handle(Input::Written(true), now(t0, 2_002));
    interaction.handle(Input::Committed(Committed::Landed), now(t0, 2_003));
    let effects = interaction.handle(good_answer(), now(t0, 2_004));
    assert_eq!(refused_reason(&effects[0]), Reason::InteractionNotPending);
    assert!(
        interaction
            .handle(
                Input::End(InteractionReason::parse("turn_settled").unwrap()),
                now(t0, 2_005)
            )
            .is_empty()
    );
}

/// Every path the machine can take, with the feedback a runtime could give at each step.
fn every_trace() -> Vec<Vec<Effect>> {
    let t0 = Instant::now();
    let feedback = || {
        vec![
            Input::Committed(Committed::Landed),
            Input::Committed(Committed::Moved { current: None }),
            Input::Committed(Committed::Duplicate),
            Input::Written(true),
            Input::Written(false),
        ]
    };
    let mut traces = Vec::new();
    let mut frontier: Vec<(Interaction, Vec<Effect>)> = [
        open_with(question(), ApprovalPolicy::Ask, t0),
        open_with(permission(), ApprovalPolicy::DenyAll, t0),
    ]
    .into_iter()
    .collect();
    while let Some((interaction, trace)) = frontier.pop() {
        let inputs = if interaction.is_pending() {
            vec![
                good_answer(),
                Input::End(InteractionReason::parse("turn_settled").unwrap()),
            ]
        } else {
            feedback()
        };
        let mut advanced = false;
        for input in inputs {
            let mut next = interaction.clone();
            let effects = next.handle(input, now(t0, 5_000));
            if effects.is_empty() {
                continue;
            }
            advanced = true;
            let mut trace = clone_trace(&trace);
            trace.extend(effects);
            if trace.len() < 40 {
                frontier.push((next, trace));
            }
        }
        if !advanced {
            traces.push(trace);
        }
    }
    traces
}

#[test]
fn a_commit_or_a_pipe_write_is_always_the_last_effect_of_a_step() {
    let t0 = Instant::now();
    let mut interaction = pending_question(t0);
    for input in [
        good_answer(),
        Input::Committed(Committed::Landed),
        Input::Written(true),
        Input::Committed(Committed::Landed),
    ] {
        let effects = interaction.handle(input, now(t0, 3_000));
        let waits = effects
            .iter()
            .position(|e| matches!(e, Effect::Commit { .. } | Effect::Respond(_)));
        assert!(waits.is_none_or(|at| at == effects.len() - 1), "{effects:?}");
    }
}

#[test]
fn on_every_path_the_agent_gets_one_response_and_hears_no_answer_that_is_not_recorded() {
    let traces = every_trace();
    assert!(traces.len() > 10, "the exploration reached the machine's paths");
    for trace in traces {
        let responds: Vec<usize> = positions(&trace, |e| matches!(e, Effect::Respond(_)));
        assert!(responds.len() <= 1, "{trace:?}");
        // An answer (anything but `cancelled`) reaches the agent only after `answered` is
        // committed; `delivered` is committed only after it.
        for &at in &responds {
            let Effect::Respond(value) = &trace[at] else {
                unreachable!()
            };
            if *value != cancelled_result() {
                let recorded = trace[..at]
                    .iter()
                    .any(|e| committed_state(e) == Some(InteractionState::Answered));
                assert!(recorded, "{trace:?}");
            }
        }
        let delivered = positions(&trace, |e| committed_state(e) == Some(InteractionState::Delivered));
        assert!(delivered.iter().all(|d| responds.iter().any(|r| r < d)), "{trace:?}");
        // A caller is told OK only once `delivered` is committed.
        let ok = positions(&trace, |e| matches!(e, Effect::Reply(Ok(_))));
        assert!(ok.iter().all(|o| delivered.iter().any(|d| d < o)), "{trace:?}");
    }
}

/// Crash windows: a service that dies after the k-th effect leaves the row in the state of
/// the last commit before k. Whatever k, the agent never heard an answer the row does not
/// record as at least `answered`, so restart recovery (which expires `answered` with
/// `delivery: unknown`) never claims too little or too much.
#[test]
fn a_crash_after_any_effect_leaves_a_row_that_never_understates_what_the_agent_heard() {
    for trace in every_trace() {
        for k in 0..=trace.len() {
            let done = &trace[..k];
            let row = done.iter().rev().find_map(committed_state);
            let heard_an_answer = done
                .iter()
                .any(|e| matches!(e, Effect::Respond(v) if *v != cancelled_result()));
            if heard_an_answer {
                assert!(
                    matches!(
                        row,
                        Some(InteractionState::Answered | InteractionState::Delivered | InteractionState::Expired)
                    ),
                    "after {k} effects: {done:?}"
                );
            }
        }
    }
}

/// The state an effect commits the interaction's row to, if it commits one (assuming it lands).
fn committed_state(effect: &Effect) -> Option<InteractionState> {
    match effect {
        Effect::Commit { writes, .. } => writes.iter().find_map(|w| match w {
            Write::InsertInteraction(r) | Write::Interaction { record: r, .. } => Some(r.state),
            _ => None,
        }),
        _ => None,
    }
}

fn positions(trace: &[Effect], matches: impl Fn(&Effect) -> bool) -> Vec<usize> {
    trace
        .iter()
        .enumerate()
        .filter(|(_, e)| matches(e))
        .map(|(i, _)| i)
        .collect()
}

fn names(effects: &[Effect]) -> Vec<&'static str> {
    effects
        .iter()
        .map(|e| match e {
            Effect::Commit { .. } => "commit",
            Effect::Respond(_) => "respond",
            Effect::Reply(_) => "reply",
            Effect::Notice { .. } => "notice",
            Effect::Observe(_) => "observe",
            Effect::Failpoint(_) => "failpoint",
            Effect::Stop(_) => "stop",
        })
        .collect()
}

/// Effects hold errors, which are not `Clone`: a trace is re-described for each branch.
fn clone_trace(trace: &[Effect]) -> Vec<Effect> {
    trace
        .iter()
        .map(|e| match e {
            Effect::Commit { writes, events } => Effect::Commit {
                writes: writes.clone(),
                events: events.clone(),
            },
            Effect::Respond(v) => Effect::Respond(v.clone()),
            Effect::Reply(Ok(r)) => Effect::Reply(Ok(r.clone())),
            Effect::Reply(Err(e)) => Effect::Reply(Err(e.clone())),
            Effect::Notice { category, summary } => Effect::Notice {
                category,
                summary: summary.clone(),
            },
            Effect::Observe(o) => Effect::Observe(o.clone()),
            Effect::Failpoint(f) => Effect::Failpoint(f),
            Effect::Stop(e) => Effect::Stop(e.clone()),
        })
        .collect()
}

#[test]
fn an_outcome_quoting_a_secret_reaches_the_agent_verbatim_and_is_recorded_and_returned_redacted() {
    let t0 = Instant::now();
    let quoting = PersistedRequest::Question(
        serde_json::from_value::<QuestionRequest>(json!({
            "questions": [{"questionId": "question-1", "nativeId": format!("q-{SECRET}"), "prompt": "Keep?",
                "allowMultiple": false,
                "options": [{"optionId": "option-1", "nativeId": format!("keep-{SECRET}"), "label": "Keep"}]}]
        }))
        .unwrap(),
    );
    let (mut interaction, _) = open_with(quoting, ApprovalPolicy::Ask, t0);
    interaction.handle(Input::Committed(Committed::Landed), now(t0, 1_000));
    let effects = interaction.handle(good_answer(), now(t0, 2_000));
    let (writes, _) = commit(&effects[0]);
    let Write::Interaction { record, .. } = &writes[0] else {
        unreachable!()
    };
    let stored = record.outcome.clone().unwrap().to_string();
    assert!(
        !stored.contains(SECRET) && stored.contains("[redacted:CURSOR_API_KEY]"),
        "{stored}"
    );
    let effects = interaction.handle(Input::Committed(Committed::Landed), now(t0, 2_001));
    match &effects[1] {
        Effect::Respond(sent) => assert!(sent.to_string().contains(&format!("keep-{SECRET}")), "{sent}"),
        other => panic!("{other:?}"),
    }
    interaction.handle(Input::Written(true), now(t0, 2_002));
    let effects = interaction.handle(Input::Committed(Committed::Landed), now(t0, 2_003));
    let replied = reply(&effects[1]).as_ref().unwrap();
    assert!(!format!("{replied:?}").contains(SECRET), "{replied:?}");
}
