//! Event heads announced by the database: on PostgreSQL every commit that appends events
//! notifies channel [`EVENTS_CHANNEL`] with each execution's new head (a trigger, migration
//! 0008), so a replica tails a stream another replica writes without polling the outbox.

use sqlx::postgres::PgListener;

/// The channel the `events` trigger notifies: `execution_id:head` per execution and commit.
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

    #[test]
    fn a_payload_without_a_numeric_head_is_not_a_notice() {
        assert_eq!(parse("exec"), None);
        assert_eq!(parse("exec:"), None);
        assert_eq!(parse("exec:x1"), None);
    }
}
