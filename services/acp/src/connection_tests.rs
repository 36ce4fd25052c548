use super::*;
use tokio::io::{AsyncBufReadExt, BufReader, duplex};

struct Peer {
    lines: tokio::io::Lines<BufReader<tokio::io::DuplexStream>>,
    write: tokio::io::DuplexStream,
}

impl Peer {
    async fn send(&mut self, v: Value) {
        let mut line = v.to_string().into_bytes();
        line.push(b'\n');
        self.write.write_all(&line).await.unwrap();
    }
    async fn recv(&mut self) -> Value {
        let line = self.lines.next_line().await.unwrap().unwrap();
        serde_json::from_str(&line).unwrap()
    }
}

fn pair() -> (AcpConnection, InboundStream, Peer) {
    let (client_stdin, agent_reads) = duplex(1 << 16);
    let (agent_writes, client_stdout) = duplex(1 << 16);
    let (conn, inbound) = AcpConnection::spawn(client_stdin, client_stdout);
    let peer = Peer {
        lines: BufReader::new(agent_reads).lines(),
        write: agent_writes,
    };
    (conn, inbound, peer)
}

#[tokio::test]
async fn an_agent_request_with_our_pending_id_is_routed_as_a_request() {
    let (conn, mut inbound, mut peer) = pair();
    let call = tokio::spawn({
        let conn = conn.clone();
        async move { conn.request("session/prompt", json!({})).await }
    });
    let sent = peer.recv().await;
    let our_id = sent["id"].clone();
    peer.send(json!({"jsonrpc":"2.0","id":our_id,"method":"cursor/ask_question","params":{}}))
        .await;
    let Some(Inbound::Request(req)) = inbound.recv().await else {
        panic!("expected a request")
    };
    assert_eq!(req.method, "cursor/ask_question");
    req.respond(Ok(json!({"ok":true}))).await.unwrap();
    assert_eq!(peer.recv().await["result"], json!({"ok":true}));
    peer.send(json!({"jsonrpc":"2.0","id":our_id,"result":{"stopReason":"end_turn"}}))
        .await;
    assert_eq!(call.await.unwrap().unwrap()["stopReason"], "end_turn");
}

#[tokio::test]
async fn an_in_order_response_follows_the_updates_sent_before_it() {
    let (conn, mut inbound, mut peer) = pair();
    let id = conn.start_request("session/prompt", json!({})).await.unwrap();
    let _ = peer.recv().await;
    peer.send(json!({"jsonrpc":"2.0","method":"session/update","params":{"n":1}}))
        .await;
    peer.send(json!({"jsonrpc":"2.0","id":id,"result":{"stopReason":"end_turn"}}))
        .await;
    assert!(matches!(inbound.recv().await, Some(Inbound::Notification { .. })));
    match inbound.recv().await {
        Some(Inbound::Response { id: got, result }) => {
            assert_eq!(got, id);
            assert_eq!(result.unwrap()["stopReason"], "end_turn");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_request_given_up_on_leaves_no_waiter_and_its_late_answer_is_unmatched() {
    let (conn, mut inbound, mut peer) = pair();
    for _ in 0..3 {
        let given_up = tokio::time::timeout(
            std::time::Duration::from_millis(20),
            conn.request("cursor/list_available_models", json!({})),
        )
        .await;
        assert!(given_up.is_err());
    }
    assert_eq!(
        conn.shared.pending.lock().waiters.len(),
        0,
        "nothing waits for the answers"
    );
    let first = peer.recv().await;
    peer.send(json!({"jsonrpc":"2.0","id":first["id"],"result":{}})).await;
    peer.send(json!({"jsonrpc":"2.0","id":first["id"],"result":{}})).await;
    assert!(
        matches!(inbound.recv().await, Some(Inbound::UnmatchedResponse { .. })),
        "the late answer passes quietly; a second answer to the same id is unmatched"
    );
}

#[tokio::test]
async fn only_the_latest_requests_given_up_on_are_remembered() {
    let (conn, mut inbound, mut peer) = pair();
    for _ in 0..=GIVEN_UP_REMEMBERED {
        let call = conn.request("x", json!({}));
        let _ = tokio::time::timeout(std::time::Duration::from_millis(1), call).await;
    }
    // Ids count from 1: the first was given up on longest ago.
    let (oldest, newest) = (1, i64::try_from(GIVEN_UP_REMEMBERED).unwrap() + 1);
    peer.send(json!({"jsonrpc":"2.0","id":newest,"result":{}})).await;
    peer.send(json!({"jsonrpc":"2.0","id":oldest,"result":{}})).await;
    assert!(matches!(
        inbound.recv().await,
        Some(Inbound::UnmatchedResponse {
            id: RequestId::Number(1)
        })
    ));
    assert_eq!(conn.shared.pending.lock().given_up.len(), GIVEN_UP_REMEMBERED - 1);
}

#[tokio::test]
async fn a_dropped_agent_request_is_answered_with_an_internal_error() {
    let (_conn, mut inbound, mut peer) = pair();
    peer.send(json!({"jsonrpc":"2.0","id":0,"method":"x"})).await;
    let Some(Inbound::Request(req)) = inbound.recv().await else {
        panic!()
    };
    drop(req);
    let answer = peer.recv().await;
    assert_eq!(answer["id"], 0);
    assert_eq!(answer["error"]["code"], INTERNAL_ERROR);
}

#[tokio::test]
async fn a_request_whose_id_no_integer_holds_is_answered_invalid_request_with_its_id() {
    let (_conn, mut inbound, mut peer) = pair();
    for (id, echoed) in [(json!(1.5), json!(1.5)), (json!({"x": 1}), Value::Null)] {
        peer.send(json!({"jsonrpc":"2.0","id":id,"method":"cursor/ask_question","params":{}}))
            .await;
        let answer = peer.recv().await;
        assert_eq!(answer["id"], echoed);
        assert_eq!(answer["error"]["code"], INVALID_REQUEST);
        assert!(
            matches!(inbound.recv().await, Some(Inbound::Invalid { .. })),
            "and said"
        );
    }
}

#[tokio::test]
async fn eof_fails_pending_requests_and_reports_closed() {
    let (conn, mut inbound, mut peer) = pair();
    let call = tokio::spawn({
        let conn = conn.clone();
        async move { conn.request("initialize", json!({})).await }
    });
    let _ = peer.recv().await;
    peer.send(json!({"jsonrpc":"2.0","method":"n"})).await;
    drop(peer);
    assert_eq!(call.await.unwrap(), Err(AcpError::Closed));
    assert!(matches!(inbound.recv().await, Some(Inbound::Notification { .. })));
    assert!(matches!(inbound.recv().await, Some(Inbound::Closed { .. })));
}

#[tokio::test]
async fn a_response_to_an_unknown_id_is_reported_not_matched() {
    let (_conn, mut inbound, mut peer) = pair();
    peer.send(json!({"jsonrpc":"2.0","id":999,"result":{}})).await;
    assert!(matches!(
        inbound.recv().await,
        Some(Inbound::UnmatchedResponse {
            id: RequestId::Number(999)
        })
    ));
}
/// A connection whose agent side reads nothing until the test says so, through a
/// pipe of `buffer` bytes.
fn deaf_pair(
    buffer: usize,
) -> (
    AcpConnection,
    InboundStream,
    tokio::io::DuplexStream,
    tokio::io::DuplexStream,
) {
    let (client_stdin, agent_reads) = duplex(buffer);
    let (agent_writes, client_stdout) = duplex(buffer);
    let (conn, inbound) = AcpConnection::spawn(client_stdin, client_stdout);
    (conn, inbound, agent_reads, agent_writes)
}

fn larger_than(bytes: usize) -> Value {
    json!({"text": "x".repeat(bytes)})
}

#[tokio::test(start_paused = true)]
async fn a_write_the_agent_takes_nothing_of_for_the_stall_limit_fails_and_ends_the_stream() {
    let (conn, mut inbound, _agent_reads, _agent_writes) = deaf_pair(1024);
    let started = tokio::time::Instant::now();
    let asked = conn.request("session/set_mode", larger_than(4096)).await;
    assert_eq!(
        asked,
        Err(AcpError::Stalled {
            limit: AGENT_WRITE_STALL_LIMIT
        })
    );
    assert_eq!(
        started.elapsed(),
        AGENT_WRITE_STALL_LIMIT,
        "given up at the limit, not before"
    );
    assert!(matches!(
        inbound.recv().await,
        Some(Inbound::StoppedReading { limit }) if limit == AGENT_WRITE_STALL_LIMIT
    ));
    assert!(inbound.recv().await.is_none(), "nothing follows");
    assert_eq!(conn.request("session/set_mode", json!({})).await, Err(AcpError::Closed));
}

#[tokio::test(start_paused = true)]
async fn a_reader_that_takes_a_little_just_within_the_stall_limit_each_time_is_waited_for() {
    let (conn, _inbound, mut agent_reads, _agent_writes) = deaf_pair(1024);
    let slow_reader = tokio::spawn(async move {
        let mut chunk = [0u8; 1024];
        let mut read = 0;
        loop {
            tokio::time::sleep(AGENT_WRITE_STALL_LIMIT - Duration::from_millis(1)).await;
            let n = tokio::io::AsyncReadExt::read(&mut agent_reads, &mut chunk)
                .await
                .unwrap();
            read += n;
            if chunk[..n].contains(&b'\n') {
                return read;
            }
        }
    });
    let started = tokio::time::Instant::now();
    conn.notify("session/cancel", larger_than(4096)).await.unwrap();
    let read = slow_reader.await.unwrap();
    assert!(read > 4096, "the whole line arrived");
    assert!(
        started.elapsed() > 3 * AGENT_WRITE_STALL_LIMIT,
        "over several limits in all"
    );
}

#[tokio::test(start_paused = true)]
async fn a_prompt_and_a_notification_return_once_queued_while_the_agent_reads_nothing() {
    let (conn, _inbound, _agent_reads, _agent_writes) = deaf_pair(1024);
    let started = tokio::time::Instant::now();
    conn.start_request("session/prompt", larger_than(4096)).await.unwrap();
    conn.notify("session/cancel", json!({})).await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO, "neither waited on the pipe");
}
