//! Every ACP and Cursor method name is spelled once, in `acp::methods`: no production
//! source of the workspace quotes one anywhere else. Test code may (a test that spells
//! the wire itself checks the constants), and so does `fake-cursor`, on purpose: it is
//! the independent peer, and sharing the client's constants would let client and fake
//! share one misspelling and still agree.
//!
//! A name with a `/` counts wherever it is quoted. A bare one (`initialize`,
//! `authenticate`) counts only where it is used as a method: a call argument (after
//! `(`), a comparison operand (after `==` / `!=`) or a match pattern (before `=>` or
//! `|`), since the same words are also phase labels and configuration keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cursor_runner_acp::methods;

/// Where names may be spelled: their home, and `fake-cursor`, the independent peer, which
/// keeps its own spellings on purpose so that client and fake cannot share a mistake.
const SPELLED_HERE: &[&str] = &["services/acp/src/methods.rs", "services/fake-cursor/"];

#[test]
fn no_production_source_outside_acp_methods_quotes_a_method_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut found: BTreeMap<(String, String), usize> = BTreeMap::new();
    for file in production_sources(&root) {
        let relative = file.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        if SPELLED_HERE.iter().any(|home| relative.starts_with(home)) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for name in quoted_method_names(&text) {
            *found.entry((relative.clone(), name)).or_default() += 1;
        }
    }
    let faults: Vec<String> = found
        .iter()
        .map(|((file, name), n)| {
            format!("{file} quotes \"{name}\" {n} times: use its `methods::` constant or `AgentMessage::classify`")
        })
        .collect();
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn the_scanner_sees_method_positions_and_skips_tests_and_comments() {
    let text = r##"
        // "session/update" in a comment
        /// "cursor/task" in a doc comment
        fn f() {
            connection.request("initialize", p);
            let label = Phase { phase: "initialize" };
            for phase in ["spawn", "initialize"] {}
            match m { "authenticate" | "x" => {}, _ => {} }
            let s = "session/cancel";
            let raw = r#"{"method":"cursor/task"}"#;
            let c = '{';
        }
        #[cfg(test)]
        mod tests {
            fn t() { let _ = "session/prompt"; let c = '}'; }
        }
        fn g() { if method == "session/new" {} }
    "##;
    let mut names = quoted_method_names(text);
    names.sort();
    assert_eq!(names, ["authenticate", "initialize", "session/cancel", "session/new"]);
}

/// Every `.rs` under a workspace crate's `src/`, minus test-only files (`tests.rs`,
/// `*_tests.rs`, `test_*.rs`, anything under a `tests/` folder).
fn production_sources(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("services")).unwrap().flatten() {
        collect(&krate.path().join("src"), &mut files);
    }
    files.retain(|f| {
        let name = f.file_name().unwrap().to_string_lossy();
        name != "tests.rs"
            && !name.ends_with("_tests.rs")
            && !name.starts_with("test_")
            && !f.components().any(|c| c.as_os_str() == "tests")
    });
    files.sort();
    files
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The method names quoted in method positions of `text`'s production code: comments
/// and `#[cfg(test)]` items are skipped.
fn quoted_method_names(text: &str) -> Vec<String> {
    let tokens = lex(text);
    let mut names = Vec::new();
    let mut skip_depth: Option<usize> = None;
    let mut depth = 0usize;
    let mut test_attribute = false;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Code(code) => {
                for (at, c) in code.char_indices() {
                    match c {
                        '{' => {
                            if test_attribute && skip_depth.is_none() {
                                skip_depth = Some(depth);
                                test_attribute = false;
                            }
                            depth += 1;
                        }
                        '}' => {
                            depth = depth.saturating_sub(1);
                            if skip_depth == Some(depth) {
                                skip_depth = None;
                            }
                        }
                        // `#[cfg(test)] mod name;` ends the attribute's item without a block.
                        ';' if test_attribute && skip_depth.is_none() => test_attribute = false,
                        _ => {}
                    }
                    if code[at..].starts_with("#[cfg(test)]") {
                        test_attribute = true;
                    }
                }
            }
            Token::Str(literal) if skip_depth.is_none() && !test_attribute => {
                let Some(name) = methods::ALL.iter().find(|name| **name == literal.as_str()) else {
                    continue;
                };
                if name.contains('/') || in_method_position(&tokens, i) {
                    names.push((*name).to_owned());
                }
            }
            Token::Str(_) => {}
        }
    }
    names
}

fn in_method_position(tokens: &[Token], i: usize) -> bool {
    let before = match i.checked_sub(1).map(|j| &tokens[j]) {
        Some(Token::Code(code)) => code.trim_end(),
        _ => "",
    };
    let after = match tokens.get(i + 1) {
        Some(Token::Code(code)) => code.trim_start(),
        _ => "",
    };
    before.ends_with('(')
        || before.ends_with("==")
        || before.ends_with("!=")
        || after.starts_with("=>")
        || after.starts_with('|')
}

enum Token {
    /// Code between literals, comments removed.
    Code(String),
    /// The contents of a string literal (escapes left as written).
    Str(String),
}

/// Splits Rust source into code and string literals; comments, char literals and
/// raw strings' delimiters are handled so that braces and quotes inside them never
/// count.
fn lex(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut code = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && raw_string_start(&chars, i) {
            let mut hashes = 0;
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                code.push(c);
                i += 1;
                continue;
            }
            let start = j + 1;
            let mut end = start;
            loop {
                if end >= chars.len() {
                    break;
                }
                if chars[end] == '"' && (0..hashes).all(|h| chars.get(end + 1 + h) == Some(&'#')) {
                    break;
                }
                end += 1;
            }
            tokens.push(Token::Code(std::mem::take(&mut code)));
            tokens.push(Token::Str(chars[start..end.min(chars.len())].iter().collect()));
            i = end + 1 + hashes;
        } else if c == '"' {
            let start = i + 1;
            let mut end = start;
            while end < chars.len() && chars[end] != '"' {
                end += if chars[end] == '\\' { 2 } else { 1 };
            }
            tokens.push(Token::Code(std::mem::take(&mut code)));
            tokens.push(Token::Str(chars[start..end.min(chars.len())].iter().collect()));
            i = end + 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped char literal: '\n', '\'', '\u{..}'.
            let mut end = i + 3;
            while end < chars.len() && chars[end] != '\'' {
                end += 1;
            }
            i = end + 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            code.push(c);
            i += 1;
        }
    }
    tokens.push(Token::Code(code));
    tokens
}

/// Whether the `r` at `i` opens a raw string (`r"…"`, `br#"…"#`), not ends an identifier.
fn raw_string_start(chars: &[char], i: usize) -> bool {
    let ident_at = |j: usize| chars[j].is_alphanumeric() || chars[j] == '_';
    match i.checked_sub(1) {
        None => true,
        Some(j) if chars[j] == 'b' => j == 0 || !ident_at(j - 1),
        Some(j) => !ident_at(j),
    }
}
