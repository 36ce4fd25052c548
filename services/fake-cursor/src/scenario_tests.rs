use nix::sys::signal::Signal;

use super::*;
use serde_json::json;

#[test]
fn a_transcript_plays_its_lines_as_one_turn_on_its_root_session_then_ends_the_turn() {
    let sc = Scenario::from_transcript(concat!(
        "{\"normalizer\":{\"rootSession\":\"sess-root\"}}\n",
        "{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{\"type\":\"text\",\"text\":\"hi\"}}\n",
        "\n",
        "{\"sessionId\":\"child-1\",\"update\":{\"sessionUpdate\":\"plan\",\"entries\":[]}}\n",
        "{\"sessionId\":\"sess-root\",\"update\":{\"sessionUpdate\":\"plan\",\"entries\":[]}}\n",
        "{\"extension\":{\"method\":\"cursor/task\",\"params\":{\"toolCallId\":\"t\"}}}\n",
    ))
    .unwrap();
    assert_eq!(sc.session_id, "sess-root");
    assert_eq!(sc.workspace_placeholder.as_deref(), Some(TRANSCRIPT_WORKSPACE));
    let sessions: Vec<_> = sc.turns[0]
        .iter()
        .map(|step| match step {
            Step::Update { session, .. } => format!("{session:?}"),
            Step::Request { method, id, .. } => format!("{method} {id:?}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        sessions,
        [
            "Default",
            "Id(\"child-1\")",
            "Default",
            "cursor/task None",
            "StopReason(\"end_turn\")"
        ]
    );
}

#[test]
fn a_transcript_the_agent_cannot_end_by_itself_is_refused() {
    for config in [
        r#"{"normalizer":{"betweenTurns":true}}"#,
        r#"{"normalizer":{"ending":"cancelled"}}"#,
    ] {
        assert!(Scenario::from_transcript(config).is_err(), "{config}");
    }
}

#[test]
fn parses_all_step_kinds() {
    let text = json!({
        "description": "all kinds",
        "turns": [[
            {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}},
            {"update": {"sessionUpdate": "plan", "entries": []}, "session_id": "child"},
            {"update": {"sessionUpdate": "plan", "entries": []}, "session_id": null},
            {"notify": {"method": "cursor/task", "params": {}}},
            {"request": {"method": "cursor/ask_question", "params": {}, "id": 0}, "expect": {"x": 1}},
            {"request": {"method": "cursor/task", "id": "s-1"}, "no_wait": true},
            {"await": "s-1", "expect": {}},
            {"raw": "not json"},
            {"raw_no_newline": "{\"jsonrpc\""},
            {"sleep_ms": 5},
            {"wait_for_cancel": true, "timeout_ms": 100},
            {"stop_reason": "end_turn"},
            {"prompt_error": {"code": -32603, "message": "boom"}},
            {"exit": 3, "stderr": "fatal"},
            {"crash": true},
            {"kill_self": "SIGKILL"},
            {"kill_self": "term"},
            {"hang": true, "comment": "forever"},
            {"flood": {"count": 3, "text": "y"}},
            {"flood": {"count": 3, "interval_us": 1000, "stamp": true}},
            {"spawn_sleeper": {"setsid": true, "ignore_sigterm": true}},
            {"env_report": true}
        ]]
    })
    .to_string();
    let s = Scenario::parse(&text).unwrap();
    assert_eq!(s.session_id, DEFAULT_SESSION_ID);
    assert_eq!(s.turns[0].len(), 22);
    assert_eq!(
        s.turns[0][2],
        Step::Update {
            update: json!({"sessionUpdate": "plan", "entries": []}),
            session: UpdateSession::Omit
        }
    );
    assert_eq!(s.turns[0][16], Step::KillSelf(Signal::SIGTERM));
    assert_eq!(
        s.turns[0][19],
        Step::Flood {
            count: 3,
            text: "x".into(),
            interval_us: Some(1000),
            stamp: true
        }
    );
}

#[test]
fn repeat_objects_expand_to_long_strings() {
    let sc = Scenario::parse(r#"{"turns":[[{"raw":{"$repeat":["ab",3]}}]]}"#).unwrap();
    assert!(matches!(&sc.turns[0][0], Step::Raw { text, .. } if text == "ababab"));
    assert!(Scenario::parse(r#"{"turns":[[{"raw":{"$repeat":["ab"]}}]]}"#).is_err());
}

#[test]
fn rejects_bad_steps() {
    for bad in [
        json!({}),
        json!({"update": {}, "raw": "x"}),
        json!({"update": {}, "sesion_id": "typo"}),
        json!({"request": {"params": {}}}),
        json!({"request": {"method": "m", "id": true}}),
        json!({"request": {"method": "m"}, "no_wait": true, "expect": {}}),
        json!({"await": null}),
        json!({"exit": "3"}),
        json!({"kill_self": "SIGNOPE"}),
        json!({"prompt_error": {"message": "no code"}}),
        json!({"crash": false}),
        json!({"flood": {"count": 1, "interval_us": -1}}),
        json!({"flood": {"count": 1, "stamp": "yes"}}),
    ] {
        let text = json!({"turns": [[bad.clone()]]}).to_string();
        assert!(Scenario::parse(&text).is_err(), "accepted {bad}");
    }
    assert!(Scenario::parse(r#"{"turns": [], "typo": 1}"#).is_err());
    assert!(Scenario::parse(r#"{"session_new_error": {"code": "x"}}"#).is_err());
}

#[test]
fn unanswered_methods_and_stopping_reading_stdin_are_parsed_and_off_by_default() {
    let sc = Scenario::parse(
        r#"{"unanswered_methods": ["cursor/list_available_models"], "stops_reading_stdin_after_session_new": true}"#,
    )
    .unwrap();
    assert_eq!(sc.unanswered_methods, ["cursor/list_available_models"]);
    assert!(sc.stops_reading_stdin_after_session_new);
    let plain = Scenario::parse("{}").unwrap();
    assert!(plain.unanswered_methods.is_empty() && !plain.stops_reading_stdin_after_session_new);
}

#[test]
fn a_session_id_asking_to_be_unique_differs_from_one_load_to_the_next() {
    let text = r#"{"session_id": "sess-{unique}", "turns": []}"#;
    let (first, second) = (Scenario::parse(text).unwrap(), Scenario::parse(text).unwrap());
    assert_eq!(first.session_id.len(), "sess-".len() + 16, "{}", first.session_id);
    assert!(first.session_id.starts_with("sess-"));
    assert_ne!(first.session_id, second.session_id);
}
