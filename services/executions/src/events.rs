//! The single writer of one execution's outbox: it assigns contiguous sequence
//! numbers, commits, and only then advances the head that subscribers watch
//! (persist before expose).

use std::sync::Arc;

use cursor_runner_activity::{ActivityPayload, HeldText, Redactor, SCHEMA_VERSION};
use cursor_runner_store::{Batch, EventRecord, ExecutionId, Generation, Store, StoreError, TurnId, Write, now_ms};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::heads::{Head, HeadBus, LocalWriter, advance_over, advance_to};
use crate::metrics::Metrics;
use cursor_runner_domain::error::EngineError;

pub struct EventWriter {
    store: Arc<dyn Store>,
    execution_id: ExecutionId,
    generation: Generation,
    next_sequence: i64,
    /// Shared with the tails of this execution's streams ([`HeadBus`]).
    head: Arc<watch::Sender<Head>>,
    /// Marks the execution as written here while this writer lives.
    _local: Option<LocalWriter>,
    metrics: Option<Arc<Metrics>>,
    /// An append was refused: the execution's generation moved on.
    fenced: bool,
    /// The secrets this execution's agent was handed, kept out of every event.
    redactor: Redactor,
    /// What ends the last text delta and could be the start of a secret, until the next
    /// event shows whether it is.
    held: HeldText<Option<TurnId>>,
    /// The append committing while the actor goes on ([`Self::emit_behind`]).
    in_flight: Option<InFlight>,
    /// Told when an append behind the actor failed, so the failure is not left unseen
    /// while the agent is quiet.
    append_failed: Arc<Notify>,
    /// Why an append behind the actor failed, until the actor takes it: whichever write
    /// waited for it (a command's, whose caller is told too) must not swallow it.
    lost: Option<EngineError>,
}

/// An append committing behind the actor's back: there is at most one, and every other
/// use of the writer waits for it first, so appends land in order and a failed one is
/// seen before anything else is written.
struct InFlight {
    task: JoinHandle<Result<(), StoreError>>,
    /// How it ended, once [`EventWriter::committed`] saw it end and before the next
    /// write takes it.
    outcome: Option<Result<(), StoreError>>,
    /// Its first event's sequence: where numbering goes back to if it failed.
    first_sequence: i64,
    events: usize,
}

/// How an append behind the actor ended; a panic in it is the caller's.
async fn joined(
    task: impl std::future::Future<Output = Result<Result<(), StoreError>, tokio::task::JoinError>>,
) -> Result<(), StoreError> {
    match task.await {
        Ok(outcome) => outcome,
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Err(_) => Err(StoreError::Unavailable("the runtime is shutting down".into())),
    }
}

impl EventWriter {
    pub fn new(store: Arc<dyn Store>, execution_id: ExecutionId, generation: Generation, head: i64) -> Self {
        Self {
            store,
            execution_id,
            generation,
            next_sequence: head + 1,
            head: Arc::new(watch::Sender::new(Head::at(head))),
            _local: None,
            metrics: None,
            fenced: false,
            redactor: Redactor::default(),
            held: HeldText::default(),
            in_flight: None,
            append_failed: Arc::new(Notify::new()),
            lost: None,
        }
    }

    /// Moves the execution's head on `bus`, where every stream of it watches.
    pub fn with_heads(mut self, bus: &HeadBus) -> Self {
        let head = self.head.borrow().sequence;
        let (head, local) = bus.writer_head(&self.execution_id, head);
        self.head = head;
        self._local = Some(local);
        self
    }

    /// Replaces the secrets `redactor` knows wherever they come back in an event.
    pub fn with_redactor(mut self, redactor: Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// The secrets kept out of this execution's events, for whatever else is derived
    /// from the agent's output (errors, records).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Counts every committed event in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Whether the store refused an append because the generation moved on: the writer
    /// (and the process it speaks for) no longer owns the execution.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// Another write for this execution (`what`: `execution`, `answer`) was refused
    /// because the generation moved on: this writer no longer owns the execution.
    pub fn refused_by_fence(&mut self, what: &'static str) {
        self.fenced = true;
        if let Some(metrics) = &self.metrics {
            metrics.fenced_write(what, 1);
        }
    }

    /// An answer echoed an etag that is not the interaction's (a superseded fence token,
    /// or a forged one): refused and counted, while this writer keeps the execution.
    pub fn refused_stale_etag(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.fenced_write("etag", 1);
        }
    }

    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
    }

    pub fn subscribe(&self) -> watch::Receiver<Head> {
        self.head.subscribe()
    }

    /// Notified when an append behind the actor failed: [`Self::flush`] then says how.
    pub fn append_failed(&self) -> Arc<Notify> {
        self.append_failed.clone()
    }

    /// Waits for the append behind the actor, if any; its error if it failed (then its
    /// sequence numbers are given out again, as if it had never been made).
    pub async fn flush(&mut self) -> Result<(), EngineError> {
        Ok(self.settle_in_flight().await?)
    }

    /// Whether an append behind the actor may still be committing.
    pub fn is_committing(&self) -> bool {
        self.in_flight.as_ref().is_some_and(|append| append.outcome.is_none())
    }

    /// Resolves when the append behind the actor (if any) has ended, leaving its outcome
    /// to the next write. Cancel-safe: dropped before that, it leaves the append as it was.
    pub async fn committed(&mut self) {
        if let Some(append) = &mut self.in_flight
            && append.outcome.is_none()
        {
            append.outcome = Some(joined(&mut append.task).await);
        }
    }

    async fn settle_in_flight(&mut self) -> Result<(), StoreError> {
        let Some(InFlight {
            task,
            outcome,
            first_sequence,
            events,
        }) = self.in_flight.take()
        else {
            return Ok(());
        };
        let outcome = match outcome {
            Some(outcome) => outcome,
            None => joined(task).await,
        };
        outcome.inspect_err(|e| {
            self.next_sequence = first_sequence;
            self.refused(e, events);
            self.lost = Some(e.clone().into());
        })
    }

    /// Why an append behind the actor failed, once: its events are lost, so the actor
    /// cannot go on as if they were written, whichever write learned of it first.
    pub fn take_lost_append(&mut self) -> Option<EngineError> {
        self.lost.take()
    }

    /// Goes on writing through `store` (another patience of the same store) from the head
    /// the outbox has: an append whose outcome was unknown (the connection was lost
    /// mid-commit) may have landed, and then it counts.
    pub async fn resume_with(&mut self, store: Arc<dyn Store>) -> Result<(), EngineError> {
        // Its error is why the writer resumes; its sequences are given out again below.
        let _ = self.flush().await;
        self.lost = None;
        self.store = store;
        let head = self.store.head_sequence(&self.execution_id).await?;
        if head >= self.next_sequence {
            self.next_sequence = head + 1;
            advance_to(&self.head, head);
        }
        Ok(())
    }

    /// Appends events in one statement; nothing is visible before the commit.
    pub async fn emit(&mut self, turn_id: Option<&TurnId>, payloads: Vec<ActivityPayload>) -> Result<(), EngineError> {
        self.flush().await?;
        let events = self.shown(turn_id, payloads);
        if events.is_empty() {
            return Ok(());
        }
        let records: Arc<[EventRecord]> = self.records(&events).into();
        if let Err(e) = self.store.append_events(records.clone()).await {
            self.refused(&e, records.len());
            return Err(e.into());
        }
        self.exposed(records, events.iter().map(|(_, p)| p));
        Ok(())
    }

    /// `payloads` of `turn_id` as they may be shown now, each with its turn ([`HeldText`]).
    fn shown(
        &mut self,
        turn_id: Option<&TurnId>,
        payloads: Vec<ActivityPayload>,
    ) -> Vec<(Option<TurnId>, ActivityPayload)> {
        let events = payloads.into_iter().map(|p| (turn_id.cloned(), p)).collect();
        self.held.pass(&self.redactor, events)
    }

    /// Appends events in one statement that commits while the caller goes on: the head
    /// moves when it has committed (nothing is visible before), and the next use of the
    /// writer waits for it (so there is one such append at a time, and the caller learns
    /// of a failure before anything else is written). What a chatty agent streams is
    /// normalized while the batch before it commits.
    pub async fn emit_behind(
        &mut self,
        turn_id: Option<&TurnId>,
        payloads: Vec<ActivityPayload>,
    ) -> Result<(), EngineError> {
        self.flush().await?;
        let events = self.shown(turn_id, payloads);
        if events.is_empty() {
            return Ok(());
        }
        let records: Arc<[EventRecord]> = self.records(&events).into();
        let first_sequence = self.next_sequence;
        self.next_sequence += records.len() as i64;
        let last_sequence = self.next_sequence - 1;
        let (store, head, metrics) = (self.store.clone(), self.head.clone(), self.metrics.clone());
        let failed = self.append_failed.clone();
        let append = async move {
            let outcome = store.append_events(records.clone()).await;
            match &outcome {
                Ok(()) => {
                    if let Some(metrics) = metrics {
                        for (record, (_, payload)) in records.iter().zip(&events) {
                            metrics.observe(&record.event_type, payload);
                        }
                    }
                    advance_over(&head, records);
                }
                Err(_) => failed.notify_one(),
            }
            outcome
        };
        self.in_flight = Some(InFlight {
            task: tokio::spawn(append.in_current_span()),
            outcome: None,
            first_sequence,
            events: (last_sequence + 1 - first_sequence) as usize,
        });
        Ok(())
    }

    /// A write of `events` events was refused with `error`: a generation that moved on
    /// (or a lease that ended) means this writer no longer owns the execution.
    fn refused(&mut self, error: &StoreError, events: usize) {
        if matches!(error, StoreError::Fenced | StoreError::LeaseEnded) {
            self.fenced = true;
            if let Some(metrics) = &self.metrics {
                metrics.fenced_write("event", events as u64);
            }
        }
    }

    /// Commits `writes` together with the events they produce (each with its turn), in
    /// one transaction; the head moves only after it. `Ok(false)`: a write found its row
    /// moved on, or the generation did; nothing was written or exposed.
    pub async fn commit(
        &mut self,
        writes: Vec<Write>,
        events: Vec<(Option<TurnId>, ActivityPayload)>,
    ) -> Result<bool, StoreError> {
        self.settle_in_flight().await?;
        let events = self.held.pass(&self.redactor, events);
        let batch = Batch {
            writes,
            events: self.records(&events),
        };
        if !self.store.commit(&batch).await? {
            return Ok(false);
        }
        self.exposed(batch.events.into(), events.iter().map(|(_, p)| p));
        Ok(true)
    }

    /// The outbox rows of `events`, numbered from the next sequence, each redacted.
    fn records(&self, events: &[(Option<TurnId>, ActivityPayload)]) -> Vec<EventRecord> {
        let emitted_at_ms = now_ms();
        events
            .iter()
            .enumerate()
            .map(|(i, (turn_id, payload))| {
                let (event_type, mut body) = payload.into_parts();
                // Said, not hidden: the marker names what was redacted, the count how often
                // (here or where the agent's update came in, before it was normalized).
                self.redactor.redact_json(&mut body);
                let redactions = self.redactor.markers_in(&body);
                if redactions > 0
                    && let Some(object) = body.as_object_mut()
                {
                    object.insert("redactions".into(), redactions.into());
                }
                EventRecord {
                    execution_id: self.execution_id.clone(),
                    sequence: self.next_sequence + i as i64,
                    event_id: uuid::Uuid::now_v7().to_string(),
                    generation: self.generation,
                    turn_id: turn_id.clone(),
                    item_id: payload.item_id().map(str::to_owned),
                    event_type,
                    priority: i64::from(payload.priority()),
                    schema_version: i64::from(SCHEMA_VERSION),
                    emitted_at_ms,
                    payload: body.to_string(),
                }
            })
            .collect()
    }

    /// `records` are committed: subscribers may read them now.
    fn exposed<'a>(&mut self, records: Arc<[EventRecord]>, payloads: impl Iterator<Item = &'a ActivityPayload>) {
        self.next_sequence += records.len() as i64;
        if let Some(metrics) = &self.metrics {
            for (record, payload) in records.iter().zip(payloads) {
                metrics.observe(&record.event_type, payload);
            }
        }
        advance_over(&self.head, records);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cursor_runner_activity::{NoticeScope, ProviderNotice};
    use cursor_runner_domain::state::ExecutionState;
    use cursor_runner_store::{ExecutionRecord, MemoryStore};

    const EXECUTION: &str = "exec-1";

    fn notices(count: usize) -> Vec<ActivityPayload> {
        (0..count)
            .map(|i| {
                ActivityPayload::ProviderNotice(ProviderNotice::info("test", NoticeScope::Session, format!("n{i}")))
            })
            .collect()
    }

    async fn store() -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let execution = ExecutionRecord {
            id: EXECUTION.into(),
            tenant_id: "t".into(),
            state: ExecutionState::Ready,
            generation: Generation::FIRST,
            ..Default::default()
        };
        store.insert_execution(&execution).await.unwrap();
        store
    }

    async fn sequences(store: &Arc<dyn Store>) -> Vec<i64> {
        let events = store.read_events(&EXECUTION.into(), 0, 100).await.unwrap();
        events.iter().map(|e| e.sequence).collect()
    }

    #[tokio::test]
    async fn appends_behind_the_caller_land_in_order_and_the_head_moves_only_once_each_committed() {
        let store = store().await;
        let mut writer = EventWriter::new(store.clone(), EXECUTION.into(), Generation::FIRST, 0);
        let head = writer.subscribe();
        writer.emit_behind(None, notices(2)).await.unwrap();
        // The append has not run yet (this runtime has one thread and nothing yielded).
        assert_eq!((head.borrow().sequence, sequences(&store).await), (0, vec![]));
        writer.emit_behind(None, notices(3)).await.unwrap();
        writer.emit(None, notices(1)).await.unwrap();
        assert_eq!(sequences(&store).await, (1..=6).collect::<Vec<_>>());
        assert_eq!(head.borrow().sequence, 6);
    }

    #[tokio::test]
    async fn waiting_for_an_append_behind_the_caller_to_commit_leaves_its_outcome_to_the_next_write() {
        let store = store().await;
        let mut writer = EventWriter::new(store.clone(), EXECUTION.into(), Generation::FIRST, 0);
        let head = writer.subscribe();
        assert!(!writer.is_committing(), "nothing was appended yet");
        writer.committed().await;
        writer.emit_behind(None, notices(2)).await.unwrap();
        assert!(writer.is_committing());
        writer.committed().await;
        assert!(!writer.is_committing());
        assert_eq!((head.borrow().sequence, sequences(&store).await), (2, vec![1, 2]));
        writer.emit(None, notices(1)).await.unwrap();
        assert_eq!(head.borrow().sequence, 3);
    }

    #[tokio::test]
    async fn a_failed_append_behind_the_caller_is_told_by_its_next_write_and_its_numbers_are_given_again() {
        let store = store().await;
        let mut writer = EventWriter::new(store.clone(), EXECUTION.into(), Generation::FIRST, 0);
        let head = writer.subscribe();
        let failed = writer.append_failed();
        // Sequence 2 is taken under the writer: its two-event append is refused whole.
        let taken = EventRecord {
            execution_id: EXECUTION.into(),
            sequence: 2,
            event_id: "taken".into(),
            generation: Generation::FIRST,
            event_type: "provider.notice.recorded".into(),
            payload: "{}".into(),
            ..Default::default()
        };
        store.append_events(vec![taken].into()).await.unwrap();
        writer.emit_behind(None, notices(2)).await.unwrap();
        failed.notified().await;
        writer.committed().await;
        assert!(!writer.is_committing());
        assert!(
            writer.emit(None, notices(1)).await.is_err(),
            "the next write says it failed"
        );
        assert_eq!(head.borrow().sequence, 0, "the head never moved for it");
        writer.emit(None, notices(1)).await.unwrap();
        assert_eq!(sequences(&store).await, [1, 2]);
        assert_eq!(head.borrow().sequence, 1);
    }
}
