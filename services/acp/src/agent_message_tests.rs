use serde_json::{Value, json};

use super::*;
use crate::cursor::SubagentType;

#[test]
fn every_method_classifies_as_itself_and_only_the_agents_are_known() {
    let params = json!({});
    let agent_sends = [
        SESSION_UPDATE,
        SESSION_REQUEST_PERMISSION,
        ASK_QUESTION,
        CREATE_PLAN,
        UPDATE_TODOS,
        TASK,
        GENERATE_IMAGE,
    ];
    for method in ALL.iter().copied().chain(["cursor/foo", "fs/read_text_file"]) {
        let message = AgentMessage::classify(method, &params);
        assert_eq!(message.method(), method);
        let unknown = matches!(message, AgentMessage::Unknown { .. });
        assert_eq!(unknown, !agent_sends.contains(&method), "{method}");
    }
}

#[test]
fn only_the_three_extensions_are_fire_and_forget() {
    let params = json!({});
    let fire_and_forget: Vec<&str> = ALL
        .iter()
        .copied()
        .filter(|m| AgentMessage::classify(m, &params).is_fire_and_forget())
        .collect();
    assert_eq!(fire_and_forget, [UPDATE_TODOS, TASK, GENERATE_IMAGE]);
}

#[test]
fn a_session_update_is_read_field_by_field() {
    let params = json!({"sessionId": "s", "update": {"sessionUpdate": "plan"}});
    let update = SessionUpdate::new(&params);
    assert_eq!(update.session_id(), Some("s"));
    assert_eq!(update.update()["sessionUpdate"], "plan");
    let odd = json!({"sessionId": 5});
    assert_eq!(SessionUpdate::new(&odd).session_id(), None);
    assert_eq!(SessionUpdate::new(&odd).update(), &Value::Null);
}

#[test]
fn malformed_blocking_params_say_what_from_value_says() {
    for (method, params) in [
        (ASK_QUESTION, json!({"questions": "no"})),
        (ASK_QUESTION, json!(null)),
        (CREATE_PLAN, json!({"todos": [{"id": 1}]})),
        (CREATE_PLAN, json!([1, 2])),
    ] {
        let reason = match AgentMessage::classify(method, &params) {
            AgentMessage::AskQuestion(Err(e)) => e.to_string(),
            AgentMessage::CreatePlan(Err(e)) => e.to_string(),
            other => panic!("{other:?}"),
        };
        let from_value = if method == ASK_QUESTION {
            serde_json::from_value::<crate::cursor::AskQuestionParams>(params.clone()).map(|_| ())
        } else {
            serde_json::from_value::<crate::cursor::CreatePlanParams>(params.clone()).map(|_| ())
        };
        assert_eq!(reason, format!("malformed {method}: {}", from_value.unwrap_err()));
    }
}

#[test]
fn fire_and_forget_params_lose_only_their_mistyped_fields() {
    let params = json!({"toolCallId": 7, "todos": [{"id": "a"}, 3], "merge": true});
    let AgentMessage::UpdateTodos(todos) = AgentMessage::classify(UPDATE_TODOS, &params) else {
        panic!()
    };
    assert_eq!(todos.tool_call_id, None);
    assert_eq!(todos.todos.map(|t| t.len()), Some(2));
    assert_eq!(todos.merge, Some(true));

    let not_an_object = json!(["t", [], true]);
    let AgentMessage::UpdateTodos(todos) = AgentMessage::classify(UPDATE_TODOS, &not_an_object) else {
        panic!()
    };
    assert_eq!(todos, Default::default());

    let params = json!({"toolCallId": "t", "agentId": "", "durationMs": 1.5, "model": null,
        "subagentType": {"custom": "x"}});
    let AgentMessage::Task(task) = AgentMessage::classify(TASK, &params) else {
        panic!()
    };
    assert_eq!(task.tool_call_id.as_deref(), Some("t"));
    assert_eq!(task.agent_id.as_deref(), Some(""));
    assert_eq!(task.duration_ms.and_then(|d| d.as_f64()), Some(1.5));
    assert_eq!(task.model, None);
    assert_eq!(task.subagent_type, Some(SubagentType::Custom("x".into())));

    let params = json!({"filePath": "a.png", "referenceImagePaths": ["b.png", 3, "c.png"]});
    let AgentMessage::GenerateImage(image) = AgentMessage::classify(GENERATE_IMAGE, &params) else {
        panic!()
    };
    assert_eq!(image.file_path.as_deref(), Some("a.png"));
    assert_eq!(image.reference_image_paths, ["b.png", "c.png"]);
    assert_eq!(image.tool_call_id, None);
}

#[test]
fn subagent_types_keep_what_they_do_not_know_raw() {
    let cases = [
        (json!("explore"), SubagentType::Named("explore".into())),
        (json!({"custom": "mine"}), SubagentType::Custom("mine".into())),
        (json!({"custom": 1}), SubagentType::Other(json!({"custom": 1}))),
        (
            json!({"custom": "a", "b": 1}),
            SubagentType::Other(json!({"custom": "a", "b": 1})),
        ),
        (json!(4), SubagentType::Other(json!(4))),
    ];
    for (raw, expected) in cases {
        assert_eq!(SubagentType::from(raw), expected);
    }
}
