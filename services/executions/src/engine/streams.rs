//! Event streams: replay from the store, then live from the execution's head, with
//! heartbeats; acknowledgements.

use std::time::Duration;

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
        let mut head_rx = live_head(&record.id).unwrap_or_else(|| watch::channel(head).1);
        let mut writer_gone = head_rx.has_changed().is_err();
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let store = self.store.clone();
        let heartbeat = self.config.heartbeat_interval;
        let mut draining = self.closing_streams.subscribe();
        let open_stream = self.metrics.stream_opened();
        tokio::spawn(async move {
            let _open_stream = open_stream;
            let mut cursor = after_sequence;
            let mut caught_up = false;
            loop {
                let page = match store.read_events(&record.id, cursor, REPLAY_PAGE).await {
                    Ok(page) => page,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                };
                let full = page.len() as i64 == REPLAY_PAGE;
                // Pruned while this stream replayed: say so rather than skip a gap.
                if let Some(first) = page.first()
                    && first.sequence != cursor + 1
                {
                    let _ = tx.send(Err(events_pruned(cursor, first.sequence))).await;
                    return;
                }
                for event in page {
                    cursor = event.sequence;
                    if tx.send(Ok(StreamItem::Event(event))).await.is_err() {
                        return;
                    }
                }
                if full {
                    continue;
                }
                if !caught_up {
                    caught_up = true;
                    if tx
                        .send(Ok(StreamItem::CaughtUp { head_sequence: cursor }))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                // Wait for the head to pass the cursor, or send a heartbeat when idle.
                loop {
                    if *head_rx.borrow_and_update() > cursor {
                        break;
                    }
                    tokio::select! {
                        changed = head_rx.changed(), if !writer_gone => {
                            if changed.is_err() {
                                // The execution's writer is gone; a recovery may bring another.
                                writer_gone = true;
                            }
                        }
                        () = tokio::time::sleep(WRITER_POLL), if writer_gone => {
                            if let Some(fresh) = live_head(&record.id).filter(|rx| rx.has_changed().is_ok()) {
                                head_rx = fresh;
                                writer_gone = false;
                            }
                            // Page the store once more either way.
                            break;
                        }
                        () = tokio::time::sleep(heartbeat) => {
                            if tx.send(Ok(StreamItem::Heartbeat { head_sequence: cursor })).await.is_err() {
                                return;
                            }
                        }
                        () = tx.closed() => return,
                        _ = async { draining.wait_for(|d| *d).await.map(|_| ()) } => {
                            let _ = tx.send(Err(EngineError::new(
                                ErrorKind::Unavailable,
                                Reason::ServiceShuttingDown,
                                format!("the service is shutting down; resume from sequence {cursor}"),
                            )
                            .with("resume_after_sequence", cursor.to_string())))
                            .await;
                            return;
                        }
                    }
                }
            }
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
