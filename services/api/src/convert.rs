//! Records → proto messages, and JSON ↔ `google.protobuf.Struct`.

use cursor_runner_activity::InteractionKind;
use cursor_runner_executions::attempts::UsageTotal;
use cursor_runner_executions::interaction::Selection;
use cursor_runner_executions::limits::ExecutionLimits;
use cursor_runner_executions::prompt::PromptBlock;
use cursor_runner_executions::session_config::{ConfigOption, OptionValue};
use cursor_runner_executions::state::{ExecutionState, InteractionState, TurnState};
use cursor_runner_executions::{
    ApprovalPolicy, EngineError, EventRecord, ExecutionRecord, InteractionAnswer, InteractionRecord, ModelCatalog,
    Reason, SessionConfig, TurnRecord,
};
use prost_types::{ListValue, Struct, Timestamp, Value as ProtoValue, value::Kind};
use serde_json::Value;

use crate::pb;
use crate::status::to_status;

pub fn approval_policy(value: i32) -> Result<ApprovalPolicy, tonic::Status> {
    match pb::ApprovalPolicy::try_from(value) {
        Ok(pb::ApprovalPolicy::Unspecified | pb::ApprovalPolicy::Ask) => Ok(ApprovalPolicy::Ask),
        Ok(pb::ApprovalPolicy::AllowSessionScope) => Ok(ApprovalPolicy::AllowSessionScope),
        Ok(pb::ApprovalPolicy::DenyAll) => Ok(ApprovalPolicy::DenyAll),
        Err(_) => Err(to_status(EngineError::invalid(
            Reason::InvalidArgument,
            format!("unknown approval_policy {value}"),
        ))),
    }
}

fn approval_policy_proto(policy: ApprovalPolicy) -> pb::ApprovalPolicy {
    match policy {
        ApprovalPolicy::Ask => pb::ApprovalPolicy::Ask,
        ApprovalPolicy::AllowSessionScope => pb::ApprovalPolicy::AllowSessionScope,
        ApprovalPolicy::DenyAll => pb::ApprovalPolicy::DenyAll,
    }
}

pub fn duration(d: prost_types::Duration) -> Result<std::time::Duration, tonic::Status> {
    std::time::Duration::try_from(d).map_err(|_| {
        to_status(EngineError::invalid(
            Reason::InvalidArgument,
            "a duration must not be negative",
        ))
    })
}

/// A `std` duration as proto (saturating: no duration here comes near the limit).
pub fn std_duration_proto(d: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 0,
    })
}

fn us_proto(us: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(us / 1_000_000).unwrap_or(i64::MAX),
        nanos: ((us % 1_000_000) * 1_000) as i32,
    }
}

fn duration_proto(ms: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

pub fn timestamp(ms: i64) -> Timestamp {
    Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

pub fn to_struct(json: &str) -> Option<Struct> {
    struct_of(serde_json::from_str::<Value>(json).ok()?)
}

/// A JSON object as a protobuf `Struct`; anything else has none.
fn struct_of(value: Value) -> Option<Struct> {
    match value {
        Value::Object(map) => Some(Struct {
            fields: map.into_iter().map(|(k, v)| (k, to_value(v))).collect(),
        }),
        _ => None,
    }
}

fn to_value(v: Value) -> ProtoValue {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s),
        Value::Array(a) => Kind::ListValue(ListValue {
            values: a.into_iter().map(to_value).collect(),
        }),
        Value::Object(map) => Kind::StructValue(Struct {
            fields: map.into_iter().map(|(k, v)| (k, to_value(v))).collect(),
        }),
    };
    ProtoValue { kind: Some(kind) }
}

fn execution_state(state: ExecutionState) -> pb::ExecutionState {
    match state {
        ExecutionState::Starting => pb::ExecutionState::Starting,
        ExecutionState::Ready => pb::ExecutionState::Ready,
        ExecutionState::Closing => pb::ExecutionState::Closing,
        ExecutionState::Closed => pb::ExecutionState::Closed,
        ExecutionState::Failed => pb::ExecutionState::Failed,
        ExecutionState::Lost => pb::ExecutionState::Lost,
    }
}

fn session_config(config: Option<SessionConfig>) -> Option<pb::SessionConfig> {
    config.map(|c| pb::SessionConfig {
        model: c.model.unwrap_or_default(),
        model_parameters: c.parameters,
        mode: c.mode.unwrap_or_default(),
        verified: c.verified,
        mcp_servers: c.mcp_servers,
    })
}

/// A recorded session, from its newest execution.
pub fn recorded_session(r: ExecutionRecord) -> pb::RecordedSession {
    pb::RecordedSession {
        session_config: session_config(r.session_config),
        execution_state: execution_state(r.state) as i32,
        session_id: r.session_id.unwrap_or_default(),
        workspace: r.workspace,
        execution_id: r.id.into(),
        update_time: Some(timestamp(r.updated_at_ms)),
    }
}

pub fn execution(r: ExecutionRecord) -> pb::Execution {
    let state = execution_state(r.state);
    let limits = limits_proto(&r.limits);
    let exited = r.exit_code.is_some() || r.exit_signal.is_some();
    pb::Execution {
        execution_id: r.id.into(),
        tenant_id: r.tenant_id,
        state: state as i32,
        generation: r.generation.get(),
        workspace: r.workspace,
        session_id: r.session_id.unwrap_or_default(),
        active_turn_id: r.active_turn_id.map(String::from).unwrap_or_default(),
        turn_count: r.turn_count,
        pid: r.pid,
        exit_status: exited.then(|| pb::ExitStatus {
            exit_code: r.exit_code.map(|c| c as i32),
            signal: r.exit_signal.map(|s| s as i32),
        }),
        failure_reason: r.failure_reason.unwrap_or_default(),
        failure_message: r.failure_message.unwrap_or_default(),
        acked_sequence: r.acked_sequence,
        create_time: Some(timestamp(r.created_at_ms)),
        update_time: Some(timestamp(r.updated_at_ms)),
        approval_policy: approval_policy_proto(r.approval_policy) as i32,
        interaction_wait_limit: Some(duration_proto(r.interaction_wait_limit_ms)),
        lease: r.lease.map(|l| pb::ExecutionLease {
            slot_id: l.slot_id,
            warm: l.warm,
            lease_duration: Some(us_proto(l.lease_us)),
            spawn_duration: Some(us_proto(l.spawn_us)),
            initialize_duration: Some(us_proto(l.initialize_us)),
            session_new_duration: l.session_new_us.map(us_proto),
            sessions_served: l.sessions_served,
            agent_profile: l.agent_profile.unwrap_or_default(),
            agent: l.agent.map(agent_report),
        }),
        // Named by GetExecution, which reads the owner.
        owner_replica: String::new(),
        owner_incarnation: String::new(),
        session_config: session_config(r.session_config),
        limits: Some(limits),
        active_time: Some(duration_proto(r.active_ms)),
        credential_name: r.credential_name.unwrap_or_default(),
    }
}

fn agent_report(a: cursor_runner_executions::lease::AgentReport) -> pb::AgentReport {
    pb::AgentReport {
        protocol_version: a.protocol_version,
        name: a.name,
        title: a.title,
        version: a.version,
        capabilities_json: a.capabilities,
        auth_methods: a
            .auth_methods
            .into_iter()
            .map(|m| pb::AgentAuthMethod {
                id: m.id,
                name: m.name,
                description: m.description,
                r#type: m.r#type,
                variables: m.variables,
            })
            .collect(),
        unavailable: a
            .unavailable
            .into_iter()
            .map(|u| pb::UnavailableCapability {
                capability: u.capability,
                reason: u.reason,
            })
            .collect(),
    }
}

fn limits_proto(limits: &ExecutionLimits) -> pb::ExecutionLimits {
    pb::ExecutionLimits {
        turn_deadline: limits.turn_deadline.map(std_duration_proto),
        max_turns: limits.max_turns.map(i64::from),
        max_active_time: limits.max_active.map(std_duration_proto),
    }
}

/// The request's limits; unset is unbounded. Out-of-range values are the engine's to refuse.
pub fn limits(limits: Option<pb::ExecutionLimits>) -> Result<ExecutionLimits, tonic::Status> {
    let Some(limits) = limits else {
        return Ok(ExecutionLimits::default());
    };
    let max_turns = limits
        .max_turns
        .map(|n| {
            u32::try_from(n).map_err(|_| {
                to_status(EngineError::invalid(
                    Reason::InvalidArgument,
                    "max_turns is out of range",
                ))
            })
        })
        .transpose()?;
    Ok(ExecutionLimits {
        turn_deadline: limits.turn_deadline.map(duration).transpose()?,
        max_turns,
        max_active: limits.max_active_time.map(duration).transpose()?,
    })
}

pub fn usage_total(total: &UsageTotal, active_ms: i64) -> pb::UsageTotal {
    pb::UsageTotal {
        turns: total.turns as i64,
        turns_without_usage: total.turns_without_usage as i64,
        cost_amount: total.cost.as_ref().map(|c| c.amount),
        cost_currency: total.cost.as_ref().map(|c| c.currency.clone()).unwrap_or_default(),
        active_time: Some(duration_proto(active_ms)),
    }
}

pub fn prompt_block(block: pb::PromptBlock) -> Result<PromptBlock, tonic::Status> {
    let optional = |text: String| (!text.is_empty()).then_some(text);
    Ok(match block.content {
        Some(pb::prompt_block::Content::Text(text)) => PromptBlock::Text(text),
        Some(pb::prompt_block::Content::Image(image)) => PromptBlock::Image {
            data: image.data,
            mime_type: image.mime_type,
            uri: optional(image.uri),
        },
        Some(pb::prompt_block::Content::Audio(audio)) => PromptBlock::Audio {
            mime_type: audio.mime_type,
        },
        Some(pb::prompt_block::Content::ResourceLink(link)) => PromptBlock::ResourceLink {
            uri: link.uri,
            name: link.name,
            title: optional(link.title),
            description: optional(link.description),
            mime_type: optional(link.mime_type),
            size: link.size,
        },
        Some(pb::prompt_block::Content::EmbeddedResource(resource)) => {
            PromptBlock::EmbeddedResource { uri: resource.uri }
        }
        None => {
            return Err(to_status(EngineError::invalid(
                Reason::PromptInvalid,
                "a prompt block has no content",
            )));
        }
    })
}

pub fn config_option(o: ConfigOption) -> pb::ConfigOption {
    let current_value = o.current_text();
    let values = match o.value {
        OptionValue::Select { values, .. } => values,
        OptionValue::Boolean { .. } => vec!["false".into(), "true".into()],
    };
    pb::ConfigOption {
        id: o.id,
        name: o.name,
        category: o.category.unwrap_or_default(),
        current_value,
        values,
    }
}

pub fn model_catalog(catalog: ModelCatalog) -> pb::ListModelsResponse {
    pb::ListModelsResponse {
        models: catalog
            .models
            .into_iter()
            .map(|m| pb::Model {
                model_id: m.model_id,
                name: m.name,
                parameters: m.parameters.into_iter().map(config_option).collect(),
            })
            .collect(),
        source: catalog.source.into(),
    }
}

pub fn turn(r: TurnRecord) -> pb::Turn {
    let usage = r.usage.clone();
    let state = match r.state {
        TurnState::Running => pb::TurnState::Running,
        TurnState::Completed => pb::TurnState::Completed,
        TurnState::Failed => pb::TurnState::Failed,
        TurnState::Cancelled => pb::TurnState::Cancelled,
        TurnState::Interrupted => pb::TurnState::Interrupted,
    };
    pb::Turn {
        turn_id: r.id.into(),
        execution_id: r.execution_id.into(),
        tenant_id: r.tenant_id,
        generation: r.generation.get(),
        turn_number: r.turn_number,
        state: state as i32,
        stop_reason: r.stop_reason.unwrap_or_default(),
        failure_reason: r.failure_reason.unwrap_or_default(),
        failure_message: r.failure_message.unwrap_or_default(),
        start_time: Some(timestamp(r.started_at_ms)),
        end_time: r.ended_at_ms.map(timestamp),
        usage: usage.map(|u| pb::TurnUsage {
            context_used_tokens: u.used,
            context_size_tokens: u.size,
            cost_amount: u.cost.as_ref().map(|c| c.amount),
            cost_currency: u.cost.map(|c| c.currency).unwrap_or_default(),
        }),
        credential_name: r.credential_name.unwrap_or_default(),
        session_config: session_config(r.session_config),
    }
}

pub fn interaction_state(state: InteractionState) -> pb::InteractionState {
    match state {
        InteractionState::Pending => pb::InteractionState::Pending,
        InteractionState::Answered => pb::InteractionState::Answered,
        InteractionState::Delivered => pb::InteractionState::Delivered,
        InteractionState::Cancelled => pb::InteractionState::Cancelled,
        InteractionState::Expired => pb::InteractionState::Expired,
    }
}

pub fn interaction_state_name(state: pb::InteractionState) -> Option<InteractionState> {
    match state {
        pb::InteractionState::Unspecified => None,
        pb::InteractionState::Pending => Some(InteractionState::Pending),
        pb::InteractionState::Answered => Some(InteractionState::Answered),
        pb::InteractionState::Delivered => Some(InteractionState::Delivered),
        pb::InteractionState::Cancelled => Some(InteractionState::Cancelled),
        pb::InteractionState::Expired => Some(InteractionState::Expired),
    }
}

pub fn interaction(r: InteractionRecord) -> pb::Interaction {
    let kind = match r.kind {
        InteractionKind::Question => pb::InteractionKind::Question,
        InteractionKind::Plan => pb::InteractionKind::Plan,
        InteractionKind::Permission => pb::InteractionKind::Permission,
    };
    pb::Interaction {
        state: interaction_state(r.state) as i32,
        interaction_id: r.id.into(),
        execution_id: r.execution_id.into(),
        tenant_id: r.tenant_id,
        turn_id: r.turn_id.into(),
        generation: r.generation.get(),
        kind: kind as i32,
        etag: r.etag,
        request: struct_of(r.request),
        outcome: r.outcome.and_then(struct_of),
        reason: r.reason.map(|r| r.as_str().to_owned()).unwrap_or_default(),
        delivery: r.delivery.map(|d| d.as_str().to_owned()).unwrap_or_default(),
        replay_allowed: r.replay_allowed,
        create_time: Some(timestamp(r.created_at_ms)),
        update_time: Some(timestamp(r.updated_at_ms)),
    }
}

pub fn event(r: EventRecord) -> pb::ActivityEvent {
    pb::ActivityEvent {
        execution_id: r.execution_id.into(),
        sequence: r.sequence,
        event_id: r.event_id,
        generation: r.generation.get(),
        turn_id: r.turn_id.map(String::from).unwrap_or_default(),
        item_id: r.item_id.unwrap_or_default(),
        event_type: r.event_type,
        priority: r.priority as i32,
        schema_version: r.schema_version as i32,
        emit_time: Some(timestamp(r.emitted_at_ms)),
        payload: to_struct(&r.payload),
    }
}

/// `google.protobuf.Struct` → JSON, for clients that print or inspect payloads.
pub fn struct_to_json(s: &Struct) -> Value {
    Value::Object(s.fields.iter().map(|(k, v)| (k.clone(), value_to_json(v))).collect())
}

fn value_to_json(v: &ProtoValue) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9.0e15 => Value::from(*n as i64),
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_to_json).collect()),
        Some(Kind::StructValue(s)) => struct_to_json(s),
    }
}

/// An answer as the engine takes it.
pub(crate) fn interaction_answer(
    answer: Option<pb::answer_interaction_request::Answer>,
) -> Result<InteractionAnswer, tonic::Status> {
    Ok(match answer {
        Some(pb::answer_interaction_request::Answer::Questions(q)) => InteractionAnswer::Questions(
            q.selections
                .into_iter()
                .map(|s| Selection {
                    question_id: s.question_id,
                    option_ids: s.option_ids,
                })
                .collect(),
        ),
        Some(pb::answer_interaction_request::Answer::Decline(d)) => InteractionAnswer::Decline {
            reason: (!d.reason.is_empty()).then_some(d.reason),
        },
        Some(pb::answer_interaction_request::Answer::Cancel(_)) => InteractionAnswer::Cancel,
        Some(pb::answer_interaction_request::Answer::Plan(plan)) => match plan.decision {
            Some(pb::plan_answer::Decision::Accept(accept)) => InteractionAnswer::AcceptPlan {
                feedback: (!accept.feedback.is_empty()).then_some(accept.feedback),
            },
            Some(pb::plan_answer::Decision::Reject(reject)) => InteractionAnswer::RejectPlan {
                reason: (!reject.reason.is_empty()).then_some(reject.reason),
            },
            None => {
                return Err(to_status(EngineError::invalid(
                    Reason::AnswerInvalid,
                    "a plan answer needs accept or reject",
                )));
            }
        },
        Some(pb::answer_interaction_request::Answer::Permission(permission)) => InteractionAnswer::SelectOption {
            option_id: permission.option_id,
        },
        None => {
            return Err(to_status(EngineError::invalid(
                Reason::AnswerInvalid,
                "an answer (questions, decline or cancel) is required",
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_split_milliseconds_exactly() {
        assert_eq!(
            timestamp(1_500),
            Timestamp {
                seconds: 1,
                nanos: 500_000_000
            }
        );
        assert_eq!(
            timestamp(-1),
            Timestamp {
                seconds: -1,
                nanos: 999_000_000
            }
        );
    }

    #[test]
    fn json_objects_become_structs_and_others_do_not() {
        let s = to_struct(r#"{"a":[1,"x",null,{"b":true}]}"#).unwrap();
        assert!(s.fields.contains_key("a"));
        assert!(to_struct("[1]").is_none());
        assert!(to_struct("not json").is_none());
    }
}
