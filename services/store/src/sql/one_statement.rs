//! A batch that moves an interaction and claims or completes a call's key, with or without
//! events — an answer's `answered` (no events) and `delivered` commits — as one statement
//! on PostgreSQL: one round trip and its commit, where a transaction takes `BEGIN`, one per
//! write and `COMMIT` (four or five). Each write is a data-modifying CTE with the very text
//! of its own statement (`Statements`), renumbered; the events go in as arrays behind the
//! owner fence. The CTEs all run, so when one changed no row the statement calls
//! `cr_refuse_batch` (migration `0014`), which aborts it — nothing lands — naming the
//! first such write in the batch's order, as the transaction would have stopped there.
//! (No transaction is open at any moment here, so the `holding_a_batch_open` crash window
//! is a transaction's only.) A refusal is a server-side error: PostgreSQL logs it at its
//! default `log_min_error_statement`, where a transaction's write that changed nothing was
//! silent. It comes from races only (an interaction that moved on between the actor's look
//! and the commit, a call's key claimed by a concurrent retry, a fenced owner).

use super::append_group::{EVENT_ARRAYS, insert_events_from_arrays};
use super::fence::{Dialect, Statements};
use crate::batch::{Batch, Write};
use crate::records::{ClaimToken, IdempotencyKey};

/// The SQLSTATE `cr_refuse_batch` raises.
const BATCH_REFUSED: &str = "CRB01";

/// Parameters of `Statements::transition_interaction`, of `claim_idempotency` and of
/// `complete_idempotency`.
const TRANSITION_PARAMETERS: usize = 12;
const CLAIM_PARAMETERS: usize = 7;
const COMPLETE_PARAMETERS: usize = 5;
/// `$12` of the transition: the fence's owner, which the events' fence takes too.
const FENCE_OWNER: usize = 12;

/// The statements of the two shapes, each with and without events.
pub(super) struct OneStatements {
    answered: [String; 2],
    delivered: [String; 2],
}

/// What a batch of one of the shapes writes beside its interaction's transition, borrowed.
pub(super) enum Shape<'b> {
    /// The claim of the call's key.
    Claim {
        key: &'b IdempotencyKey,
        digest: &'b str,
        token: &'b ClaimToken,
    },
    /// The completion of the call's key.
    Complete {
        key: &'b IdempotencyKey,
        response: &'b serde_json::Value,
    },
}

impl OneStatements {
    pub(super) fn new(statements: &Statements, dialect: Dialect) -> Self {
        let compose = |key_write: &str, key_parameters: usize, with_events: bool| {
            let mut writes = format!(
                "WITH w0 AS ({transition} RETURNING 1), w1 AS ({key} RETURNING 1)",
                transition = statements.transition_interaction,
                key = renumbered(key_write, TRANSITION_PARAMETERS),
            );
            let mut refusals = String::from(
                "CASE WHEN (SELECT COUNT(*) FROM w0) <> 1 THEN cr_refuse_batch(0) \
                 WHEN (SELECT COUNT(*) FROM w1) <> 1 THEN cr_refuse_batch(1) ",
            );
            if with_events {
                let first_array = TRANSITION_PARAMETERS + key_parameters + 1;
                let execution = format!("${}", first_array + EVENT_ARRAYS);
                let generation = format!("${}", first_array + EVENT_ARRAYS + 1);
                writes.push_str(&format!(
                    ", ev AS ({insert} WHERE {owned} RETURNING 1)",
                    insert = insert_events_from_arrays(first_array),
                    owned = dialect.owned(&execution, &generation, &format!("${FENCE_OWNER}")),
                ));
                refusals.push_str("WHEN NOT EXISTS (SELECT 1 FROM ev) THEN cr_refuse_batch(2) ");
            }
            format!("{writes} SELECT {refusals}ELSE 0 END")
        };
        let both = |key_write: &str, key_parameters: usize| {
            [false, true].map(|with_events| compose(key_write, key_parameters, with_events))
        };
        Self {
            answered: both(&statements.claim_idempotency, CLAIM_PARAMETERS),
            delivered: both(&statements.complete_idempotency, COMPLETE_PARAMETERS),
        }
    }

    /// The statement of `shape` with events or without: the transition's parameters, the
    /// key write's, then (with events) the event arrays
    /// ([`super::events::bind_event_columns`]) and the events' execution and generation.
    pub(super) fn of(&self, shape: &Shape<'_>, with_events: bool) -> &str {
        let statements = match shape {
            Shape::Claim { .. } => &self.answered,
            Shape::Complete { .. } => &self.delivered,
        };
        &statements[usize::from(with_events)]
    }
}

impl<'b> Shape<'b> {
    /// `batch`'s shape, when it has one of them; `None` sends it through a transaction.
    pub(super) fn of(batch: &'b Batch) -> Option<Self> {
        match batch.writes.as_slice() {
            [
                Write::Interaction { .. },
                Write::ClaimIdempotency { key, digest, token },
            ] => Some(Shape::Claim { key, digest, token }),
            [Write::Interaction { .. }, Write::CompleteIdempotency { key, response }] => {
                Some(Shape::Complete { key, response })
            }
            _ => None,
        }
    }
}

/// The index `cr_refuse_batch` named, when `e` is its refusal.
pub(super) fn refused_write(e: &sqlx::Error) -> Option<usize> {
    let database = e.as_database_error()?;
    if database.code().as_deref() != Some(BATCH_REFUSED) {
        return None;
    }
    let pg = database.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()?;
    pg.detail()?.parse().ok()
}

/// `sql` with every parameter `$n` numbered `$(n + by)`.
fn renumbered(sql: &str, by: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            let n: usize = rest[..digits].parse().expect("ASCII digits");
            out.push_str(&(n + by).to_string());
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// The highest parameter number `sql` uses.
#[cfg(test)]
fn parameters_in(sql: &str) -> usize {
    sql.split('$')
        .skip(1)
        .filter_map(|after| {
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            after[..digits].parse().ok()
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{EventRecord, InteractionRecord};
    use cursor_runner_activity::InteractionKind;
    use cursor_runner_domain::state::InteractionState;

    fn answered() -> Write {
        Write::Interaction {
            expected_state: InteractionState::Pending,
            record: InteractionRecord {
                id: "question-1".into(),
                execution_id: "exec-1".into(),
                tenant_id: "t".into(),
                generation: Default::default(),
                turn_id: "turn-1".into(),
                native_request_id: "0".into(),
                kind: InteractionKind::Question,
                state: InteractionState::Answered,
                etag: "e".into(),
                request: serde_json::json!({}),
                outcome: None,
                answer_request_id: None,
                answer_fingerprint: None,
                reason: None,
                delivery: None,
                replay_allowed: false,
                created_at_ms: 0,
                updated_at_ms: 1,
            },
        }
    }

    fn key() -> IdempotencyKey {
        IdempotencyKey {
            tenant_id: "t".into(),
            operation: "AnswerInteraction".into(),
            request_id: "r-1".into(),
        }
    }

    // `answered` carries no events (the actor's interaction machine commits none with it);
    // `delivered` carries its two.
    #[test]
    fn an_answers_batches_have_a_shape_with_or_without_events() {
        let claim = Write::ClaimIdempotency {
            key: key(),
            digest: "d".into(),
            token: ClaimToken::new(),
        };
        let complete = Write::CompleteIdempotency {
            key: key(),
            response: serde_json::json!({}),
        };
        for events in [vec![], vec![EventRecord::default()]] {
            let answered_batch = Batch {
                writes: vec![answered(), claim.clone()],
                events: events.clone(),
            };
            assert!(matches!(Shape::of(&answered_batch), Some(Shape::Claim { .. })));
            let delivered_batch = Batch {
                writes: vec![answered(), complete.clone()],
                events,
            };
            assert!(matches!(Shape::of(&delivered_batch), Some(Shape::Complete { .. })));
        }
    }

    #[test]
    fn other_batches_have_no_shape() {
        let alone = Batch {
            writes: vec![answered()],
            events: vec![],
        };
        assert!(Shape::of(&alone).is_none());
    }

    #[test]
    fn the_statements_without_events_bind_no_event_parameters() {
        let statements = OneStatements::new(&Statements::new(Dialect::POSTGRES), Dialect::POSTGRES);
        let claim = Shape::Claim {
            key: &key(),
            digest: "d",
            token: &ClaimToken::new(),
        };
        assert_eq!(
            parameters_in(statements.of(&claim, false)),
            TRANSITION_PARAMETERS + CLAIM_PARAMETERS
        );
        assert_eq!(
            parameters_in(statements.of(&claim, true)),
            TRANSITION_PARAMETERS + CLAIM_PARAMETERS + EVENT_ARRAYS + 2
        );
        assert!(!statements.of(&claim, false).contains("cr_refuse_batch(2)"));
    }

    #[test]
    fn parameters_are_renumbered_whatever_their_width_and_nothing_else_changes() {
        assert_eq!(
            renumbered("VALUES ($1, $2, $10) WHERE a = $1 AND b = 'x$'", 12),
            "VALUES ($13, $14, $22) WHERE a = $13 AND b = 'x$'"
        );
        assert_eq!(renumbered("no parameters", 3), "no parameters");
    }

    #[test]
    fn the_key_writes_take_the_parameters_the_statement_numbers_after_them() {
        let statements = Statements::new(Dialect::POSTGRES);
        assert_eq!(parameters_in(&statements.transition_interaction), TRANSITION_PARAMETERS);
        assert_eq!(parameters_in(&statements.claim_idempotency), CLAIM_PARAMETERS);
        assert_eq!(parameters_in(&statements.complete_idempotency), COMPLETE_PARAMETERS);
        assert!(
            statements
                .transition_interaction
                .contains(&format!("r.incarnation = ${FENCE_OWNER}")),
            "the transition's fence takes its owner as ${FENCE_OWNER}"
        );
    }
}
