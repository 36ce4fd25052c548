//! One JSON-RPC connection over an agent's stdio.
//!
//! A reader task owns stdout, a writer task owns stdin. Our requests and the agent's
//! requests live in independent id spaces: a response is matched only against our
//! pending table, and an agent request is routed by its `method`, never by its id.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::agent_message::AgentMessage;
use crate::framing::{FrameReader, ReadFrame};
use crate::inbound_queue::{self, Batcher, INBOUND_QUEUE, MAX_INBOUND_QUEUE_BYTES};
use crate::message::{
    Classified, INTERNAL_ERROR, INVALID_REQUEST, RequestId, RpcError, UNANSWERABLE_ID_MESSAGE, classify,
};
use crate::text_chunk::TextChunk;

/// Outgoing lines waiting for the writer task.
const OUTBOUND_QUEUE: usize = 256;
/// How long one write to the agent's stdin may go without the agent taking a single byte
/// before the agent counts as no longer reading: its stdin is dropped, every write after
/// fails, and the stream reports [`Inbound::StoppedReading`]. A live agent drains its
/// pipe within milliseconds; ten seconds of none is a hung reader, not a slow one.
pub const AGENT_WRITE_STALL_LIMIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AcpError {
    #[error("the agent connection is closed")]
    Closed,
    #[error("{0}")]
    Rpc(RpcError),
    #[error("writing to the agent failed: {0}")]
    Write(String),
    #[error("the agent read nothing of a write for {limit:?}")]
    Stalled { limit: Duration },
    #[error("encoding a message failed: {0}")]
    Encode(String),
}

/// Something the agent sent that the owner of the connection must look at.
#[derive(Debug)]
pub enum Inbound {
    Request(AgentRequest),
    Notification {
        method: String,
        params: Value,
    },
    /// A `session/update` that is one text chunk ([`Classified::TextChunk`]).
    TextChunk(TextChunk),
    /// A line that is not a valid JSON-RPC message; it was skipped.
    Invalid {
        reason: String,
    },
    /// A line over [`crate::MAX_FRAME_BYTES`]; it was skipped whole.
    Oversized {
        bytes: usize,
    },
    /// The response to a request sent with [`AcpConnection::start_request`], delivered
    /// in wire order with everything else the agent sent.
    Response {
        id: i64,
        result: Result<Value, RpcError>,
    },
    /// A response whose id matches none of our pending requests.
    UnmatchedResponse {
        id: RequestId,
    },
    /// stdout reached EOF (or failed). Every pending request of ours has failed with
    /// [`AcpError::Closed`]. Nothing follows.
    Closed {
        truncated_last_line: bool,
    },
    /// A write to the agent's stdin made no progress for `limit`
    /// ([`AGENT_WRITE_STALL_LIMIT`]): the agent no longer reads, so it can hear nothing
    /// more. Its stdin was dropped and every pending request of ours has failed; the
    /// stream ends here.
    StoppedReading {
        limit: Duration,
    },
}

/// What the agent sent, in wire order; bounded in messages and in bytes ([`inbound_queue`]).
pub type InboundStream = inbound_queue::Receiver<Inbound>;

/// An agent→client request. It must be answered exactly once through
/// [`AgentRequest::respond`]; if it is dropped unanswered (a bug, or the owner gave
/// up), an internal error is sent so that the agent never waits forever.
#[derive(Debug)]
pub struct AgentRequest {
    pub id: RequestId,
    pub method: String,
    pub params: Value,
    out: Option<mpsc::Sender<Outgoing>>,
}

impl AgentRequest {
    /// What the request is, by its method, with its params decoded.
    pub fn classify(&self) -> AgentMessage<'_> {
        AgentMessage::classify(&self.method, &self.params)
    }

    /// Writes the response and resolves once it has been written and flushed to the
    /// agent's stdin: proof of transport hand-off, not of the agent's acknowledgement.
    pub async fn respond(mut self, result: Result<Value, RpcError>) -> Result<(), AcpError> {
        let out = self.out.take().ok_or(AcpError::Closed)?;
        let line = encode_response(&self.id, result)?;
        send_flushed(&out, line).await
    }
}

impl Drop for AgentRequest {
    fn drop(&mut self) {
        if let Some(out) = self.out.take() {
            let error = RpcError::new(INTERNAL_ERROR, "request dropped by the client");
            if let Ok(line) = encode_response(&self.id, Err(error)) {
                let _ = out.try_send(Outgoing::Line { line, flushed: None });
            }
        }
    }
}

enum Outgoing {
    Line {
        line: Vec<u8>,
        flushed: Option<oneshot::Sender<Result<(), AcpError>>>,
    },
    CloseStdin,
}

/// Where the response to one of our requests goes.
enum Waiter {
    /// To the caller of [`AcpConnection::request`].
    Caller(oneshot::Sender<Result<Value, RpcError>>),
    /// Into the inbound stream, after everything the agent sent before it.
    InOrder,
}

/// How many requests given up on (their callers timed out) are remembered, so that a late
/// answer to one is dropped quietly rather than reported as an unknown id; an older one's
/// late answer is reported as unmatched.
pub const GIVEN_UP_REMEMBERED: usize = 64;

/// Our requests awaiting an answer, and the latest ones given up on.
#[derive(Default)]
struct Pending {
    waiters: HashMap<i64, Waiter>,
    given_up: std::collections::VecDeque<i64>,
}

impl Pending {
    fn give_up(&mut self, id: i64) {
        if self.waiters.remove(&id).is_some() {
            if self.given_up.len() == GIVEN_UP_REMEMBERED {
                self.given_up.pop_front();
            }
            self.given_up.push_back(id);
        }
    }

    /// The waiter for a response to `id`; `Err(())` when it was given up on.
    fn answered(&mut self, id: i64) -> Result<Option<Waiter>, ()> {
        match self.waiters.remove(&id) {
            Some(waiter) => Ok(Some(waiter)),
            None => match self.given_up.iter().position(|given_up| *given_up == id) {
                Some(at) => {
                    self.given_up.remove(at);
                    Err(())
                }
                None => Ok(None),
            },
        }
    }
}

type PendingTable = Mutex<Pending>;

struct Shared {
    out: mpsc::Sender<Outgoing>,
    /// Signalled by the writer when the agent stopped reading; the reader then ends the stream.
    stalled: Arc<Notify>,
    pending: PendingTable,
    next_id: AtomicI64,
    tap: Tap,
}

/// Which way a line went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    FromAgent,
    ToAgent,
}

/// Sees every line exactly as it crossed the pipe (a wire capture), from the first.
pub trait WireTap: Send + Sync {
    fn line(&self, direction: Direction, line: &[u8]);
}

type Tap = Option<Arc<dyn WireTap>>;

fn tap_line(tap: &Tap, direction: Direction, line: &[u8]) {
    if let Some(tap) = tap {
        tap.line(direction, line);
    }
}

/// Removes a caller's waiter when its [`AcpConnection::request`] ends, answered or not.
struct Forget<'a> {
    shared: &'a Shared,
    id: i64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.shared.pending.lock().give_up(self.id);
    }
}

/// The client half of a connection. Cheap to clone.
#[derive(Clone)]
pub struct AcpConnection {
    shared: Arc<Shared>,
}

impl AcpConnection {
    /// Starts the reader and writer tasks.
    pub fn spawn<W, R>(stdin: W, stdout: R) -> (Self, InboundStream)
    where
        W: AsyncWrite + Unpin + Send + 'static,
        R: AsyncRead + Unpin + Send + 'static,
    {
        Self::spawn_tapped(stdin, stdout, None)
    }

    /// [`AcpConnection::spawn`], showing every line, both ways, to `tap` from the first
    /// byte on (a tap set later misses what was read before).
    pub fn spawn_tapped<W, R>(stdin: W, stdout: R, tap: Option<Arc<dyn WireTap>>) -> (Self, InboundStream)
    where
        W: AsyncWrite + Unpin + Send + 'static,
        R: AsyncRead + Unpin + Send + 'static,
    {
        let (out_tx, out_rx) = mpsc::channel(OUTBOUND_QUEUE);
        let (in_tx, in_rx) = inbound_queue::channel(INBOUND_QUEUE, MAX_INBOUND_QUEUE_BYTES);
        let stalled = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            out: out_tx,
            stalled: stalled.clone(),
            pending: Mutex::new(Pending::default()),
            next_id: AtomicI64::new(1),
            tap: tap.clone(),
        });
        tokio::spawn(write_loop(stdin, out_rx, tap, stalled));
        tokio::spawn(read_loop(FrameReader::new(stdout), shared.clone(), in_tx));
        (Self { shared }, in_rx)
    }

    /// Sends a request and waits for its response.
    pub async fn request<P: Serialize>(&self, method: &str, params: P) -> Result<Value, AcpError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let params = serde_json::to_value(params).map_err(|e| AcpError::Encode(e.to_string()))?;
        let line = encode(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let (tx, rx) = oneshot::channel();
        self.pending().waiters.insert(id, Waiter::Caller(tx));
        // A caller that gives up (a timeout drops this future) leaves no waiter behind: its
        // late answer is an unmatched response, and the table stays as small as what is
        // really awaited.
        let _forget = Forget {
            shared: &self.shared,
            id,
        };
        send_flushed(&self.shared.out, line).await?;
        match rx.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(AcpError::Rpc(error)),
            Err(_) => Err(AcpError::Closed),
        }
    }

    /// Sends a request whose response will arrive as [`Inbound::Response`] in wire
    /// order: updates the agent sent before answering are seen before the answer (a
    /// prompt's updates before its settlement). Returns the request's id once the line is
    /// queued, not written: a caller with deadlines to serve never waits on the agent's
    /// pipe, and a write that fails ends the stream ([`Inbound::Closed`] or
    /// [`Inbound::StoppedReading`]).
    pub async fn start_request<P: Serialize>(&self, method: &str, params: P) -> Result<i64, AcpError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let params = serde_json::to_value(params).map_err(|e| AcpError::Encode(e.to_string()))?;
        let line = encode(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        self.pending().waiters.insert(id, Waiter::InOrder);
        if let Err(e) = send_queued(&self.shared.out, line).await {
            self.pending().waiters.remove(&id);
            return Err(e);
        }
        Ok(id)
    }

    /// Sends a notification (never answered), returning once it is queued, as
    /// [`AcpConnection::start_request`] does.
    pub async fn notify<P: Serialize>(&self, method: &str, params: P) -> Result<(), AcpError> {
        let params = serde_json::to_value(params).map_err(|e| AcpError::Encode(e.to_string()))?;
        let line = encode(&json!({"jsonrpc": "2.0", "method": method, "params": params}))?;
        send_queued(&self.shared.out, line).await
    }

    /// Closes the agent's stdin after everything queued before it is written.
    pub async fn close_stdin(&self) {
        let _ = self.shared.out.send(Outgoing::CloseStdin).await;
    }

    fn pending(&self) -> parking_lot::MutexGuard<'_, Pending> {
        self.shared.pending.lock()
    }
}

fn encode(value: &Value) -> Result<Vec<u8>, AcpError> {
    serde_json::to_vec(value).map_err(|e| AcpError::Encode(e.to_string()))
}

fn encode_response(id: &RequestId, result: Result<Value, RpcError>) -> Result<Vec<u8>, AcpError> {
    match result {
        Ok(result) => encode(&json!({"jsonrpc": "2.0", "id": id, "result": result})),
        Err(error) => encode(&json!({"jsonrpc": "2.0", "id": id, "error": error})),
    }
}

async fn send_queued(out: &mpsc::Sender<Outgoing>, line: Vec<u8>) -> Result<(), AcpError> {
    out.send(Outgoing::Line { line, flushed: None })
        .await
        .map_err(|_| AcpError::Closed)
}

/// Resolves once the line is written and flushed, or failed; the writer gives up on a
/// line after [`AGENT_WRITE_STALL_LIMIT`] without progress, so this never waits for ever.
async fn send_flushed(out: &mpsc::Sender<Outgoing>, line: Vec<u8>) -> Result<(), AcpError> {
    let (tx, rx) = oneshot::channel();
    out.send(Outgoing::Line {
        line,
        flushed: Some(tx),
    })
    .await
    .map_err(|_| AcpError::Closed)?;
    rx.await.map_err(|_| AcpError::Closed)?
}

async fn write_loop<W: AsyncWrite + Unpin>(stdin: W, mut rx: mpsc::Receiver<Outgoing>, tap: Tap, stalled: Arc<Notify>) {
    let mut stdin = Some(stdin);
    while let Some(message) = rx.recv().await {
        match message {
            Outgoing::CloseStdin => {
                if let Some(mut w) = stdin.take() {
                    let _ = w.shutdown().await;
                }
            }
            Outgoing::Line { mut line, flushed } => {
                let result = match stdin.as_mut() {
                    None => Err(AcpError::Closed),
                    Some(w) => {
                        tap_line(&tap, Direction::ToAgent, &line);
                        line.push(b'\n');
                        let written = write_line(w, &line).await;
                        if let Err(e) = &written {
                            stdin = None;
                            if matches!(e, AcpError::Stalled { .. }) {
                                stalled.notify_one();
                            }
                        }
                        written
                    }
                };
                if let Some(flushed) = flushed {
                    let _ = flushed.send(result);
                }
            }
        }
    }
}

/// Writes the whole line; each write and the flush may stall for at most
/// [`AGENT_WRITE_STALL_LIMIT`], so a slow reader is waited for and one that stopped is not.
async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, line: &[u8]) -> Result<(), AcpError> {
    let stalled = || AcpError::Stalled {
        limit: AGENT_WRITE_STALL_LIMIT,
    };
    let failed = |e: std::io::Error| AcpError::Write(e.to_string());
    let mut rest = line;
    while !rest.is_empty() {
        match tokio::time::timeout(AGENT_WRITE_STALL_LIMIT, w.write(rest)).await {
            Err(_) => return Err(stalled()),
            Ok(Err(e)) => return Err(failed(e)),
            Ok(Ok(0)) => return Err(failed(std::io::ErrorKind::WriteZero.into())),
            Ok(Ok(n)) => rest = &rest[n..],
        }
    }
    match tokio::time::timeout(AGENT_WRITE_STALL_LIMIT, w.flush()).await {
        Err(_) => Err(stalled()),
        Ok(flushed) => flushed.map_err(failed),
    }
}

/// Reads stdout into the inbound queue in wire order. What one read decoded goes over as
/// one batch, sent before the reader waits for more bytes and before a caller is handed
/// its response (the caller then finds everything the agent wrote before it queued).
async fn read_loop<R: AsyncRead + Unpin>(
    mut reader: FrameReader<R>,
    shared: Arc<Shared>,
    inbound: inbound_queue::Sender<Inbound>,
) {
    let stopped_reading = shared.stalled.clone();
    let stopped_reading = stopped_reading.notified();
    tokio::pin!(stopped_reading);
    let mut batch = Batcher::default();
    let truncated_last_line = loop {
        if !batch.is_empty() && !reader.has_buffered_frame() {
            send_batch(&inbound, &mut batch).await;
        }
        let next = tokio::select! {
            next = reader.next_frame() => next,
            () = &mut stopped_reading => {
                shared.pending.lock().waiters.clear();
                batch.push(Inbound::StoppedReading { limit: AGENT_WRITE_STALL_LIMIT }, 0);
                send_batch(&inbound, &mut batch).await;
                return;
            }
        };
        let frame = match next {
            Ok(frame) => frame,
            Err(e) => {
                tracing::warn!(error = %e, "reading agent stdout failed");
                break false;
            }
        };
        let line_bytes = match &frame {
            ReadFrame::Line(line) => {
                tap_line(&shared.tap, Direction::FromAgent, line);
                line.len()
            }
            ReadFrame::Oversized { .. } => 1,
            ReadFrame::Eof { .. } => 0,
        };
        let message = match frame {
            ReadFrame::Eof { partial } => break partial.is_some(),
            ReadFrame::Oversized { bytes } => Inbound::Oversized { bytes },
            ReadFrame::Line(line) if line.iter().all(u8::is_ascii_whitespace) => continue,
            ReadFrame::Line(line) => match classify(line) {
                Classified::Request { id, method, params } => Inbound::Request(AgentRequest {
                    id,
                    method,
                    params,
                    out: Some(shared.out.clone()),
                }),
                Classified::Notification { method, params } => Inbound::Notification { method, params },
                Classified::TextChunk(chunk) => Inbound::TextChunk(chunk),
                Classified::Invalid { reason } => Inbound::Invalid { reason },
                Classified::Unanswerable { id, reason } => {
                    let error = RpcError::new(INVALID_REQUEST, UNANSWERABLE_ID_MESSAGE);
                    if let Ok(line) = encode(&json!({"jsonrpc": "2.0", "id": id, "error": error})) {
                        let _ = shared.out.try_send(Outgoing::Line { line, flushed: None });
                    }
                    Inbound::Invalid {
                        reason: format!("{reason} (answered {INVALID_REQUEST})"),
                    }
                }
                Classified::Response { id, result } => {
                    let waiter = match &id {
                        RequestId::Number(n) => shared.pending.lock().answered(*n),
                        _ => Ok(None),
                    };
                    let Ok(waiter) = waiter else {
                        tracing::debug!(%id, "a late answer to a request given up on");
                        continue;
                    };
                    match (waiter, id) {
                        (Some(Waiter::Caller(waiter)), _) => {
                            send_batch(&inbound, &mut batch).await;
                            let _ = waiter.send(result);
                            continue;
                        }
                        (Some(Waiter::InOrder), RequestId::Number(id)) => Inbound::Response { id, result },
                        (_, id) => Inbound::UnmatchedResponse { id },
                    }
                }
            },
        };
        if batch.push(message, line_bytes) {
            send_batch(&inbound, &mut batch).await;
        }
    };
    shared.pending.lock().waiters.clear();
    batch.push(Inbound::Closed { truncated_last_line }, 0);
    send_batch(&inbound, &mut batch).await;
}

/// Hands the gathered batch to the consumer once the queue has room for it. When nobody
/// listens any more it is dropped, and the reader goes on draining stdout so the agent
/// never blocks.
async fn send_batch(inbound: &inbound_queue::Sender<Inbound>, batch: &mut Batcher<Inbound>) {
    let _ = inbound.send_all(batch.take()).await;
}

#[cfg(test)]
#[path = "connection_tests.rs"]
mod tests;
