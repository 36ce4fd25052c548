//! Delta coalescing: adjacent `item.delta`s of one item, already waiting together, become
//! one event before they get a sequence number — fewer rows and frames for a chatty
//! agent, the same text in the same order. Never across another event (no reordering),
//! never past [`MAX_COALESCED_DELTA_BYTES`], never a delta that was cut to its bound (its
//! `truncated` flag belongs to its own text).

use crate::event::{ActivityPayload, Channel, ItemDelta, ItemKind};

/// UTF-8 bytes of text one coalesced `item.delta` may carry (the bounded window of
/// performance goal P1); a delta that would grow past it starts a new event.
pub const MAX_COALESCED_DELTA_BYTES: usize = 8 * 1024;

/// `events` with each run of adjacent, mergeable deltas of one item joined.
pub fn coalesce_deltas(events: Vec<ActivityPayload>) -> Vec<ActivityPayload> {
    let mut out: Vec<ActivityPayload> = Vec::with_capacity(events.len());
    push_coalesced(&mut out, events);
    out
}

/// Appends `events` to `out`, each delta joined to the one before it where they merge: what
/// [`coalesce_deltas`] makes of `out` and `events` together, built as they come.
pub fn push_coalesced(out: &mut Vec<ActivityPayload>, events: Vec<ActivityPayload>) {
    for event in events {
        if let (Some(ActivityPayload::ItemDelta(last)), ActivityPayload::ItemDelta(next)) = (out.last_mut(), &event)
            && mergeable(last, next)
        {
            last.text.push_str(&next.text);
            last.sanitized |= next.sanitized;
            continue;
        }
        out.push(event);
    }
}

/// Appends the delta `next` would make to `out`, joined to the delta before it where they
/// merge: what [`push_coalesced`] makes of it, without building an event (nor copying the
/// item's id) when it joins — a text chunk's usual case.
pub(crate) fn push_delta(out: &mut Vec<ActivityPayload>, next: NextDelta<'_>) {
    if let Some(ActivityPayload::ItemDelta(last)) = out.last_mut()
        && next.joins(last)
    {
        last.text.push_str(&next.text);
        last.sanitized |= next.sanitized;
        return;
    }
    out.push(ActivityPayload::ItemDelta(ItemDelta {
        item_id: next.item_id.to_owned(),
        kind: next.kind,
        channel: next.channel,
        text: next.text,
        truncated: next.truncated,
        sanitized: next.sanitized,
        child_id: next.child_id.map(str::to_owned),
    }))
}

/// An [`ItemDelta`]'s parts, its identity borrowed.
pub(crate) struct NextDelta<'a> {
    pub item_id: &'a str,
    pub kind: ItemKind,
    pub channel: Channel,
    pub child_id: Option<&'a str>,
    pub text: String,
    pub truncated: bool,
    pub sanitized: bool,
}

impl NextDelta<'_> {
    fn joins(&self, last: &ItemDelta) -> bool {
        Identity::of(last) == Identity::of_next(self) && mergeable_texts(last, self.truncated, self.text.len())
    }
}

/// Whose a delta is: its item, kind, channel and child, borrowed.
#[derive(PartialEq)]
struct Identity<'a> {
    item_id: &'a str,
    kind: ItemKind,
    channel: Channel,
    child_id: Option<&'a str>,
}

impl<'a> Identity<'a> {
    fn of(delta: &'a ItemDelta) -> Self {
        Self {
            item_id: &delta.item_id,
            kind: delta.kind,
            channel: delta.channel,
            child_id: delta.child_id.as_deref(),
        }
    }

    fn of_next(next: &NextDelta<'a>) -> Self {
        Self {
            item_id: next.item_id,
            kind: next.kind,
            channel: next.channel,
            child_id: next.child_id,
        }
    }
}

/// Whether `next` goes on where `last` left off: the same item, kind, channel and child.
pub(crate) fn continues(last: &ItemDelta, next: &ItemDelta) -> bool {
    Identity::of(last) == Identity::of(next)
}

fn mergeable(last: &ItemDelta, next: &ItemDelta) -> bool {
    continues(last, next) && mergeable_texts(last, next.truncated, next.text.len())
}

/// Neither text was cut to its bound and together they stay within the window.
fn mergeable_texts(last: &ItemDelta, next_truncated: bool, next_len: usize) -> bool {
    !last.truncated && !next_truncated && last.text.len() + next_len <= MAX_COALESCED_DELTA_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Channel, ItemKind};
    use crate::test_events::message_delta;

    fn delta(item: &str, text: &str) -> ActivityPayload {
        message_delta(item, text)
    }

    fn texts(events: &[ActivityPayload]) -> Vec<String> {
        events
            .iter()
            .map(|event| match event {
                ActivityPayload::ItemDelta(d) => format!("{}={}", d.item_id, d.text),
                other => other.into_parts().0.to_owned(),
            })
            .collect()
    }

    #[test]
    fn adjacent_deltas_of_one_item_join_and_others_stay_apart_in_order() {
        let boundary = ActivityPayload::ItemCompleted(crate::event::ItemBoundary {
            item_id: "a".into(),
            kind: ItemKind::AgentMessage,
            channel: Channel::Progress,
            child_id: None,
        });
        let events = vec![
            delta("a", "Hel"),
            delta("a", "lo"),
            delta("b", " other"),
            delta("a", "!"),
            boundary,
            delta("a", "late"),
        ];
        assert_eq!(
            texts(&coalesce_deltas(events)),
            ["a=Hello", "b= other", "a=!", "item.completed", "a=late"]
        );
    }

    #[test]
    fn events_pushed_as_they_come_coalesce_as_they_would_all_at_once() {
        let events = || vec![delta("a", "Hel"), delta("a", "lo"), delta("b", "x"), delta("b", "y")];
        for split in 0..=4 {
            let all = events();
            let (first, rest) = all.split_at(split);
            let mut pushed = Vec::new();
            push_coalesced(&mut pushed, first.to_vec());
            push_coalesced(&mut pushed, rest.to_vec());
            assert_eq!(pushed, coalesce_deltas(events()), "split at {split}");
        }
    }

    #[test]
    fn a_child_s_delta_never_joins_the_root_s() {
        let mut child = delta("a", " child");
        if let ActivityPayload::ItemDelta(d) = &mut child {
            d.child_id = Some("c1".into());
        }
        assert_eq!(coalesce_deltas(vec![delta("a", "root"), child]).len(), 2);
    }

    #[test]
    fn a_truncated_delta_keeps_its_own_event() {
        let mut cut = delta("a", "cut");
        if let ActivityPayload::ItemDelta(d) = &mut cut {
            d.truncated = true;
        }
        assert_eq!(coalesce_deltas(vec![delta("a", "x"), cut, delta("a", "y")]).len(), 3);
    }

    #[test]
    fn a_window_of_exactly_max_coalesced_delta_bytes_joins_and_one_byte_more_does_not() {
        let half = "x".repeat(MAX_COALESCED_DELTA_BYTES / 2);
        let joined = coalesce_deltas(vec![delta("a", &half), delta("a", &half)]);
        assert_eq!(joined.len(), 1);
        let over = coalesce_deltas(vec![delta("a", &half), delta("a", &format!("{half}x"))]);
        assert_eq!(over.len(), 2);
    }
}
