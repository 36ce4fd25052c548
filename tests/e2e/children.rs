//! Child agents end to end: a turn with two subagents (one with a grandchild) renders as
//! a tree of transcripts from `StreamEvents` alone; requests from a child are attributed to
//! it; an oversized spawn is bounded, not fatal.

use std::collections::{BTreeMap, BTreeSet};

use cursor_runner_activity::MAX_DELEGATION_TASK_CHARS;
use cursor_runner_e2e::*;
use serde_json::Value;

on_both_backends!(
    a_turn_with_two_children_renders_as_a_tree_of_transcripts_from_the_stream_alone,
    a_childs_permission_is_accepted_and_attributed_to_the_child,
    a_childs_question_is_attributed_to_it_and_a_300_kb_task_is_bounded_with_the_framing_intact,
);

/// What a control plane renders for one session of the turn, built from events only.
#[derive(Debug, Default)]
struct Transcript {
    parent: Option<String>,
    /// Assistant messages in order: (item id, text).
    messages: Vec<(String, String)>,
    /// `toolCallId=status` of each completed tool.
    tools: Vec<String>,
    /// `status` of each `delegation.completed`.
    ended: Vec<String>,
}

async fn a_turn_with_two_children_renders_as_a_tree_of_transcripts_from_the_stream_alone(backend: Backend) {
    let service = TestService::start(backend, "children.json").await;
    let mut client = service.client().await;
    let (execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");

    let initialize = service
        .agent_received()
        .into_iter()
        .find(|line| line["method"] == "initialize")
        .expect("initialize was sent");
    assert_eq!(initialize["params"]["clientCapabilities"]["_meta"]["subagents"], true);

    let root = execution.session_id.clone();
    let mut tree: BTreeMap<String, Transcript> = BTreeMap::from([(root.clone(), Transcript::default())]);
    for event in &settled {
        let body = payload(event);
        let owner = body["childId"].as_str().unwrap_or(&root).to_owned();
        if event.event_type == "delegation.started" {
            let parent = body["parentId"].as_str().map(str::to_owned);
            let fresh = Transcript {
                parent,
                ..Transcript::default()
            };
            assert!(tree.insert(owner.clone(), fresh).is_none(), "{owner} starts once");
            continue;
        }
        let Some(node) = tree.get_mut(&owner) else {
            panic!("{} for {owner} before its delegation.started", event.event_type)
        };
        match event.event_type.as_str() {
            "item.delta" if body["kind"] == "agentMessage" => {
                let text = body["text"].as_str().unwrap();
                match node.messages.last_mut() {
                    Some((item, message)) if *item == event.item_id => message.push_str(text),
                    _ => node.messages.push((event.item_id.clone(), text.to_owned())),
                }
            }
            "tool.execution.completed" => node.tools.push(format!(
                "{}={}",
                body["toolCallId"].as_str().unwrap(),
                body["status"].as_str().unwrap()
            )),
            "delegation.completed" => node.ended.push(body["status"].as_str().unwrap().to_owned()),
            _ => {}
        }
    }

    let parents: Vec<(&str, Option<&str>)> = tree.iter().map(|(id, t)| (id.as_str(), t.parent.as_deref())).collect();
    assert_eq!(
        parents,
        [
            ("child-explore", Some(root.as_str())),
            ("child-review", Some(root.as_str())),
            ("grandchild-tests", Some("child-review")),
            (root.as_str(), None),
        ]
    );
    let messages = |id: &str| -> Vec<&str> { tree[id].messages.iter().map(|(_, text)| text.as_str()).collect() };
    assert_eq!(
        messages(&root),
        ["Delegating to two subagents.", " Both subagents are done."],
        "no child text in the root's transcript"
    );
    assert_eq!(messages("child-explore"), ["Found fn main() in src/main.rs."]);
    assert_eq!(
        messages("child-review"),
        [
            "Reviewing the tests; asking a helper to run them.",
            "The suite is healthy."
        ]
    );
    assert_eq!(messages("grandchild-tests"), ["All 12 tests pass."]);
    assert_eq!(tree[&root].tools, ["task-1=completed", "task-2=completed"]);
    assert_eq!(tree["child-explore"].tools, ["read-1=completed"]);
    assert_eq!(
        tree["child-review"].tools,
        ["task-1=completed"],
        "the root's id, another tool"
    );
    assert_eq!(tree["grandchild-tests"].tools, ["run-1=completed"]);
    for child in ["child-explore", "child-review", "grandchild-tests"] {
        assert_eq!(tree[child].ended, ["completed"], "{child} completes exactly once");
    }

    let enriched: Vec<Value> = settled
        .iter()
        .filter(|e| e.event_type == "delegation.updated")
        .map(payload)
        .collect();
    assert_eq!(enriched.len(), 1, "{enriched:?}");
    assert_eq!(enriched[0]["childId"], "child-explore");
    assert_eq!(enriched[0]["durationMs"], 1530);
    assert_eq!(enriched[0]["role"], "explore");

    let task_1_items: BTreeSet<&str> = settled
        .iter()
        .filter(|e| e.event_type.starts_with("tool.execution.") && payload(e)["toolCallId"] == "task-1")
        .map(|e| e.item_id.as_str())
        .collect();
    assert_eq!(
        task_1_items.len(),
        2,
        "one envelope item per session's task-1: {task_1_items:?}"
    );

    let foreign = settled
        .iter()
        .map(payload)
        .find(|p| p["category"] == "unknown_session_update")
        .expect("the foreign update is noticed");
    assert!(foreign.get("childId").is_none());
    assert!(
        settled
            .iter()
            .all(|e| !payload(e).to_string().contains("not a child of this execution")),
        "the foreign text is never shown"
    );
    service.shutdown().await;
}

async fn a_childs_permission_is_accepted_and_attributed_to_the_child(backend: Backend) {
    let service = TestService::start(backend, "children_permission.json").await;
    let mut client = service.client().await;
    let (_execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    let created = payload(events.events_until("runtime_request.created").await.last().unwrap());
    assert_eq!(created["childId"], "child-web");
    assert_eq!(created["toolCallKnown"], true, "the child's own tool call");
    let interaction = get_interaction(&mut client, created["interactionId"].as_str().unwrap()).await;
    let request = interaction.request.expect("the durable request");
    let child = request.fields["child"].kind.clone();
    let Some(prost_types::value::Kind::StructValue(child)) = child else {
        panic!("the durable request names the child: {request:?}")
    };
    let text = |key: &str| match &child.fields[key].kind {
        Some(prost_types::value::Kind::StringValue(s)) => s.clone(),
        other => panic!("{key}: {other:?}"),
    };
    assert_eq!(text("childId"), "child-web");
    assert_eq!(text("parentToolCallId"), "task-1");
    let answered = client
        .answer_interaction(proto::AnswerInteractionRequest {
            request_id: "answer-1".into(),
            interaction_id: interaction.interaction_id.clone(),
            etag: interaction.etag.clone(),
            answer: Some(proto::answer_interaction_request::Answer::Permission(
                proto::PermissionAnswer {
                    option_id: "option-1".into(),
                },
            )),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answered.interaction.unwrap().state,
        proto::InteractionState::Delivered as i32
    );
    let settled = events.until_turn_settles().await;
    assert_eq!(settled.last().unwrap().event_type, "turn.completed");
    let completed: Vec<Value> = settled
        .iter()
        .filter(|e| e.event_type == "delegation.completed")
        .map(payload)
        .collect();
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0]["status"], "completed");
    service.shutdown().await;
}

async fn a_childs_question_is_attributed_to_it_and_a_300_kb_task_is_bounded_with_the_framing_intact(backend: Backend) {
    let service = TestService::start(backend, "children_question_long_task.json").await;
    let mut client = service.client().await;
    let (_execution, _turn, mut events) = begin_turn(&mut client, &service).await;
    let before_question = events.events_until("runtime_request.created").await;
    let started = before_question
        .iter()
        .find(|e| e.event_type == "delegation.started")
        .map(payload)
        .expect("the child started");
    let task = started["task"].as_str().expect("a task");
    assert_eq!(
        task.chars().count(),
        MAX_DELEGATION_TASK_CHARS,
        "the task is cut to its bound"
    );
    assert!(task.starts_with("Survey every storage call site"));
    assert_eq!(started["taskTruncated"], true);

    let created = payload(before_question.last().unwrap());
    assert_eq!(
        created["childId"], "child-db",
        "the question's tool call is the child's"
    );
    assert_eq!(created["kind"], "question");
    let answered = client
        .answer_interaction(one_question_answer(&created, "answer-1", "option-1"))
        .await
        .expect("AnswerInteraction")
        .into_inner();
    assert_eq!(
        answered.interaction.unwrap().state,
        proto::InteractionState::Delivered as i32
    );

    let settled = events.until_turn_settles().await;
    assert_eq!(
        settled.last().unwrap().event_type,
        "turn.completed",
        "the fake got option pg"
    );
    let child_text: String = settled
        .iter()
        .filter(|e| e.event_type == "item.delta")
        .map(payload)
        .filter(|body| body["childId"] == "child-db")
        .map(|body| body["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        child_text, "Assuming PostgreSQL.",
        "the line after the 300 KB frame arrived whole"
    );
    service.shutdown().await;
}
