//! An idempotent call's key as its actor sees it: the actor puts the key's claim and its
//! completion into its own commits, so an answer is one transaction (record + claim), the
//! flushed pipe write, then `delivered` (+ completion), and a plain `StartTurn` is the one
//! commit that starts the turn. The call's wrapper (`engine/idempotency.rs`) reads what
//! landed afterwards and does only what is left.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use cursor_runner_store::{ClaimToken, IdempotencyKey, Write};
use serde_json::{Value, json};

/// How far a call's key has come in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyProgress {
    /// Nothing written yet: the call's first commit is to claim it.
    Unclaimed,
    /// In flight, this incarnation's.
    Claimed,
    /// Completed with the call's outcome.
    Completed,
}

/// A call's idempotency key, shared between the call and its actor.
#[derive(Debug, Clone)]
pub(crate) struct CallKey {
    key: IdempotencyKey,
    digest: String,
    /// The call's hold on the key, stored with its claim.
    token: ClaimToken,
    progress: Arc<AtomicU8>,
}

impl CallKey {
    pub(crate) fn new(key: IdempotencyKey, digest: String, token: ClaimToken, progress: KeyProgress) -> Self {
        Self {
            key,
            digest,
            token,
            progress: Arc::new(AtomicU8::new(progress as u8)),
        }
    }

    pub(crate) fn progress(&self) -> KeyProgress {
        match self.progress.load(Ordering::Acquire) {
            0 => KeyProgress::Unclaimed,
            1 => KeyProgress::Claimed,
            _ => KeyProgress::Completed,
        }
    }

    /// The key's claim, for the call's first commit: none if it was claimed before.
    pub(crate) fn claim_write(&self) -> Option<Write> {
        (self.progress() == KeyProgress::Unclaimed).then(|| Write::ClaimIdempotency {
            key: self.key.clone(),
            digest: self.digest.clone(),
            token: self.token.clone(),
        })
    }

    /// The key's completion with `stored`, for the commit that makes the call's outcome true.
    pub(crate) fn completion_write(&self, stored: Value) -> Write {
        Write::CompleteIdempotency {
            key: self.key.clone(),
            response: stored,
        }
    }

    /// A commit holding `writes` landed: notes what it did to this key.
    pub(crate) fn landed(&self, writes: &[Write]) {
        for write in writes {
            let progress = match write {
                Write::ClaimIdempotency { key, .. } if *key == self.key => KeyProgress::Claimed,
                Write::CompleteIdempotency { key, .. } if *key == self.key => KeyProgress::Completed,
                _ => continue,
            };
            self.progress.fetch_max(progress as u8, Ordering::AcqRel);
        }
    }
}

/// What a call that results in a turn stores: the turn's id.
pub(crate) fn stored_turn(id: &str) -> Value {
    json!({"turnId": id})
}

/// What a call that results in an interaction stores: the interaction's id.
pub(crate) fn stored_interaction(id: &str) -> Value {
    json!({"interactionId": id})
}

/// What a call that results in an execution stores: the execution's id.
pub(crate) fn stored_execution(id: &str) -> Value {
    json!({"executionId": id})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> IdempotencyKey {
        IdempotencyKey {
            tenant_id: "t".into(),
            operation: "AnswerInteraction".into(),
            request_id: "r-1".into(),
        }
    }

    #[test]
    fn an_unclaimed_key_is_claimed_by_the_first_commit_and_completed_by_the_last() {
        let call = CallKey::new(key(), "d".into(), ClaimToken::new(), KeyProgress::Unclaimed);
        let first = call.claim_write().into_iter().collect::<Vec<_>>();
        assert!(matches!(first.as_slice(), [Write::ClaimIdempotency { digest, .. }] if digest == "d"));
        call.landed(&first);
        assert_eq!(call.progress(), KeyProgress::Claimed);
        assert_eq!(call.claim_write(), None, "claimed once");
        let last = [call.completion_write(stored_interaction("i-1"))];
        call.landed(&last);
        assert_eq!(call.progress(), KeyProgress::Completed);
    }

    #[test]
    fn a_key_claimed_before_the_call_is_only_completed() {
        let call = CallKey::new(key(), "d".into(), ClaimToken::new(), KeyProgress::Claimed);
        assert_eq!(call.claim_write(), None);
        call.landed(&[call.completion_write(stored_turn("t-1"))]);
        assert_eq!(call.progress(), KeyProgress::Completed);
    }

    #[test]
    fn a_commit_naming_another_key_changes_nothing() {
        let call = CallKey::new(key(), "d".into(), ClaimToken::new(), KeyProgress::Unclaimed);
        let other = CallKey::new(
            IdempotencyKey {
                request_id: "r-2".into(),
                ..key()
            },
            "d".into(),
            ClaimToken::new(),
            KeyProgress::Unclaimed,
        );
        call.landed(&[other.claim_write().unwrap(), other.completion_write(Value::Null)]);
        assert_eq!(call.progress(), KeyProgress::Unclaimed);
        // A clone is the same key: what the actor notes, the call reads.
        let held = call.clone();
        held.landed(&[call.claim_write().unwrap()]);
        assert_eq!(call.progress(), KeyProgress::Claimed);
    }
}
