use serde_json::json;

use std::collections::HashMap;

use serde_json::Value;

use super::*;
use crate::bounds::*;
use crate::event::*;
use crate::test_rng::Rng;
use crate::{TurnEnding, TurnNormalizer};

const ROOT: &str = "root";

fn normalizer() -> TurnNormalizer {
    TurnNormalizer::new("t1")
        .with_workspace("/work/repo")
        .with_root_session(ROOT)
}

fn on(session: &str, update: Value) -> Value {
    json!({"sessionId": session, "update": update})
}

fn spawn(parent: &str, child: &str, tool_call_id: &str, agent_id: &str) -> Value {
    on(
        parent,
        json!({"sessionUpdate":"subagent_spawned","subagentSessionId":child,"name":"Explore","task":"look",
                "capabilities":{},"_meta":{"cursor":{"toolCallId":tool_call_id,"agentId":agent_id}}}),
    )
}

fn state(parent: &str, child: &str, state: &str) -> Value {
    on(
        parent,
        json!({"sessionUpdate":"subagent_state_update","subagentSessionId":child,"state":state}),
    )
}

fn text(session: &str, text: &str) -> Value {
    on(
        session,
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":text}}),
    )
}

fn tool(session: &str, tool_call_id: &str, title: &str) -> Value {
    on(
        session,
        json!({"sessionUpdate":"tool_call","toolCallId":tool_call_id,"title":title,"kind":"read","status":"pending"}),
    )
}

fn types(events: &[ActivityPayload]) -> Vec<String> {
    events.iter().map(|e| e.into_parts().0).collect()
}

fn delegations(events: &[ActivityPayload]) -> Vec<(&str, &Delegation)> {
    events
        .iter()
        .filter_map(|e| match e {
            ActivityPayload::DelegationStarted(d) => Some(("started", d)),
            ActivityPayload::DelegationUpdated(d) => Some(("updated", d)),
            ActivityPayload::DelegationCompleted(d) => Some(("completed", d)),
            _ => None,
        })
        .collect()
}

fn only_notice(events: &[ActivityPayload]) -> &ProviderNotice {
    match events {
        [ActivityPayload::ProviderNotice(notice)] => notice,
        other => panic!("expected one notice, got {other:?}"),
    }
}

/// A turn with child `c1` (spawned by the root through `task-1`, agent `ag-1`).
fn with_child() -> TurnNormalizer {
    let mut n = normalizer();
    let started = n.on_session_update(&spawn(ROOT, "c1", "task-1", "ag-1"));
    assert_eq!(types(&started), ["delegation.started"]);
    n
}

#[test]
fn each_suppression_is_counted_and_noticed_once_per_session() {
    let long_id = "c".repeat(MAX_NAME_CHARS + 1);
    let cases: Vec<(&str, Vec<Value>, Value, Suppression)> = vec![
        (
            "an update for a foreign session",
            vec![],
            text("elsewhere", "hi"),
            Suppression::UnknownSession,
        ),
        (
            "an update naming no session",
            vec![],
            json!({"update": {"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}),
            Suppression::UnknownSession,
        ),
        (
            "a spawn on a foreign parent",
            vec![],
            spawn("elsewhere", "c9", "task-9", "ag-9"),
            Suppression::SpawnFromUnknownParent,
        ),
        (
            "a spawn naming no parent",
            vec![],
            json!({"update": spawn(ROOT, "c9", "task-9", "ag-9")["update"]}),
            Suppression::SpawnFromUnknownParent,
        ),
        (
            "an ACP announcement on a foreign parent",
            vec![],
            on("elsewhere", json!({"sessionUpdate":"subagent_update","sessionId":"c9"})),
            Suppression::SpawnFromUnknownParent,
        ),
        (
            "a spawn without the Task tool call id",
            vec![],
            on(
                ROOT,
                json!({"sessionUpdate":"subagent_spawned","subagentSessionId":"c9","_meta":{"cursor":{"agentId":"a"}}}),
            ),
            Suppression::MalformedLifecycle,
        ),
        (
            "a spawn with a child id over the id bound",
            vec![],
            spawn(ROOT, &long_id, "task-9", "ag-9"),
            Suppression::MalformedLifecycle,
        ),
        (
            "a spawn with control characters in the child id",
            vec![],
            spawn(ROOT, "c\u{1b}[2J", "task-9", "ag-9"),
            Suppression::MalformedLifecycle,
        ),
        (
            "a state update without a child id",
            vec![],
            on(
                ROOT,
                json!({"sessionUpdate":"subagent_state_update","state":"completed"}),
            ),
            Suppression::MalformedLifecycle,
        ),
        (
            "a state outside the native set",
            vec![],
            state(ROOT, "c1", "paused"),
            Suppression::MalformedLifecycle,
        ),
        (
            "an ACP update without a session id",
            vec![],
            on(ROOT, json!({"sessionUpdate":"subagent_update","title":"x"})),
            Suppression::MalformedLifecycle,
        ),
        (
            "a child spawning itself",
            vec![],
            spawn("c1", "c1", "task-2", "ag-2"),
            Suppression::SpawnOfItself,
        ),
        (
            "the root spawning itself",
            vec![],
            spawn(ROOT, ROOT, "task-2", "ag-2"),
            Suppression::SpawnOfItself,
        ),
        (
            "a second spawn of a known child",
            vec![],
            spawn(ROOT, "c1", "task-2", "ag-2"),
            Suppression::DuplicateSpawn,
        ),
        (
            "a child spawning the root",
            vec![],
            spawn("c1", ROOT, "task-2", "ag-2"),
            Suppression::DuplicateSpawn,
        ),
        (
            "a state update for a child never spawned",
            vec![],
            state(ROOT, "c9", "completed"),
            Suppression::UnknownChild,
        ),
        (
            "a state update on a session that is not the child's parent",
            vec![],
            state("c1", "c1", "completed"),
            Suppression::UnknownChild,
        ),
        (
            "a state update naming another agent",
            vec![],
            on(
                ROOT,
                json!({"sessionUpdate":"subagent_state_update","subagentSessionId":"c1","state":"completed",
                        "_meta":{"cursor":{"agentId":"ag-other"}}}),
            ),
            Suppression::OriginMismatch,
        ),
        (
            "a state update naming another spawning tool call",
            vec![],
            on(
                ROOT,
                json!({"sessionUpdate":"subagent_state_update","subagentSessionId":"c1","state":"completed",
                        "_meta":{"cursor":{"toolCallId":"task-other"}}}),
            ),
            Suppression::OriginMismatch,
        ),
        (
            "a child update naming another agent",
            vec![],
            on(
                "c1",
                json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"forged"},
                        "_meta":{"cursor":{"agentId":"ag-other"}}}),
            ),
            Suppression::OriginMismatch,
        ),
        (
            "an ACP update for a child from another parent",
            vec![spawn(ROOT, "c2", "task-2", "ag-2")],
            on(
                "c2",
                json!({"sessionUpdate":"subagent_update","sessionId":"c1","title":"mine now"}),
            ),
            Suppression::OriginMismatch,
        ),
        (
            "a cursor/task naming another agent for the child's Task call",
            vec![],
            json!({"extension": {"toolCallId":"task-1","agentId":"ag-other","durationMs":5}}),
            Suppression::OriginMismatch,
        ),
        (
            "a second terminal state",
            vec![state(ROOT, "c1", "completed")],
            state(ROOT, "c1", "failed"),
            Suppression::AfterEnd,
        ),
        (
            "an ACP update for an ended child",
            vec![state(ROOT, "c1", "completed")],
            on(
                ROOT,
                json!({"sessionUpdate":"subagent_update","sessionId":"c1","title":"again"}),
            ),
            Suppression::AfterEnd,
        ),
        (
            "a cursor/task whose Task call id spawned two children",
            vec![spawn("c1", "g1", "task-1", "ag-g")],
            json!({"extension": {"toolCallId":"task-1","durationMs":5}}),
            Suppression::AmbiguousTask,
        ),
    ];
    for (name, setup, offending, reason) in cases {
        let mut n = with_child();
        for params in &setup {
            n.on_session_update(params);
        }
        let send = |n: &mut TurnNormalizer| match offending.get("extension") {
            Some(params) => n.on_extension("cursor/task", params),
            None => n.on_session_update(&offending),
        };
        let first = send(&mut n);
        let notice = only_notice(&first);
        assert_eq!(notice.category, reason.category(), "{name}");
        assert_eq!(notice.severity, Severity::Warning, "{name}");
        assert_eq!(n.suppressed(reason), 1, "{name}");
        assert!(send(&mut n).is_empty(), "{name}: the same suppression is noticed once");
        assert_eq!(n.suppressed(reason), 2, "{name}: and counted every time");
        let settled = n.finish(TurnEnding::Completed);
        let totals = settled
            .iter()
            .find_map(|e| match e {
                ActivityPayload::ProviderNotice(n) if n.category == "session_updates_suppressed" => Some(n),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{name}: finish totals the unnoticed suppression"));
        assert!(totals.summary.contains(&format!("{} ×2", reason.category())), "{name}");
        let completed = delegations(&settled).iter().filter(|(k, _)| *k == "completed").count();
        assert!(completed <= 2, "{name}: nothing of the suppression became a record");
    }
}

#[test]
fn a_routed_root_update_is_projected_as_the_roots_own() {
    let chunk = json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}});
    let routed = normalizer().on_session_update(&on(ROOT, chunk.clone()));
    assert_eq!(routed, normalizer().on_update(&chunk));
    assert!(routed.iter().all(|e| e.child_id().is_none()));
    assert_eq!(routed[0].item_id(), Some("t1:msg-1"));
}

#[test]
fn spawns_are_refused_while_no_turn_runs() {
    let mut between = normalizer().between_turns();
    let refused = between.on_session_update(&spawn(ROOT, "c1", "task-1", "ag-1"));
    assert_eq!(only_notice(&refused).category, "child_spawn_outside_turn");
    let announced = between.on_session_update(&on(ROOT, json!({"sessionUpdate":"subagent_update","sessionId":"c2"})));
    assert_eq!(only_notice(&announced).category, "child_spawn_outside_turn");
    assert_eq!(between.suppressed(Suppression::SpawnOutsideTurn), 2);
    assert_eq!(
        only_notice(&between.on_session_update(&text("c1", "hi"))).category,
        "unknown_session_update",
        "a refused child stays unknown"
    );

    let mut settled = with_child();
    settled.finish(TurnEnding::Completed);
    let late = settled.on_session_update(&spawn(ROOT, "c2", "task-2", "ag-2"));
    assert_eq!(only_notice(&late).category, "child_spawn_outside_turn");
}

#[test]
fn without_a_root_session_every_routed_update_is_refused_and_subagent_tags_stay_unclassified() {
    let mut n = TurnNormalizer::new("t1");
    let routed = n.on_session_update(&text(ROOT, "hi"));
    assert_eq!(only_notice(&routed).category, "unknown_session_update");
    let spawned = n.on_update(&spawn(ROOT, "c1", "task-1", "ag-1")["update"]);
    assert_eq!(only_notice(&spawned).category, "unclassified_acp_subagent_spawned");
}

#[test]
fn native_states_map_to_canonical_statuses_and_end_a_child_once() {
    let cases = [
        ("completed", DelegationStatus::Completed, false),
        ("failed", DelegationStatus::Failed, false),
        ("cancelled", DelegationStatus::Interrupted, true),
        ("disconnected", DelegationStatus::Failed, true),
    ];
    for (native, status, explained) in cases {
        let mut n = with_child();
        n.on_session_update(&text("c1", "partial"));
        let events = n.on_session_update(&state(ROOT, "c1", native));
        assert_eq!(types(&events), ["item.completed", "delegation.completed"], "{native}");
        let [("completed", record)] = delegations(&events)[..] else {
            panic!("{events:?}")
        };
        assert_eq!(record.status, status, "{native}");
        assert_eq!(record.native_state.as_deref(), Some(native));
        assert_eq!(record.explanation.is_some(), explained, "{native}");
        assert_eq!(record.action, Some(DelegationAction::Close));
        assert!(
            delegations(&n.finish(TurnEnding::Completed)).is_empty(),
            "{native}: settlement does not end it again"
        );
    }
}

#[test]
fn cursor_task_enriches_a_known_child_which_completes_exactly_once_in_either_order() {
    let task = json!({"toolCallId":"task-1","agentId":"ag-1","description":"Find auth","prompt":"Look",
            "subagentType":"explore","model":"m-small","durationMs":4210});
    for task_first in [true, false] {
        let mut n = with_child();
        let mut events = Vec::new();
        if task_first {
            events.extend(n.on_extension("cursor/task", &task));
            events.extend(n.on_session_update(&state(ROOT, "c1", "completed")));
        } else {
            events.extend(n.on_session_update(&state(ROOT, "c1", "completed")));
            events.extend(n.on_extension("cursor/task", &task));
        }
        events.extend(n.finish(TurnEnding::Completed));
        let records = delegations(&events);
        let kinds: Vec<&str> = records.iter().map(|(kind, _)| *kind).collect();
        let expected = if task_first {
            ["updated", "completed"]
        } else {
            ["completed", "updated"]
        };
        assert_eq!(kinds, expected);
        let (_, updated) = records.iter().find(|(kind, _)| *kind == "updated").unwrap();
        assert_eq!(updated.child_id, "c1");
        assert_eq!((updated.role.as_str(), updated.duration_ms), ("explore", Some(4210)));
        assert_eq!(updated.evidence, "cursor_task_metadata");
        let (_, completed) = records.iter().find(|(kind, _)| *kind == "completed").unwrap();
        assert_eq!(completed.status, DelegationStatus::Completed);
        assert_eq!(completed.duration_ms, task_first.then_some(4210));
    }
}

#[test]
fn cursor_task_for_no_known_child_is_the_metadata_completion() {
    let mut n = with_child();
    let events = n.on_extension("cursor/task", &json!({"toolCallId":"task-9","agentId":"ag-9"}));
    let [("completed", record)] = delegations(&events)[..] else {
        panic!("{events:?}")
    };
    assert_eq!(
        (record.child_id.as_str(), record.evidence.as_str()),
        ("ag-9", "cursor_task_metadata")
    );
}

#[test]
fn settlement_ends_open_children_grandchildren_first() {
    let mut n = with_child();
    n.on_session_update(&spawn("c1", "g1", "task-g", "ag-g"));
    n.on_session_update(&on(
        ROOT,
        json!({"sessionUpdate":"subagent_update","sessionId":"idle-child",
            "state":{"state":"idle"}}),
    ));
    n.on_session_update(&text("g1", "still working"));
    let events = n.finish(TurnEnding::Completed);
    let ended: Vec<(&str, DelegationStatus, &str)> = delegations(&events)
        .into_iter()
        .map(|(_, d)| (d.child_id.as_str(), d.status, d.evidence.as_str()))
        .collect();
    assert_eq!(
        ended,
        [
            ("idle-child", DelegationStatus::Closed, "turn_settled"),
            ("g1", DelegationStatus::Interrupted, "turn_settled"),
            ("c1", DelegationStatus::Interrupted, "turn_settled"),
        ]
    );
    let g1_closed = events
        .iter()
        .position(|e| matches!(e, ActivityPayload::ItemCompleted(b) if b.child_id.as_deref() == Some("g1")));
    let g1_ended = events
        .iter()
        .position(|e| matches!(e, ActivityPayload::DelegationCompleted(d) if d.child_id == "g1"));
    assert!(g1_closed < g1_ended, "its open text closes before it ends");
    assert!(
        n.finish(TurnEnding::Completed).is_empty(),
        "a second settlement yields nothing"
    );
}

#[test]
fn an_acp_child_waits_when_idle_runs_again_and_is_interrupted_at_settlement() {
    let mut n = normalizer();
    let announce = json!({"sessionUpdate":"subagent_update","sessionId":"a1","title":"Researcher",
            "description":"Survey","state":{"state":"running"}});
    let started = n.on_session_update(&on(ROOT, announce));
    let [("started", record)] = delegations(&started)[..] else {
        panic!("{started:?}")
    };
    assert_eq!(
        (record.name.as_deref(), record.task.as_deref(), record.evidence.as_str()),
        (Some("Researcher"), Some("Survey"), "acp_subagent_update")
    );
    let steps = [
        (json!({"state":"requires_action"}), Some(DelegationStatus::Waiting)),
        (json!({"state":"requires_action"}), None),
        (json!({"state":"running"}), Some(DelegationStatus::Running)),
        (json!({"state":"_custom","detail":1}), Some(DelegationStatus::Running)),
    ];
    for (patch, expected) in steps {
        let events = n.on_session_update(&on(
            ROOT,
            json!({"sessionUpdate":"subagent_update","sessionId":"a1","state":patch}),
        ));
        match expected {
            None => assert!(events.is_empty(), "an unchanged record emits nothing"),
            Some(status) => {
                let [("updated", record)] = delegations(&events)[..] else {
                    panic!("{events:?}")
                };
                assert_eq!(record.status, status, "{patch}");
            }
        }
    }
    let settled = n.finish(TurnEnding::Completed);
    let [("completed", record)] = delegations(&settled)[..] else {
        panic!("{settled:?}")
    };
    assert_eq!(
        (record.status, record.native_state.as_deref()),
        (DelegationStatus::Interrupted, Some("_custom"))
    );
}

#[test]
fn a_resumed_child_needs_the_agent_id_and_a_numbered_suffix() {
    let cases = [
        ("ag-1.2", Some(2), Some("c1"), DelegationAction::Resume),
        ("ag-1.x", None, None, DelegationAction::Spawn),
        ("ag-2.2", None, None, DelegationAction::Spawn),
    ];
    for (child, incarnation, resumed_from, action) in cases {
        let mut n = with_child();
        let events = n.on_session_update(&spawn(ROOT, child, "task-2", "ag-1"));
        let [("started", record)] = delegations(&events)[..] else {
            panic!("{events:?}")
        };
        assert_eq!(record.incarnation, incarnation, "{child}");
        assert_eq!(record.resumed_from.as_deref(), resumed_from, "{child}");
        assert_eq!(record.action, Some(action), "{child}");
    }
}

#[test]
fn child_for_attributes_by_session_then_by_a_tool_call_only_one_child_has() {
    let mut n = with_child();
    n.on_session_update(&spawn(ROOT, "c2", "task-2", "ag-2"));
    n.on_session_update(&tool(ROOT, "root-tool", "x"));
    n.on_session_update(&tool("c1", "c1-tool", "x"));
    n.on_session_update(&tool("c1", "shared", "x"));
    n.on_session_update(&tool("c2", "shared", "x"));
    n.on_session_update(&tool(ROOT, "everywhere", "x"));
    n.on_session_update(&tool("c1", "everywhere", "x"));
    let cases = [
        (Some("c1"), None, Some("c1")),
        (Some("c2"), Some("c1-tool"), Some("c2")),
        (Some(ROOT), Some("c1-tool"), Some("c1")),
        (None, Some("c1-tool"), Some("c1")),
        (None, Some("root-tool"), None),
        (None, Some("everywhere"), None),
        (None, Some("shared"), None),
        (None, Some("never-seen"), None),
        (None, None, None),
        (Some("elsewhere"), Some("c1-tool"), None),
    ];
    for (session, tool_call, child) in cases {
        let found = n.child_for(session, tool_call);
        assert_eq!(
            found.as_ref().map(|c| c.child_id.as_str()),
            child,
            "{session:?} {tool_call:?}"
        );
    }
    let c1 = n.child_for(Some("c1"), None).unwrap();
    assert_eq!(
        c1,
        ChildRef {
            child_id: "c1".into(),
            parent_id: ROOT.into(),
            parent_tool_call_id: Some("task-1".into()),
            agent_id: Some("ag-1".into()),
        }
    );
    assert!(n.knows_tool_call("root-tool") && n.knows_tool_call("c1-tool") && n.knows_tool_call("shared"));
    assert!(!n.knows_tool_call("never-seen"));
}

#[test]
fn todos_for_a_child_tool_call_update_that_childs_checklist() {
    let mut n = with_child();
    n.on_session_update(&tool("c1", "todo-tool", "updateTodos"));
    let todos = json!({"toolCallId":"todo-tool","merge":false,"todos":[{"id":"a","content":"A","status":"pending"}]});
    let events = n.on_extension("cursor/update_todos", &todos);
    let [ActivityPayload::PlanUpdated(plan)] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(plan.child_id.as_deref(), Some("c1"));
    assert_eq!(plan.plan_id, "t1:child-1:checklist");
    let root = n.on_extension("cursor/update_todos", &json!({"toolCallId":"unknown","todos":[]}));
    assert!(
        root.iter().all(|e| e.child_id().is_none()),
        "unattributable todos stay the root's"
    );
}

#[test]
fn the_child_bound_is_exact() {
    let mut n = normalizer();
    for i in 0..MAX_CHILDREN_PER_TURN {
        let events = n.on_session_update(&spawn(ROOT, &format!("c{i}"), &format!("t{i}"), &format!("a{i}")));
        assert_eq!(types(&events), ["delegation.started"], "child {i}");
    }
    let over = n.on_session_update(&spawn(ROOT, "one-more", "t", "a"));
    assert_eq!(only_notice(&over).category, "child_limit_reached");
    assert_eq!(n.suppressed(Suppression::ChildLimit), 1);
}

#[test]
fn suppression_notices_stop_at_their_bound_and_settlement_totals_the_rest() {
    for (sessions, totalled) in [(MAX_SUPPRESSION_NOTICES, false), (MAX_SUPPRESSION_NOTICES + 1, true)] {
        let mut n = normalizer();
        let notices: usize = (0..sessions)
            .map(|i| n.on_session_update(&text(&format!("foreign-{i}"), "x")).len())
            .sum();
        assert_eq!(notices, MAX_SUPPRESSION_NOTICES);
        assert_eq!(n.suppressed(Suppression::UnknownSession) as usize, sessions);
        let summary = n
            .finish(TurnEnding::Completed)
            .into_iter()
            .any(|e| matches!(e, ActivityPayload::ProviderNotice(n) if n.category == "session_updates_suppressed"));
        assert_eq!(summary, totalled, "{sessions}");
    }
}

#[test]
fn child_ids_are_taken_whole_at_the_bound_and_refused_beyond_it() {
    for (chars, admitted) in [(MAX_NAME_CHARS, true), (MAX_NAME_CHARS + 1, false)] {
        let mut n = normalizer();
        let events = n.on_session_update(&spawn(ROOT, &"é".repeat(chars), "task-1", "ag-1"));
        assert_eq!(types(&events) == ["delegation.started"], admitted, "{chars}");
    }
}

#[test]
fn a_300_kb_task_is_bounded_and_the_spawn_admitted() {
    for (chars, truncated) in [
        (MAX_DELEGATION_TASK_CHARS, false),
        (MAX_DELEGATION_TASK_CHARS + 1, true),
        (300 * 1024, true),
    ] {
        let mut n = normalizer();
        let update = on(
            ROOT,
            json!({"sessionUpdate":"subagent_spawned","subagentSessionId":"c1","task":"t".repeat(chars),
                    "_meta":{"cursor":{"toolCallId":"task-1","agentId":"ag-1"}}}),
        );
        let events = n.on_session_update(&update);
        let [("started", record)] = delegations(&events)[..] else {
            panic!("{chars}")
        };
        assert_eq!(record.task.as_ref().unwrap().chars().count(), MAX_DELEGATION_TASK_CHARS);
        assert_eq!(record.task_truncated, truncated, "{chars}");
        let noticed = events
            .iter()
            .any(|e| matches!(e, ActivityPayload::ProviderNotice(n) if n.category == "delegation_task_truncated"));
        assert_eq!(noticed, truncated, "{chars}");
    }
}

#[test]
fn the_activity_summary_keeps_its_tail_at_the_bound() {
    let summary_after = |chunks: &[String]| {
        let mut n = with_child();
        for chunk in chunks {
            n.on_session_update(&text("c1", chunk));
        }
        let events = n.on_session_update(&state(ROOT, "c1", "completed"));
        delegations(&events)[0].1.activity_summary.clone().unwrap()
    };
    let at = summary_after(&["a".repeat(MAX_ACTIVITY_SUMMARY_CHARS)]);
    assert!(!at.truncated);
    assert_eq!(at.text.chars().count(), MAX_ACTIVITY_SUMMARY_CHARS);
    let over = summary_after(&[format!("X{}", "a".repeat(MAX_ACTIVITY_SUMMARY_CHARS))]);
    assert!(over.truncated);
    assert_eq!(over.text.chars().count(), MAX_ACTIVITY_SUMMARY_CHARS);
    assert!(over.text.starts_with('…') && !over.text.contains('X'));
    let many: Vec<String> = (0..30).map(|i| format!("{i:03}{}", "b".repeat(397))).collect();
    let long = summary_after(&many);
    assert!(long.truncated);
    assert_eq!(long.text.chars().count(), MAX_ACTIVITY_SUMMARY_CHARS);
    assert!(long.text.ends_with(&many[29]), "the tail is the latest activity");
}

/// One child's valid updates, in order; every text, tool title and plan step names
/// the child (`marker`), so attribution can be checked from the events alone.
fn child_script(session: &str, parent: &str, marker: &str) -> Vec<Value> {
    let mut script = vec![text(session, &format!("[{marker}] hello "))];
    for step in 0..3 {
        script.push(on(
                session,
                json!({"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":format!("[{marker}] thinking {step} ")}}),
            ));
        // Every child uses the same tool call ids: they are session-local.
        script.push(tool(
            session,
            &format!("tool-{step}"),
            &format!("[{marker}] tool {step}"),
        ));
        script.push(text(session, &format!("[{marker}] text {step} ")));
        script.push(on(
            session,
            json!({"sessionUpdate":"tool_call_update","toolCallId":format!("tool-{step}"),"status":"completed",
                    "rawOutput":{"output":format!("[{marker}] out")}}),
        ));
    }
    script.push(on(
            session,
            json!({"sessionUpdate":"plan","entries":[{"content":format!("[{marker}] step"),"priority":"low","status":"pending"}]}),
        ));
    script.push(state(parent, session, "completed"));
    script
}

fn marker_of(text: &str) -> Option<&str> {
    text.strip_prefix('[')?.split(']').next()
}

#[test]
fn any_interleaving_keeps_every_event_with_its_own_child_and_none_in_the_parent_text() {
    let children = [("c1", ROOT), ("c2", ROOT), ("c3", ROOT), ("g1", "c1")];
    for seed in 1..=200u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut n = normalizer();
        let mut events = Vec::new();
        for (index, (child, parent)) in children.iter().enumerate() {
            events.extend(n.on_session_update(&spawn(parent, child, &format!("task-{index}"), &format!("ag-{child}"))));
        }
        let mut scripts: Vec<std::collections::VecDeque<Value>> = children
            .iter()
            .map(|(child, parent)| child_script(child, parent, child).into())
            .collect();
        scripts.push(
            (0..8)
                .map(|i| text(ROOT, &format!("[{ROOT}] root {i} ")))
                .collect::<Vec<_>>()
                .into(),
        );
        while scripts.iter().any(|s| !s.is_empty()) {
            let open: Vec<usize> = (0..scripts.len()).filter(|i| !scripts[*i].is_empty()).collect();
            let pick = open[rng.below(open.len() as u64) as usize];
            let params = scripts[pick].pop_front().unwrap();
            events.extend(n.on_session_update(&params));
        }
        events.extend(n.finish(TurnEnding::Completed));

        let mut item_owner: HashMap<String, Option<String>> = HashMap::new();
        let mut completed: HashMap<String, u32> = HashMap::new();
        for event in &events {
            let owner = event.child_id().map(str::to_owned);
            if let Some(item) = event.item_id() {
                let previous = item_owner.entry(item.to_owned()).or_insert_with(|| owner.clone());
                assert_eq!(*previous, owner, "seed {seed}: item {item} has one owner");
            }
            let expected = owner.as_deref().unwrap_or(ROOT);
            let named = match event {
                ActivityPayload::ItemDelta(d) => marker_of(&d.text),
                ActivityPayload::ToolStarted(t) | ActivityPayload::ToolCompleted(t) => marker_of(&t.name),
                ActivityPayload::PlanUpdated(p) => marker_of(&p.steps[0].body),
                ActivityPayload::DelegationCompleted(d) => {
                    *completed.entry(d.child_id.clone()).or_default() += 1;
                    None
                }
                ActivityPayload::ProviderNotice(notice) => panic!("seed {seed}: {notice:?}"),
                _ => None,
            };
            if let Some(named) = named {
                assert_eq!(named, expected, "seed {seed}: {event:?}");
            }
        }
        for (child, _) in children {
            assert_eq!(completed.get(child), Some(&1), "seed {seed}: {child} completes once");
        }
    }
}

/// A text chunk normalized without a tree yields what its tree yields, whoever's it is:
/// the root's, a spawned child's, a finished child's or an unknown session's, between
/// tool calls and lifecycle updates that open and close items.
#[test]
fn a_text_chunk_yields_what_its_tree_yields_in_every_session_and_state() {
    use cursor_runner_acp::{ChunkKind, TextChunk};
    let sessions = [ROOT, "child-1", "child-2", "stranger"];
    for seed in 1..100u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let (mut by_tree, mut by_chunk) = (normalizer(), normalizer());
        for step in 0..40 {
            let session = sessions[rng.below(sessions.len() as u64) as usize];
            let tree_only = match rng.below(6) {
                0 => Some(spawn(ROOT, "child-1", &format!("task-{step}"), "a1")),
                1 => Some(tool(session, &format!("call-{}", rng.below(3)), "Read")),
                2 => Some(state(ROOT, "child-1", ["running", "completed"][rng.below(2) as usize])),
                _ => None,
            };
            if let Some(update) = tree_only {
                assert_eq!(by_tree.on_session_update(&update), by_chunk.on_session_update(&update));
                continue;
            }
            let chunk = TextChunk {
                session_id: session.to_owned(),
                kind: [ChunkKind::AgentMessage, ChunkKind::AgentThought][rng.below(2) as usize],
                text: ["hi", "", "\u{1b}[31mred", &"x".repeat(MAX_ITEM_TEXT_CHARS + 1)][rng.below(4) as usize]
                    .to_owned(),
            };
            let expected = by_tree.on_session_update(&chunk.clone().into_params());
            assert_eq!(by_chunk.on_text_chunk(chunk), expected, "seed {seed} step {step}");
        }
        assert_eq!(
            by_tree.finish(TurnEnding::Completed),
            by_chunk.finish(TurnEnding::Completed)
        );
    }
}

/// Text chunks pushed onto one list as they come (`on_text_chunk_into`) make what the
/// coalescing of every update's own events makes, whoever's they are, with tool calls and
/// lifecycle updates between them and texts that fill the window or are cut to the bound.
#[test]
fn text_chunks_pushed_as_they_come_make_the_coalesced_events_of_their_trees() {
    use crate::coalesce::push_coalesced;
    use cursor_runner_acp::{ChunkKind, TextChunk};
    let sessions = [ROOT, ROOT, "child-1", "stranger"];
    let long = "y".repeat(5000);
    let cut = "x".repeat(MAX_ITEM_TEXT_CHARS + 1);
    for seed in 1..100u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let (mut by_tree, mut by_chunk) = (normalizer(), normalizer());
        let (mut expected, mut pushed) = (Vec::new(), Vec::new());
        for step in 0..60 {
            let session = sessions[rng.below(sessions.len() as u64) as usize];
            let tree_only = match rng.below(10) {
                0 => Some(spawn(ROOT, "child-1", &format!("task-{step}"), "a1")),
                1 => Some(tool(session, &format!("call-{}", rng.below(3)), "Read")),
                _ => None,
            };
            if let Some(update) = tree_only {
                push_coalesced(&mut expected, by_tree.on_session_update(&update));
                push_coalesced(&mut pushed, by_chunk.on_session_update(&update));
                continue;
            }
            let chunk = TextChunk {
                session_id: session.to_owned(),
                kind: [ChunkKind::AgentMessage, ChunkKind::AgentThought][rng.below(2) as usize],
                text: ["hi", "", "\u{1b}[31mred", &long, &cut][rng.below(5) as usize].to_owned(),
            };
            push_coalesced(&mut expected, by_tree.on_session_update(&chunk.clone().into_params()));
            by_chunk.on_text_chunk_into(chunk, &mut pushed);
            assert_eq!(pushed, expected, "seed {seed} step {step}");
        }
    }
}
