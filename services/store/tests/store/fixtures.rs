//! Rows as a test writes them: valid and minimal, one field away from what a behaviour
//! needs.

pub use cursor_runner_activity::{InteractionKind, UsageReported};
pub use cursor_runner_domain::lease::LeaseInfo;
pub use cursor_runner_domain::session_config::SessionConfig;
pub use cursor_runner_domain::state::{Delivery, ExecutionState, InteractionState, TurnState};
use cursor_runner_store::*;

pub const TENANT: &str = "tenant-a";
pub const OTHER_TENANT: &str = "tenant-b";
/// A time well in the past, so "older than now" holds for what tests write.
pub const T0: i64 = 1_700_000_000_000;

/// An execution `id` of [`TENANT`], `ready` at generation 1.
pub fn execution(id: &str) -> ExecutionRecord {
    ExecutionRecord {
        id: id.into(),
        tenant_id: TENANT.to_owned(),
        state: ExecutionState::Ready,
        generation: Generation::FIRST,
        workspace: "/work/space".to_owned(),
        created_at_ms: T0,
        updated_at_ms: T0,
        approval_policy: Default::default(),
        interaction_wait_limit_ms: 1_800_000,
        ..Default::default()
    }
}

/// A checkpoint of session `session_id` taken by `execution` after `turn_count` turns.
pub fn checkpoint(execution: &ExecutionRecord, session_id: &str, turn_count: i64) -> SessionCheckpoint {
    let body = format!("{}:{turn_count}", execution.id).into_bytes();
    SessionCheckpoint {
        tenant_id: execution.tenant_id.clone(),
        session_id: session_id.to_owned(),
        execution_id: execution.id.clone(),
        generation: execution.generation,
        turn_count,
        format: "tar+gzip/1".to_owned(),
        raw_bytes: 10 * body.len() as i64,
        stored_bytes: body.len() as i64,
        sha256: format!("{:064x}", turn_count),
        body,
        taken_at_ms: T0 + turn_count,
    }
}

/// Turn `number` (`id`) of `execution`, `running`.
pub fn turn(execution: &ExecutionRecord, id: &str, number: i64) -> TurnRecord {
    TurnRecord {
        id: id.into(),
        execution_id: execution.id.clone(),
        tenant_id: execution.tenant_id.clone(),
        generation: execution.generation,
        turn_number: number,
        state: TurnState::Running,
        started_at_ms: T0,
        credential_name: Some("CURSOR_API_KEY".to_owned()),
        session_config: Some(SessionConfig {
            model: Some("m".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A `pending` question of `turn`, answering the agent's request `native`.
pub fn interaction(turn: &TurnRecord, id: &str, native: &str) -> InteractionRecord {
    InteractionRecord {
        id: id.into(),
        execution_id: turn.execution_id.clone(),
        tenant_id: turn.tenant_id.clone(),
        generation: turn.generation,
        turn_id: turn.id.clone(),
        native_request_id: native.to_owned(),
        kind: InteractionKind::Question,
        state: InteractionState::Pending,
        etag: "e1".to_owned(),
        request: serde_json::json!({"questions": []}),
        outcome: None,
        answer_request_id: None,
        answer_fingerprint: None,
        reason: None,
        delivery: None,
        replay_allowed: false,
        created_at_ms: T0,
        updated_at_ms: T0,
    }
}

/// Event `sequence` of `execution` at `generation`, emitted at `T0 + sequence`.
pub fn event(execution_id: &str, generation: impl Into<Generation>, sequence: i64) -> EventRecord {
    EventRecord {
        execution_id: execution_id.into(),
        sequence,
        event_id: format!("{execution_id}-event-{sequence}"),
        generation: generation.into(),
        event_type: "item.delta".to_owned(),
        schema_version: 1,
        emitted_at_ms: T0 + sequence,
        payload: format!(r#"{{"n":{sequence}}}"#),
        ..Default::default()
    }
}

/// Events `sequences` of `execution_id` at `generation`.
pub fn events(
    execution_id: &str,
    generation: impl Into<Generation>,
    sequences: std::ops::RangeInclusive<i64>,
) -> Vec<EventRecord> {
    let generation = generation.into();
    sequences.map(|s| event(execution_id, generation, s)).collect()
}

/// The sequences of `events`, in their order.
pub fn sequences(events: &[EventRecord]) -> Vec<i64> {
    events.iter().map(|e| e.sequence).collect()
}

/// The ids of `records`, in their order.
pub fn ids<'a>(records: impl IntoIterator<Item = &'a ExecutionRecord>) -> Vec<&'a str> {
    records.into_iter().map(|e| e.id.as_str()).collect()
}

/// An execution with a running turn, both inserted.
pub async fn execution_with_turn(store: &dyn Store, id: &str) -> (ExecutionRecord, TurnRecord) {
    let e = execution(id);
    store.insert_execution(&e).await.unwrap();
    let t = turn(&e, &format!("{id}-turn-1"), 1);
    store.insert_turn(&t).await.unwrap();
    (e, t)
}

/// Lease terms long enough that no test outlives them unless it means to.
pub fn terms() -> LeaseTerms {
    LeaseTerms {
        length: std::time::Duration::from_secs(60),
        renew_timeout: std::time::Duration::from_secs(2),
        self_fence_margin: std::time::Duration::from_secs(2),
    }
}

/// Every operation a store was observed making, in order, with whether it succeeded.
#[derive(Default)]
pub struct Seen(pub std::sync::Mutex<Vec<(&'static str, bool)>>);

impl Seen {
    /// How many times `operation` was made.
    pub fn count(&self, operation: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|(op, _)| *op == operation).count()
    }
}

impl StoreObserver for Seen {
    fn observed(&self, operation: &'static str, _took: std::time::Duration, ok: bool) {
        self.0.lock().unwrap().push((operation, ok));
    }
}
