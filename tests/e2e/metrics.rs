//! Metrics move with the work, by exact amounts, and never carry an id; health tells
//! the truth about draining.

use std::collections::HashMap;

use cursor_runner_e2e::*;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

on_both_backends!(
    a_turn_with_one_question_moves_the_metrics_by_exact_amounts,
    health_is_not_serving_once_draining_begins,
);

/// PostgreSQL only: cutting off a SQLite file is not a thing a pool notices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_is_not_serving_while_the_store_is_unreachable_and_recovers_while_liveness_holds() {
    let service = TestService::start(Backend::Postgres, "demo.json").await;
    let mut health = HealthClient::new(service.channel().await);
    health_becomes(&mut health, ServingStatus::Serving).await;
    service.database().set_unreachable(true).await;
    health_becomes(&mut health, ServingStatus::NotServing).await;
    // The probe that found it sets the gauge the store alert watches, before health.
    assert_eq!(samples(&service.metrics())["cursor_runner_store_reachable"], 0.0);
    // Liveness stays SERVING: a restart would kill every agent and fix nothing.
    let overall = health
        .check(HealthCheckRequest { service: String::new() })
        .await
        .unwrap()
        .into_inner()
        .status();
    assert_eq!(overall, ServingStatus::Serving);
    service.database().set_unreachable(false).await;
    health_becomes(&mut health, ServingStatus::Serving).await;
    assert_eq!(samples(&service.metrics())["cursor_runner_store_reachable"], 1.0);
    service.shutdown().await;
}

/// `series{labels}` → value, for every sample line of an OpenMetrics scrape.
fn samples(scrape: &str) -> HashMap<String, f64> {
    assert!(scrape.ends_with("# EOF\n"), "an OpenMetrics exposition ends with # EOF");
    scrape
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            (series.to_owned(), value.parse().expect("a numeric value"))
        })
        .collect()
}

/// Every label value in the scrape.
fn label_values(scrape: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in scrape.lines().filter(|l| !l.starts_with('#')) {
        if let Some((_, rest)) = line.split_once('{') {
            let labels = rest.rsplit_once('}').expect("closed label set").0;
            for pair in labels.split(',') {
                let (_, value) = pair.split_once('=').expect("name=value");
                out.push(value.trim_matches('"').to_owned());
            }
        }
    }
    out
}

fn delta(before: &HashMap<String, f64>, after: &HashMap<String, f64>, series: &str) -> f64 {
    after.get(series).copied().unwrap_or(0.0) - before.get(series).copied().unwrap_or(0.0)
}

fn family_sum(samples: &HashMap<String, f64>, metric: &str) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| series.starts_with(&format!("{metric}{{")))
        .map(|(_, value)| value)
        .sum()
}

async fn a_turn_with_one_question_moves_the_metrics_by_exact_amounts(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let id = execution.execution_id.clone();
    // The agent announces its commands right after `session/new`; once that is
    // committed nothing else happens before the turn, so the head is stable.
    let mut events = Subscriber::open(&mut client, &id, 0).await.unwrap();
    let head = events
        .events_until("session.commands.updated")
        .await
        .last()
        .unwrap()
        .sequence;
    assert_eq!(service.store.head_sequence(&id.as_str().into()).await.unwrap(), head);
    let before_text = service.metrics();
    let before = samples(&before_text);
    assert_eq!(before["cursor_runner_executions_live"], 1.0, "{before_text}");
    assert_eq!(
        before["cursor_runner_process_starts_total{distribution=\"unpinned\"}"], 1.0,
        "a development command is reported unpinned\n{before_text}"
    );
    assert_eq!(before["cursor_runner_event_streams_open"], 1.0, "{before_text}");
    assert_eq!(
        before["cursor_runner_pool_slots{state=\"leased\",profile=\"learned\"}"], 1.0,
        "the execution's process, of a profile its CreateExecution taught the pool\n{before_text}"
    );
    assert_eq!(
        before["cursor_runner_pool_slots{state=\"leased\",profile=\"configured\"}"], 0.0,
        "{before_text}"
    );

    let turn = start_turn(&mut client, &id, "turn-1").await.unwrap();
    let asked = events.events_until("runtime_request.created").await;
    let request = payload(asked.last().unwrap());
    let interaction_id = request["interactionId"].as_str().unwrap().to_owned();
    let forged = client
        .answer_interaction(one_question_answer(&request, "answer-0", "option-99"))
        .await
        .unwrap_err();
    let forged_reason = reason(&forged);
    client
        .answer_interaction(proto::AnswerInteractionRequest {
            request_id: "answer-1".into(),
            interaction_id: interaction_id.clone(),
            etag: request["etag"].as_str().unwrap().into(),
            answer: Some(proto::answer_interaction_request::Answer::Questions(
                proto::QuestionAnswer {
                    selections: vec![proto::QuestionSelection {
                        question_id: "question-1".into(),
                        option_ids: vec!["option-1".into()],
                    }],
                },
            )),
        })
        .await
        .unwrap();
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let streamed = asked.len() + settled.len();

    let after_text = service.metrics();
    let after = samples(&after_text);
    let exact = |series: &str, expected: f64| {
        assert_eq!(delta(&before, &after, series), expected, "{series} in\n{after_text}");
    };
    exact("cursor_runner_turns_started_total", 1.0);
    exact("cursor_runner_turns_settled_total{state=\"completed\"}", 1.0);
    exact("cursor_runner_interactions_created_total{kind=\"question\"}", 1.0);
    exact(
        "cursor_runner_interactions_ended_total{kind=\"question\",state=\"delivered\"}",
        1.0,
    );
    exact("cursor_runner_answers_delivered_total{answered_by=\"human\"}", 1.0);
    exact("cursor_runner_process_starts_total{distribution=\"unpinned\"}", 0.0);
    exact(
        &format!("cursor_runner_requests_refused_total{{reason=\"{forged_reason}\"}}"),
        1.0,
    );
    exact("cursor_runner_turn_duration_seconds_count{state=\"completed\"}", 1.0);
    exact(
        "cursor_runner_interaction_wait_seconds_count{kind=\"question\",state=\"delivered\"}",
        1.0,
    );
    exact("cursor_runner_answer_delivery_seconds_count", 1.0);
    assert!(
        delta(
            &before,
            &after,
            "cursor_runner_store_operation_duration_seconds_count{operation=\"append_events\"}"
        ) >= 1.0,
        "store latency is measured per operation\n{after_text}"
    );
    assert_eq!(
        after["cursor_runner_agent_start_seconds_count{phase=\"spawn\"}"], 1.0,
        "{after_text}"
    );
    assert_eq!(
        after[&format!("cursor_runner_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"))],
        1.0
    );
    assert_eq!(
        family_sum(&after, "cursor_runner_events_appended_total")
            - family_sum(&before, "cursor_runner_events_appended_total"),
        streamed as f64,
        "events appended == events streamed\n{after_text}"
    );
    assert_eq!(
        service.store.head_sequence(&id.as_str().into()).await.unwrap() - head,
        streamed as i64,
        "the subscriber saw every event of the turn"
    );

    let ids = [id.as_str(), interaction_id.as_str(), turn.turn_id.as_str()];
    for value in label_values(&after_text) {
        assert!(!ids.contains(&value.as_str()), "an id as a label value: {value}");
    }
    drop(events);
    service.shutdown().await;
}

async fn health_is_not_serving_once_draining_begins(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut health = HealthClient::new(service.channel().await);
    let status = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    for name in [cursor_runner_api::RUNNER_SERVICE_NAME, ""] {
        let serving = health.check(status(name)).await.unwrap().into_inner().status();
        assert_eq!(serving, ServingStatus::Serving, "{name:?}");
    }
    assert_eq!(samples(&service.metrics())["cursor_runner_draining"], 0.0);
    // Shutdown begins with ending the streams; the server still answers health.
    service.engine.end_streams();
    assert_eq!(samples(&service.metrics())["cursor_runner_draining"], 1.0);
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let now = health
            .check(status(cursor_runner_api::RUNNER_SERVICE_NAME))
            .await
            .unwrap()
            .into_inner()
            .status();
        if now == ServingStatus::NotServing {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still {now:?} while draining");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let overall = health.check(status("")).await.unwrap().into_inner().status();
    assert_eq!(overall, ServingStatus::NotServing);
    service.shutdown().await;
}
