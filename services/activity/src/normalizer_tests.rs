use super::*;
use crate::test_events::{last_tool, notices};
use crate::test_rng::Rng;
use serde_json::json;

fn types(events: &[ActivityPayload]) -> Vec<String> {
    events.iter().map(|e| e.into_parts().0).collect()
}

#[test]
fn message_chunks_open_one_item_and_stream_deltas() {
    let mut n = TurnNormalizer::new("t1");
    let chunk = json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}});
    let first = n.on_update(&chunk);
    let second = n.on_update(&chunk);
    assert_eq!(types(&first), ["item.started", "item.delta"]);
    assert_eq!(types(&second), ["item.delta"]);
    assert_eq!(first[1].item_id(), second[0].item_id());
    assert_eq!(
        types(&n.finish(TurnEnding::Completed)),
        ["item.completed", "usage.reported"]
    );
}

#[test]
fn thought_chunks_are_reasoning_on_the_summary_channel() {
    let mut n = TurnNormalizer::new("t1");
    let events = n.on_update(&json!({"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hm"}}));
    match &events[1] {
        ActivityPayload::ItemDelta(d) => {
            assert_eq!(d.kind, ItemKind::Reasoning);
            assert_eq!(d.channel, Channel::Summary);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tool_status_table() {
    let cases = vec![
        (json!({"exitCode":0,"stdout":"ok"}), ToolStatus::Completed, None),
        (json!({"exitCode":2,"stdout":""}), ToolStatus::Failed, Some("exitCode")),
        (json!({"error":"boom"}), ToolStatus::Failed, Some("error")),
        (json!({"rejected":true}), ToolStatus::Failed, Some("rejected")),
        (
            json!({"permissionDenied":true}),
            ToolStatus::Failed,
            Some("permissionDenied"),
        ),
        (json!({"exitCode":"0"}), ToolStatus::Completed, None),
    ];
    for (raw_output, status, source) in cases {
        let mut n = TurnNormalizer::new("t");
        n.on_update(
            &json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","kind":"execute","status":"pending"}),
        );
        let events = n.on_update(
            &json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"completed","rawOutput":raw_output}),
        );
        let ActivityPayload::ToolCompleted(tool) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!(tool.status, status, "{raw_output}");
        assert_eq!(tool.failure_source.as_deref(), source, "{raw_output}");
    }
}

#[test]
fn a_resent_tool_call_updates_instead_of_duplicating() {
    let mut n = TurnNormalizer::new("t");
    let call = json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","kind":"read","status":"pending"});
    assert_eq!(types(&n.on_update(&call)), ["tool.execution.started"]);
    assert_eq!(types(&n.on_update(&call)), ["tool.execution.progressed"]);
}

#[test]
fn unknown_update_tags_become_unclassified_notices() {
    let mut n = TurnNormalizer::new("t");
    let events = n.on_update(&json!({"sessionUpdate":"subagent_deleted"}));
    let ActivityPayload::ProviderNotice(notice) = &events[0] else {
        panic!()
    };
    assert_eq!(notice.category, "unclassified_acp_subagent_deleted");
}

#[test]
fn a_tool_call_id_of_exactly_max_name_chars_is_kept_and_one_more_is_a_notice() {
    let longest = "t".repeat(MAX_NAME_CHARS);
    let mut n = TurnNormalizer::new("t");
    let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":longest,"title":"x"}));
    assert_eq!(last_tool(&events).tool_call_id, longest);
    for refused in [format!("{longest}t"), String::new(), "id\u{1b}[2J".to_owned()] {
        let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":refused,"title":"x"}));
        assert_eq!(types(&events), ["provider.notice.recorded"], "{refused:?}");
    }
    assert!(n.knows_tool_call(&longest));
}

#[test]
fn a_refused_tool_call_id_leaves_the_open_message_open() {
    let mut n = TurnNormalizer::new("t");
    n.on_update(&json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hi"}}));
    let refused = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"","title":"x"}));
    assert_eq!(types(&refused), ["provider.notice.recorded"]);
    let more = n.on_update(&json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"!"}}));
    assert_eq!(types(&more), ["item.delta"], "the same item goes on");
}

#[test]
fn a_malformed_known_update_is_a_notice_not_a_panic() {
    let mut n = TurnNormalizer::new("t");
    let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":5}));
    assert_eq!(types(&events), ["provider.notice.recorded"]);
}

fn ws() -> TurnNormalizer {
    TurnNormalizer::new("t1").with_workspace("/work/repo")
}

#[test]
fn a_resent_tool_call_merges_field_wise_and_keeps_what_it_does_not_repeat() {
    let mut n = ws();
    n.on_update(
        &json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"Read","kind":"read",
            "locations":[{"path":"/work/repo/src/lib.rs","line":3}],"rawInput":{"path":"src/lib.rs"}}),
    );
    let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"Read lib.rs"}));
    assert_eq!(types(&events), ["tool.execution.progressed"]);
    let tool = last_tool(&events);
    assert_eq!(tool.name, "Read lib.rs");
    assert_eq!(tool.operation, ToolOperation::Read);
    assert_eq!(tool.target.as_deref(), Some("src/lib.rs"));
    assert_eq!(tool.locations[0].line, Some(3));
    assert!(!tool.input_updated, "the input was not re-sent");
}

#[test]
fn input_updated_is_set_only_when_the_raw_input_changes_after_start() {
    let cases = [
        (json!({"command":"ls"}), json!({"command":"ls"}), false),
        (json!({"command":"ls"}), json!({"command":"ls -la"}), true),
        (json!({}), json!({"command":"ls"}), true),
    ];
    for (first, second, updated) in cases {
        let mut n = ws();
        let started = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","rawInput":first}));
        assert!(!last_tool(&started).input_updated);
        let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","rawInput":second}));
        assert_eq!(last_tool(&events).input_updated, updated, "{first} -> {second}");
    }
}

#[test]
fn locations_outside_the_workspace_are_omitted_counted_and_warned_once() {
    let mut n = ws();
    let update = json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","locations":[
            {"path":"/work/repo/a.rs"},{"path":"/home/agent/.cursor/secret"},{"path":"/work/repo2/b.rs"},{"path":"rel/c.rs"}]});
    let events = n.on_update(&update);
    let tool = last_tool(&events);
    let paths: Vec<_> = tool.locations.iter().map(|l| l.path.as_str()).collect();
    assert_eq!(paths, ["a.rs", "rel/c.rs"]);
    assert_eq!(tool.locations_omitted, 2);
    let warned = notices(&events);
    assert_eq!(warned.len(), 1);
    assert_eq!(warned[0].category, "tool_path_outside_workspace");
    assert!(!warned[0].summary.contains("/home"), "{}", warned[0].summary);
    assert!(notices(&n.on_update(&update)).is_empty(), "warned once per tool call");
}

#[test]
fn without_a_workspace_absolute_locations_are_omitted() {
    let mut n = TurnNormalizer::new("t1");
    let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x",
            "locations":[{"path":"/work/repo/a.rs"}]}));
    assert_eq!(last_tool(&events).locations_omitted, 1);
    assert!(notices(&events)[0].summary.contains("no workspace"));
}

#[test]
fn the_location_bound_is_exact() {
    let locations = |n: usize| -> Vec<Value> { (0..n).map(|i| json!({"path": format!("f{i}.rs")})).collect() };
    for (count, truncated) in [(MAX_TOOL_LOCATIONS, false), (MAX_TOOL_LOCATIONS + 1, true)] {
        let mut n = ws();
        let events = n
            .on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","locations":locations(count)}));
        let tool = last_tool(&events);
        assert_eq!(tool.locations.len(), MAX_TOOL_LOCATIONS);
        assert_eq!(tool.locations_truncated, truncated);
    }
}

#[test]
fn diff_blocks_are_projected_as_create_modify_and_delete() {
    let mut n = ws();
    let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"e","content":[
        {"type":"diff","path":"/work/repo/new.rs","oldText":null,"newText":"fn a() {}\n"},
        {"type":"diff","path":"/work/repo/old.rs","oldText":"x","newText":"y"},
        {"type":"diff","path":"/work/repo/gone.rs","oldText":"bye","newText":""},
        {"type":"diff","path":"/work/repo/absent_old.rs","newText":"z"},
        {"type":"diff","path":"/etc/passwd","oldText":"root","newText":"evil"},
        {"type":"diff","path":"/work/repo/bad.rs","oldText":"x"}
    ]}));
    let tool = last_tool(&events);
    let view: Vec<_> = tool
        .diffs
        .iter()
        .map(|d| (d.path.as_str(), d.change, d.old_text.as_deref(), d.new_text.as_deref()))
        .collect();
    assert_eq!(
        view,
        [
            ("new.rs", DiffChange::Create, None, Some("fn a() {}\n")),
            ("old.rs", DiffChange::Modify, Some("x"), Some("y")),
            ("gone.rs", DiffChange::Delete, Some("bye"), None),
            ("absent_old.rs", DiffChange::Create, None, Some("z")),
        ]
    );
    assert_eq!(tool.diffs_omitted, 2);
    assert_eq!(notices(&events).len(), 1, "only the outside path warns");
}

#[test]
fn diff_text_shares_one_byte_budget_and_keeps_full_byte_counts() {
    let big = "a".repeat(MAX_DIFF_TEXT_BYTES - 10);
    let mut n = ws();
    let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"e","content":[
        {"type":"diff","path":"a.rs","oldText":null,"newText":big},
        {"type":"diff","path":"b.rs","oldText":"0123456789abcdef","newText":"new"}
    ]}));
    let tool = last_tool(&events);
    assert!(!tool.diffs[0].truncated);
    let second = &tool.diffs[1];
    assert!(second.truncated);
    assert_eq!(second.old_text.as_deref(), Some("0123456789"));
    assert_eq!(second.old_text_bytes, Some(16));
    assert_eq!(second.new_text.as_deref(), Some(""));
    assert_eq!(second.new_text_bytes, Some(3));
    let kept: usize = tool
        .diffs
        .iter()
        .flat_map(|d| [d.old_text.as_deref(), d.new_text.as_deref()])
        .flatten()
        .map(str::len)
        .sum();
    assert_eq!(kept, MAX_DIFF_TEXT_BYTES);
}

#[test]
fn the_diff_and_artifact_bounds_are_exact() {
    let diffs = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"type":"diff","path":format!("f{i}.rs"),"oldText":"a","newText":"b"}))
            .collect()
    };
    let images = |n: usize| -> Vec<Value> {
        (0..n)
                .map(|i| json!({"type":"content","content":{"type":"image","data":"AA","mimeType":"image/png","uri":format!("file:///work/repo/{i}.png")}}))
                .collect()
    };
    for (extra, omitted) in [(0, 0), (1, 1)] {
        let content: Vec<Value> = diffs(MAX_TOOL_DIFFS + extra)
            .into_iter()
            .chain(images(MAX_TOOL_ARTIFACTS + extra))
            .collect();
        let events = ws().on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","content":content}));
        let tool = last_tool(&events);
        assert_eq!((tool.diffs.len(), tool.diffs_omitted), (MAX_TOOL_DIFFS, omitted));
        assert_eq!(
            (tool.artifacts.len(), tool.artifacts_omitted),
            (MAX_TOOL_ARTIFACTS, omitted)
        );
        assert!(notices(&events).is_empty(), "a bound is not an outside path");
    }
}

#[test]
fn a_path_longer_than_its_bound_is_omitted() {
    let long = format!("/work/repo/{}", "d".repeat(MAX_PATH_CHARS + 1));
    let at = format!("/work/repo/{}", "d".repeat(MAX_PATH_CHARS));
    let events = ws().on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x",
            "locations":[{"path":long},{"path":at}]}));
    let tool = last_tool(&events);
    assert_eq!(tool.locations.len(), 1);
    assert_eq!(tool.locations[0].path.chars().count(), MAX_PATH_CHARS);
    assert_eq!(tool.locations_omitted, 1);
}

#[test]
fn the_config_option_bound_is_exact() {
    for (count, omitted) in [(MAX_CONFIG_OPTIONS, 0), (MAX_CONFIG_OPTIONS + 1, 1)] {
        let options: Vec<_> = (0..count)
            .map(|i| json!({"id": format!("o{i}"), "type":"boolean","currentValue":true}))
            .collect();
        let events = ws().on_update(&json!({"sessionUpdate":"config_option_update","configOptions":options}));
        let ActivityPayload::SessionConfigUpdated(c) = &events[0] else {
            panic!()
        };
        assert_eq!(
            (c.config_options.len(), c.options_omitted),
            (MAX_CONFIG_OPTIONS, omitted)
        );
    }
}

/// Every option at its value bound, every value and name at the name bound: the update
/// would be megabytes; values past the update's own budget are omitted and counted, and
/// what is kept stays within it.
#[test]
fn one_config_update_lists_values_up_to_its_character_budget_and_counts_the_rest() {
    let long = "v".repeat(MAX_NAME_CHARS);
    let options: Vec<_> = (0..MAX_CONFIG_OPTIONS)
        .map(|i| {
            let values: Vec<_> = (0..MAX_CONFIG_OPTION_VALUES)
                .map(|j| json!({"value": format!("{j}{long}"), "name": long}))
                .collect();
            json!({"id": format!("o{i}"), "type": "select", "currentValue": "x", "options": values})
        })
        .collect();
    let events = ws().on_update(&json!({"sessionUpdate":"config_option_update","configOptions":options}));
    let ActivityPayload::SessionConfigUpdated(c) = &events[0] else {
        panic!()
    };
    let kept: usize = c
        .config_options
        .iter()
        .flat_map(|o| &o.values)
        .map(|v| v.value.chars().count() + v.name.as_deref().map_or(0, |n| n.chars().count()))
        .sum();
    let listed: usize = c.config_options.iter().map(|o| o.values.len()).sum();
    let omitted: u32 = c.config_options.iter().map(|o| o.values_omitted).sum();
    assert!(kept <= MAX_CONFIG_UPDATE_VALUE_CHARS, "{kept}");
    assert!(
        kept + 2 * MAX_NAME_CHARS > MAX_CONFIG_UPDATE_VALUE_CHARS,
        "the budget is used, not wasted: {kept}"
    );
    assert_eq!(listed + omitted as usize, MAX_CONFIG_OPTIONS * MAX_CONFIG_OPTION_VALUES);
    assert_eq!(
        c.config_options.len(),
        MAX_CONFIG_OPTIONS,
        "every option is still named"
    );
}

#[test]
fn text_content_is_the_output_only_until_raw_output_has_text() {
    let mut n = ws();
    let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x",
            "content":[{"type":"content","content":{"type":"text","text":"found 3 files"}}]}));
    let tool = last_tool(&events);
    assert_eq!(tool.output.as_ref().unwrap().output, "found 3 files");
    assert_eq!(tool.output_source, Some(OutputSource::Content));
    let events = n.on_update(
        &json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"completed",
            "rawOutput":{"stdout":"a\nb\nc\n"}}),
    );
    let tool = last_tool(&events);
    assert_eq!(tool.output.as_ref().unwrap().output, "a\nb\nc\n");
    assert_eq!(tool.output_source, Some(OutputSource::RawOutput));
}

#[test]
fn media_and_resource_blocks_become_references_without_their_bytes() {
    let mut n = ws();
    let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","content":[
            {"type":"content","content":{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png","uri":"file:///work/repo/shot.png"}},
            {"type":"content","content":{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}},
            {"type":"content","content":{"type":"resource_link","uri":"https://example.com/doc","name":"doc"}},
            {"type":"content","content":{"type":"resource","resource":{"uri":"file:///work/repo/notes.md","text":"secret body"}}},
            {"type":"content","content":{"type":"resource_link","uri":"file:///home/agent/x.png","name":"x"}},
            {"type":"content","content":{"type":"resource_link","uri":"data:text/plain,hi","name":"d"}}
        ]}));
    let tool = last_tool(&events);
    let view: Vec<_> = tool
        .artifacts
        .iter()
        .map(|a| {
            (
                a.kind,
                a.reference.as_deref(),
                a.uri.as_deref(),
                a.inline_data_omitted,
                a.registered,
            )
        })
        .collect();
    assert_eq!(
        view,
        [
            (ArtifactRefKind::Image, Some("shot.png"), None, true, false),
            (ArtifactRefKind::Image, None, None, true, false),
            (
                ArtifactRefKind::ResourceLink,
                None,
                Some("https://example.com/doc"),
                false,
                false
            ),
            (ArtifactRefKind::Resource, Some("notes.md"), None, true, false),
        ]
    );
    assert_eq!(tool.artifacts_omitted, 2);
    let serialized = serde_json::to_string(tool).unwrap();
    assert!(!serialized.contains("iVBOR") && !serialized.contains("secret body"));
    assert_eq!(notices(&events).len(), 1);
}

#[test]
fn exit_codes_are_kept_only_when_validated_integers() {
    let cases = [
        (json!({"exitCode":0}), Some(0)),
        (json!({"exitCode":-1}), Some(-1)),
        (json!({"exitCode":1.0}), None),
        (json!({"exitCode":"1"}), None),
        (json!({"exitCode":4_294_967_296u64}), None),
        (json!({"exitCode":null}), None),
        (json!({"exit_code":3}), Some(3)),
        (json!({"exit_code":"3"}), None),
        (json!({"exitCode":0,"exit_code":3}), Some(0)),
    ];
    for (raw, code) in cases {
        let mut n = ws();
        let events = n.on_update(
            &json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","status":"completed","rawOutput":raw}),
        );
        assert_eq!(last_tool(&events).exit_code, code, "{raw}");
    }
}

#[test]
fn failure_is_derived_from_the_last_raw_output_even_when_status_comes_later() {
    let mut n = ws();
    n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","kind":"execute"}));
    n.on_update(
        &json!({"sessionUpdate":"tool_call_update","toolCallId":"a","rawOutput":{"exitCode":1,"stderr":"boom"}}),
    );
    let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"completed"}));
    assert_eq!(types(&events), ["tool.execution.completed"]);
    let tool = last_tool(&events);
    assert_eq!(tool.status, ToolStatus::Failed);
    assert_eq!(tool.failure_source.as_deref(), Some("exitCode"));
    assert_eq!(tool.exit_code, Some(1));
}

#[test]
fn a_tool_completes_once_and_later_updates_only_progress() {
    let mut n = ws();
    let first = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"x","status":"completed"}));
    assert_eq!(types(&first), ["tool.execution.started", "tool.execution.completed"]);
    let ActivityPayload::ToolStarted(started) = &first[0] else {
        panic!()
    };
    assert_eq!(
        started.status,
        ToolStatus::Running,
        "a started event never claims a terminal status"
    );
    let later = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"in_progress"}));
    assert_eq!(types(&later), ["tool.execution.progressed"]);
    assert_eq!(last_tool(&later).status, ToolStatus::Completed);
    let again = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"a","status":"completed"}));
    assert_eq!(types(&again), ["tool.execution.progressed"]);
}

#[test]
fn a_first_update_for_an_unknown_tool_starts_it() {
    let mut n = ws();
    let events = n.on_update(&json!({"sessionUpdate":"tool_call_update","toolCallId":"z","status":"in_progress"}));
    assert_eq!(types(&events), ["tool.execution.started"]);
}

#[test]
fn agent_text_with_terminal_escapes_is_neutralized_and_flagged() {
    let mut n = ws();
    let events = n.on_update(
            &json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"ok\u{1b}]0;pwned\u{7}\u{1b}[2J"}}),
        );
    let ActivityPayload::ItemDelta(delta) = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(delta.text, "ok␛]0;pwned␇␛[2J");
    assert!(delta.sanitized);
    let clean = n.on_update(&json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"fine"}}));
    let (_, payload) = clean[0].into_parts();
    assert!(
        payload.get("sanitized").is_none(),
        "the flag is absent when nothing was replaced"
    );
    let tool = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":"run \u{9b}31m"}));
    let tool = last_tool(&tool);
    assert_eq!(tool.name, "run \u{fffd}31m");
    assert!(tool.sanitized);
}

#[test]
fn tool_titles_are_bounded_with_a_marker() {
    let mut n = ws();
    let title = "t".repeat(MAX_NAME_CHARS + 1);
    let events = n.on_update(&json!({"sessionUpdate":"tool_call","toolCallId":"a","title":title}));
    let name = &last_tool(&events).name;
    assert_eq!(name.chars().count(), MAX_NAME_CHARS);
    assert!(name.ends_with('…'));
}

#[test]
fn todos_and_acp_plans_feed_one_checklist_with_increasing_revisions() {
    let mut n = ws();
    let a =
        n.on_update(&json!({"sessionUpdate":"plan","entries":[{"content":"A","priority":"high","status":"pending"}]}));
    let b = n.on_extension(
        "cursor/update_todos",
        &json!({"toolCallId":"t","merge":true,"todos":[{"id":"x","content":"X","status":"cancelled"}]}),
    );
    let revisions: Vec<_> = a
        .iter()
        .chain(b.iter())
        .filter_map(|e| match e {
            ActivityPayload::PlanUpdated(p) => Some((p.plan_id.clone(), p.revision, p.steps.len())),
            _ => None,
        })
        .collect();
    assert_eq!(
        revisions,
        [("t1:checklist".to_owned(), 1, 1), ("t1:checklist".to_owned(), 2, 2)]
    );
}

#[test]
fn cursor_task_is_delegation_metadata_not_proof_of_success() {
    let cases = [
        (
            json!({"toolCallId":"task-1","agentId":"ag-1","description":"Find auth","prompt":"Look for auth code",
                    "subagentType":"explore","model":"m-small","durationMs":1234}),
            ("ag-1", "explore", None, Some(1234)),
        ),
        (
            json!({"toolCallId":"task-2","description":"d","subagentType":{"custom":"reviewer"},"durationMs":12.6}),
            ("task-2", "custom", Some("reviewer"), Some(13)),
        ),
        (
            json!({"toolCallId":"task-3","subagentType":42,"durationMs":"5"}),
            ("task-3", "unknown", None, None),
        ),
    ];
    for (params, (child, role, name, duration)) in cases {
        let events = ws().on_extension("cursor/task", &params);
        let ActivityPayload::DelegationCompleted(d) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!(
            (d.child_id.as_str(), d.role.as_str(), d.name.as_deref(), d.duration_ms),
            (child, role, name, duration),
            "{params}"
        );
        assert_eq!(d.status, DelegationStatus::Completed);
        assert_eq!(d.evidence, "cursor_task_metadata");
    }
    let events = ws().on_extension("cursor/task", &json!({"description":"orphan"}));
    assert_eq!(notices(&events)[0].category, "malformed_cursor_extension");
}

#[test]
fn a_long_task_description_is_bounded_and_marked() {
    let description = "d".repeat(MAX_DELEGATION_TASK_CHARS + 1);
    let events = ws().on_extension("cursor/task", &json!({"toolCallId":"t","description":description}));
    let ActivityPayload::DelegationCompleted(d) = &events[0] else {
        panic!()
    };
    assert_eq!(d.task.as_ref().unwrap().chars().count(), MAX_DELEGATION_TASK_CHARS);
    assert!(d.task_truncated);
}

#[test]
fn other_extension_methods_are_notices() {
    let events = ws().on_extension("cursor/generate_image", &json!({}));
    assert_eq!(notices(&events)[0].category, "unprojected_cursor_extension");
}

#[test]
fn session_metadata_updates_become_their_families() {
    let mut n = ws();
    let cases = [
        (
            json!({"sessionUpdate":"current_mode_update","currentModeId":"plan"}),
            "review.mode.changed",
        ),
        (
            json!({"sessionUpdate":"config_option_update","configOptions":[{"id":"model","name":"Model","category":"model",
                    "type":"select","currentValue":"gpt[effort=high]","options":[{"value":"gpt[effort=high]","name":"GPT"},
                    {"group":"more","name":"More","options":[{"value":"m2","name":"M2"}]}]}]}),
            "session.config.updated",
        ),
        (
            json!({"sessionUpdate":"session_info_update","title":"Fix the build"}),
            "session.info.updated",
        ),
        (
            json!({"sessionUpdate":"available_commands_update","availableCommands":[{"name":"review","description":"Review","input":{"hint":"path"}}]}),
            "session.commands.updated",
        ),
    ];
    for (update, family) in cases {
        let events = n.on_update(&update);
        assert_eq!(types(&events), [family], "{update}");
    }
    let events = n.on_update(&json!({"sessionUpdate":"current_mode_update","currentModeId":"agent"}));
    let ActivityPayload::ReviewModeChanged(mode) = &events[0] else {
        panic!()
    };
    assert_eq!(mode.previous_mode_id.as_deref(), Some("plan"));
}

#[test]
fn config_values_are_flattened_from_groups() {
    let events = ws().on_update(&json!({"sessionUpdate":"config_option_update","configOptions":[{"id":"m","type":"select",
            "currentValue":"a","options":[{"value":"a"},{"group":"g","name":"G","options":[{"value":"b"},{"value":"c"}]},{"name":"no value"}]},
            {"name":"no id"}, {"id":"fast","type":"boolean","currentValue":true}]}));
    let ActivityPayload::SessionConfigUpdated(config) = &events[0] else {
        panic!()
    };
    let values: Vec<_> = config.config_options[0]
        .values
        .iter()
        .map(|v| v.value.as_str())
        .collect();
    assert_eq!(values, ["a", "b", "c"]);
    assert_eq!(config.config_options[0].values_omitted, 1);
    assert_eq!(config.options_omitted, 1);
    assert_eq!(config.config_options[1].current_value, Some(json!(true)));
}

#[test]
fn session_info_distinguishes_a_cleared_title_from_an_absent_one() {
    let mut n = ws();
    let cleared =
        n.on_update(&json!({"sessionUpdate":"session_info_update","title":null,"updatedAt":"2026-09-28T10:00:00Z"}));
    let ActivityPayload::SessionInfoUpdated(info) = &cleared[0] else {
        panic!()
    };
    assert!(info.title_cleared && info.title.is_none());
    assert_eq!(info.updated_at.as_deref(), Some("2026-09-28T10:00:00Z"));
    assert!(!info.updated_at_cleared);
    assert!(
        n.on_update(&json!({"sessionUpdate":"session_info_update","_meta":{"cursor":{"requestId":"r"}}}))
            .is_empty()
    );
}

#[test]
fn the_command_bound_is_exact() {
    for (count, omitted) in [(MAX_SESSION_COMMANDS, 0), (MAX_SESSION_COMMANDS + 1, 1)] {
        let list: Vec<_> = (0..count).map(|i| json!({"name": format!("c{i}")})).collect();
        let events = ws().on_update(&json!({"sessionUpdate":"available_commands_update","availableCommands":list}));
        let ActivityPayload::SessionCommandsUpdated(c) = &events[0] else {
            panic!()
        };
        assert_eq!((c.commands.len(), c.commands_omitted), (MAX_SESSION_COMMANDS, omitted));
    }
}

#[test]
fn usage_is_unavailable_without_token_fields_when_nothing_was_reported() {
    let mut n = ws();
    let events = n.finish(TurnEnding::Completed);
    let (event_type, payload) = events.last().unwrap().into_parts();
    assert_eq!(event_type, "usage.reported");
    assert_eq!(
        payload,
        json!({"turnId":"t1","requestCountSource":"unavailable","providerCostStatus":"unpriced",
                "providerCostUnavailableReason":"cursor_reports_no_usage"})
    );
    assert!(
        n.finish(TurnEnding::Completed).is_empty(),
        "exactly one usage.reported per turn"
    );
}

#[test]
fn a_usage_update_is_projected_faithfully_once_at_settlement() {
    let mut n = ws();
    assert!(
        n.on_update(&json!({"sessionUpdate":"usage_update","used":100,"size":200000}))
            .is_empty()
    );
    assert!(
        n.on_update(
            &json!({"sessionUpdate":"usage_update","used":1500,"size":200000,"cost":{"amount":0.25,"currency":"USD"}})
        )
        .is_empty()
    );
    let events = n.finish(TurnEnding::Completed);
    assert_eq!(types(&events), ["usage.reported"]);
    let (_, payload) = events[0].into_parts();
    assert_eq!(
        payload,
        json!({"turnId":"t1","requestCountSource":"unavailable","providerCostStatus":"reported",
                "usageSource":"acp_usage_update","used":1500,"size":200000,"cost":{"amount":0.25,"currency":"USD"}})
    );
    let bad = n.on_update(&json!({"sessionUpdate":"usage_update","used":"lots"}));
    assert_eq!(notices(&bad)[0].category, "malformed_acp_update");
}

/// Arbitrary JSON, biased towards the keys and values the normalizer looks at.
fn arbitrary_value(rng: &mut Rng, depth: u32) -> Value {
    let pick = if depth == 0 { rng.below(5) } else { rng.below(7) };
    match pick {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => json!(rng.next() as i64 >> rng.below(64)),
        3 => json!((rng.next() as f64) / 7.0 - 1e18),
        4 => {
            let words = [
                "",
                "a",
                "\u{1b}[31m",
                "/work/repo/x",
                "/etc/passwd",
                "../x",
                "cancelled",
                "completed",
                "diff",
                "text",
                "image",
                "file:///work/repo/i.png",
                "custom",
                "é🎉",
            ];
            json!(words[rng.below(words.len() as u64) as usize])
        }
        5 => Value::Array((0..rng.below(4)).map(|_| arbitrary_value(rng, depth - 1)).collect()),
        _ => {
            let keys = [
                "sessionUpdate",
                "toolCallId",
                "title",
                "kind",
                "status",
                "content",
                "locations",
                "rawInput",
                "rawOutput",
                "entries",
                "todos",
                "merge",
                "id",
                "path",
                "oldText",
                "newText",
                "type",
                "uri",
                "exitCode",
                "error",
                "configOptions",
                "availableCommands",
                "currentModeId",
                "used",
                "cost",
            ];
            let mut map = serde_json::Map::new();
            for _ in 0..rng.below(6) {
                let key = keys[rng.below(keys.len() as u64) as usize];
                map.insert(key.to_owned(), arbitrary_value(rng, depth - 1));
            }
            Value::Object(map)
        }
    }
}

#[test]
fn random_todo_sequences_keep_revisions_increasing_and_within_the_step_bound() {
    let statuses = ["pending", "in_progress", "completed", "cancelled", "weird"];
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut n = ws();
        let mut last_revision = 0;
        for _ in 0..60 {
            let count = rng.below(MAX_PLAN_STEPS as u64 + 40);
            let todos: Vec<Value> = (0..count)
                .map(|_| {
                    json!({"id": format!("t{}", rng.below(400)), "content": "step",
                            "status": statuses[rng.below(statuses.len() as u64) as usize]})
                })
                .collect();
            let events = if rng.below(5) == 0 {
                let entries: Vec<Value> = todos
                    .iter()
                    .map(|t| json!({"content": t["content"], "status": t["status"], "priority":"low"}))
                    .collect();
                n.on_update(&json!({"sessionUpdate":"plan","entries":entries}))
            } else {
                n.on_extension(
                    "cursor/update_todos",
                    &json!({"todos": todos, "merge": rng.below(2) == 0}),
                )
            };
            for event in events {
                if let ActivityPayload::PlanUpdated(plan) = event {
                    assert!(plan.revision > last_revision, "seed {seed}");
                    last_revision = plan.revision;
                    assert!(plan.steps.len() <= MAX_PLAN_STEPS, "seed {seed}");
                }
            }
        }
    }
}

#[test]
fn arbitrary_json_never_panics_the_normalizer() {
    let tags = [
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "available_commands_update",
        "usage_update",
        "subagent_spawned",
        "subagent_state_update",
        "subagent_update",
    ];
    let sessions = ["root", "c0", "c1", "elsewhere"];
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0xd1b5_4a32_d192_ed03));
        let mut n = ws().with_root_session("root");
        for _ in 0..30 {
            let mut value = arbitrary_value(&mut rng, 4);
            if let (Some(map), true) = (value.as_object_mut(), rng.below(3) > 0) {
                map.insert(
                    "sessionUpdate".into(),
                    json!(tags[rng.below(tags.len() as u64) as usize]),
                );
                map.insert("toolCallId".into(), json!(format!("tc{}", rng.below(3))));
                map.insert("subagentSessionId".into(), json!(format!("c{}", rng.below(2))));
                map.insert("_meta".into(), json!({"cursor": {"toolCallId": "tc0", "agentId": "a"}}));
            }
            let events = if rng.below(2) == 0 {
                n.on_update(&value)
            } else {
                let session = sessions[rng.below(sessions.len() as u64) as usize];
                n.on_session_update(&json!({"sessionId": session, "update": value}))
            };
            for event in events {
                let _ = event.into_parts();
            }
            let method = ["cursor/update_todos", "cursor/task", "cursor/x"][rng.below(3) as usize];
            for event in n.on_extension(method, &value) {
                let _ = event.into_parts();
            }
        }
        let _ = n.finish(TurnEnding::Completed);
    }
}
