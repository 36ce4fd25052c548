//! Secrets said across deltas. The outbox redacts each event whole, so a secret the agent
//! says in two text chunks that land in separate appends would reach the stream in halves,
//! each too short to match. What ends a text delta and could be the start of a secret is
//! held back until the next event shows whether it is: joined to the front of the next
//! delta of the same item (and redacted with it), or shown as a delta of its own just
//! before any other event, so no text is lost and the order of events is kept. A delta
//! cut at its bound loses what ends it and could start a secret, as it lost the rest. A
//! secret split around another item's event between its halves is not caught.

use crate::coalesce::continues;
use crate::{ActivityPayload, ItemDelta, Redactor};

/// The text held back, with whatever the caller keeps beside each event (`T`: its turn).
pub struct HeldText<T> {
    held: Option<(T, ItemDelta)>,
}

impl<T> Default for HeldText<T> {
    fn default() -> Self {
        Self { held: None }
    }
}

impl<T: Clone + PartialEq> HeldText<T> {
    /// `events` as they may be shown now: text held back before joined to them, and what
    /// now ends a delta and could start one of `redactor`'s secrets held back in turn.
    pub fn pass(&mut self, redactor: &Redactor, events: Vec<(T, ActivityPayload)>) -> Vec<(T, ActivityPayload)> {
        if redactor.is_empty() && self.held.is_none() {
            return events;
        }
        let mut shown = Vec::with_capacity(events.len() + 1);
        for (with, event) in events {
            let ActivityPayload::ItemDelta(mut delta) = event else {
                shown.extend(self.release());
                shown.push((with, event));
                continue;
            };
            match self.held.take() {
                Some((held_with, held)) if held_with == with && continues(&held, &delta) => {
                    delta.text.insert_str(0, &held.text);
                    delta.sanitized |= held.sanitized;
                }
                Some(held) => shown.push((held.0, ActivityPayload::ItemDelta(held.1))),
                None => {}
            }
            let begun = redactor.secret_begun_at_end(&delta.text);
            if begun > 0 && delta.truncated {
                // The text after the cut is gone, and so is what could have started a
                // secret just before it: no more text follows to show whether it did.
                delta.text.truncate(delta.text.len() - begun);
            } else if begun > 0 {
                let text = delta.text.split_off(delta.text.len() - begun);
                let rest = ItemDelta {
                    item_id: delta.item_id.clone(),
                    kind: delta.kind,
                    channel: delta.channel,
                    text,
                    truncated: false,
                    sanitized: delta.sanitized,
                    child_id: delta.child_id.clone(),
                };
                self.held = Some((with.clone(), rest));
                if delta.text.is_empty() {
                    continue;
                }
            }
            shown.push((with, ActivityPayload::ItemDelta(delta)));
        }
        shown
    }

    /// The text held back, as a delta of its own; nothing is held after.
    pub fn release(&mut self) -> Option<(T, ActivityPayload)> {
        self.held
            .take()
            .map(|(with, held)| (with, ActivityPayload::ItemDelta(held)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_events::message_delta;
    use crate::{NoticeScope, ProviderNotice};

    const SECRET: &str = "sk-secret-value";

    fn redactor() -> Redactor {
        Redactor::new([("KEY".to_owned(), SECRET.to_owned())])
    }

    fn delta(item_id: &str, text: &str) -> (u8, ActivityPayload) {
        (1, message_delta(item_id, text))
    }

    fn notice() -> (u8, ActivityPayload) {
        (
            1,
            ActivityPayload::ProviderNotice(ProviderNotice::info("test", NoticeScope::Session, "n")),
        )
    }

    /// `(item, text)` of each delta, `("notice", "")` for anything else.
    fn shown(events: &[(u8, ActivityPayload)]) -> Vec<(String, String)> {
        events
            .iter()
            .map(|(_, event)| match event {
                ActivityPayload::ItemDelta(d) => (d.item_id.clone(), d.text.clone()),
                _ => ("notice".into(), String::new()),
            })
            .collect()
    }

    fn pair(item: &str, text: &str) -> (String, String) {
        (item.into(), text.into())
    }

    #[test]
    fn the_start_of_a_secret_ending_a_delta_waits_for_the_next_delta_of_its_item() {
        let (redactor, mut held) = (redactor(), HeldText::default());
        assert_eq!(
            shown(&held.pass(&redactor, vec![delta("m", "key: sk-sec")])),
            [pair("m", "key: ")]
        );
        let joined = held.pass(&redactor, vec![delta("m", "ret-value!")]);
        assert_eq!(
            shown(&joined),
            [pair("m", "sk-secret-value!")],
            "whole again, for the outbox to redact"
        );
        assert!(held.release().is_none());
    }

    #[test]
    fn a_delta_that_is_all_the_start_of_a_secret_shows_nothing_yet() {
        let (redactor, mut held) = (redactor(), HeldText::default());
        assert!(held.pass(&redactor, vec![delta("m", "sk-")]).is_empty());
        assert_eq!(shown(&held.pass(&redactor, vec![delta("m", "s")])), []);
        assert_eq!(
            shown(&held.pass(&redactor, vec![delta("m", "x")])),
            [pair("m", "sk-sx")]
        );
    }

    #[test]
    fn held_text_is_shown_on_its_own_before_any_other_event() {
        let (redactor, mut held) = (redactor(), HeldText::default());
        held.pass(&redactor, vec![delta("m", "bye sk")]);
        assert_eq!(
            shown(&held.pass(&redactor, vec![notice()])),
            [pair("m", "sk"), pair("notice", "")]
        );
    }

    #[test]
    fn held_text_is_shown_before_another_items_delta_not_joined_to_it() {
        let (redactor, mut held) = (redactor(), HeldText::default());
        held.pass(&redactor, vec![delta("a", "sk-s")]);
        assert_eq!(
            shown(&held.pass(&redactor, vec![delta("b", "ecret-value")])),
            [pair("a", "sk-s"), pair("b", "ecret-value")]
        );
    }

    #[test]
    fn held_text_of_another_turn_is_not_joined() {
        let (redactor, mut held) = (redactor(), HeldText::default());
        held.pass(&redactor, vec![delta("m", "sk-s")]);
        let (_, next) = delta("m", "ecret-value");
        assert_eq!(
            shown(&held.pass(&redactor, vec![(2, next)])),
            [pair("m", "sk-s"), pair("m", "ecret-value")]
        );
    }

    #[test]
    fn text_that_cannot_start_a_secret_passes_and_a_cut_delta_loses_the_start_of_one() {
        let (redactor, mut held) = (redactor(), HeldText::default());
        assert_eq!(
            shown(&held.pass(&redactor, vec![delta("m", "plain text")])),
            [pair("m", "plain text")]
        );
        let (with, mut cut) = delta("m", "cut at sk-sec");
        if let ActivityPayload::ItemDelta(d) = &mut cut {
            d.truncated = true;
        }
        assert_eq!(
            shown(&held.pass(&redactor, vec![(with, cut)])),
            [pair("m", "cut at ")],
            "no more text follows a cut: the start of a secret goes with the rest"
        );
        assert!(held.release().is_none());
    }

    #[test]
    fn release_gives_the_held_text_once() {
        let (redactor, mut held) = (redactor(), HeldText::default());
        held.pass(&redactor, vec![delta("m", "sk-secret-valu")]);
        assert_eq!(shown(&[held.release().expect("held")]), [pair("m", "sk-secret-valu")]);
        assert!(held.release().is_none());
    }

    #[test]
    fn without_secrets_every_event_passes_untouched() {
        let mut held = HeldText::default();
        let events = vec![delta("m", "sk-"), notice()];
        assert_eq!(
            shown(&held.pass(&Redactor::default(), events)),
            [pair("m", "sk-"), pair("notice", "")]
        );
    }
}
