//! No production source file is over [`MAX_PRODUCTION_LINES`]: past it, a file is asking to
//! be split along a concept. Production lines are those before a file's unit-test module;
//! test-only files (`tests.rs`, `*_tests.rs`, `test_*.rs`) do not count.

use std::path::Path;

use crate::production_sources;

/// Lines a production source file may have.
const MAX_PRODUCTION_LINES: usize = 700;

/// Lines before the unit-test module (`#[cfg(test)]` followed by `mod …`), if any.
fn production_lines(source: &str) -> usize {
    let lines: Vec<&str> = source.lines().collect();
    lines
        .windows(2)
        .position(|pair| pair[0].trim() == "#[cfg(test)]" && pair[1].trim_start().starts_with("mod "))
        .unwrap_or(lines.len())
}

fn is_test_only(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy();
    name == "tests.rs" || name.ends_with("_tests.rs") || name.starts_with("test_")
}

#[test]
fn no_production_file_is_over_the_line_bound() {
    let services = Path::new(env!("CARGO_MANIFEST_DIR")).join("../services");
    let mut over = Vec::new();
    for krate in std::fs::read_dir(&services).unwrap() {
        let src = krate.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        for (file, source) in production_sources(&src) {
            let lines = production_lines(&source);
            if !is_test_only(&file) && lines > MAX_PRODUCTION_LINES {
                over.push(format!(
                    "{} has {lines}",
                    file.strip_prefix(&services).unwrap().display()
                ));
            }
        }
    }
    assert!(
        over.is_empty(),
        "over {MAX_PRODUCTION_LINES} production lines:\n{}",
        over.join("\n")
    );
}

#[test]
fn production_lines_stop_at_the_unit_test_module_and_count_to_the_bound() {
    let at_bound = "x\n".repeat(MAX_PRODUCTION_LINES);
    assert_eq!(production_lines(&at_bound), MAX_PRODUCTION_LINES);
    let with_tests = format!("{at_bound}#[cfg(test)]\nmod tests {{\n{}}}\n", "y\n".repeat(50));
    assert_eq!(production_lines(&with_tests), MAX_PRODUCTION_LINES);
    let one_over = format!("{at_bound}x\n");
    assert_eq!(production_lines(&one_over), MAX_PRODUCTION_LINES + 1);
    // A cfg(test) item that is not the test module counts as production.
    assert_eq!(production_lines("#[cfg(test)]\nfn helper() {}\n"), 2);
}
