//! The `executions`, `turns`, `interactions` and `events` rows as sqlx reads them, JSON columns as text. They stay in
//! the store: above it, the records carry the domain's types. A JSON column this version
//! cannot read is taken as absent, as every reader of it did before it was typed.

use std::time::Duration;

use cursor_runner_activity::{InteractionKind, UsageReported};
use cursor_runner_domain::ids::Generation;
use cursor_runner_domain::interaction::{ApprovalPolicy, InteractionReason};
use cursor_runner_domain::lease::LeaseInfo;
use cursor_runner_domain::limits::ExecutionLimits;
use cursor_runner_domain::session_config::SessionConfig;
use cursor_runner_domain::state::{Delivery, ExecutionState, InteractionState, TurnState};

use crate::records::{EventRecord, ExecutionRecord, InteractionRecord, TurnRecord};

#[derive(sqlx::FromRow)]
pub(super) struct ExecutionRow {
    id: String,
    tenant_id: String,
    #[sqlx(try_from = "String")]
    state: ExecutionState,
    generation: i64,
    workspace: String,
    session_id: Option<String>,
    active_turn_id: Option<String>,
    turn_count: i64,
    pid: Option<i64>,
    exit_code: Option<i64>,
    exit_signal: Option<i64>,
    failure_reason: Option<String>,
    failure_message: Option<String>,
    acked_sequence: i64,
    created_at_ms: i64,
    updated_at_ms: i64,
    #[sqlx(try_from = "String")]
    approval_policy: ApprovalPolicy,
    interaction_wait_limit_ms: i64,
    lease: Option<String>,
    session_config: Option<String>,
    credential_name: Option<String>,
    turn_deadline_ms: Option<i64>,
    max_turns: Option<i64>,
    max_active_ms: Option<i64>,
    active_ms: i64,
}

impl From<ExecutionRow> for ExecutionRecord {
    fn from(row: ExecutionRow) -> Self {
        Self {
            id: row.id.into(),
            tenant_id: row.tenant_id,
            state: row.state,
            generation: Generation::new(row.generation),
            workspace: row.workspace,
            session_id: row.session_id,
            active_turn_id: row.active_turn_id.map(Into::into),
            turn_count: row.turn_count,
            pid: row.pid,
            exit_code: row.exit_code,
            exit_signal: row.exit_signal,
            failure_reason: row.failure_reason,
            failure_message: row.failure_message,
            acked_sequence: row.acked_sequence,
            created_at_ms: row.created_at_ms,
            updated_at_ms: row.updated_at_ms,
            approval_policy: row.approval_policy,
            interaction_wait_limit_ms: row.interaction_wait_limit_ms,
            lease: row.lease.as_deref().and_then(LeaseInfo::from_json),
            session_config: row.session_config.as_deref().and_then(SessionConfig::from_json),
            credential_name: row.credential_name,
            limits: ExecutionLimits {
                turn_deadline: row.turn_deadline_ms.map(duration_of_ms),
                max_turns: row.max_turns.map(|n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)),
                max_active: row.max_active_ms.map(duration_of_ms),
            },
            active_ms: row.active_ms,
        }
    }
}

fn duration_of_ms(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// A limit's column: whole milliseconds, saturating (a limit is validated to 30 days).
pub(super) fn ms_of(limit: Option<Duration>) -> Option<i64> {
    limit.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[derive(sqlx::FromRow)]
pub(super) struct TurnRow {
    id: String,
    execution_id: String,
    tenant_id: String,
    generation: i64,
    turn_number: i64,
    #[sqlx(try_from = "String")]
    state: TurnState,
    stop_reason: Option<String>,
    failure_reason: Option<String>,
    failure_message: Option<String>,
    started_at_ms: i64,
    ended_at_ms: Option<i64>,
    credential_name: Option<String>,
    session_config: Option<String>,
    usage: Option<String>,
}

impl From<TurnRow> for TurnRecord {
    fn from(row: TurnRow) -> Self {
        Self {
            id: row.id.into(),
            execution_id: row.execution_id.into(),
            tenant_id: row.tenant_id,
            generation: Generation::new(row.generation),
            turn_number: row.turn_number,
            state: row.state,
            stop_reason: row.stop_reason,
            failure_reason: row.failure_reason,
            failure_message: row.failure_message,
            started_at_ms: row.started_at_ms,
            ended_at_ms: row.ended_at_ms,
            credential_name: row.credential_name,
            session_config: row.session_config.as_deref().and_then(SessionConfig::from_json),
            usage: row.usage.as_deref().and_then(|text| serde_json::from_str(text).ok()),
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct InteractionRow {
    id: String,
    execution_id: String,
    tenant_id: String,
    generation: i64,
    turn_id: String,
    native_request_id: String,
    #[sqlx(try_from = "String")]
    kind: InteractionKind,
    #[sqlx(try_from = "String")]
    state: InteractionState,
    etag: String,
    request: String,
    outcome: Option<String>,
    answer_request_id: Option<String>,
    answer_fingerprint: Option<String>,
    reason: Option<String>,
    delivery: Option<String>,
    replay_allowed: bool,
    created_at_ms: i64,
    updated_at_ms: i64,
}

impl From<InteractionRow> for InteractionRecord {
    fn from(row: InteractionRow) -> Self {
        Self {
            id: row.id.into(),
            execution_id: row.execution_id.into(),
            tenant_id: row.tenant_id,
            generation: Generation::new(row.generation),
            turn_id: row.turn_id.into(),
            native_request_id: row.native_request_id,
            kind: row.kind,
            state: row.state,
            etag: row.etag,
            request: serde_json::from_str(&row.request).unwrap_or_default(),
            outcome: row.outcome.as_deref().and_then(|text| serde_json::from_str(text).ok()),
            answer_request_id: row.answer_request_id,
            answer_fingerprint: row.answer_fingerprint,
            // A reason this version does not know is not one it can act on.
            reason: row.reason.as_deref().and_then(InteractionReason::parse),
            // A delivery this version does not know says no more than that no one knows.
            delivery: row
                .delivery
                .map(|text| Delivery::parse(&text).unwrap_or(Delivery::Unknown)),
            replay_allowed: row.replay_allowed,
            created_at_ms: row.created_at_ms,
            updated_at_ms: row.updated_at_ms,
        }
    }
}

/// A JSON column's text, as written.
pub(super) fn json_text(value: &serde_json::Value) -> String {
    value.to_string()
}

/// A JSON column's text, as written.
pub(super) fn lease_text(lease: &Option<LeaseInfo>) -> Option<String> {
    lease.as_ref().map(LeaseInfo::to_json)
}

/// A JSON column's text, as written.
pub(super) fn usage_text(usage: &Option<UsageReported>) -> Option<String> {
    usage
        .as_ref()
        .map(|u| serde_json::to_string(u).expect("a usage report serializes"))
}

/// A JSON column's text, as written.
pub(super) fn config_text(config: &Option<SessionConfig>) -> Option<String> {
    config.as_ref().map(SessionConfig::to_json)
}

#[derive(sqlx::FromRow)]
pub(super) struct EventRow {
    execution_id: String,
    sequence: i64,
    event_id: String,
    generation: i64,
    turn_id: Option<String>,
    item_id: Option<String>,
    event_type: String,
    priority: i64,
    schema_version: i64,
    emitted_at_ms: i64,
    payload: String,
}

impl From<EventRow> for EventRecord {
    fn from(row: EventRow) -> Self {
        Self {
            execution_id: row.execution_id.into(),
            sequence: row.sequence,
            event_id: row.event_id,
            generation: Generation::new(row.generation),
            turn_id: row.turn_id.map(Into::into),
            item_id: row.item_id,
            event_type: row.event_type,
            priority: row.priority,
            schema_version: row.schema_version,
            emitted_at_ms: row.emitted_at_ms,
            payload: row.payload,
        }
    }
}
