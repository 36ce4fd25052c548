//! Racing answers: however many calls answer one agent request at once, under one request id
//! or several, the agent reads exactly one answer, and every caller learns which.

use cursor_runner_e2e::*;
use proto::answer_interaction_request::Answer;
use tonic::Code;

use crate::durable::{created, responses, send, the_agent_got};

on_both_backends!(
    one_answer_per_agent_request_racing_answers_deliver_exactly_once,
    the_same_answer_retried_concurrently_under_one_request_id_is_delivered_once_and_returned_to_all,
    one_request_id_racing_with_two_answers_delivers_one_and_refuses_the_other_as_a_conflict,
    an_answer_under_a_request_id_another_call_used_reaches_no_agent_and_the_question_waits_for_its_answer,
);

async fn one_answer_per_agent_request_racing_answers_deliver_exactly_once(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let question = created(&mut events, 1).await.remove(0);
    let pick = || {
        Answer::Questions(proto::QuestionAnswer {
            selections: vec![proto::QuestionSelection {
                question_id: "question-1".into(),
                option_ids: vec!["option-1".into()],
            }],
        })
    };
    let mut racers = Vec::new();
    for n in 0..4 {
        let mut client = service.client().await;
        let question = question.clone();
        let answer = pick();
        racers.push(tokio::spawn(async move {
            send(&mut client, &format!("racer-{n}"), &question, answer).await
        }));
    }
    let mut delivered = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(interaction) => {
                assert_eq!(interaction.state, proto::InteractionState::Delivered as i32);
                delivered += 1;
            }
            Err(status) => assert_eq!(reason(&status), "INTERACTION_NOT_PENDING"),
        }
    }
    assert_eq!(delivered, 1);
    the_agent_got(&service, 1, "the agent got one answer").await;
    service.shutdown().await;
}

/// Rounds of the race below: each racer's arrival relative to the winner's commit varies,
/// and every arrival must give the same refusal.
const CONFLICT_ROUNDS: usize = 3;

async fn one_request_id_racing_with_two_answers_delivers_one_and_refuses_the_other_as_a_conflict(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    for round in 0..CONFLICT_ROUNDS {
        let (_, _, question) = question_asked(&mut client, &service.workspace, &format!("conflict-{round}")).await;
        let mut racers = Vec::new();
        for option_id in ["option-1", "option-2", "option-1", "option-2"] {
            let mut client = service.client().await;
            let request = one_question_answer(&question, &format!("one-id-{round}"), option_id);
            racers.push(tokio::spawn(async move {
                client
                    .answer_interaction(request)
                    .await
                    .map(|r| r.into_inner().interaction.unwrap())
            }));
        }
        let mut delivered = Vec::new();
        for racer in racers {
            match racer.await.unwrap() {
                Ok(interaction) => delivered.push(interaction.outcome),
                Err(status) => assert_eq!(
                    (status.code(), reason(&status).as_str()),
                    (Code::Aborted, "ANSWER_CONFLICT"),
                    "round {round}: {status:?}"
                ),
            }
        }
        assert_eq!(delivered.len(), 2, "round {round}: the two calls of the winning answer");
        assert_eq!(delivered[0], delivered[1], "round {round}: one request id, one result");
    }
    the_agent_got(&service, CONFLICT_ROUNDS, "one answer per question").await;
    service.shutdown().await;
}

async fn the_same_answer_retried_concurrently_under_one_request_id_is_delivered_once_and_returned_to_all(
    backend: Backend,
) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let question = created(&mut events, 1).await.remove(0);
    let mut retries = Vec::new();
    for _ in 0..3 {
        let mut client = service.client().await;
        let request = one_question_answer(&question, "one-id", "option-1");
        retries.push(tokio::spawn(async move {
            client
                .answer_interaction(request)
                .await
                .map(|r| r.into_inner().interaction.unwrap())
        }));
    }
    for retry in retries {
        let interaction = retry.await.unwrap().expect("a retry gets the stored result");
        assert_eq!(interaction.state, proto::InteractionState::Delivered as i32);
    }
    the_agent_got(&service, 1, "the agent got one answer").await;
    service.shutdown().await;
}

/// The answer's key is claimed in the same transaction that records it `answered`: a key
/// found taken there rolls the record back, so nothing reaches the agent and the question
/// is still pending for the answer that follows.
async fn an_answer_under_a_request_id_another_call_used_reaches_no_agent_and_the_question_waits_for_its_answer(
    backend: Backend,
) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (_, _, mut events) = begin_turn(&mut client, &service).await;
    let question = created(&mut events, 1).await.remove(0);
    // `turn-1` is the request id `begin_turn` started the turn with.
    let reused = client
        .answer_interaction(one_question_answer(&question, "turn-1", "option-1"))
        .await;
    assert_refused(reused, Code::Aborted, "REQUEST_ID_REUSED");
    assert!(responses(&service).is_empty(), "the agent got no answer");
    let id = question["interactionId"].as_str().unwrap();
    assert_eq!(
        get_interaction(&mut client, id).await.state,
        proto::InteractionState::Pending as i32
    );
    let answered = client
        .answer_interaction(one_question_answer(&question, "answer-1", "option-1"))
        .await
        .expect("the next answer is taken")
        .into_inner()
        .interaction
        .unwrap();
    assert_eq!(answered.state, proto::InteractionState::Delivered as i32);
    the_agent_got(&service, 1, "the agent got one answer").await;
    service.shutdown().await;
}
