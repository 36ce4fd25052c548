//! Event streams: replay from the store, then live from the execution's head, with
//! heartbeats; acknowledgements.

use std::sync::Arc;
use std::time::Duration;

use cursor_runner_store::Store;

use tokio::sync::{mpsc, watch};

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};

use super::data::*;

/// Events read from the store per page while replaying.
const REPLAY_PAGE: i64 = 512;

/// Stream items buffered per subscriber before the reader waits for it.
const SUBSCRIBER_BUFFER: usize = 256;

/// How often a stream whose execution has no live writer looks for a new one (a
/// recovery) and re-reads the store.
const WRITER_POLL: Duration = Duration::from_secs(1);

impl Engine {
    /// Replays committed events after `after_sequence`, then tails live ones.
    pub async fn stream_events(
        &self,
        tenant_id: &str,
        execution_id: &str,
        after_sequence: i64,
    ) -> Result<mpsc::Receiver<Result<StreamItem, EngineError>>, EngineError> {
        let record = self.get_execution(tenant_id, execution_id).await?;
        if after_sequence < 0 {
            return Err(EngineError::invalid(
                Reason::InvalidArgument,
                "after_sequence must not be negative",
            ));
        }
        let head = self.store.head_sequence(&record.id).await?;
        if after_sequence > head {
            return Err(EngineError::new(
                ErrorKind::OutOfRange,
                Reason::CursorAheadOfHead,
                format!("after_sequence {after_sequence} is beyond the head {head}"),
            )
            .with("head_sequence", head.to_string()));
        }
        if let Some(oldest) = self.store.oldest_sequence(&record.id).await?
            && after_sequence < oldest - 1
        {
            return Err(events_pruned(after_sequence, oldest));
        }
        let executions = self.executions.clone();
        let live_head = move |id: &str| executions.lock().get(id).map(|h| h.head.clone());
        // Not live here: its head does not move, unless a recovery gives it a writer.
        let head_rx = live_head(&record.id).unwrap_or_else(|| watch::channel(head).1);
        let writer_gone = head_rx.has_changed().is_err();
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let open_stream = self.metrics.stream_opened();
        let execution_id = record.id.clone();
        let tail = Tail {
            store: self.store.clone(),
            cursor: after_sequence,
            head: head_rx,
            writer_gone,
            live_head: Box::new(move || live_head(&execution_id)),
            execution_id: record.id,
            heartbeat: self.config.heartbeat_interval,
            closing: self.closing_streams.subscribe(),
            tx,
        };
        tokio::spawn(async move {
            let _open_stream = open_stream;
            tail.run().await;
        });
        Ok(rx)
    }

    /// Records the control plane's cumulative acknowledgement.
    pub async fn ack_events(&self, tenant_id: &str, execution_id: &str, through: i64) -> Result<i64, EngineError> {
        let record = self.get_execution(tenant_id, execution_id).await?;
        let head = self.store.head_sequence(&record.id).await?;
        if through > head {
            return Err(EngineError::invalid(
                Reason::AckBeyondHead,
                format!("through_sequence {through} is beyond the head {head}"),
            ));
        }
        if through < record.acked_sequence {
            return Err(EngineError::precondition(
                Reason::AckRegression,
                format!(
                    "through_sequence {through} is below the acknowledged {}",
                    record.acked_sequence
                ),
            ));
        }
        self.store.set_acked_sequence(tenant_id, &record.id, through).await?;
        Ok(through)
    }

    /// Ends every open event stream with `UNAVAILABLE` (clients resume elsewhere from
    /// their cursor), so a graceful server shutdown is not held open by tails.
    pub fn end_streams(&self) {
        self.draining.send_replace(true);
        self.metrics.draining();
        self.closing_streams.send_replace(true);
    }
}

/// One subscriber's tail: pages committed events after its cursor from the store, says
/// when it caught up, then waits for the execution's head to pass the cursor (or sends a
/// heartbeat). It reads only what is committed, so it never exposes more than the store has.
struct Tail {
    store: Arc<dyn Store>,
    execution_id: String,
    cursor: i64,
    head: watch::Receiver<i64>,
    /// The head's writer is gone (or there was none): poll for a new one.
    writer_gone: bool,
    /// The live writer's head for the execution, if it has one now (a recovery may bring one).
    live_head: Box<dyn Fn() -> Option<watch::Receiver<i64>> + Send>,
    heartbeat: Duration,
    /// Flips when the service ends every stream.
    closing: watch::Receiver<bool>,
    tx: mpsc::Sender<Result<StreamItem, EngineError>>,
}

impl Tail {
    async fn run(mut self) {
        let mut caught_up = false;
        loop {
            let page = match self
                .store
                .read_events(&self.execution_id, self.cursor, REPLAY_PAGE)
                .await
            {
                Ok(page) => page,
                Err(e) => {
                    let _ = self.tx.send(Err(e.into())).await;
                    return;
                }
            };
            let full = page.len() as i64 == REPLAY_PAGE;
            // Pruned while this stream replayed: say so rather than skip a gap.
            if let Some(first) = page.first()
                && first.sequence != self.cursor + 1
            {
                let _ = self.tx.send(Err(events_pruned(self.cursor, first.sequence))).await;
                return;
            }
            for event in page {
                self.cursor = event.sequence;
                if self.tx.send(Ok(StreamItem::Event(event))).await.is_err() {
                    return;
                }
            }
            if full {
                continue;
            }
            if !caught_up {
                caught_up = true;
                let caught = StreamItem::CaughtUp {
                    head_sequence: self.cursor,
                };
                if self.tx.send(Ok(caught)).await.is_err() {
                    return;
                }
            }
            if !self.wait_for_more().await {
                return;
            }
        }
    }

    /// Waits until the head passes the cursor (or a writer-less stream should page the
    /// store again), sending heartbeats while idle. False: the stream is over.
    async fn wait_for_more(&mut self) -> bool {
        loop {
            if *self.head.borrow_and_update() > self.cursor {
                return true;
            }
            tokio::select! {
                changed = self.head.changed(), if !self.writer_gone => {
                    if changed.is_err() {
                        // The execution's writer is gone; a recovery may bring another.
                        self.writer_gone = true;
                    }
                }
                () = tokio::time::sleep(WRITER_POLL), if self.writer_gone => {
                    if let Some(fresh) = (self.live_head)().filter(|rx| rx.has_changed().is_ok()) {
                        self.head = fresh;
                        self.writer_gone = false;
                    }
                    // Page the store once more either way.
                    return true;
                }
                () = tokio::time::sleep(self.heartbeat) => {
                    let beat = StreamItem::Heartbeat { head_sequence: self.cursor };
                    if self.tx.send(Ok(beat)).await.is_err() {
                        return false;
                    }
                }
                () = self.tx.closed() => return false,
                // Mapped to `()` inside, so the borrow it returns is not held across an await.
                _ = async { self.closing.wait_for(|closing| *closing).await.map(drop) } => {
                    let _ = self.tx.send(Err(EngineError::new(
                        ErrorKind::Unavailable,
                        Reason::ServiceShuttingDown,
                        format!("the service is shutting down; resume from sequence {}", self.cursor),
                    )
                    .with("resume_after_sequence", self.cursor.to_string())))
                    .await;
                    return false;
                }
            }
        }
    }
}

/// A cursor below the oldest event still kept (the rest was acknowledged and pruned).
fn events_pruned(after_sequence: i64, oldest: i64) -> EngineError {
    EngineError::new(
        ErrorKind::OutOfRange,
        Reason::EventsPruned,
        format!(
            "events after {after_sequence} up to {} were acknowledged and pruned; the oldest kept is {oldest}",
            oldest - 1
        ),
    )
    .with("oldest_sequence", oldest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cursor_runner_domain::state::ExecutionState;
    use cursor_runner_store::{EventRecord, ExecutionRecord, MemoryStore};

    const EXECUTION: &str = "exec-1";

    fn event(sequence: i64) -> EventRecord {
        EventRecord {
            execution_id: EXECUTION.into(),
            sequence,
            event_id: format!("event-{sequence}"),
            generation: 1,
            event_type: "item.delta".into(),
            payload: "{}".into(),
            ..Default::default()
        }
    }

    async fn store_with_events(sequences: std::ops::RangeInclusive<i64>) -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let execution = ExecutionRecord {
            id: EXECUTION.into(),
            tenant_id: "t".into(),
            state: ExecutionState::Ready,
            generation: 1,
            ..Default::default()
        };
        store.insert_execution(&execution).await.unwrap();
        let events: Vec<_> = sequences.map(event).collect();
        store.append_events(&events).await.unwrap();
        store
    }

    struct Subscriber {
        rx: mpsc::Receiver<Result<StreamItem, EngineError>>,
        head: watch::Sender<i64>,
        closing: watch::Sender<bool>,
    }

    /// A tail after `cursor` whose live writer's head is at `head`.
    fn subscribe(store: &Arc<dyn Store>, cursor: i64, head: i64) -> Subscriber {
        let (head_tx, head_rx) = watch::channel(head);
        let (closing_tx, closing_rx) = watch::channel(false);
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let tail = Tail {
            store: store.clone(),
            execution_id: EXECUTION.into(),
            cursor,
            head: head_rx,
            writer_gone: false,
            live_head: Box::new(|| None),
            heartbeat: Duration::from_secs(10),
            closing: closing_rx,
            tx,
        };
        tokio::spawn(tail.run());
        Subscriber {
            rx,
            head: head_tx,
            closing: closing_tx,
        }
    }

    impl Subscriber {
        async fn next(&mut self) -> StreamItem {
            self.rx.recv().await.expect("the stream is open").expect("an item")
        }

        async fn sequences_until_caught_up(&mut self) -> (Vec<i64>, i64) {
            let mut sequences = Vec::new();
            loop {
                match self.next().await {
                    StreamItem::Event(e) => sequences.push(e.sequence),
                    StreamItem::CaughtUp { head_sequence } => return (sequences, head_sequence),
                    StreamItem::Heartbeat { .. } => {}
                }
            }
        }
    }

    fn sequence(item: StreamItem) -> i64 {
        match item {
            StreamItem::Event(e) => e.sequence,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn replay_sends_every_committed_event_after_the_cursor_then_caught_up() {
        let store = store_with_events(1..=3).await;
        let mut stream = subscribe(&store, 1, 3);
        assert_eq!(stream.sequences_until_caught_up().await, (vec![2, 3], 3));
    }

    #[tokio::test]
    async fn replay_pages_through_more_than_a_page_without_a_gap() {
        let total = REPLAY_PAGE * 2 + 7;
        let store = store_with_events(1..=total).await;
        let mut stream = subscribe(&store, 0, total);
        let (sequences, head) = stream.sequences_until_caught_up().await;
        assert_eq!(sequences, (1..=total).collect::<Vec<_>>());
        assert_eq!(head, total);
    }

    #[tokio::test]
    async fn a_committed_event_is_sent_once_the_head_moves_past_the_cursor() {
        let store = store_with_events(1..=1).await;
        let mut stream = subscribe(&store, 0, 1);
        stream.sequences_until_caught_up().await;
        store.append_events(&[event(2)]).await.unwrap();
        stream.head.send_replace(2);
        assert_eq!(sequence(stream.next().await), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_committed_event_waits_for_the_head_before_it_is_sent() {
        let store = store_with_events(1..=1).await;
        let mut stream = subscribe(&store, 0, 1);
        stream.sequences_until_caught_up().await;
        // In the store, but its writer has not moved the head yet: the heartbeat comes first.
        store.append_events(&[event(2)]).await.unwrap();
        assert!(matches!(
            stream.next().await,
            StreamItem::Heartbeat { head_sequence: 1 }
        ));
        stream.head.send_replace(2);
        assert_eq!(sequence(stream.next().await), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_whose_writer_is_gone_pages_the_store_for_what_a_new_one_commits() {
        let store = store_with_events(1..=1).await;
        let Subscriber {
            mut rx,
            head,
            closing: _open,
        } = subscribe(&store, 0, 1);
        while !matches!(rx.recv().await.unwrap().unwrap(), StreamItem::CaughtUp { .. }) {}
        drop(head);
        store.append_events(&[event(2)]).await.unwrap();
        match rx.recv().await.unwrap().unwrap() {
            StreamItem::Event(e) => assert_eq!(e.sequence, 2),
            other => panic!("expected event 2 after a writer poll, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_gap_below_the_first_kept_event_ends_the_stream_with_events_pruned() {
        let store = store_with_events(5..=7).await;
        let mut stream = subscribe(&store, 0, 7);
        let error = stream.rx.recv().await.unwrap().unwrap_err();
        assert_eq!(error.reason, Reason::EventsPruned);
    }

    #[tokio::test]
    async fn closing_the_streams_ends_each_with_the_cursor_to_resume_from() {
        let store = store_with_events(1..=2).await;
        let mut stream = subscribe(&store, 0, 2);
        stream.sequences_until_caught_up().await;
        stream.closing.send_replace(true);
        let error = stream.rx.recv().await.unwrap().unwrap_err();
        assert_eq!(error.reason, Reason::ServiceShuttingDown);
        assert!(error.message.contains("resume from sequence 2"), "{}", error.message);
    }
}
