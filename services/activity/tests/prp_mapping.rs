//! Every canonical event type and every value of a closed payload enum has a row in
//! docs/prp-mapping.md: its PRP spelling, or `extension` where PRP has none.

use cursor_runner_activity::{
    ArtifactRefKind, Channel, DelegationAction, DelegationStatus, DiffChange, EVENT_TYPES, EXTENSION_EVENT_TYPES,
    InteractionKind, ItemKind, NoticeScope, OutputSource, PlanSource, Severity, StepPriority, StepStatus,
    ToolOperation, ToolStatus, TurnFailureReason,
};

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

#[test]
fn every_event_type_is_mapped_to_its_prp_spelling_or_marked_an_extension() {
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
        ),
    ]
}

/// Enums whose values PRP spells differently, with PRP's spellings (its `requestKind`).
const RESPELLED_FOR_PRP: &[(&str, &[&str])] = &[("InteractionKind", &["user_input", "permission_approval"])];

#[test]
fn every_payload_enum_value_is_mapped_to_its_prp_spelling_or_marked_an_extension() {
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
