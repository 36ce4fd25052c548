//! Event heads announced through the database: on PostgreSQL every commit that appends
//! events is followed by a notification on channel [`EVENTS_CHANNEL`] of each execution's
//! new head (`sql::announce`, once the commit has returned), so a replica tails a stream
//! another replica writes without polling the outbox.

use std::collections::HashMap;

use parking_lot::Mutex;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;

use crate::records::EventRecord;

/// The channel event heads are announced on: `execution_id:head`, at most one per
/// execution and statement.
pub const EVENTS_CHANNEL: &str = "cr_events";

/// What the database said about the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadNotice {
    /// A commit appended events of `execution_id` up to `head`, and they can be read now.
    Advanced { execution_id: String, head: i64 },
    /// The listening connection was lost: whatever was committed meanwhile went
    /// unannounced. The listener is spent; listen again.
    Lost(String),
}

/// One connection listening on [`EVENTS_CHANNEL`].
pub struct HeadListener(PgListener);

impl HeadListener {
    pub(crate) async fn listen(pool: &sqlx::PgPool) -> Result<Self, sqlx::Error> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(EVENTS_CHANNEL).await?;
        Ok(Self(listener))
    }

    /// The next announcement. After [`HeadNotice::Lost`] the listener says nothing more.
    pub async fn next(&mut self) -> HeadNotice {
        loop {
            match self.0.try_recv().await {
                Ok(Some(notification)) => {
                    if let Some(advanced) = parse(notification.payload()) {
                        return advanced;
                    }
                    tracing::warn!(
                        payload = notification.payload(),
                        "ignored a malformed event-head notification"
                    );
                }
                Ok(None) => return HeadNotice::Lost("the listening connection was lost".into()),
                Err(e) => return HeadNotice::Lost(e.to_string()),
            }
        }
    }
}

/// `execution_id:head` (execution ids hold no `:`; the last one splits).
fn parse(payload: &str) -> Option<HeadNotice> {
    let (execution_id, head) = payload.rsplit_once(':')?;
    Some(HeadNotice::Advanced {
        execution_id: execution_id.to_owned(),
        head: head.parse().ok()?,
    })
}

/// The heads committed here and not yet announced, at most one per execution: each commit
/// leaves its executions' heads here, and one task announces them (`sql::announce`).
#[derive(Default)]
pub(crate) struct UnannouncedHeads {
    pending: Mutex<HashMap<String, i64>>,
    wake: Notify,
    announcing: std::sync::OnceLock<()>,
}

impl UnannouncedHeads {
    /// `events` are committed: their executions' heads are to be announced.
    pub(crate) fn committed(&self, events: &[EventRecord]) {
        if events.is_empty() {
            return;
        }
        let mut pending = self.pending.lock();
        for event in events {
            let head = pending.entry(event.execution_id.to_string()).or_insert(event.sequence);
            *head = (*head).max(event.sequence);
        }
        drop(pending);
        self.wake.notify_one();
    }

    /// Runs `start` (which starts the announcing task) the first time only.
    pub(crate) fn announce_with(&self, start: impl FnOnce()) {
        self.announcing.get_or_init(start);
    }

    /// Resolves once something was committed (or the store is gone) since the last call.
    pub(crate) async fn changed(&self) {
        self.wake.notified().await;
    }

    /// The payloads of every head left since the last call (`execution_id:head`).
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.pending.lock())
            .into_iter()
            .map(|(execution_id, head)| format!("{execution_id}:{head}"))
            .collect()
    }

    /// The store is gone: its announcing task ends.
    pub(crate) fn store_dropped(&self) {
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_names_the_execution_and_its_new_head() {
        assert_eq!(
            parse("0190-abc:42"),
            Some(HeadNotice::Advanced {
                execution_id: "0190-abc".into(),
                head: 42
            })
        );
    }

    fn event(execution_id: &str, sequence: i64) -> EventRecord {
        EventRecord {
            execution_id: execution_id.into(),
            sequence,
            ..Default::default()
        }
    }

    #[test]
    fn the_heads_left_between_two_announcements_are_said_once_each_at_their_highest() {
        let heads = UnannouncedHeads::default();
        heads.committed(&[event("a", 1), event("a", 2)]);
        heads.committed(&[event("b", 7)]);
        heads.committed(&[event("a", 3)]);
        let mut said = heads.take();
        said.sort();
        assert_eq!(said, ["a:3", "b:7"]);
        assert!(heads.take().is_empty(), "nothing is said twice");
    }

    #[test]
    fn a_payload_without_a_numeric_head_is_not_a_notice() {
        assert_eq!(parse("exec"), None);
        assert_eq!(parse("exec:"), None);
        assert_eq!(parse("exec:x1"), None);
    }
}
