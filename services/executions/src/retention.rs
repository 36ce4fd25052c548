//! Event retention: the outbox keeps every event until the control plane has acknowledged
//! it **and** it is older than the retention period; then it is pruned in bounded
//! batches. The newest event of an execution is never pruned, so sequence numbers keep
//! counting up from it. A stream that asks for pruned events is told the oldest one
//! still kept (`OUT_OF_RANGE`), never handed a gap.
//!
//! Idempotency keys are kept the same way: a completed call's outcome answers retries of
//! its `request_id` for the retention period, then the key is deleted in bounded batches
//! and the `request_id` is free again. A key still in flight is never deleted.

use std::sync::Arc;
use std::time::Duration;

use cursor_runner_store::{ExecutionId, Store, now_ms};

use crate::metrics::Metrics;

/// Events deleted per statement.
pub const PRUNE_BATCH: i64 = 1000;
/// Statements per execution per sweep, so one huge outbox cannot hold up the others.
pub const PRUNE_BATCHES_PER_SWEEP: u32 = 10;
/// Executions read per page while sweeping.
const SWEEP_PAGE: i64 = 500;
/// Completed idempotency keys deleted per statement.
pub const IDEMPOTENCY_PRUNE_BATCH: i64 = 1000;
/// How long a completed call's outcome answers retries of its `request_id`, by default.
pub const DEFAULT_IDEMPOTENCY_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// How often the retention sweeps run, by default.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(300);

/// How long acknowledged events are kept, and how often the sweep runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub keep: Duration,
    pub sweep_every: Duration,
}

/// One sweep over every acknowledged execution; the number of events pruned.
pub async fn sweep(store: &dyn Store, retention: Retention, metrics: &Metrics) -> u64 {
    let cutoff = now_ms() - i64::try_from(retention.keep.as_millis()).unwrap_or(i64::MAX);
    let mut pruned = 0;
    let mut after: Option<ExecutionId> = None;
    loop {
        let page = match store.acknowledged_executions(after.as_deref(), SWEEP_PAGE).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %e, "event retention: listing executions failed; next sweep retries");
                return pruned;
            }
        };
        for (execution_id, acked) in &page {
            pruned += prune_one(store, execution_id, *acked, cutoff).await;
        }
        if (page.len() as i64) < SWEEP_PAGE {
            break;
        }
        after = page.last().map(|(id, _)| id.clone());
    }
    if pruned > 0 {
        metrics.events_pruned(pruned);
        tracing::debug!(pruned, "event retention sweep");
    }
    pruned
}

async fn prune_one(store: &dyn Store, execution_id: &ExecutionId, acked: i64, cutoff_ms: i64) -> u64 {
    let head = match store.head_sequence(execution_id).await {
        Ok(head) => head,
        Err(_) => return 0,
    };
    // Never the newest event: the next one is numbered from it.
    let through = acked.min(head - 1);
    let mut pruned = 0;
    for _ in 0..PRUNE_BATCHES_PER_SWEEP {
        match store.prune_events(execution_id, through, cutoff_ms, PRUNE_BATCH).await {
            Ok(n) => {
                pruned += n;
                if n < PRUNE_BATCH as u64 {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(%execution_id, error = %e, "event retention: pruning failed; next sweep retries");
                break;
            }
        }
    }
    pruned
}

/// One sweep of completed idempotency keys older than `keep`; the number deleted.
pub async fn sweep_idempotency(store: &dyn Store, keep: Duration) -> u64 {
    let cutoff = now_ms() - i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
    let mut pruned = 0;
    for _ in 0..PRUNE_BATCHES_PER_SWEEP {
        match store.prune_idempotency(cutoff, IDEMPOTENCY_PRUNE_BATCH).await {
            Ok(n) => {
                pruned += n;
                if n < IDEMPOTENCY_PRUNE_BATCH as u64 {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "idempotency retention: pruning failed; next sweep retries");
                break;
            }
        }
    }
    if pruned > 0 {
        tracing::debug!(pruned, "idempotency retention sweep");
    }
    pruned
}

/// Runs [`sweep`] every `sweep_every` until the engine is dropped.
pub fn start(store: Arc<dyn Store>, retention: Retention, metrics: Arc<Metrics>) -> tokio::task::JoinHandle<()> {
    every(retention.sweep_every, move || {
        let (store, metrics) = (store.clone(), metrics.clone());
        async move {
            sweep(store.as_ref(), retention, &metrics).await;
        }
    })
}

/// Runs [`sweep_idempotency`] every `sweep_every` until the engine is dropped.
pub fn start_idempotency(store: Arc<dyn Store>, retention: Retention) -> tokio::task::JoinHandle<()> {
    every(retention.sweep_every, move || {
        let store = store.clone();
        async move {
            sweep_idempotency(store.as_ref(), retention.keep).await;
        }
    })
}

fn every<F, Fut>(interval: Duration, mut run: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut every = tokio::time::interval(interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            run().await;
        }
    })
}
