use serde_json::Value;

use super::*;

/// One sample per variant. The exhaustive match makes a new variant a compile error
/// here until it gets a sample (and so a check against [`EVENT_TYPES`]).
fn samples() -> Vec<ActivityPayload> {
    let settled = TurnSettled {
        turn_id: "t".into(),
        stop_reason: None,
        failure_reason: None,
        message: None,
    };
    let boundary = ItemBoundary {
        item_id: "i".into(),
        kind: ItemKind::AgentMessage,
        channel: Channel::Progress,
        child_id: Some("c".into()),
    };
    let ended = RuntimeRequestEnded {
        interaction_id: "i".into(),
        kind: InteractionKind::Question,
        turn_id: "t".into(),
        reason: "turn_settled".into(),
        replay_allowed: false,
        delivery: "pipe_written".into(),
        request: None,
    };
    let mut delegation = Delegation::new("c", "explore", DelegationStatus::Completed, "cursor_subagent_lifecycle");
    delegation.parent_id = Some("p".into());
    delegation.action = Some(DelegationAction::Close);
    delegation.activity_summary = Some(ActivitySummary {
        text: "…done".into(),
        truncated: true,
        tool_calls: 2,
        tools_failed: 1,
    });
    let all = vec![
        ActivityPayload::TurnStarted(TurnStarted {
            turn_id: "t".into(),
            turn_number: 1,
            prompt_chars: 3,
        }),
        ActivityPayload::TurnCompleted(settled.clone()),
        ActivityPayload::TurnCancelled(settled.clone()),
        ActivityPayload::TurnInterrupted(settled.clone()),
        ActivityPayload::TurnFailed(settled),
        ActivityPayload::ItemStarted(boundary.clone()),
        ActivityPayload::ItemDelta(ItemDelta {
            item_id: "i".into(),
            kind: ItemKind::Reasoning,
            channel: Channel::Summary,
            text: "x".into(),
            truncated: false,
            sanitized: true,
            child_id: None,
        }),
        ActivityPayload::ItemCompleted(boundary),
        ActivityPayload::ToolStarted(ToolExecution::new("a")),
        ActivityPayload::ToolProgressed(ToolExecution::new("a")),
        ActivityPayload::ToolCompleted(ToolExecution::new("a")),
        ActivityPayload::RuntimeRequestCreated(RuntimeRequestCreated {
            interaction_id: "i".into(),
            kind: InteractionKind::Plan,
            etag: "e".into(),
            turn_id: "t".into(),
            request: Value::Null,
            tool_call_known: None,
            child_id: None,
        }),
        ActivityPayload::RuntimeRequestResolved(RuntimeRequestResolved {
            interaction_id: "i".into(),
            kind: InteractionKind::Permission,
            turn_id: "t".into(),
            outcome: Value::Null,
            delivery: "pipe_written".into(),
            answered_by: "human".into(),
        }),
        ActivityPayload::RuntimeRequestCancelled(ended.clone()),
        ActivityPayload::RuntimeRequestExpired(ended),
        ActivityPayload::ProcessSpawned(ProcessSpawned {
            pid: 1,
            distribution: "unpinned".into(),
            program: "agent".into(),
        }),
        ActivityPayload::ProcessExited(ProcessExited {
            pid: 1,
            exit_code: Some(0),
            signal: None,
            initiated_by: "agent".into(),
        }),
        ActivityPayload::ProcessReleased(ProcessReleased {
            pid: 1,
            sessions_served: 1,
        }),
        ActivityPayload::ProviderNotice(ProviderNotice::warning("c", NoticeScope::Turn, "s")),
        ActivityPayload::PlanUpdated(PlanUpdated {
            plan_id: "p".into(),
            revision: 1,
            steps: vec![PlanStep {
                step_id: "s".into(),
                body: "b".into(),
                status: StepStatus::Blocked,
                label: Some("Cancelled".into()),
                priority: Some(StepPriority::Low),
            }],
            source: PlanSource::CursorTodos,
            partial: false,
            sanitized: false,
            child_id: Some("c".into()),
        }),
        ActivityPayload::DelegationStarted(delegation.clone()),
        ActivityPayload::DelegationUpdated(delegation.clone()),
        ActivityPayload::DelegationCompleted(delegation),
        ActivityPayload::ReviewModeChanged(ReviewModeChanged {
            mode_id: "plan".into(),
            previous_mode_id: None,
            sanitized: false,
        }),
        ActivityPayload::SessionConfigUpdated(SessionConfigUpdated {
            config_options: Vec::new(),
            options_omitted: 0,
            sanitized: false,
        }),
        ActivityPayload::SessionInfoUpdated(SessionInfoUpdated {
            title: Some("x".into()),
            title_cleared: false,
            updated_at: None,
            updated_at_cleared: false,
            sanitized: false,
        }),
        ActivityPayload::SessionCommandsUpdated(SessionCommandsUpdated {
            commands: Vec::new(),
            commands_omitted: 0,
            sanitized: false,
        }),
        ActivityPayload::SessionLoaded(SessionLoaded {
            session_id: "s".into(),
            recovery: true,
            generation: 2,
            replayed_updates_suppressed: 3,
        }),
        ActivityPayload::UsageReported(UsageReported {
            turn_id: "t".into(),
            request_count_source: "unavailable".into(),
            provider_cost_status: "unpriced".into(),
            provider_cost_unavailable_reason: Some("cursor_reports_no_usage".into()),
            usage_source: None,
            used: None,
            size: None,
            cost: None,
        }),
        ActivityPayload::ArtifactGenerated(ArtifactGenerated {
            artifact_id: "tc".into(),
            tool_call_id: "tc".into(),
            reference: Some("out/cat.png".into()),
            description: "a cat".into(),
            status: "completed".into(),
            registered: false,
            sanitized: false,
        }),
        ActivityPayload::ArtifactViewed(ArtifactViewed {
            artifact_id: "tc:ref-1".into(),
            tool_call_id: "tc".into(),
            reference: "in/dog.png".into(),
        }),
    ];
    for sample in &all {
        match sample {
            ActivityPayload::TurnStarted(_)
            | ActivityPayload::TurnCompleted(_)
            | ActivityPayload::TurnCancelled(_)
            | ActivityPayload::TurnInterrupted(_)
            | ActivityPayload::TurnFailed(_)
            | ActivityPayload::ItemStarted(_)
            | ActivityPayload::ItemDelta(_)
            | ActivityPayload::ItemCompleted(_)
            | ActivityPayload::ToolStarted(_)
            | ActivityPayload::ToolProgressed(_)
            | ActivityPayload::ToolCompleted(_)
            | ActivityPayload::RuntimeRequestCreated(_)
            | ActivityPayload::RuntimeRequestResolved(_)
            | ActivityPayload::RuntimeRequestCancelled(_)
            | ActivityPayload::RuntimeRequestExpired(_)
            | ActivityPayload::ProcessSpawned(_)
            | ActivityPayload::ProcessExited(_)
            | ActivityPayload::ProcessReleased(_)
            | ActivityPayload::ProviderNotice(_)
            | ActivityPayload::PlanUpdated(_)
            | ActivityPayload::DelegationStarted(_)
            | ActivityPayload::DelegationUpdated(_)
            | ActivityPayload::DelegationCompleted(_)
            | ActivityPayload::ReviewModeChanged(_)
            | ActivityPayload::SessionConfigUpdated(_)
            | ActivityPayload::SessionInfoUpdated(_)
            | ActivityPayload::SessionCommandsUpdated(_)
            | ActivityPayload::SessionLoaded(_)
            | ActivityPayload::UsageReported(_)
            | ActivityPayload::ArtifactGenerated(_)
            | ActivityPayload::ArtifactViewed(_) => {}
        }
    }
    all
}

#[test]
fn every_variant_serializes_to_a_listed_event_type() {
    let mut seen = std::collections::BTreeSet::new();
    for sample in samples() {
        let (event_type, _) = sample.into_parts();
        assert!(EVENT_TYPES.contains(&event_type.as_str()), "{event_type}");
        seen.insert(event_type);
    }
    assert_eq!(seen.len(), EVENT_TYPES.len(), "every listed event type has a variant");
    for extension in EXTENSION_EVENT_TYPES {
        assert!(EVENT_TYPES.contains(extension), "{extension}");
    }
}

#[test]
fn every_variant_round_trips_through_its_parts() {
    for event in samples() {
        let (event_type, payload) = event.into_parts();
        let back: ActivityPayload =
            serde_json::from_value(serde_json::json!({"eventType": event_type, "payload": payload})).unwrap();
        assert_eq!(back, event);
    }
}

#[test]
fn new_families_have_their_priorities() {
    for event in samples() {
        let (event_type, _) = event.into_parts();
        let expected = match event_type.as_str() {
            "item.delta" => 2,
            "usage.reported" => 0,
            t if t.starts_with("turn.") || t.starts_with("runtime_request.") || t.starts_with("process.") => 0,
            _ => 1,
        };
        assert_eq!(event.priority(), expected, "{event_type}");
    }
}

#[test]
fn payload_round_trips_through_its_parts() {
    let event = ActivityPayload::TurnCompleted(TurnSettled {
        turn_id: "t1".into(),
        stop_reason: Some("end_turn".into()),
        failure_reason: None,
        message: None,
    });
    let (event_type, payload) = event.into_parts();
    assert_eq!(event_type, "turn.completed");
    let back: ActivityPayload =
        serde_json::from_value(serde_json::json!({"eventType": event_type, "payload": payload})).unwrap();
    assert_eq!(back, event);
}
