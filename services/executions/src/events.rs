//! The single writer of one execution's outbox: it assigns contiguous sequence
//! numbers, commits, and only then advances the head that subscribers watch
//! (persist before expose).

use std::sync::Arc;

use cursor_runner_activity::{ActivityPayload, Redactor, SCHEMA_VERSION};
use cursor_runner_store::{Batch, EventRecord, ExecutionId, Generation, Store, StoreError, TurnId, Write, now_ms};
use tokio::sync::watch;

use crate::heads::{HeadBus, LocalWriter, advance_to};
use crate::metrics::Metrics;
use cursor_runner_domain::error::EngineError;

pub struct EventWriter {
    store: Arc<dyn Store>,
    execution_id: ExecutionId,
    generation: Generation,
    next_sequence: i64,
    /// Shared with the tails of this execution's streams ([`HeadBus`]).
    head: Arc<watch::Sender<i64>>,
    /// Marks the execution as written here while this writer lives.
    _local: Option<LocalWriter>,
    metrics: Option<Arc<Metrics>>,
    /// An append was refused: the execution's generation moved on.
    fenced: bool,
    /// The secrets this execution's agent was handed, kept out of every event.
    redactor: Redactor,
}

impl EventWriter {
    pub fn new(store: Arc<dyn Store>, execution_id: ExecutionId, generation: Generation, head: i64) -> Self {
        Self {
            store,
            execution_id,
            generation,
            next_sequence: head + 1,
            head: Arc::new(watch::Sender::new(head)),
            _local: None,
            metrics: None,
            fenced: false,
            redactor: Redactor::default(),
        }
    }

    /// Moves the execution's head on `bus`, where every stream of it watches.
    pub fn with_heads(mut self, bus: &HeadBus) -> Self {
        let head = *self.head.borrow();
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

    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.head.subscribe()
    }

    /// Goes on writing through `store` (another patience of the same store) from the head
    /// the outbox has: an append whose outcome was unknown (the connection was lost
    /// mid-commit) may have landed, and then it counts.
    pub async fn resume_with(&mut self, store: Arc<dyn Store>) -> Result<(), EngineError> {
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
        if payloads.is_empty() {
            return Ok(());
        }
        let records = self.records(payloads.iter().map(|p| (turn_id, p)));
        if let Err(e) = self.store.append_events(&records).await {
            if matches!(e, StoreError::Fenced | StoreError::LeaseEnded) {
                self.fenced = true;
                if let Some(metrics) = &self.metrics {
                    metrics.fenced_write("event", records.len() as u64);
                }
            }
            return Err(e.into());
        }
        self.exposed(&records, payloads.iter());
        Ok(())
    }

    /// Commits `writes` together with the events they produce (each with its turn), in
    /// one transaction; the head moves only after it. `Ok(false)`: a write found its row
    /// moved on, or the generation did; nothing was written or exposed.
    pub async fn commit(
        &mut self,
        writes: Vec<Write>,
        events: Vec<(Option<TurnId>, ActivityPayload)>,
    ) -> Result<bool, StoreError> {
        let events_with_turns = events.iter().map(|(turn_id, p)| (turn_id.as_ref(), p));
        let batch = Batch {
            writes,
            events: self.records(events_with_turns),
        };
        if !self.store.commit(&batch).await? {
            return Ok(false);
        }
        self.exposed(&batch.events, events.iter().map(|(_, p)| p));
        Ok(true)
    }

    /// The outbox rows of `payloads`, numbered from the next sequence, each redacted.
    fn records<'a>(
        &self,
        payloads: impl Iterator<Item = (Option<&'a TurnId>, &'a ActivityPayload)>,
    ) -> Vec<EventRecord> {
        let emitted_at_ms = now_ms();
        payloads
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
                    turn_id: turn_id.cloned(),
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
    fn exposed<'a>(&mut self, records: &[EventRecord], payloads: impl Iterator<Item = &'a ActivityPayload>) {
        self.next_sequence += records.len() as i64;
        advance_to(&self.head, self.next_sequence - 1);
        if let Some(metrics) = &self.metrics {
            for (record, payload) in records.iter().zip(payloads) {
                metrics.observe(&record.event_type, payload);
            }
        }
    }
}
