//! The runtime side of [`cursor_runner_domain::settlement`]: what is left live when an
//! execution's agent is gone becomes one batch of row writes and their events, which the
//! caller commits with [`EventWriter::commit`](crate::events::EventWriter::commit). The
//! actor and start-up recovery both settle through here, so a crash can leave nothing
//! half-settled and each rule has one home.

use cursor_runner_activity::{ActivityPayload, Redactor};
use cursor_runner_domain::error::EngineError;
use cursor_runner_domain::settlement::Loss;
use cursor_runner_domain::state::ExecutionState;
use cursor_runner_store::{ExecutionRecord, InteractionRecord, TurnId, TurnRecord, Write};

use crate::turn_row;
use crate::{execution_row, interaction_row};

/// The turn that was running, with what its normalizer emitted as it closed.
pub(crate) struct LiveTurn {
    pub(crate) record: TurnRecord,
    pub(crate) closing: Vec<ActivityPayload>,
}

/// One settlement, ready to commit.
pub(crate) struct Settlement {
    pub(crate) writes: Vec<Write>,
    /// In the order they are exposed: each interaction's end, then the turn's.
    pub(crate) events: Vec<(Option<TurnId>, ActivityPayload)>,
    /// The execution's row as the batch writes it.
    pub(crate) execution: ExecutionRecord,
    /// The turn's row as the batch writes it.
    pub(crate) turn: Option<TurnRecord>,
}

/// Settles `execution` (its row in `stored`) and what is live on it as `loss` says:
/// every live interaction, then the running turn, then the execution row — one batch.
/// Messages pass `redactor`.
pub(crate) fn settle(
    loss: &Loss,
    execution: &ExecutionRecord,
    stored: ExecutionState,
    interactions: Vec<InteractionRecord>,
    turn: Option<LiveTurn>,
    redactor: &Redactor,
    now_ms: i64,
) -> Result<Settlement, EngineError> {
    let mut writes = Vec::new();
    let mut events = Vec::new();
    for mut interaction in interactions {
        let from = interaction.state;
        let Some(end) = loss.interaction_end(from) else {
            continue;
        };
        interaction.state = end.state;
        interaction.reason = Some(end.reason);
        interaction.delivery = Some(end.delivery);
        interaction.replay_allowed = false;
        interaction.updated_at_ms = now_ms;
        writes.push(interaction_row::write(from, &interaction)?);
        events.push((
            Some(interaction.turn_id.clone()),
            interaction_row::ended(&interaction, true),
        ));
    }
    let mut row = execution.clone();
    let end = loss.execution_end();
    row.state = end.state;
    row.failure_reason = Some(end.reason);
    if let Some(message) = end.message {
        row.failure_message = Some(redactor.redact_text(&message).0);
    }
    row.active_turn_id = None;
    row.updated_at_ms = now_ms;
    let mut settled_turn = None;
    if let Some(LiveTurn { record, closing }) = turn {
        let end = loss.turn_end().redacted(redactor);
        let (record, terminal) = turn_row::settled(record, end, &closing, now_ms);
        if loss.charges_turn_time() {
            row.active_ms += turn_row::ran_ms(&record);
        }
        let turn_id = Some(record.id.clone());
        events.extend(closing.into_iter().chain([terminal]).map(|p| (turn_id.clone(), p)));
        writes.push(Write::SettleTurn(record.clone()));
        settled_turn = Some(record);
    }
    writes.push(execution_row::write(stored, &row)?.0);
    Ok(Settlement {
        writes,
        events,
        execution: row,
        turn: settled_turn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventWriter;
    use cursor_runner_domain::state::{Delivery, InteractionState, TurnState};
    use cursor_runner_store::{InteractionReason, MemoryStore, Store};
    use std::sync::Arc;

    const NOW: i64 = 1_700_000_000_000;

    /// A `ready` execution with a running turn, a pending question and an answered one.
    async fn live(store: &dyn Store) -> (ExecutionRecord, TurnRecord, Vec<InteractionRecord>) {
        let mut execution = ExecutionRecord {
            id: "exec-1".into(),
            tenant_id: "t".into(),
            state: ExecutionState::Ready,
            generation: cursor_runner_store::Generation::FIRST,
            ..Default::default()
        };
        store.insert_execution(&execution).await.unwrap();
        let turn = TurnRecord {
            id: "turn-1".into(),
            execution_id: execution.id.clone(),
            tenant_id: "t".into(),
            generation: cursor_runner_store::Generation::FIRST,
            turn_number: 1,
            state: TurnState::Running,
            started_at_ms: NOW - 5_000,
            ..Default::default()
        };
        store.insert_turn(&turn).await.unwrap();
        execution.active_turn_id = Some(turn.id.clone());
        assert!(store.update_execution(ExecutionState::Ready, &execution).await.unwrap());
        let mut interactions = Vec::new();
        for (id, state) in [("i-1", InteractionState::Pending), ("i-2", InteractionState::Answered)] {
            let interaction = InteractionRecord {
                id: id.into(),
                execution_id: execution.id.clone(),
                turn_id: turn.id.clone(),
                native_request_id: id.into(),
                created_at_ms: NOW,
                updated_at_ms: NOW,
                ..crate::interaction_row::pending_question()
            };
            store.insert_interaction(&interaction).await.unwrap();
            let now = InteractionRecord { state, ..interaction };
            if state != InteractionState::Pending {
                assert!(
                    store
                        .transition_interaction(InteractionState::Pending, &now)
                        .await
                        .unwrap()
                );
            }
            interactions.push(now);
        }
        (execution, turn, interactions)
    }

    async fn settle_restarted(store: &Arc<dyn Store>) -> bool {
        let execution = store.get_execution("t", &"exec-1".into()).await.unwrap().unwrap();
        let turn = store.get_turn("t", &"turn-1".into()).await.unwrap().unwrap();
        let query = cursor_runner_store::InteractionQuery {
            tenant_id: "t".into(),
            limit: 9,
            ..Default::default()
        };
        let interactions = store.list_interactions(&query).await.unwrap();
        let live_turn = (turn.state == TurnState::Running).then_some(LiveTurn {
            record: turn,
            closing: Vec::new(),
        });
        let settled = settle(
            &Loss::ServiceRestarted,
            &execution,
            execution.state,
            interactions,
            live_turn,
            &Redactor::default(),
            NOW,
        )
        .unwrap();
        let head = store.head_sequence(&"exec-1".into()).await.unwrap();
        let mut events = EventWriter::new(
            store.clone(),
            "exec-1".into(),
            cursor_runner_store::Generation::FIRST,
            head,
        );
        events.commit(settled.writes, settled.events).await.unwrap()
    }

    #[tokio::test]
    async fn a_settlement_ends_every_live_row_and_says_so_in_order() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        live(&*store).await;
        assert!(settle_restarted(&store).await);
        let execution = store.get_execution("t", &"exec-1".into()).await.unwrap().unwrap();
        assert_eq!((execution.state.as_str(), execution.active_turn_id), ("lost", None));
        assert_eq!(
            execution.active_ms, 0,
            "a turn that died with the service is not charged"
        );
        let turn = store.get_turn("t", &"turn-1".into()).await.unwrap().unwrap();
        assert_eq!(
            (turn.state.as_str(), turn.failure_reason.as_deref()),
            ("failed", Some("provider_lost"))
        );
        let mut ended = Vec::new();
        for id in ["i-1", "i-2"] {
            let i = store.get_interaction("t", &id.into()).await.unwrap().unwrap();
            ended.push((i.state, i.delivery.unwrap(), i.reason.unwrap()));
        }
        assert_eq!(
            ended,
            [
                (
                    InteractionState::Expired,
                    Delivery::NotSent,
                    InteractionReason::ServiceRestarted
                ),
                (
                    InteractionState::Expired,
                    Delivery::Unknown,
                    InteractionReason::ServiceRestarted
                ),
            ]
        );
        let types: Vec<_> = store
            .read_events(&"exec-1".into(), 0, 9)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event_type)
            .collect();
        assert_eq!(
            types,
            ["runtime_request.expired", "runtime_request.expired", "turn.failed"]
        );
    }

    #[tokio::test]
    async fn a_second_settlement_of_the_same_rows_writes_nothing() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let (execution, _, _) = live(&*store).await;
        let stale = settle(
            &Loss::ServiceRestarted,
            &execution,
            ExecutionState::Ready,
            Vec::new(),
            None,
            &Redactor::default(),
            NOW,
        )
        .unwrap();
        assert!(settle_restarted(&store).await);
        // A second settler that read the rows before the first committed.
        let mut events = EventWriter::new(
            store.clone(),
            "exec-1".into(),
            cursor_runner_store::Generation::FIRST,
            0,
        );
        assert!(!events.commit(stale.writes, stale.events).await.unwrap());
        assert_eq!(
            store.head_sequence(&"exec-1".into()).await.unwrap(),
            3,
            "each ending is said once"
        );
    }
}
