//! Group commit of event appends on PostgreSQL: appends of many executions that wait
//! while others commit go in together, in one statement (one round trip, one WAL flush)
//! instead of one each. Each execution's rows stay behind its own owner fence, evaluated
//! per row, so a fenced execution lands nothing while the others of its group land; the
//! statement reports how many rows of each execution went in. The columns travel as
//! arrays (`UNNEST`), so the statement's text is the same for every group (prepared once
//! per connection) and no group meets the bind-parameter limit.
//!
//! A group that fails as a whole (a duplicate row of one member, a lost connection) tells
//! each member so, and each append is then made alone with its own store's patience: after
//! a failure that may have committed, a row already there is its own. This module keeps
//! what waits and the slots; `sql::events` commits the groups.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::fence::Dialect;
use crate::records::EventRecord;

/// Most rows one group statement carries; an append larger than this goes alone in its
/// own group. Bounds one statement's arrays (and the time one flush waits for them).
pub const MAX_GROUP_EVENTS: usize = 4096;

/// Group statements committing at once: while they are all in flight, appends wait and
/// go in the next group together. Half the pool, so reads and other writes always find
/// connections.
pub const GROUPS_IN_FLIGHT: usize = 4;

/// Arrays `events::bind_event_columns!` binds.
pub(super) const EVENT_ARRAYS: usize = 11;

/// `INSERT INTO events … SELECT a.* FROM UNNEST(…) AS a (…)` over the arrays
/// `events::bind_event_columns!` binds as parameters `$first` onwards; a condition on `a` may
/// follow.
pub(super) fn insert_events_from_arrays(first: usize) -> String {
    const COLUMNS: &str = "execution_id, sequence, event_id, generation, turn_id, item_id, event_type, priority, schema_version, emitted_at_ms, payload";
    const TYPES: [&str; EVENT_ARRAYS] = [
        "text", "int8", "text", "int8", "text", "text", "text", "int8", "int8", "int8", "text",
    ];
    let arrays: Vec<String> = TYPES
        .iter()
        .enumerate()
        .map(|(i, ty)| format!("${}::{ty}[]", first + i))
        .collect();
    format!(
        "INSERT INTO events ({COLUMNS}) SELECT a.* FROM UNNEST({}) AS a ({COLUMNS})",
        arrays.join(", ")
    )
}

/// How a member's append ended in its group.
#[derive(Debug)]
pub(super) enum Grouped {
    Landed,
    /// The execution is not at the append's generation under this owner: nothing went in.
    Fenced,
    /// The whole group failed; `maybe_committed` when it may have landed anyway (a lost
    /// connection), so the member's retry counts its own rows found there.
    Failed {
        maybe_committed: bool,
    },
}

/// One execution's append waiting for a group.
pub(super) struct Waiting {
    pub(super) events: Arc<[EventRecord]>,
    pub(super) told: oneshot::Sender<Grouped>,
}

/// The appends waiting for a group, and the slots of the groups committing.
pub(super) struct AppendGroups {
    /// The one statement of every group (`$1` the fence's owner; then the rows' columns,
    /// one array each; then each member's execution and generation).
    statement: String,
    waiting: Mutex<Vec<Waiting>>,
    slots: Arc<Semaphore>,
}

impl AppendGroups {
    pub(super) fn new(dialect: Dialect) -> Self {
        let owned = dialect.owned_rows("SELECT * FROM UNNEST($13::text[], $14::int8[])", "$1");
        Self {
            statement: format!(
                "WITH owned AS ({owned}), inserted AS ({insert} \
                 JOIN owned ON owned.id = a.execution_id AND owned.generation = a.generation \
                 RETURNING execution_id) \
                 SELECT execution_id, COUNT(*) FROM inserted GROUP BY execution_id",
                insert = insert_events_from_arrays(2)
            ),
            waiting: Mutex::default(),
            slots: Arc::new(Semaphore::new(GROUPS_IN_FLIGHT)),
        }
    }

    /// The one statement every group of more than one append takes.
    pub(super) fn statement(&self) -> &str {
        &self.statement
    }

    /// `events` wait for a group; the receiver is told how their append ended.
    pub(super) fn wait(&self, events: Arc<[EventRecord]>) -> oneshot::Receiver<Grouped> {
        let (told, outcome) = oneshot::channel();
        self.waiting.lock().push(Waiting { events, told });
        outcome
    }

    /// The next group of what waits, with its slot, if one is free.
    pub(super) fn next(&self) -> Option<(Vec<Waiting>, OwnedSemaphorePermit)> {
        let mut waiting = self.waiting.lock();
        if waiting.is_empty() {
            return None;
        }
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        Some((Self::take_group(&mut waiting), slot))
    }

    /// The next group: the longest run of waiting appends, in the order they came, that
    /// fits [`MAX_GROUP_EVENTS`] (the first always goes) with one append per execution
    /// (an execution's next append waits for the group after, so its rows are counted
    /// apart). The rest keep their places; one whose caller is gone is dropped.
    fn take_group(waiting: &mut Vec<Waiting>) -> Vec<Waiting> {
        let mut group: Vec<Waiting> = Vec::new();
        let mut executions = HashSet::new();
        let mut rows = 0;
        let mut left = Vec::new();
        for append in waiting.drain(..) {
            // Its caller went away while it waited: it must not land behind its back.
            if append.told.is_closed() {
                continue;
            }
            let execution = append.events[0].execution_id.clone();
            let fits = group.is_empty() || rows + append.events.len() <= MAX_GROUP_EVENTS;
            if fits && !executions.contains(&execution) {
                rows += append.events.len();
                executions.insert(execution);
                group.push(append);
            } else {
                left.push(append);
            }
        }
        *waiting = left;
        group
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An append of `rows` events of `execution`, and the receiver its caller waits on.
    fn waiting(execution: &str, rows: usize) -> (Waiting, oneshot::Receiver<Grouped>) {
        let events: Vec<EventRecord> = (1..=rows as i64)
            .map(|sequence| EventRecord {
                execution_id: execution.into(),
                sequence,
                ..Default::default()
            })
            .collect();
        let (told, outcome) = oneshot::channel();
        (
            Waiting {
                events: events.into(),
                told,
            },
            outcome,
        )
    }

    fn executions(group: &[Waiting]) -> Vec<&str> {
        group.iter().map(|w| w.events[0].execution_id.as_str()).collect()
    }

    #[test]
    fn a_group_takes_one_append_per_execution_in_the_order_they_came() {
        let (a1, _r1) = waiting("a", 1);
        let (b, _r2) = waiting("b", 1);
        let (a2, _r3) = waiting("a", 1);
        let (c, _r4) = waiting("c", 1);
        let mut queue = vec![a1, b, a2, c];
        let group = AppendGroups::take_group(&mut queue);
        assert_eq!(executions(&group), ["a", "b", "c"]);
        assert_eq!(executions(&queue), ["a"], "a's second append waits for the next group");
    }

    #[test]
    fn an_append_larger_than_a_group_goes_alone() {
        let (big, _r1) = waiting("a", MAX_GROUP_EVENTS + 1);
        let (small, _r2) = waiting("b", 1);
        let mut queue = vec![big, small];
        assert_eq!(executions(&AppendGroups::take_group(&mut queue)), ["a"]);
        assert_eq!(executions(&AppendGroups::take_group(&mut queue)), ["b"]);
    }

    #[test]
    fn an_append_whose_caller_went_away_is_dropped_unwritten() {
        let (gone, receiver) = waiting("a", 1);
        drop(receiver);
        let (kept, _r) = waiting("b", 1);
        let mut queue = vec![gone, kept];
        assert_eq!(executions(&AppendGroups::take_group(&mut queue)), ["b"]);
        assert!(queue.is_empty());
    }
}
