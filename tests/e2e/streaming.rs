use std::collections::HashSet;
use std::time::Duration;

use cursor_runner_e2e::*;
use proto::stream_events_response::Frame;
use tonic::Code;

on_both_backends!(
    streaming_from_zero_and_from_the_middle_returns_exactly_the_remaining_events,
    a_second_subscriber_sees_the_same_sequence,
    subscribers_switching_from_replay_to_live_at_random_cursors_see_no_gap_and_no_duplicate,
    an_idle_stream_gets_caught_up_then_heartbeats,
    a_cursor_beyond_the_head_is_out_of_range,
    acks_are_cumulative_and_refuse_regressions_and_the_future,
    persist_before_expose_every_streamed_event_and_interaction_is_already_committed,
    acknowledged_events_past_retention_are_pruned_and_a_cursor_below_them_is_out_of_range,
    an_execution_takes_streams_up_to_its_bound_and_refuses_one_more_until_one_closes,
);

/// Each open stream holds a bounded buffer of events in the service, so an execution has
/// at most `MAX_STREAMS_PER_EXECUTION` of them: one more is `RESOURCE_EXHAUSTED` /
/// `STREAMS_EXHAUSTED` until one closes.
async fn an_execution_takes_streams_up_to_its_bound_and_refuses_one_more_until_one_closes(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let mut open = Vec::new();
    for _ in 0..cursor_runner_executions::MAX_STREAMS_PER_EXECUTION {
        open.push(
            Subscriber::open(&mut client, &execution.execution_id, 0)
                .await
                .expect("under the bound"),
        );
    }
    let refused = Subscriber::open(&mut client, &execution.execution_id, 0)
        .await
        .err()
        .expect("one stream over the bound");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert_eq!(reason(&refused), "STREAMS_EXHAUSTED");
    drop(open.pop());
    let mut reopened = None;
    for _ in 0..200 {
        // The service lets go of a stream once it sees the client gone.
        match Subscriber::open(&mut client, &execution.execution_id, 0).await {
            Ok(stream) => {
                reopened = Some(stream);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(25)).await,
        }
    }
    assert!(reopened.is_some(), "a closed stream frees its place");
    service.shutdown().await;
}

async fn settled_execution(service: &TestService, client: &mut Client) -> (String, Vec<proto::ActivityEvent>) {
    let (execution, _turn, mut events) = begin_turn(client, service).await;
    let all = events.until_turn_settles().await;
    (execution.execution_id, all)
}

async fn streaming_from_zero_and_from_the_middle_returns_exactly_the_remaining_events(backend: Backend) {
    let service = TestService::start(backend, "two_turns.json").await;
    let mut client = service.client().await;
    let (execution_id, all) = settled_execution(&service, &mut client).await;
    let sequences: Vec<i64> = all.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        (1..=all.len() as i64).collect::<Vec<_>>(),
        "contiguous from 1"
    );
    let head = *sequences.last().unwrap();
    for cursor in [0, 1, head / 2, head - 1] {
        let mut replay = Subscriber::open(&mut client, &execution_id, cursor).await.unwrap();
        let mut got = Vec::new();
        loop {
            match replay.next_frame().await {
                Frame::Event(e) => got.push(e),
                Frame::CaughtUp(c) => {
                    assert_eq!(c.head_sequence, head);
                    break;
                }
                Frame::Heartbeat(_) => {}
            }
        }
        let expected: Vec<_> = all.iter().filter(|e| e.sequence > cursor).cloned().collect();
        assert_eq!(got, expected, "replay after {cursor}");
    }
    service.shutdown().await;
}

async fn a_second_subscriber_sees_the_same_sequence(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let mut first = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    let mut second = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    let a = first.events_until("runtime_request.created").await;
    let b = second.events_until("runtime_request.created").await;
    assert_eq!(a, b);
    service.shutdown().await;
}

async fn subscribers_switching_from_replay_to_live_at_random_cursors_see_no_gap_and_no_duplicate(backend: Backend) {
    let service = TestService::start(backend, "flood_around_question.json").await;
    let mut client = service.client().await;
    let execution = create_execution(&mut client, &service, "create-1").await;
    let mut watcher = Subscriber::open(&mut client, &execution.execution_id, 0).await.unwrap();
    start_turn(&mut client, &execution.execution_id, "turn-1")
        .await
        .unwrap();
    // Subscribers join while the agent is still appending, each at a cursor somewhere
    // in what is already committed; the question mid-turn holds the stream still until
    // every one of them has opened, so each reaches the head live before the second flood.
    let mut joiners = Vec::new();
    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::channel(8);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(15)).await;
        let head = service
            .store
            .head_sequence(&execution.execution_id.as_str().into())
            .await
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let cursor = if head == 0 { 0 } else { (seed % head as u64) as i64 };
        let mut client = service.client().await;
        let execution_id = execution.execution_id.clone();
        let opened = opened_tx.clone();
        joiners.push(tokio::spawn(async move {
            let mut subscriber = Subscriber::open(&mut client, &execution_id, cursor).await.unwrap();
            opened.send(()).await.unwrap();
            // Caught up before the turn settled: this subscriber went from replay to live.
            let mut went_live = false;
            let mut sequences = Vec::new();
            loop {
                match subscriber.next_frame().await {
                    Frame::CaughtUp(_) => went_live = true,
                    Frame::Event(event) => {
                        sequences.push(event.sequence);
                        if is_settlement(&event.event_type) {
                            break;
                        }
                    }
                    _ => {}
                }
            }
            (cursor, sequences, went_live)
        }));
    }
    for _ in 0..8 {
        opened_rx.recv().await.unwrap();
    }
    let created = payload(watcher.events_until("runtime_request.created").await.last().unwrap());
    client
        .answer_interaction(one_question_answer(&created, "answer-1", "option-1"))
        .await
        .expect("answered");
    let mut live = 0;
    for joiner in joiners {
        let (cursor, sequences, went_live) = joiner.await.unwrap();
        let expected: Vec<i64> = (cursor + 1..=cursor + sequences.len() as i64).collect();
        assert_eq!(sequences, expected, "subscriber from {cursor}");
        assert_eq!(sequences.iter().collect::<HashSet<_>>().len(), sequences.len());
        live += usize::from(went_live);
    }
    assert_eq!(
        live, 8,
        "every subscriber switched from replay to live before the settlement"
    );
    service.shutdown().await;
}

async fn an_idle_stream_gets_caught_up_then_heartbeats(backend: Backend) {
    let options = Options {
        heartbeat: Duration::from_millis(100),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "two_turns.json", options).await;
    let mut client = service.client().await;
    let (execution_id, all) = settled_execution(&service, &mut client).await;
    let head = all.last().unwrap().sequence;
    let mut stream = Subscriber::open(&mut client, &execution_id, head).await.unwrap();
    assert_eq!(
        stream.next_frame().await,
        Frame::CaughtUp(proto::CaughtUp { head_sequence: head })
    );
    match stream.next_frame().await {
        Frame::Heartbeat(h) => assert_eq!(h.head_sequence, head),
        other => panic!("expected a heartbeat, got {other:?}"),
    }
    service.shutdown().await;
}

async fn a_cursor_beyond_the_head_is_out_of_range(backend: Backend) {
    let service = TestService::start(backend, "two_turns.json").await;
    let mut client = service.client().await;
    let (execution_id, all) = settled_execution(&service, &mut client).await;
    let head = all.last().unwrap().sequence;
    assert_refused(
        Subscriber::open(&mut client, &execution_id, head + 1).await.map(|_| ()),
        Code::OutOfRange,
        "CURSOR_AHEAD_OF_HEAD",
    );
    assert_refused(
        Subscriber::open(&mut client, &execution_id, -1).await.map(|_| ()),
        Code::InvalidArgument,
        "INVALID_ARGUMENT",
    );
    service.shutdown().await;
}

/// A negative sequence is bad input, as it is for `StreamEvents`, not a regression.
async fn acks_are_cumulative_and_refuse_regressions_and_the_future(backend: Backend) {
    let service = TestService::start(backend, "two_turns.json").await;
    let mut client = service.client().await;
    let (execution_id, all) = settled_execution(&service, &mut client).await;
    let head = all.last().unwrap().sequence;
    let ack = |through: i64| {
        let mut client = client.clone();
        let execution_id = execution_id.clone();
        async move {
            client
                .ack_events(proto::AckEventsRequest {
                    execution_id,
                    through_sequence: through,
                })
                .await
                .map(|r| r.into_inner().acked_sequence)
        }
    };
    assert_refused(ack(-1).await, Code::InvalidArgument, "INVALID_ARGUMENT");
    assert_eq!(ack(2).await.unwrap(), 2);
    assert_eq!(ack(2).await.unwrap(), 2, "repeating an ack is harmless");
    assert_refused(ack(1).await, Code::FailedPrecondition, "ACK_REGRESSION");
    assert_refused(ack(head + 1).await, Code::InvalidArgument, "ACK_BEYOND_HEAD");
    assert_eq!(ack(head).await.unwrap(), head);
    let record = get_execution(&mut client, &execution_id).await;
    assert_eq!(record.acked_sequence, head);
    service.shutdown().await;
}

async fn persist_before_expose_every_streamed_event_and_interaction_is_already_committed(backend: Backend) {
    let service = TestService::start(backend, "demo.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    loop {
        let event = events.next_event().await;
        // The event is in the outbox the moment a subscriber sees it…
        let stored = service
            .store
            .read_events(&execution.execution_id.as_str().into(), event.sequence - 1, 1)
            .await
            .unwrap();
        assert_eq!(stored[0].event_id, event.event_id);
        if event.event_type == "runtime_request.created" {
            // …and so is the interaction it exposes.
            let id = payload(&event)["interactionId"].as_str().unwrap().to_owned();
            let row = service
                .store
                .get_interaction(TENANT, &id.as_str().into())
                .await
                .unwrap()
                .expect("interaction row");
            assert_eq!(row.state.as_str(), "pending");
            break;
        }
    }
    service.shutdown().await;
}

/// Keeps the P1 benchmark compiling and running (its figures come from `cargo bench`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_throughput_benchmark_runs_at_smoke_size() {
    let report = cursor_runner_e2e::throughput::measure(Backend::Sqlite, 200).await;
    assert_eq!(report.updates, 200);
    assert_eq!(
        report.text_bytes_streamed, report.text_bytes_sent,
        "every chunk's text arrived"
    );
}

async fn acknowledged_events_past_retention_are_pruned_and_a_cursor_below_them_is_out_of_range(backend: Backend) {
    let options = Options {
        retention: Some(cursor_runner_executions::retention::Retention {
            keep: Duration::ZERO,
            sweep_every: Duration::from_millis(50),
        }),
        ..Options::default()
    };
    let service = TestService::start_with(backend, "two_turns.json", options).await;
    let mut client = service.client().await;
    let (execution, _, mut events) = begin_turn(&mut client, &service).await;
    let first_turn = events.until_turn_settles().await;
    let head = first_turn.last().unwrap().sequence;
    let acked = head - 2;
    client
        .ack_events(proto::AckEventsRequest {
            execution_id: execution.execution_id.clone(),
            through_sequence: acked,
        })
        .await
        .unwrap();
    let store = service.store.clone();
    let id = execution.execution_id.clone();
    let mut oldest = 0;
    for _ in 0..200 {
        oldest = store.oldest_sequence(&id.as_str().into()).await.unwrap().unwrap();
        if oldest > 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        oldest,
        acked + 1,
        "pruned exactly through the acknowledgement, no further"
    );

    let refused = Subscriber::open(&mut client, &execution.execution_id, 0)
        .await
        .map(drop);
    let status = refused.expect_err("a cursor below the oldest kept event");
    assert_eq!(status.code(), Code::OutOfRange);
    assert_eq!(reason(&status), "EVENTS_PRUNED");
    let details = tonic_types::StatusExt::get_error_details(&status);
    assert_eq!(
        details.error_info().unwrap().metadata["oldest_sequence"],
        oldest.to_string(),
        "the refusal names the oldest available sequence"
    );
    let mut resumed = Subscriber::open(&mut client, &execution.execution_id, oldest - 1)
        .await
        .unwrap();
    assert_eq!(resumed.next_event().await.sequence, oldest);

    // Everything acknowledged, the newest included: the newest is kept, and the next
    // turn's events number on from it.
    client
        .ack_events(proto::AckEventsRequest {
            execution_id: execution.execution_id.clone(),
            through_sequence: head,
        })
        .await
        .unwrap();
    for _ in 0..200 {
        if store.oldest_sequence(&id.as_str().into()).await.unwrap() == Some(head) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        store.oldest_sequence(&id.as_str().into()).await.unwrap(),
        Some(head),
        "the newest event is kept"
    );
    start_turn(&mut client, &execution.execution_id, "turn-2")
        .await
        .unwrap();
    let second = events.until_turn_settles().await;
    assert_eq!(second[0].sequence, head + 1, "sequences keep counting up");
    service.shutdown().await;
}
