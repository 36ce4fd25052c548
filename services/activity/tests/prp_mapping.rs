//! Every canonical event type has a row in docs/prp-mapping.md: its PRP spelling, or
//! `extension` for families PRP lacks.

use cursor_runner_activity::{EVENT_TYPES, EXTENSION_EVENT_TYPES};

fn mapping_rows() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/prp-mapping.md"))
        .expect("docs/prp-mapping.md exists");
    doc.lines()
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
