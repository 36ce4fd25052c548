//! Checkpoints of the session's home into the store, so the session loads and recovers
//! on any replica (`docs/scale-out.md` §6). A home is packed only between turns (at
//! creation, after a settlement, and at a close or drain that cut no turn short), when the
//! agent's state is whole; never after a loss or a cut turn, whose home may be torn, so
//! the last good checkpoint stays. A home whose sessions were all checkpointed at their
//! end is removed when its process ends.

use cursor_runner_activity::{ActivityPayload, NoticeScope, ProviderNotice};
use cursor_runner_domain::error::EngineError;
use cursor_runner_store::{SessionCheckpoint, now_ms};
use cursor_runner_supervisor::checkpoint::{self, CHECKPOINT_FORMAT, Packed};

use super::data::Actor;

/// The notice category of a home over a checkpoint bound (the previous checkpoint stays).
pub(crate) const CHECKPOINT_REFUSED: &str = "session_checkpoint_refused";
/// The notice category of files a checkpoint left out (links, denied names, secrets).
pub(crate) const CHECKPOINT_LEFT_OUT: &str = "session_checkpoint_left_out";
/// Homes packed at once on this node; each pack may hold up to
/// `MAX_SESSION_CHECKPOINT_RAW_BYTES` of a home in memory.
pub(crate) const MAX_CONCURRENT_PACKS: usize = 2;
static PACKING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_CONCURRENT_PACKS);

impl Actor {
    /// Packs the home now and stores it in the background, after every earlier checkpoint
    /// of this actor (so they land in the order they were taken).
    pub(super) async fn checkpoint(&mut self) -> Result<(), EngineError> {
        let Some(home) = self.ticket.as_ref().map(|t| t.home.clone()) else {
            return Ok(());
        };
        let redactor = self.events.redactor().clone();
        // Each pack holds up to the raw bound in memory: a few at a time on the node.
        let _permit = PACKING.acquire().await.expect("the semaphore is never closed");
        let packed =
            tokio::task::spawn_blocking(move || checkpoint::pack(&home, &|bytes| redactor.appears_in(bytes))).await;
        let packed = match packed {
            Ok(Ok(packed)) => packed,
            Ok(Err(refused)) => {
                self.metrics_checkpoint("refused");
                self.then_upload(async { false });
                let summary = format!("the session was not checkpointed ({refused}); its previous checkpoint stays");
                return self.session_notice(CHECKPOINT_REFUSED, summary).await;
            }
            Err(panicked) => {
                tracing::error!(execution_id = %self.record.id, error = %panicked, "packing a checkpoint panicked");
                self.then_upload(async { false });
                return Ok(());
            }
        };
        if !packed.left_out.is_empty() {
            let summary = left_out_summary(&packed);
            self.session_notice(CHECKPOINT_LEFT_OUT, summary).await?;
        }
        let record = SessionCheckpoint {
            tenant_id: self.record.tenant_id.clone(),
            session_id: self.session_id.clone(),
            execution_id: self.record.id.clone(),
            generation: self.record.generation,
            turn_count: self.record.turn_count,
            format: CHECKPOINT_FORMAT.to_owned(),
            raw_bytes: packed.raw_bytes as i64,
            stored_bytes: packed.body.len() as i64,
            sha256: packed.sha256,
            body: packed.body,
            taken_at_ms: now_ms(),
        };
        let store = self.store.clone();
        let metrics = self.events.metrics().cloned();
        self.then_upload(async move {
            let outcome: &'static str = match store.save_session_checkpoint(&record).await {
                Ok(true) => "stored",
                // Fenced (another generation or owner took the execution) or older.
                Ok(false) => "superseded",
                Err(e) => {
                    tracing::warn!(execution_id = %record.execution_id, error = %e, "storing a session checkpoint failed");
                    "failed"
                }
            };
            if let Some(metrics) = metrics {
                metrics.session_checkpoint(outcome);
            }
            outcome == "stored"
        });
        Ok(())
    }

    /// Runs `upload` once every earlier one has ended; the last one's result is whether the
    /// home's state as last packed (or refused) is in the store.
    fn then_upload(&mut self, upload: impl std::future::Future<Output = bool> + Send + 'static) {
        let previous = self.checkpoint_upload.take();
        self.checkpoint_upload = Some(tokio::spawn(async move {
            if let Some(previous) = previous {
                let _ = previous.await;
            }
            upload.await
        }));
    }

    /// At the end of the session (close, drain): its home is checkpointed unless a turn was
    /// cut short (`mid_turn`: the home may be torn, and the last good checkpoint stays), and
    /// the slot learns whether the session is stored elsewhere now (else its home stays).
    pub(super) async fn checkpoint_between_turns(&mut self, mid_turn: bool) -> Result<(), EngineError> {
        if !mid_turn {
            self.checkpoint().await?;
        }
        let stored = self.checkpoints_stored().await && !mid_turn;
        if let Some(ticket) = self.ticket.as_mut() {
            ticket.session_ended(stored);
        }
        Ok(())
    }

    /// Waits until every checkpoint taken so far is stored (or failed to be); whether the
    /// last one taken is the one stored.
    pub(super) async fn checkpoints_stored(&mut self) -> bool {
        match self.checkpoint_upload.take() {
            Some(upload) => upload.await.unwrap_or(false),
            None => false,
        }
    }

    fn metrics_checkpoint(&self, outcome: &'static str) {
        if let Some(metrics) = self.events.metrics() {
            metrics.session_checkpoint(outcome);
        }
    }

    async fn session_notice(&mut self, category: &str, summary: String) -> Result<(), EngineError> {
        let notice = ProviderNotice::warning(category, NoticeScope::Session, summary);
        self.events
            .emit(None, vec![ActivityPayload::ProviderNotice(notice)])
            .await
    }
}

/// What was left out, by reason, with the first few paths (the event's redaction applies).
fn left_out_summary(packed: &Packed) -> String {
    const NAMED: usize = 5;
    let named: Vec<String> = packed
        .left_out
        .iter()
        .take(NAMED)
        .map(|l| format!("{} ({})", l.path(), l.reason()))
        .collect();
    let more = packed.left_out.len().saturating_sub(NAMED);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "the session's checkpoint left out {} file(s): {}{more}",
        packed.left_out.len(),
        named.join(", ")
    )
}
