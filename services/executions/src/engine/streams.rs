//! Event streams: replay from the store, then live from the execution's head, with
//! heartbeats; acknowledgements.

use std::sync::Arc;
use std::time::Duration;

use cursor_runner_store::{ExecutionId, Store};

use tokio::sync::{mpsc, watch};

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};

use super::data::*;
use crate::heads::{Feed, Head, HeadBus, STREAM_POLL_WHILE_DEAF, advance_to};

/// Events read from the store per page while replaying.
const REPLAY_PAGE: i64 = 512;

/// Stream items buffered per subscriber before its tail waits for it: a subscriber that
/// stops reading holds at most this many events (then the transport's window) in memory.
const SUBSCRIBER_BUFFER: usize = 32;

/// Open event streams one execution may have on one replica: with [`SUBSCRIBER_BUFFER`],
/// what idle subscribers can hold in memory per execution is bounded.
pub const MAX_STREAMS_PER_EXECUTION: usize = 32;

/// One open stream of an execution, counted until dropped.
struct StreamSlot {
    open: OpenStreams,
    execution_id: String,
}

impl StreamSlot {
    fn take(open: &OpenStreams, execution_id: &str) -> Result<Self, EngineError> {
        let mut counts = open.lock();
        let count = counts.entry(execution_id.to_owned()).or_default();
        if *count >= MAX_STREAMS_PER_EXECUTION {
            return Err(EngineError::new(
                ErrorKind::ResourceExhausted,
                Reason::StreamsExhausted,
                format!(
                    "execution `{execution_id}` has {MAX_STREAMS_PER_EXECUTION} open event streams, as many as it may"
                ),
            )
            .with("max_streams", MAX_STREAMS_PER_EXECUTION.to_string()));
        }
        *count += 1;
        Ok(Self {
            open: open.clone(),
            execution_id: execution_id.to_owned(),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut counts = self.open.lock();
        if let Some(count) = counts.get_mut(&self.execution_id) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.execution_id);
            }
        }
    }
}

impl Engine {
    /// Replays committed events after `after_sequence`, then tails live ones.
    pub async fn stream_events(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        after_sequence: i64,
    ) -> Result<mpsc::Receiver<Result<StreamItem, EngineError>>, EngineError> {
        let record = self.get_execution(tenant_id, execution_id).await?;
        if after_sequence < 0 {
            return Err(EngineError::invalid(
                Reason::InvalidArgument,
                "after_sequence must not be negative",
            ));
        }
        // Held before the head is read: any commit after the read moves it.
        let held = self.heads.head(&record.id, 0);
        let head = self.store.head_sequence(&record.id).await?;
        advance_to(&held, head);
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
        let slot = StreamSlot::take(&self.open_streams, &record.id)?;
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let open_stream = self.metrics.stream_opened();
        let tail = Tail {
            store: self.store.clone(),
            cursor: after_sequence,
            head: held.subscribe(),
            _held: held,
            feed: self.heads.feed(),
            _bus: self.heads.clone(),
            execution_id: record.id,
            heartbeat: self.config.heartbeat_interval,
            closing: self.closing_streams.subscribe(),
            tx,
        };
        tokio::spawn(async move {
            let _open = (open_stream, slot);
            tail.run().await;
        });
        Ok(rx)
    }

    /// Records the control plane's cumulative acknowledgement.
    pub async fn ack_events(
        &self,
        tenant_id: &str,
        execution_id: &ExecutionId,
        through: i64,
    ) -> Result<i64, EngineError> {
        let record = self.get_execution(tenant_id, execution_id).await?;
        if through < 0 {
            return Err(EngineError::invalid(
                Reason::InvalidArgument,
                "through_sequence must not be negative",
            ));
        }
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
/// heartbeat) and sends what it passed: from the head when the head holds the run that
/// moved it (a tail that keeps up reads nothing back), else from the store. It sends only
/// what is committed, so it never exposes more than the store has.
/// The head moves wherever the execution is written: by its writer here, or by the
/// database's announcement of another replica's commit (`heads`).
struct Tail {
    store: Arc<dyn Store>,
    execution_id: ExecutionId,
    cursor: i64,
    head: watch::Receiver<Head>,
    /// Keeps the execution's head on the bus while this stream lives.
    _held: Arc<watch::Sender<Head>>,
    feed: watch::Receiver<Feed>,
    /// Keeps `feed`'s sender alive for as long as this stream lives.
    _bus: Arc<HeadBus>,
    heartbeat: Duration,
    /// Flips when the service ends every stream.
    closing: watch::Receiver<bool>,
    tx: mpsc::Sender<Result<StreamItem, EngineError>>,
}

/// Why a tail stopped waiting.
enum Wake {
    /// The head passed the cursor.
    HeadMoved,
    /// The store may hold what nobody announced (the announcements are down, came back,
    /// or a heartbeat passed while they were up).
    Unannounced,
}

impl Tail {
    async fn run(mut self) {
        if !self.read_store().await {
            return;
        }
        let caught = StreamItem::CaughtUp {
            head_sequence: self.cursor,
        };
        if !self.send(Ok(caught)).await {
            return;
        }
        loop {
            let open = match self.wait_for_more().await {
                None => return,
                Some(Wake::HeadMoved) => match self.send_held().await {
                    Some(open) => open,
                    None => self.read_store().await,
                },
                Some(Wake::Unannounced) => self.read_store().await,
            };
            if !open {
                return;
            }
        }
    }

    /// Sends `item`. False: the subscriber is gone.
    async fn send(&self, item: Result<StreamItem, EngineError>) -> bool {
        self.tx.send(item).await.is_ok()
    }

    /// Sends every committed event after the cursor that the store has, page by page.
    /// False: the stream is over.
    async fn read_store(&mut self) -> bool {
        loop {
            let page = match self
                .store
                .read_events(&self.execution_id, self.cursor, REPLAY_PAGE)
                .await
            {
                Ok(page) => page,
                Err(e) => {
                    self.send(Err(e.into())).await;
                    return false;
                }
            };
            let full = page.len() as i64 == REPLAY_PAGE;
            // Pruned while this stream replayed: say so rather than skip a gap.
            if let Some(first) = page.first()
                && first.sequence != self.cursor + 1
            {
                self.send(Err(events_pruned(self.cursor, first.sequence))).await;
                return false;
            }
            for event in page {
                self.cursor = event.sequence;
                if !self.send(Ok(StreamItem::Event(event))).await {
                    return false;
                }
            }
            if !full {
                return true;
            }
        }
    }

    /// Sends the events after the cursor from the head, if it holds every one of them up
    /// to itself. `None`: it does not (the store has them); `Some(false)`: the stream is over.
    async fn send_held(&mut self) -> Option<bool> {
        let head = self.head.borrow().clone();
        for event in head.events_after(self.cursor)? {
            self.cursor = event.sequence;
            if !self.send(Ok(StreamItem::Event(event.clone()))).await {
                return Some(false);
            }
        }
        Some(true)
    }

    /// Waits until the head passes the cursor, or the store may hold what nobody
    /// announced, sending heartbeats while idle. `None`: the stream is over.
    async fn wait_for_more(&mut self) -> Option<Wake> {
        loop {
            if self.head.borrow_and_update().sequence > self.cursor {
                return Some(Wake::HeadMoved);
            }
            let feed = *self.feed.borrow_and_update();
            tokio::select! {
                // This tail holds the head's sender: it never closes.
                _ = self.head.changed() => {}
                _ = self.feed.changed() => return Some(Wake::Unannounced),
                () = tokio::time::sleep(STREAM_POLL_WHILE_DEAF), if feed == Feed::Deaf => return Some(Wake::Unannounced),
                () = tokio::time::sleep(self.heartbeat) => {
                    let beat = StreamItem::Heartbeat { head_sequence: self.cursor };
                    if !self.send(Ok(beat)).await {
                        return None;
                    }
                    // A lost announcement costs at most one heartbeat.
                    if feed != Feed::Local {
                        return Some(Wake::Unannounced);
                    }
                }
                () = self.tx.closed() => return None,
                // Mapped to `()` inside, so the borrow it returns is not held across an await.
                _ = async { self.closing.wait_for(|closing| *closing).await.map(drop) } => {
                    self.send(Err(EngineError::new(
                        ErrorKind::Unavailable,
                        Reason::ServiceShuttingDown,
                        format!("the service is shutting down; resume from sequence {}", self.cursor),
                    )
                    .with("resume_after_sequence", self.cursor.to_string())))
                    .await;
                    return None;
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
    use crate::events::EventWriter;
    use crate::heads::advance_over;
    use cursor_runner_activity::{ActivityPayload, NoticeScope, ProviderNotice};
    use cursor_runner_domain::state::ExecutionState;
    use cursor_runner_store::{EventRecord, ExecutionRecord, MemoryStore};

    const EXECUTION: &str = "exec-1";

    fn event(sequence: i64) -> EventRecord {
        EventRecord {
            execution_id: EXECUTION.into(),
            sequence,
            event_id: format!("event-{sequence}"),
            generation: cursor_runner_store::Generation::FIRST,
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
            generation: cursor_runner_store::Generation::FIRST,
            ..Default::default()
        };
        store.insert_execution(&execution).await.unwrap();
        let events: Vec<_> = sequences.map(event).collect();
        store.append_events(events.into()).await.unwrap();
        store
    }

    const HEARTBEAT: Duration = Duration::from_secs(10);

    struct Subscriber {
        rx: mpsc::Receiver<Result<StreamItem, EngineError>>,
        bus: Arc<HeadBus>,
        closing: watch::Sender<bool>,
    }

    /// A tail after `cursor` of an execution whose head is at `head`, on a bus whose
    /// announcements are in `feed`'s state.
    fn subscribe_with(store: &Arc<dyn Store>, cursor: i64, head: i64, feed: Feed) -> Subscriber {
        let bus = Arc::new(HeadBus::new(feed));
        let held = bus.head(EXECUTION, head);
        let (closing_tx, closing_rx) = watch::channel(false);
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let tail = Tail {
            store: store.clone(),
            execution_id: EXECUTION.into(),
            cursor,
            head: held.subscribe(),
            _held: held,
            feed: bus.feed(),
            _bus: bus.clone(),
            heartbeat: HEARTBEAT,
            closing: closing_rx,
            tx,
        };
        tokio::spawn(tail.run());
        Subscriber {
            rx,
            bus,
            closing: closing_tx,
        }
    }

    /// A tail on a store whose writers are all in this process.
    fn subscribe(store: &Arc<dyn Store>, cursor: i64, head: i64) -> Subscriber {
        subscribe_with(store, cursor, head, Feed::Local)
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
        store.append_events(vec![event(2)].into()).await.unwrap();
        stream.bus.advance(EXECUTION, 2);
        assert_eq!(sequence(stream.next().await), 2);
    }

    #[tokio::test]
    async fn a_tail_that_keeps_up_takes_the_run_its_head_holds_without_reading_the_store() {
        let store = store_with_events(1..=1).await;
        let mut stream = subscribe(&store, 0, 1);
        stream.sequences_until_caught_up().await;
        // Held by the head only: were the tail to read the store, it would find nothing.
        advance_over(&stream.bus.head(EXECUTION, 0), (2..=3).map(event).collect());
        assert_eq!(sequence(stream.next().await), 2);
        assert_eq!(sequence(stream.next().await), 3);
    }

    #[tokio::test]
    async fn a_tail_behind_the_run_its_head_holds_reads_the_store_from_its_cursor() {
        let store = store_with_events(1..=1).await;
        let mut stream = subscribe(&store, 0, 1);
        stream.sequences_until_caught_up().await;
        let head = stream.bus.head(EXECUTION, 0);
        store.append_events(vec![event(2)].into()).await.unwrap();
        advance_to(&head, 2);
        store.append_events(vec![event(3)].into()).await.unwrap();
        advance_over(&head, vec![event(3)].into());
        // The tail runs only now, and finds the head at 3 holding 3 alone.
        let seen = [sequence(stream.next().await), sequence(stream.next().await)];
        assert_eq!(seen, [2, 3], "2 is read from the store, not skipped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_committed_event_waits_for_the_head_before_it_is_sent() {
        let store = store_with_events(1..=1).await;
        let mut stream = subscribe(&store, 0, 1);
        stream.sequences_until_caught_up().await;
        // In the store, but its writer has not moved the head yet: the heartbeat comes first.
        store.append_events(vec![event(2)].into()).await.unwrap();
        assert!(matches!(
            stream.next().await,
            StreamItem::Heartbeat { head_sequence: 1 }
        ));
        stream.bus.advance(EXECUTION, 2);
        assert_eq!(sequence(stream.next().await), 2);
    }

    #[tokio::test]
    async fn a_stream_wakes_when_another_writer_of_its_execution_commits() {
        let store = store_with_events(1..=1).await;
        let mut stream = subscribe(&store, 0, 1);
        stream.sequences_until_caught_up().await;
        // A recovery's writer, or another replica's commit announced by the database.
        let mut writer = EventWriter::new(
            store.clone(),
            EXECUTION.into(),
            cursor_runner_store::Generation::FIRST,
            1,
        )
        .with_heads(&stream.bus);
        writer
            .emit(
                None,
                vec![ActivityPayload::ProviderNotice(ProviderNotice::info(
                    "test",
                    NoticeScope::Session,
                    "committed elsewhere",
                ))],
            )
            .await
            .unwrap();
        assert_eq!(sequence(stream.next().await), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn while_the_announcements_are_down_a_stream_pages_the_store_before_its_heartbeat() {
        let store = store_with_events(1..=1).await;
        let mut stream = subscribe_with(&store, 0, 1, Feed::Deaf);
        stream.sequences_until_caught_up().await;
        store.append_events(vec![event(2)].into()).await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(sequence(stream.next().await), 2);
        assert!(started.elapsed() < HEARTBEAT, "found by polling, not by a heartbeat");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_rereads_the_store_when_the_announcements_come_back() {
        let store = store_with_events(1..=1).await;
        let mut stream = subscribe_with(&store, 0, 1, Feed::Deaf);
        stream.sequences_until_caught_up().await;
        store.append_events(vec![event(2)].into()).await.unwrap();
        let started = tokio::time::Instant::now();
        stream.bus.set_feed(Feed::Listening);
        assert_eq!(sequence(stream.next().await), 2);
        assert!(
            started.elapsed() < STREAM_POLL_WHILE_DEAF,
            "re-read on the change, not by polling"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unannounced_commit_is_read_after_the_next_heartbeat_while_listening() {
        let store = store_with_events(1..=1).await;
        let mut stream = subscribe_with(&store, 0, 1, Feed::Listening);
        stream.sequences_until_caught_up().await;
        store.append_events(vec![event(2)].into()).await.unwrap();
        assert!(matches!(
            stream.next().await,
            StreamItem::Heartbeat { head_sequence: 1 }
        ));
        assert_eq!(sequence(stream.next().await), 2);
    }

    #[tokio::test]
    async fn a_gap_below_the_first_kept_event_ends_the_stream_with_events_pruned() {
        let store = store_with_events(5..=7).await;
        let mut stream = subscribe(&store, 0, 7);
        let error = stream.rx.recv().await.unwrap().unwrap_err();
        assert_eq!(error.reason, Reason::EventsPruned);
    }

    #[test]
    fn an_execution_takes_streams_up_to_its_bound_and_one_more_once_one_closes() {
        let open = OpenStreams::default();
        let mut slots: Vec<_> = (0..MAX_STREAMS_PER_EXECUTION)
            .map(|_| StreamSlot::take(&open, EXECUTION).expect("under the bound"))
            .collect();
        let refused = StreamSlot::take(&open, EXECUTION).err().expect("over the bound");
        assert_eq!(
            (refused.kind, refused.reason),
            (ErrorKind::ResourceExhausted, Reason::StreamsExhausted)
        );
        assert!(StreamSlot::take(&open, "another").is_ok(), "the bound is per execution");
        slots.pop();
        assert!(StreamSlot::take(&open, EXECUTION).is_ok());
        drop(slots);
        assert_eq!(open.lock().get(EXECUTION), None, "nothing is kept for closed streams");
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
