//! Our canonical spellings against the Paperclip runner protocol (PRP).
//!
//! - Against the protocol itself: the shared spec (`shared/spec/paperclip-runner.md`) is
//!   parsed for the event families, payload fields and closed values it writes, and
//!   compared with what our events actually serialize. Every difference is listed once, with
//!   why, in `prp_differences.tsv`; an unlisted difference or a stale entry fails.
//! - Against our own doc: every canonical event type and every value of a closed payload
//!   enum has a row in docs/prp-mapping.md, which mirrors the list of differences.

use std::collections::BTreeSet;

use cursor_runner_activity::{
    ActivityPayload, ActivitySummary, ArtifactGenerated, ArtifactRefKind, ArtifactViewed, Channel, Delegation,
    DelegationAction, DelegationStatus, DiffChange, EVENT_TYPES, EXTENSION_EVENT_TYPES, InteractionKind, ItemBoundary,
    ItemDelta, ItemKind, NoticeScope, OutputSource, PlanSource, PlanStep, PlanUpdated, ProcessExited, ProcessReleased,
    ProcessSpawned, ProviderDiff, ProviderNotice, ReportedCost, ReviewModeChanged, RuntimeRequestCreated,
    RuntimeRequestEnded, RuntimeRequestResolved, SessionCommandsUpdated, SessionConfigUpdated, SessionInfoUpdated,
    SessionLoaded, Severity, StepPriority, StepStatus, ToolArtifactRef, ToolExecution, ToolLocation, ToolOperation,
    ToolStatus, TurnFailureReason, TurnSettled, TurnStarted, UsageReported, bound_output,
};
use serde_json::{Value, json};

const MAPPING_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/prp-mapping.md");

fn mapping_doc() -> String {
    std::fs::read_to_string(MAPPING_DOC).expect("docs/prp-mapping.md exists")
}

/// The cells of each table row under the `## {heading}` section, up to the next section.
fn section_rows(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let start = doc
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("no `## {heading}` section"));
    let section = &doc[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |at| at + 3);
    section[..end]
        .lines()
        .filter(|line| line.starts_with('|') && !line.starts_with("|---"))
        .skip(1)
        .map(|line| {
            line.trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().trim_matches('`').to_owned())
                .collect()
        })
        .collect()
}

fn mapping_rows() -> Vec<(String, String)> {
    mapping_doc()
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let ours = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let theirs = cells.get(2)?.trim_matches('`');
            Some((ours.to_owned(), theirs.to_owned()))
        })
        .collect()
}

/// The doc's event table is complete and agrees with our extension list. It is our own
/// record: the spellings themselves are checked against PRP's spec further down.
#[test]
fn every_event_type_has_a_row_in_the_mapping_doc() {
    let rows = mapping_rows();
    for event_type in EVENT_TYPES {
        let (_, theirs) = rows
            .iter()
            .find(|(ours, _)| ours == event_type)
            .unwrap_or_else(|| panic!("{event_type} has no row in docs/prp-mapping.md"));
        if EXTENSION_EVENT_TYPES.contains(event_type) {
            assert_eq!(theirs, "extension", "{event_type} is an extension");
        } else {
            assert_eq!(theirs, event_type, "{event_type} keeps PRP's spelling");
        }
    }
}

/// One closed payload enum: its name and every variant as serialized. The match fails to
/// compile when a variant is added without being listed here, and so in the doc.
macro_rules! payload_enum {
    ($enum:ident: $($variant:ident),+ $(,)?) => {{
        let _every_variant_is_listed = |value: $enum| match value {
            $($enum::$variant => ()),+
        };
        (stringify!($enum), vec![$(serialized(&$enum::$variant)),+])
    }};
}

fn serialized(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value).expect("serializes") {
        serde_json::Value::String(text) => text,
        other => panic!("a payload enum serializes as a string, not {other}"),
    }
}

fn payload_enums() -> Vec<(&'static str, Vec<String>)> {
    vec![
        payload_enum!(ItemKind: AgentMessage, Reasoning),
        payload_enum!(Channel: Progress, Summary),
        payload_enum!(ToolOperation: Read, Search, List, Execute, Edit, Unknown),
        payload_enum!(ToolStatus: Running, Completed, Failed, Cancelled, Interrupted),
        payload_enum!(OutputSource: RawOutput, Content),
        payload_enum!(DiffChange: Create, Modify, Delete),
        payload_enum!(ArtifactRefKind: Image, Audio, ResourceLink, Resource),
        payload_enum!(InteractionKind: Question, Plan, Permission),
        payload_enum!(Severity: Info, Warning, Error),
        payload_enum!(NoticeScope: Turn, Session, Environment, Account),
        payload_enum!(StepStatus: Pending, InProgress, Completed, Blocked),
        payload_enum!(StepPriority: High, Medium, Low),
        payload_enum!(PlanSource: AcpPlan, CursorTodos),
        payload_enum!(DelegationStatus: Running, Waiting, Completed, Failed, Interrupted, Closed),
        payload_enum!(DelegationAction: Spawn, Resume, Wait, Close),
        payload_enum!(
            TurnFailureReason: AuthRequired,
            AgentExited,
            AgentUnresponsive,
            ProviderLost,
            ProtocolError,
            CancelTimeout,
            ReplacedByNewTurn,
            ServiceDraining,
            DeadlineExceeded,
            BudgetExhausted,
            AgentIdle,
            StoreUnavailable,
            ExecutionClosed,
        ),
    ]
}

/// Enums whose values PRP spells differently, with PRP's spellings (its `requestKind`).
const RESPELLED_FOR_PRP: &[(&str, &[&str])] = &[("InteractionKind", &["user_input", "permission_approval"])];

/// The doc's payload enum table is complete and agrees with itself; PRP's own values are
/// checked against the spec further down.
#[test]
fn every_payload_enum_value_has_a_row_in_the_mapping_doc() {
    let rows = section_rows(&mapping_doc(), "Payload enum values");
    for (name, values) in payload_enums() {
        for value in values {
            let row = rows
                .iter()
                .find(|row| row[0] == name && row[1] == value)
                .unwrap_or_else(|| panic!("{name} `{value}` has no row in docs/prp-mapping.md"));
            let prp = row[2].as_str();
            match RESPELLED_FOR_PRP.iter().find(|(respelled, _)| *respelled == name) {
                Some((_, spellings)) => assert!(spellings.contains(&prp), "{name} `{value}` maps to PRP's `{prp}`"),
                None if prp == "extension" => {}
                None => assert_eq!(prp, value, "{name} `{value}` keeps PRP's spelling"),
            }
        }
    }
}

#[test]
fn the_payload_enum_table_has_no_row_for_a_value_that_does_not_exist() {
    let enums = payload_enums();
    for row in section_rows(&mapping_doc(), "Payload enum values") {
        let known = enums
            .iter()
            .any(|(name, values)| *name == row[0] && values.contains(&row[1]));
        assert!(
            known,
            "docs/prp-mapping.md maps {} `{}`, which is not a payload enum value",
            row[0], row[1]
        );
    }
}

// The spellings checked against the Paperclip runner protocol itself, as the shared spec
// writes them (its families, fields and enum values), never against a column of ours. The
// spec is parsed only where it writes event types and payloads (EVENT_PASSAGES, its
// provider-event table, FIELD_PASSAGES); prose elsewhere is not read.

const PRP_SPEC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/spec/paperclip-runner.md");

/// A key names an event type (`plan.updated`), one of its payload fields
/// (`plan.updated:steps.status`) or one value of a closed field
/// (`plan.updated:steps.status=blocked`). In a [`Difference`] an event type may be a
/// family (`research.*`) or any (`*`), and the field `*` (every field); an entry explains
/// its key and everything under it.
#[derive(Clone, Copy)]
enum Difference {
    /// The spec names it; we do not produce it.
    PrpOnly(&'static str, &'static str),
    /// We produce it; the spec does not name it.
    Extension(&'static str, &'static str),
    /// Ours (first) is the spec's (second) spelled differently.
    Respelled(&'static str, &'static str, &'static str),
    /// The spec closes this field's values; ours is an open string, so which of them we
    /// send is not a property of our types.
    OpenString(&'static str, &'static str),
}

use Difference::{Extension, OpenString, PrpOnly, Respelled};

/// Every difference between what our events serialize and PRP as the spec writes it, each
/// with why: the data file `prp_differences.tsv`, mirrored in docs/prp-mapping.md
/// ("Deliberate differences").
fn deliberate_differences() -> Vec<Difference> {
    include_str!("prp_differences.tsv")
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .map(|(index, line)| {
            let fields: Vec<&'static str> = line.split('\t').collect();
            match fields.as_slice() {
                ["prp-only", prp, why] => PrpOnly(prp, why),
                ["extension", ours, why] => Extension(ours, why),
                ["respelled", ours, prp, why] => Respelled(ours, prp, why),
                ["open-string", prp, why] => OpenString(prp, why),
                _ => panic!("prp_differences.tsv line {}: {line:?}", index + 1),
            }
        })
        .collect()
}

impl Difference {
    /// The patterns this entry explains on the spec's side and on ours.
    fn sides(self) -> (Option<&'static str>, Option<&'static str>) {
        match self {
            PrpOnly(prp, _) | OpenString(prp, _) => (Some(prp), None),
            Extension(ours, _) => (None, Some(ours)),
            Respelled(ours, prp, _) => (Some(prp), Some(ours)),
        }
    }

    fn doc_row(self) -> String {
        match self {
            PrpOnly(prp, why) => format!("| PRP only | `{prp}` | {why} |"),
            Extension(ours, why) => format!("| extension | `{ours}` | {why} |"),
            Respelled(ours, prp, why) => format!("| respelled | `{ours}` for PRP `{prp}` | {why} |"),
            OpenString(prp, why) => format!("| open string | `{prp}` | {why} |"),
        }
    }
}

fn split_key(key: &str) -> (&str, Option<&str>) {
    match key.split_once(':') {
        Some((event, rest)) => (event, Some(rest)),
        None => (key, None),
    }
}

/// Whether `pattern` names `key` or something `key` lies under.
fn covers(pattern: &str, key: &str) -> bool {
    let ((pattern_event, pattern_rest), (event, rest)) = (split_key(pattern), split_key(key));
    let event_matches = pattern_event == "*"
        || pattern_event == event
        || pattern_event
            .strip_suffix('*')
            .is_some_and(|family| event.starts_with(family));
    event_matches
        && match (pattern_rest, rest) {
            (None, _) => true,
            (Some("*"), rest) => rest.is_some(),
            (Some(field), Some(rest)) => {
                rest == field || rest.starts_with(&format!("{field}.")) || rest.starts_with(&format!("{field}="))
            }
            (Some(_), None) => false,
        }
}

fn prp_spec() -> String {
    std::fs::read_to_string(PRP_SPEC)
        .unwrap_or_else(|e| panic!("the PRP spec {PRP_SPEC} must be beside the checkout: {e}"))
}

/// The spec's text after `start` up to `end`; a missing anchor means the spec was
/// restructured and this parse must follow it, never silently find less.
fn passage<'a>(spec: &'a str, start: &str, end: &str) -> &'a str {
    let from = spec
        .find(start)
        .unwrap_or_else(|| panic!("the PRP spec no longer contains `{start}`"))
        + start.len();
    let to = spec[from..]
        .find(end)
        .unwrap_or_else(|| panic!("the PRP spec has no `{end}` after `{start}`"));
    &spec[from..from + to]
}

/// The event types a text names, expanded: `turn.started/completed`,
/// `run.{attached,result.*}`, `runner.*`, `**item.delta**,`.
fn event_types_in(text: &str) -> Vec<String> {
    text.split_whitespace()
        .flat_map(|word| {
            let word = word.trim_matches(|c| matches!(c, ',' | ';' | ':' | '(' | ')' | '`'));
            let word = word.trim_start_matches("**").trim_end_matches("**");
            expand_event_type(word.strip_suffix('.').unwrap_or(word))
        })
        .collect()
}

fn expand_event_type(token: &str) -> Vec<String> {
    let segment = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    let (prefix, alternatives) = match token.split_once(".{") {
        Some((prefix, braced)) => match braced.strip_suffix('}') {
            Some(inner) => (prefix, inner.split(',').collect::<Vec<_>>()),
            None => return Vec::new(),
        },
        None => match token.rsplit_once('.') {
            Some((prefix, "*")) => (prefix, vec!["*"]),
            Some((prefix, last)) if last.split('/').all(segment) => (prefix, last.split('/').collect()),
            _ => return Vec::new(),
        },
    };
    if !prefix.split('.').all(segment) {
        return Vec::new();
    }
    alternatives
        .into_iter()
        .map(|alternative| format!("{prefix}.{alternative}"))
        .collect()
}

/// The backticked spans of `text`, each with the prose just before it.
fn spans(text: &str) -> Vec<(&str, &str)> {
    let parts: Vec<&str> = text.split('`').collect();
    parts.chunks(2).filter(|c| c.len() == 2).map(|c| (c[0], c[1])).collect()
}

/// Adds the fields and closed values one span names for `event` to `keys`.
///
/// The spec's notation: `name`, `name?`, `name[≤64]`, `name≥1`, `name: a|b|c` (closed
/// values), `name:"literal"` (a value), `name: type` (ignored), `name{sub, …}`,
/// `{a, b}` (the payload itself), `cancelled{…}` (the payload of `*.cancelled`). A bare
/// `a|b|c` is the values of `bare`. Spans with `/` or a `.` outside any payload are
/// paths, schema ids or event types, not fields.
fn add_fields(event: &str, span: &str, bare: Option<&str>, keys: &mut BTreeSet<String>) {
    let span = span.trim();
    if span.contains('/') || (span.contains('.') && !span.contains(':') && !span.contains('{')) {
        return;
    }
    if !span.contains(':') && !span.contains('{') && span.contains('|') {
        let field = bare.unwrap_or_else(|| panic!("`{span}` ({event}): values of no field"));
        keys.insert(format!("{event}:{field}"));
        keys.extend(span.split('|').map(|value| format!("{event}:{field}={value}")));
        return;
    }
    let chars: Vec<char> = span.chars().collect();
    let mut at = 0;
    parse_fields(event, &chars, &mut at, "", keys);
}

fn parse_fields(event: &str, chars: &[char], at: &mut usize, prefix: &str, keys: &mut BTreeSet<String>) {
    let payload_name = event.rsplit('.').next().unwrap_or_default();
    while *at < chars.len() && chars[*at] != '}' {
        let start = *at;
        while *at < chars.len() && (chars[*at].is_ascii_alphanumeric() || matches!(chars[*at], '_' | '*')) {
            *at += 1;
        }
        let name: String = chars[start..*at].iter().collect();
        if name.is_empty() {
            *at += 1;
            continue;
        }
        let path = format!("{prefix}{name}");
        if chars.get(*at) == Some(&'?') {
            *at += 1;
        }
        if chars.get(*at) == Some(&'[') {
            while *at < chars.len() && chars[*at] != ']' {
                *at += 1;
            }
        }
        while *at < chars.len() && matches!(chars[*at], ']' | '≥' | '≤' | '0'..='9' | ' ') {
            *at += 1;
        }
        match chars.get(*at) {
            Some('{') if prefix.is_empty() && name == payload_name => {
                *at += 1;
                parse_fields(event, chars, at, "", keys);
                *at += 1;
                continue;
            }
            Some('{') => {
                keys.insert(format!("{event}:{path}"));
                *at += 1;
                parse_fields(event, chars, at, &format!("{path}."), keys);
                *at += 1;
            }
            Some(':') => {
                keys.insert(format!("{event}:{path}"));
                *at += 1;
                let start = *at;
                while *at < chars.len() && !matches!(chars[*at], ',' | '}') {
                    *at += 1;
                }
                let value: String = chars[start..*at].iter().collect();
                let value = value.trim();
                if let Some(literal) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                    keys.insert(format!("{event}:{path}={literal}"));
                } else if value.contains('|') {
                    keys.extend(value.split('|').map(|v| format!("{event}:{path}={}", v.trim())));
                }
            }
            _ => {
                keys.insert(format!("{event}:{path}"));
            }
        }
        while *at < chars.len() && !matches!(chars[*at], ',' | '}') {
            *at += 1;
        }
        if chars.get(*at) == Some(&',') {
            *at += 1;
        }
        while chars.get(*at) == Some(&' ') {
            *at += 1;
        }
    }
}

/// The first word of the prose right before a span, after its last `;` or `,`: the field
/// a bare `a|b|c` in a table cell belongs to (`status for run and child: …`).
fn field_named_before(prose: &str) -> Option<&str> {
    prose
        .rsplit([';', ','])
        .next()
        .and_then(|clause| clause.split_whitespace().next())
        .map(|word| word.trim_end_matches(':'))
}

/// Where the spec writes payload fields outside its provider-event table: the passage
/// (from, to), the event types it describes, and the field a bare `a|b` there belongs to.
const FIELD_PASSAGES: &[(&str, &str, &[&str], Option<&str>)] = &[
    ("**Text and reasoning.**", "- Ids come from", &["item.delta"], None),
    ("- `payload.channel` takes", "\n", &["item.delta"], Some("channel")),
    (
        "**Usage** (",
        "**Cursor emits no standard usage.**",
        &["usage.reported"],
        None,
    ),
    (
        "**Request shape.**",
        "**Resolution**",
        &["runtime_request.created"],
        Some("requestKind"),
    ),
    ("**Resolution**", "- input:", &["runtime_request.resolved"], None),
    (
        "- **resolved** after delivery:",
        "\n",
        &["runtime_request.resolved"],
        None,
    ),
    ("- pending *permission* →", "\n", &["runtime_request.cancelled"], None),
    ("- pending *input* →", "\n", &["runtime_request.expired"], None),
    ("- Moving to a durable wait →", "\n", &["runtime_request.expired"], None),
    (
        "- Stale pending after transport recovery →",
        "\n",
        &["runtime_request.cancelled"],
        None,
    ),
];

/// Where the spec names event types: its event inventory, its ACP, terminal and
/// interaction lifecycle notes (the provider-event table is read separately).
const EVENT_PASSAGES: &[(&str, &str)] = &[
    ("counts 105 events in 31 families:", "**Closed provider inventory.**"),
    ("**ACP status tags:**", "**Usage**"),
    ("**Terminal.**", "**Cursor → canonical.**"),
    ("**Lifecycle:**", "**Fences, ordering and acknowledgement.**"),
];

/// Every key the spec writes: event types, their payload fields and closed values.
fn prp_keys() -> BTreeSet<String> {
    let spec = prp_spec();
    let mut keys = BTreeSet::new();
    for (from, to) in EVENT_PASSAGES {
        keys.extend(event_types_in(passage(&spec, from, to)));
    }
    let table = passage(&spec, "| eventType | key fields and exact enums |", "\n\n");
    for row in table.lines().skip(2) {
        let cells: Vec<String> = row
            .replace("\\|", "\u{1}")
            .split('|')
            .map(|cell| cell.replace('\u{1}', "|").trim().to_owned())
            .collect();
        let (events, fields) = (&cells[1], &cells[2]);
        if events == "others" {
            add_others(fields, &mut keys);
            continue;
        }
        let event_groups: Vec<&str> = events.split(" / ").collect();
        let field_groups: Vec<&str> = match event_groups.len() {
            1 => vec![fields.as_str()],
            n => {
                let groups: Vec<&str> = fields.split(" / ").collect();
                assert_eq!(groups.len(), n, "`{events}`: one field group per event group");
                groups
            }
        };
        for (events, fields) in event_groups.iter().zip(field_groups) {
            for event in event_types_in(events) {
                keys.insert(event.clone());
                for (prose, span) in spans(fields) {
                    add_fields(&event, span, field_named_before(prose), &mut keys);
                }
            }
        }
    }
    for (from, to, events, bare) in FIELD_PASSAGES {
        for (_, span) in spans(passage(&spec, from, to)) {
            for event in *events {
                add_fields(event, span, *bare, &mut keys);
            }
        }
    }
    keys
}

/// The table's `others` row: `` `event` (field a|b; a|b) ``, where a bare `a|b` belongs
/// to a field the spec leaves unnamed.
fn add_others(cell: &str, keys: &mut BTreeSet<String>) {
    for (_, span) in spans(cell) {
        for event in expand_event_type(span) {
            keys.insert(event.clone());
            let after = &cell[cell.find(&format!("`{span}`")).unwrap() + span.len() + 2..];
            let Some(inner) = after.strip_prefix(" (").and_then(|rest| rest.split(')').next()) else {
                continue;
            };
            for clause in inner.split(';') {
                let words: Vec<&str> = clause.split_whitespace().collect();
                let (field, values) = match words.as_slice() {
                    [values] => ("(unnamed)", *values),
                    [field, values] => (*field, *values),
                    _ => panic!("`{event}`: unreadable `{clause}`"),
                };
                keys.insert(format!("{event}:{field}"));
                keys.extend(values.split('|').map(|value| format!("{event}:{field}={value}")));
            }
        }
    }
}

/// One event of every type with every optional field set, so that serializing them
/// shows every field we can produce. Struct literals name every field: a new field does
/// not compile here until it is given a value, and so compared with the spec.
fn every_field_of_every_event() -> Vec<ActivityPayload> {
    let settled = TurnSettled {
        turn_id: "t".into(),
        stop_reason: Some("end_turn".into()),
        failure_reason: Some(TurnFailureReason::AgentExited),
        message: Some("m".into()),
    };
    let boundary = ItemBoundary {
        item_id: "i".into(),
        kind: ItemKind::AgentMessage,
        channel: Channel::Progress,
        child_id: Some("c".into()),
    };
    let tool = ToolExecution {
        tool_call_id: "tc".into(),
        child_id: Some("c".into()),
        item_id: Some("i".into()),
        transport: "builtin".into(),
        operation: ToolOperation::Execute,
        name: "n".into(),
        status: ToolStatus::Completed,
        target: Some("a.rs".into()),
        locations: vec![ToolLocation {
            path: "a.rs".into(),
            line: Some(1),
        }],
        locations_omitted: 1,
        locations_truncated: true,
        input_updated: true,
        raw_input: Some("opaque".into()),
        raw_input_truncated: true,
        raw_paths_rewritten: 1,
        raw_paths_omitted: 1,
        exit_code: Some(0),
        failure_source: Some("exitCode".into()),
        output: Some(bound_output("out")),
        output_source: Some(OutputSource::RawOutput),
        diffs: vec![ProviderDiff {
            path: "a.rs".into(),
            change: DiffChange::Modify,
            old_text: Some("a".into()),
            old_text_bytes: Some(1),
            new_text: Some("b".into()),
            new_text_bytes: Some(1),
            truncated: true,
        }],
        diffs_omitted: 1,
        artifacts: vec![ToolArtifactRef {
            kind: ArtifactRefKind::Image,
            reference: Some("a.png".into()),
            uri: Some("https://x".into()),
            media_type: Some("image/png".into()),
            title: Some("t".into()),
            registered: false,
            inline_data_omitted: true,
        }],
        artifacts_omitted: 1,
        sanitized: true,
    };
    let ended = RuntimeRequestEnded {
        interaction_id: "i".into(),
        kind: InteractionKind::Question,
        turn_id: "t".into(),
        reason: "turn_settled".into(),
        replay_allowed: false,
        delivery: "pipe_written".into(),
        request: Some("opaque".into()),
    };
    let delegation = Delegation {
        child_id: "c".into(),
        parent_id: Some("p".into()),
        parent_tool_call_id: Some("tc".into()),
        agent_id: Some("a".into()),
        action: Some(DelegationAction::Spawn),
        role: "explore".into(),
        name: Some("n".into()),
        subagent_type_raw: Some("{}".into()),
        model: Some("m".into()),
        task: Some("t".into()),
        task_truncated: true,
        prompt_chars: Some(1),
        status: DelegationStatus::Running,
        native_state: Some("running".into()),
        explanation: Some("e".into()),
        duration_ms: Some(1),
        resumed_from: Some("c0".into()),
        incarnation: Some(1),
        activity_summary: Some(ActivitySummary {
            text: "s".into(),
            truncated: true,
            tool_calls: 1,
            tools_failed: 1,
        }),
        evidence: "cursor_subagent_lifecycle".into(),
        sanitized: true,
    };
    let mut notice = ProviderNotice::warning("c", NoticeScope::Turn, "s");
    notice.sanitized = true;
    notice.child_id = Some("c".into());
    vec![
        ActivityPayload::TurnStarted(TurnStarted {
            turn_id: "t".into(),
            turn_number: 1,
            prompt_chars: 1,
        }),
        ActivityPayload::TurnCompleted(settled.clone()),
        ActivityPayload::TurnCancelled(settled.clone()),
        ActivityPayload::TurnInterrupted(settled.clone()),
        ActivityPayload::TurnFailed(settled),
        ActivityPayload::ItemStarted(boundary.clone()),
        ActivityPayload::ItemDelta(ItemDelta {
            item_id: "i".into(),
            kind: ItemKind::AgentMessage,
            channel: Channel::Progress,
            text: "x".into(),
            truncated: true,
            sanitized: true,
            child_id: Some("c".into()),
        }),
        ActivityPayload::ItemCompleted(boundary),
        ActivityPayload::ToolStarted(tool.clone()),
        ActivityPayload::ToolProgressed(tool.clone()),
        ActivityPayload::ToolCompleted(tool),
        ActivityPayload::RuntimeRequestCreated(RuntimeRequestCreated {
            interaction_id: "i".into(),
            kind: InteractionKind::Question,
            etag: "e".into(),
            turn_id: "t".into(),
            request: "opaque".into(),
            tool_call_known: Some(true),
            child_id: Some("c".into()),
        }),
        ActivityPayload::RuntimeRequestResolved(RuntimeRequestResolved {
            interaction_id: "i".into(),
            kind: InteractionKind::Question,
            turn_id: "t".into(),
            outcome: "opaque".into(),
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
            signal: Some(9),
            initiated_by: "runner".into(),
        }),
        ActivityPayload::ProcessReleased(ProcessReleased {
            pid: 1,
            sessions_served: 1,
        }),
        ActivityPayload::ProviderNotice(notice),
        ActivityPayload::PlanUpdated(PlanUpdated {
            plan_id: "p".into(),
            revision: 1,
            steps: vec![PlanStep {
                step_id: "s".into(),
                body: "b".into(),
                status: StepStatus::Pending,
                label: Some("l".into()),
                priority: Some(StepPriority::High),
            }],
            source: PlanSource::AcpPlan,
            partial: true,
            sanitized: true,
            child_id: Some("c".into()),
        }),
        ActivityPayload::DelegationStarted(delegation.clone()),
        ActivityPayload::DelegationUpdated(delegation.clone()),
        ActivityPayload::DelegationCompleted(delegation),
        ActivityPayload::ReviewModeChanged(ReviewModeChanged {
            mode_id: "plan".into(),
            previous_mode_id: Some("agent".into()),
            sanitized: true,
        }),
        ActivityPayload::SessionConfigUpdated(SessionConfigUpdated {
            config_options: Vec::new(),
            options_omitted: 1,
            sanitized: true,
        }),
        ActivityPayload::SessionInfoUpdated(SessionInfoUpdated {
            title: Some("x".into()),
            title_cleared: true,
            updated_at: Some("now".into()),
            updated_at_cleared: true,
            sanitized: true,
        }),
        ActivityPayload::SessionCommandsUpdated(SessionCommandsUpdated {
            commands: Vec::new(),
            commands_omitted: 1,
            sanitized: true,
        }),
        ActivityPayload::SessionLoaded(SessionLoaded {
            session_id: "s".into(),
            recovery: true,
            generation: 2,
            replayed_updates_suppressed: 1,
        }),
        ActivityPayload::UsageReported(UsageReported {
            turn_id: "t".into(),
            request_count_source: "unavailable".into(),
            provider_cost_status: "reported".into(),
            provider_cost_unavailable_reason: Some("r".into()),
            usage_source: Some("acp_usage_update".into()),
            used: Some(1),
            size: Some(2),
            cost: Some(ReportedCost {
                amount: 0.5,
                currency: "USD".into(),
            }),
        }),
        ActivityPayload::ArtifactGenerated(ArtifactGenerated {
            artifact_id: "tc".into(),
            tool_call_id: "tc".into(),
            reference: Some("a.png".into()),
            description: "d".into(),
            status: "completed".into(),
            registered: false,
            sanitized: true,
        }),
        ActivityPayload::ArtifactViewed(ArtifactViewed {
            artifact_id: "tc:ref-1".into(),
            tool_call_id: "tc".into(),
            reference: "b.png".into(),
        }),
    ]
}

/// Every key our events serialize, and the fields that are open strings. Whether a
/// string field is a closed enum, and which values it takes, is found by serde itself:
/// each payload-enum value is put in the field and the event deserialized back.
fn our_keys() -> (BTreeSet<String>, BTreeSet<String>) {
    let values: BTreeSet<String> = payload_enums().into_iter().flat_map(|(_, values)| values).collect();
    let (mut keys, mut open) = (BTreeSet::new(), BTreeSet::new());
    for event in every_field_of_every_event() {
        let (event_type, payload) = event.into_parts();
        keys.insert(event_type.clone());
        let mut leaves = Vec::new();
        walk(&payload, "", "", &mut keys, &event_type, &mut leaves);
        for (path, pointer, own) in leaves {
            let accepts = |candidate: &str| {
                let mut probe = payload.clone();
                *probe.pointer_mut(&pointer).unwrap() = Value::String(candidate.to_owned());
                serde_json::from_value::<ActivityPayload>(json!({"eventType": event_type, "payload": probe})).is_ok()
            };
            let key = format!("{event_type}:{path}");
            if accepts("\u{1}not a value") {
                open.insert(key);
                continue;
            }
            assert!(
                values.contains(&own),
                "{key} is a closed enum missing from payload_enums()"
            );
            keys.extend(
                values
                    .iter()
                    .filter(|value| accepts(value))
                    .map(|value| format!("{key}={value}")),
            );
        }
    }
    (keys, open)
}

/// Adds the field paths of `value` (arrays by their first element) and collects its
/// string leaves as (path, JSON pointer, value).
fn walk(
    value: &Value,
    path: &str,
    pointer: &str,
    keys: &mut BTreeSet<String>,
    event_type: &str,
    leaves: &mut Vec<(String, String, String)>,
) {
    match value {
        Value::Object(fields) => {
            for (name, field) in fields {
                let path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                keys.insert(format!("{event_type}:{path}"));
                walk(field, &path, &format!("{pointer}/{name}"), keys, event_type, leaves);
            }
        }
        Value::Array(items) => {
            if let Some(first) = items.first() {
                walk(first, path, &format!("{pointer}/0"), keys, event_type, leaves);
            }
        }
        Value::String(own) => leaves.push((path.to_owned(), pointer.to_owned(), own.clone())),
        _ => {}
    }
}

/// The spec's keys we do not produce, and ours the spec does not name.
fn raw_differences() -> (Vec<String>, Vec<String>, BTreeSet<String>) {
    let prp = prp_keys();
    let (ours, open) = our_keys();
    (
        prp.difference(&ours).cloned().collect(),
        ours.difference(&prp).cloned().collect(),
        open,
    )
}

#[test]
fn the_prp_spec_is_read_for_families_fields_and_values() {
    let prp = prp_keys();
    for key in [
        "turn.submitted",
        "interaction.request.materialized",
        "run.result.*",
        "external_provider.*",
        "tool.execution.progressed:executionId",
        "tool.execution.completed:transport=builtin",
        "plan.updated:steps.status=in_progress",
        "delegation.completed:status=closed",
        "delegation.started:children.activitySummary",
        "artifact.viewed:mediaType",
        "artifact.generated:status=failed",
        "item.delta:channel=detail",
        "usage.reported:requestCountSource=token_bearing_turn_minimum",
        "runtime_request.created:requestKind=elicitation",
        "runtime_request.resolved:action=accept_for_session",
        "runtime_request.expired:reason=durable_handoff",
        "review.mode.changed:(unnamed)=exited",
    ] {
        assert!(prp.contains(key), "the spec parse lost `{key}`");
    }
}

#[test]
fn every_spelling_the_prp_spec_names_is_produced_or_a_listed_difference() {
    let (prp_only, _, _) = raw_differences();
    let unexplained: Vec<&String> = prp_only
        .iter()
        .filter(|key| {
            !deliberate_differences()
                .iter()
                .any(|d| d.sides().0.is_some_and(|p| covers(p, key)))
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "the PRP spec names these; we neither produce them nor list them as deliberate:\n{unexplained:#?}"
    );
}

#[test]
fn every_spelling_we_produce_is_named_by_the_prp_spec_or_a_listed_difference() {
    let (_, ours_only, _) = raw_differences();
    let unexplained: Vec<&String> = ours_only
        .iter()
        .filter(|key| {
            !deliberate_differences()
                .iter()
                .any(|d| d.sides().1.is_some_and(|p| covers(p, key)))
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "we produce these; the PRP spec does not name them and they are not listed as extensions:\n{unexplained:#?}"
    );
}

#[test]
fn every_listed_difference_still_exists() {
    let (prp_only, ours_only, open) = raw_differences();
    let any = |keys: &[String], pattern: &str| keys.iter().any(|key| covers(pattern, key));
    for difference in deliberate_differences() {
        let (prp, ours) = difference.sides();
        assert!(
            prp.is_none_or(|p| any(&prp_only, p)) && ours.is_none_or(|o| any(&ours_only, o)),
            "stale deliberate difference: {}",
            difference.doc_row()
        );
        if let OpenString(field, _) = difference {
            assert!(
                open.iter().any(|key| covers(field, key)),
                "`{field}` is no longer an open string of ours"
            );
        }
    }
}

/// docs/prp-mapping.md's "Deliberate differences" section, rendered from the list
/// (`UPDATE_PRP_MAPPING=1 cargo test -p cursor-runner-activity --test prp_mapping`
/// rewrites it).
#[test]
fn the_mapping_doc_lists_every_deliberate_difference() {
    let mut rendered = String::from("\n| kind | ours / PRP's | why |\n|---|---|---|\n");
    for difference in deliberate_differences() {
        rendered.push_str(&difference.doc_row());
        rendered.push('\n');
    }
    rendered.push('\n');
    let doc = mapping_doc();
    let heading = "\n## Deliberate differences\n";
    let intro_end = doc
        .find(heading)
        .and_then(|at| doc[at..].find("\n\n|").map(|end| at + end + 1))
        .expect("docs/prp-mapping.md has a `## Deliberate differences` section with a table");
    let table_end = doc[intro_end..]
        .find("\n## ")
        .map_or(doc.len(), |end| intro_end + end + 1);
    if std::env::var_os("UPDATE_PRP_MAPPING").is_some() {
        let updated = format!("{}{rendered}{}", &doc[..intro_end], &doc[table_end..]);
        std::fs::write(MAPPING_DOC, updated).unwrap();
        return;
    }
    assert!(
        doc[intro_end..table_end] == rendered,
        "docs/prp-mapping.md \"Deliberate differences\" is stale: run with UPDATE_PRP_MAPPING=1"
    );
}
