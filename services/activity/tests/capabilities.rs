//! The capability coverage list: every row of the seed's capability matrix and of its
//! field audit (read from the seed text itself) has one entry in
//! `docs/capabilities.json`, proven by a fixture transcript whose expected events
//! carry the projected field, or by named tests whose bodies mention what the row is
//! about (see [`check_test_evidence`]); only the seed's named
//! absences may be `absent`; what another issue owns is `pending` with its owner.
//! `docs/capabilities.md` is generated from the same list.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The seed's named absences: the only rows allowed to be `absent`.
const NAMED_ABSENCES: &[&str] = &[
    "True active-turn steering",
    "Queued follow-ups",
    "Fork/resume methods",
    "Subagent questions",
    "Reviews, compaction, hooks, memory",
    "Goal controls / lineage",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The first cells of the tab-separated rows following `header` (skipping the header row).
fn seed_rows(seed: &str, header: &str) -> Vec<String> {
    seed.lines()
        .skip_while(|line| !line.starts_with(header))
        .skip(1)
        .skip_while(|line| !line.contains('\t'))
        .skip(1)
        .take_while(|line| line.contains('\t'))
        .map(|line| line.split('\t').next().unwrap_or_default().trim().to_owned())
        .collect()
}

fn entries() -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("docs/capabilities.json")).expect("docs/capabilities.json");
    serde_json::from_str(&text).expect("the coverage list is JSON")
}

/// True when some value under `path` (dot-separated keys, arrays searched) exists.
fn has_field(value: &Value, path: &[&str]) -> bool {
    match (value, path.split_first()) {
        (_, None) => true,
        (Value::Array(items), _) => items.iter().any(|item| has_field(item, path)),
        (Value::Object(map), Some((key, rest))) => map.get(*key).is_some_and(|v| has_field(v, rest)),
        _ => false,
    }
}

/// Where evidence tests live: the end-to-end suite, the service's integration tests,
/// and the activity crate's own tests (unit tests beside the normalizer included).
const TEST_DIRS: &[&str] = &[
    "tests/e2e",
    "services/runner/tests",
    "services/activity/tests",
    "services/activity/src",
];

/// Checks that the test `name` exists once, is run, and exercises its row: each marker
/// in `exercises` (the row's update kind, method, fixture, RPC or error code) appears in
/// the test's own body, outside whole-line comments. So a renamed, unregistered or
/// hollowed-out test breaks the row instead of silently still "proving" it. The test is
/// read, not run: that it passes is its own suite's job.
fn check_test_evidence(name: &str, exercises: &[&str]) -> Result<(), String> {
    let signature = format!("fn {name}(");
    let mut found = Vec::new();
    for dir in TEST_DIRS {
        for path in rust_files(&root().join(dir)) {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if let Some(at) = text.find(&signature) {
                found.push((path, text, at));
            }
        }
    }
    let [(path, text, at)] = found.as_slice() else {
        return Err(format!("{} definitions of test `{name}`", found.len()));
    };
    if !is_run(text, *at, name) {
        return Err(format!(
            "`{name}` in {} is neither #[test] nor instantiated by on_both_backends!",
            path.display()
        ));
    }
    let body: String = function_body(&text[*at..])
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    match exercises.iter().find(|marker| !body.contains(**marker)) {
        Some(missing) => Err(format!("`{name}` never mentions `{missing}`")),
        None if exercises.is_empty() => Err(format!("`{name}`: evidence names nothing it exercises")),
        None => Ok(()),
    }
}

/// The `.rs` files under `dir`, its subfolders included (unit tests live beside their
/// modules, e.g. `src/children/tests.rs`).
fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// A test function is run when an attribute line just above it says `test`, or when the
/// end-to-end macro that instantiates it once per backend names it.
fn is_run(text: &str, at: usize, name: &str) -> bool {
    let line_start = text[..at].rfind('\n').map_or(0, |newline| newline + 1);
    let attributed = text[..line_start]
        .lines()
        .rev()
        .take_while(|line| line.trim_start().starts_with("#[") || line.trim_start().starts_with("///"))
        .any(|line| line.contains("test"));
    let instantiated = text.split("on_both_backends!(").skip(1).any(|call| {
        call[..call.find(')').unwrap_or(call.len())]
            .split(|c: char| c == ',' || c.is_whitespace())
            .any(|listed| listed == name)
    });
    attributed || instantiated
}

/// The body of `function`, up to its closing brace. Braces are counted without parsing
/// strings: the JSON literals in these tests are balanced.
fn function_body(function: &str) -> &str {
    let open = function.find('{').expect("a function body");
    let mut depth = 0;
    for (offset, c) in function[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &function[open..=open + offset];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces in a test function")
}

#[test]
fn every_seed_row_is_covered_by_a_fixture_a_test_a_named_absence_or_an_owner() {
    let seed_path = root().join("../shared/seeds/001_8a03ac1837ae2f09.txt");
    let seed = std::fs::read_to_string(&seed_path)
        .unwrap_or_else(|e| panic!("the seed {} must be beside the checkout: {e}", seed_path.display()));
    let matrix = seed_rows(&seed, "Capability matrix against Codex app-server");
    let audit = seed_rows(&seed, "Exact remaining field audit");
    assert!(
        matrix.len() >= 20 && audit.len() >= 10,
        "the seed tables were found: {matrix:?} {audit:?}"
    );
    let entries = entries();
    for (table, rows) in [("matrix", &matrix), ("field_audit", &audit)] {
        for row in rows {
            let found: Vec<&Value> = entries
                .iter()
                .filter(|e| e["table"] == table && e["row"] == row.as_str())
                .collect();
            assert_eq!(found.len(), 1, "seed {table} row `{row}` needs exactly one entry");
        }
    }
    for entry in &entries {
        let (table, row) = (entry["table"].as_str().unwrap(), entry["row"].as_str().unwrap());
        match table {
            "matrix" => assert!(matrix.iter().any(|r| r == row), "`{row}` is not a seed matrix row"),
            "field_audit" => assert!(audit.iter().any(|r| r == row), "`{row}` is not a seed field-audit row"),
            // The runner's own rows: what the issues require said that the seed has no row for.
            "runner" => assert!(
                matches!(entry["status"].as_str(), Some("test" | "absent")),
                "`{row}`: a runner row is proven by a test or is an upstream absence"
            ),
            other => panic!("`{row}`: unknown table {other}"),
        }
        match entry["status"].as_str().unwrap() {
            "fixture" => {
                let name = entry["evidence"].as_str().unwrap();
                let expected = root().join(format!("fixtures/transcripts/{name}.expected.json"));
                let events: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&expected).unwrap()).unwrap();
                let event = entry["event"].as_str().unwrap();
                let field: Vec<&str> = entry["field"].as_str().unwrap().split('.').collect();
                assert!(
                    events
                        .iter()
                        .any(|e| e["eventType"] == event && has_field(&e["payload"], &field)),
                    "`{row}`: {name} has no {event} with {field:?}"
                );
            }
            "test" => {
                let evidence = entry["evidence"].as_array().expect("test evidence is a list");
                assert!(!evidence.is_empty(), "`{row}`: no evidence");
                for test in evidence {
                    let exercises: Vec<&str> = test["exercises"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    if let Err(why) = check_test_evidence(test["test"].as_str().unwrap(), &exercises) {
                        panic!("`{row}`: {why}");
                    }
                }
            }
            "absent" => assert!(
                table == "runner" || NAMED_ABSENCES.contains(&row),
                "`{row}` is not a named absence"
            ),
            "pending" => assert!(
                entry["owner"].as_str().is_some_and(|o| o.starts_with("issue ")),
                "`{row}` needs an owner"
            ),
            other => panic!("`{row}`: unknown status {other}"),
        }
        // PRP's words: availability, and a detail level (a partial capability is
        // `available` with `summary` detail and a reason); implemented is not qualified.
        let availability = entry["availability"].as_str().unwrap();
        assert!(
            ["available", "unsupported", "policy_disabled"].contains(&availability),
            "`{row}`: availability {availability}"
        );
        assert!(
            matches!(entry["detail"].as_str(), Some("summary" | "structured")),
            "`{row}`: detail"
        );
        assert!(
            matches!(entry["qualification"].as_str(), Some("unverified" | "verified_here")),
            "`{row}`: qualification"
        );
        assert!(
            !entry["reason"].as_str().unwrap_or_default().is_empty(),
            "`{row}`: a reason"
        );
    }
}

fn render(entries: &[Value]) -> String {
    let mut out = String::from(
        "# Capabilities\n\nGenerated from `docs/capabilities.json` by `services/activity/tests/capabilities.rs` \
         (`UPDATE_CAPABILITIES=1 cargo test -p cursor-runner-activity --test capabilities` rewrites it). \
         Each row of the seed's capability matrix and field audit, with its availability (PRP's words) and \
         how it is proven here: a fixture transcript, an end-to-end test, a named absence, or the issue that owns it. \
         Nothing here is qualified against a real, authenticated Cursor: \"proven\" means against the scripted fake agent.\n",
    );
    for (table, title) in [
        ("matrix", "Capability matrix"),
        ("field_audit", "Field audit"),
        ("runner", "The runner's own rows"),
    ] {
        out.push_str(&format!(
            "\n## {title}\n\n| row | availability | detail | qualification | proven by | notes |\n|---|---|---|---|---|---|\n"
        ));
        for e in entries.iter().filter(|e| e["table"] == table) {
            let proof = match e["status"].as_str().unwrap_or_default() {
                "fixture" => format!(
                    "transcript `{}` (`{}`.`{}`)",
                    e["evidence"].as_str().unwrap_or_default(),
                    e["event"].as_str().unwrap_or_default(),
                    e["field"].as_str().unwrap_or_default()
                ),
                "test" => e["evidence"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| format!("test `{}`", t["test"].as_str().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(", "),
                "absent" if e["table"] == "runner" => "absent upstream".to_owned(),
                "absent" => "named absence".to_owned(),
                _ => format!("pending ({})", e["owner"].as_str().unwrap_or_default()),
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                e["row"].as_str().unwrap_or_default(),
                e["availability"].as_str().unwrap_or_default(),
                e["detail"].as_str().unwrap_or_default(),
                e["qualification"].as_str().unwrap_or_default(),
                proof,
                e["reason"].as_str().unwrap_or_default()
            ));
        }
    }
    out
}

#[test]
fn the_capabilities_doc_is_generated_from_the_coverage_list() {
    let rendered = render(&entries());
    let path = root().join("docs/capabilities.md");
    if std::env::var_os("UPDATE_CAPABILITIES").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == rendered,
        "docs/capabilities.md is stale: run with UPDATE_CAPABILITIES=1"
    );
}
