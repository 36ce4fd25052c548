//! Where stream tails learn that an execution's outbox grew: one watch per execution,
//! moved by this process's own writers after their commit and, on PostgreSQL, by the
//! database's announcements of other replicas' commits (`store::HeadListener`). A head
//! only ever moves forward, and only to a sequence already committed. A writer here also
//! leaves on the head the run of events it just committed, so tails that keep up take
//! them from memory instead of reading them back from the store.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use cursor_runner_store::{EventRecord, HeadNotice, Store};
use parking_lot::Mutex;
use tokio::sync::watch;

/// How long the announcements may stay down before listening again (and how often a tail
/// pages the store meanwhile, see [`Feed::Deaf`]).
pub const STREAM_POLL_WHILE_DEAF: Duration = Duration::from_secs(1);

/// What one committed run of events may weigh ([`EventRecord`]s, strings included) and
/// still be left on its execution's head for tails to take from memory: what a head holds
/// beyond its sequence is at most this, per execution with a writer here (half the
/// 256 KiB an execution may cost the service, `shared/spec/performance.md` P4). An agent
/// streaming at a reading pace commits runs of a few chunks; a flood's full run
/// (`MAX_UPDATES_PER_APPEND` chunks of ~100 bytes, coalesced: about 400 KiB) is heavier
/// and is read back from the store by whoever wants it.
pub const MAX_HELD_RUN_BYTES: usize = 128 * 1024;

/// Where an execution's outbox ends, as far as this process knows.
#[derive(Debug, Clone, Default)]
pub struct Head {
    /// The last committed event's sequence.
    pub sequence: i64,
    /// The run of events whose commit moved the head here, when a writer in this process
    /// committed it and it weighs at most [`MAX_HELD_RUN_BYTES`]; it ends at `sequence`.
    held: Option<Arc<[EventRecord]>>,
}

impl Head {
    pub fn at(sequence: i64) -> Self {
        Self { sequence, held: None }
    }

    /// Every committed event after `cursor` up to the head, if the head holds them all.
    pub fn events_after(&self, cursor: i64) -> Option<&[EventRecord]> {
        let held = self.held.as_deref()?;
        let first = held.first()?.sequence;
        if cursor < first - 1 || cursor >= self.sequence {
            return None;
        }
        Some(&held[(cursor + 1 - first) as usize..])
    }
}

/// Roughly what `record` takes in memory.
fn weight(record: &EventRecord) -> usize {
    std::mem::size_of::<EventRecord>()
        + record.execution_id.len()
        + record.event_id.len()
        + record.turn_id.as_ref().map_or(0, |turn| turn.len())
        + record.item_id.as_ref().map_or(0, String::len)
        + record.event_type.len()
        + record.payload.len()
}

/// Whether heads moved elsewhere reach this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// Every writer of the store is in this process: its own heads are all there is.
    Local,
    /// Other replicas' commits are announced as they land.
    Listening,
    /// The announcements are down (not yet up, or lost): tails page the store every
    /// [`STREAM_POLL_WHILE_DEAF`] until they are back.
    Deaf,
}

/// The heads of the executions someone watches or writes here.
pub struct HeadBus {
    heads: Mutex<HashMap<String, Weak<watch::Sender<Head>>>>,
    feed: watch::Sender<Feed>,
    /// Executions written by a writer in this process ([`LocalWriter`]).
    local_writers: LocalWriters,
}

type LocalWriters = Arc<Mutex<HashMap<String, usize>>>;

/// An execution this process writes, for as long as this lives: its head moves by its
/// writer only, once each commit has returned, never first by the database's
/// announcement of that commit (so what a stream shows, the writer has finished: its
/// metrics count it, its next step follows it).
pub struct LocalWriter {
    writers: LocalWriters,
    execution_id: String,
}

impl Drop for LocalWriter {
    fn drop(&mut self) {
        let mut writers = self.writers.lock();
        if let Some(count) = writers.get_mut(&self.execution_id) {
            *count -= 1;
            if *count == 0 {
                writers.remove(&self.execution_id);
            }
        }
    }
}

impl HeadBus {
    pub fn new(feed: Feed) -> Self {
        Self {
            heads: Mutex::new(HashMap::new()),
            feed: watch::Sender::new(feed),
            local_writers: LocalWriters::default(),
        }
    }

    /// The head of `execution_id` for its writer in this process, and the mark that it
    /// writes here ([`LocalWriter`]).
    pub fn writer_head(&self, execution_id: &str, at_least: i64) -> (Arc<watch::Sender<Head>>, LocalWriter) {
        *self.local_writers.lock().entry(execution_id.to_owned()).or_default() += 1;
        let mark = LocalWriter {
            writers: self.local_writers.clone(),
            execution_id: execution_id.to_owned(),
        };
        (self.head(execution_id, at_least), mark)
    }

    /// The head of `execution_id`, at least `at_least`. It lives while a writer or a
    /// tail holds it; each holder sees every later advance.
    pub fn head(&self, execution_id: &str, at_least: i64) -> Arc<watch::Sender<Head>> {
        let mut heads = self.heads.lock();
        let head = match heads.get(execution_id).and_then(Weak::upgrade) {
            Some(head) => head,
            None => {
                // Forget the heads nobody holds any more before adding one.
                heads.retain(|_, head| head.strong_count() > 0);
                let head = Arc::new(watch::Sender::new(Head::at(at_least)));
                heads.insert(execution_id.to_owned(), Arc::downgrade(&head));
                head
            }
        };
        advance_to(&head, at_least);
        head
    }

    /// The database announced that events of `execution_id` up to `head` are committed.
    /// Nothing to do for an execution whose head nobody here holds, or that a writer here
    /// writes (it moves the head itself).
    pub fn advance(&self, execution_id: &str, head: i64) {
        if self.local_writers.lock().contains_key(execution_id) {
            return;
        }
        let held = self.heads.lock().get(execution_id).and_then(Weak::upgrade);
        if let Some(held) = held {
            advance_to(&held, head);
        }
    }

    pub fn feed(&self) -> watch::Receiver<Feed> {
        self.feed.subscribe()
    }

    pub(crate) fn set_feed(&self, feed: Feed) {
        self.feed
            .send_if_modified(|current| std::mem::replace(current, feed) != feed);
    }
}

/// Moves `head` forward to `to`; never back (announcements may arrive late or twice).
/// Tails read what it passed from the store.
pub fn advance_to(head: &watch::Sender<Head>, to: i64) {
    head.send_if_modified(|current| {
        let moved = to > current.sequence;
        if moved {
            *current = Head::at(to);
        }
        moved
    });
}

/// Moves `head` forward over `run`, events just committed that follow one another, and
/// leaves the run on it when it weighs at most [`MAX_HELD_RUN_BYTES`].
pub fn advance_over(head: &watch::Sender<Head>, run: Arc<[EventRecord]>) {
    let Some(last) = run.last().map(|record| record.sequence) else {
        return;
    };
    let light = run.iter().map(weight).sum::<usize>() <= MAX_HELD_RUN_BYTES;
    let held = light.then_some(run);
    head.send_if_modified(|current| {
        let moved = last > current.sequence;
        if moved {
            *current = Head { sequence: last, held };
        }
        moved
    });
}

/// Feeds `bus` from the database's announcements for as long as the bus lives: listens,
/// and listens again after a loss. Ends at once for a store whose writers are all here.
pub async fn follow_announcements(bus: Weak<HeadBus>, store: Arc<dyn Store>) {
    loop {
        let listened = store.listen_for_heads().await;
        let Some(live) = bus.upgrade() else { return };
        let mut listener = match listened {
            Ok(Some(listener)) => listener,
            Ok(None) => return live.set_feed(Feed::Local),
            Err(e) => {
                live.set_feed(Feed::Deaf);
                tracing::warn!(error = %e, "cannot listen for event heads; streams poll the store meanwhile");
                drop(live);
                tokio::time::sleep(STREAM_POLL_WHILE_DEAF).await;
                continue;
            }
        };
        // Listening now, maybe after a loss: tails re-read what went unannounced.
        live.set_feed(Feed::Listening);
        drop(live);
        loop {
            let notice = listener.next().await;
            let Some(live) = bus.upgrade() else { return };
            match notice {
                HeadNotice::Advanced { execution_id, head } => live.advance(&execution_id, head),
                HeadNotice::Lost(why) => {
                    live.set_feed(Feed::Deaf);
                    tracing::warn!(error = %why, "lost the event-head listener; streams poll the store until it is back");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_moves_forward_only() {
        let bus = HeadBus::new(Feed::Local);
        let head = bus.head("e", 5);
        bus.advance("e", 3);
        assert_eq!(head.borrow().sequence, 5);
        bus.advance("e", 9);
        assert_eq!(head.borrow().sequence, 9);
    }

    #[test]
    fn a_writer_and_a_tail_of_one_execution_share_its_head() {
        let bus = HeadBus::new(Feed::Local);
        let writer = bus.head("e", 2);
        let tail = bus.head("e", 0);
        let mut watching = tail.subscribe();
        advance_to(&writer, 4);
        assert!(watching.has_changed().unwrap());
        assert_eq!(watching.borrow_and_update().sequence, 4);
    }

    #[test]
    fn an_announcement_of_an_execution_written_here_moves_nothing_until_its_writer_is_gone() {
        let bus = HeadBus::new(Feed::Listening);
        let (head, writing) = bus.writer_head("e", 1);
        bus.advance("e", 5);
        assert_eq!(
            head.borrow().sequence,
            1,
            "its writer moves it, after its commit returns"
        );
        drop(writing);
        bus.advance("e", 5);
        assert_eq!(head.borrow().sequence, 5);
        assert!(bus.local_writers.lock().is_empty());
    }

    fn run(sequences: std::ops::RangeInclusive<i64>, payload_bytes: usize) -> Vec<EventRecord> {
        sequences
            .map(|sequence| EventRecord {
                execution_id: "e".into(),
                sequence,
                payload: "x".repeat(payload_bytes),
                ..Default::default()
            })
            .collect()
    }

    fn sequences(events: Option<&[EventRecord]>) -> Option<Vec<i64>> {
        events.map(|events| events.iter().map(|e| e.sequence).collect())
    }

    #[test]
    fn a_head_holds_the_run_that_moved_it_for_cursors_from_its_start_to_its_end() {
        let bus = HeadBus::new(Feed::Local);
        let head = bus.head("e", 4);
        advance_over(&head, run(5..=7, 10).into());
        let held = head.borrow().clone();
        assert_eq!(held.sequence, 7);
        assert_eq!(sequences(held.events_after(4)), Some(vec![5, 6, 7]));
        assert_eq!(sequences(held.events_after(6)), Some(vec![7]));
        assert_eq!(sequences(held.events_after(3)), None, "event 4 is in the store only");
        assert_eq!(sequences(held.events_after(7)), None, "nothing after the head");
    }

    #[test]
    fn a_head_moved_by_an_announcement_holds_no_run() {
        let bus = HeadBus::new(Feed::Listening);
        let head = bus.head("e", 0);
        advance_over(&head, run(1..=2, 10).into());
        bus.advance("e", 3);
        let moved = head.borrow().clone();
        assert_eq!((moved.sequence, sequences(moved.events_after(2))), (3, None));
    }

    #[test]
    fn a_run_is_held_up_to_its_weight_bound_and_not_one_byte_past_it() {
        let overhead = weight(&run(1..=1, 0)[0]);
        let bus = HeadBus::new(Feed::Local);
        let head = bus.head("e", 0);
        advance_over(&head, run(1..=2, MAX_HELD_RUN_BYTES / 2 - overhead).into());
        assert!(head.borrow().events_after(0).is_some(), "at the bound");
        advance_over(&head, run(3..=4, MAX_HELD_RUN_BYTES / 2 - overhead + 1).into());
        let heavy = head.borrow().clone();
        assert_eq!((heavy.sequence, sequences(heavy.events_after(2))), (4, None));
    }

    #[test]
    fn an_announcement_for_a_head_nobody_holds_is_dropped_and_nothing_is_kept() {
        let bus = HeadBus::new(Feed::Listening);
        drop(bus.head("gone", 1));
        bus.advance("gone", 7);
        bus.advance("never-watched", 7);
        assert_eq!(bus.head("gone", 0).borrow().sequence, 0);
        assert_eq!(bus.heads.lock().len(), 1);
    }
}
