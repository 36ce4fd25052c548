//! No module imports one that imports it back, directly or through others, in any crate of the
//! workspace. A module is one source file; an edge is a path in its production code (`crate::…`,
//! `super::…`, `self::…`, or a child declared in the file) resolved to the deepest module it names.
//! Declaring a child (`mod x;`) is not an edge; using what the child defines is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::production_sources;

type ModulePath = Vec<String>;

/// The module a source file is, from its path under `src/`.
fn module_of(relative: &Path) -> ModulePath {
    let mut segments: ModulePath = relative
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(segments.last().map(String::as_str), Some("lib" | "main" | "mod")) {
        segments.pop();
    }
    segments
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every module path the code names, as written (`crate`, `super`, `self` or a child name first),
/// with grouped imports (`crate::{a::X, b::{c::Y}}`) expanded one level per group.
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut paths = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_ident_char(chars[i - 1]) && chars[i - 1] != ':';
        if starts_word && is_ident_char(chars[i]) {
            let (path, end) = read_path(&chars, i, Vec::new(), &mut paths);
            if path.len() > 1 {
                paths.push(path);
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    paths
}

/// Reads `a::b::{…}` from `start`, pushing the expansions of any group; returns the plain path
/// read and where it ended.
fn read_path(chars: &[char], start: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> (Vec<String>, usize) {
    let mut path = prefix;
    let mut i = start;
    loop {
        let begin = i;
        while i < chars.len() && is_ident_char(chars[i]) {
            i += 1;
        }
        if i == begin {
            return (path, i);
        }
        path.push(chars[begin..i].iter().collect());
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
            if chars.get(i) == Some(&'{') {
                i = read_group(chars, i + 1, &path, out);
                return (Vec::new(), i);
            }
        } else {
            return (path, i);
        }
    }
}

fn read_group(chars: &[char], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    while i < chars.len() {
        match chars[i] {
            '}' => return i + 1,
            c if is_ident_char(c) => {
                let (path, end) = read_path(chars, i, prefix.to_vec(), out);
                if !path.is_empty() {
                    out.push(path);
                }
                i = end.max(i + 1);
            }
            _ => i += 1,
        }
    }
    i
}

/// Production code only: line comments and the unit-test module are not imports.
fn production_code(source: &str) -> String {
    let mut code = String::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") && lines.peek().is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push_str(line.split(" // ").next().unwrap_or(line));
        code.push('\n');
    }
    code
}

/// The child modules a file declares: in files of their own (`mod x;`) and inline
/// (`mod x {`, e.g. generated code), which count as modules with no imports of their own.
fn declared_children(code: &str) -> BTreeSet<String> {
    code.lines()
        .filter_map(|l| {
            let l = l
                .trim_start()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            let name = l.strip_prefix("mod ")?;
            let name = name.strip_suffix(';').or_else(|| name.strip_suffix(" {"))?;
            Some(name.trim().to_owned())
        })
        .collect()
}

/// The deepest known module a written path names, from the module `from`.
fn resolve(
    written: &[String],
    from: &ModulePath,
    children: &BTreeSet<String>,
    known: &BTreeSet<ModulePath>,
) -> Option<ModulePath> {
    let mut base: ModulePath;
    let mut rest = written;
    match written.first()?.as_str() {
        "crate" => {
            base = Vec::new();
            rest = &written[1..];
        }
        "self" => {
            base = from.clone();
            rest = &written[1..];
        }
        "super" => {
            base = from.clone();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        first if children.contains(first) => base = from.clone(),
        _ => return None,
    }
    let mut deepest = base.clone();
    for segment in rest {
        base.push(segment.clone());
        if known.contains(&base) {
            deepest = base.clone();
        } else {
            break;
        }
    }
    Some(deepest)
}

/// The import graph of one crate's `src/`.
fn graph_of(src: &Path) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let files: Vec<(ModulePath, String)> = production_sources(src)
        .into_iter()
        .map(|(file, source)| (module_of(file.strip_prefix(src).unwrap()), production_code(&source)))
        .collect();
    let mut known: BTreeSet<ModulePath> = files.iter().map(|(m, _)| m.clone()).collect();
    for (module, code) in &files {
        for child in declared_children(code) {
            let mut inline = module.clone();
            inline.push(child);
            known.insert(inline);
        }
    }
    let mut graph = BTreeMap::new();
    for (module, code) in &files {
        let children = declared_children(code);
        let edges: BTreeSet<ModulePath> = named_paths(code)
            .iter()
            .filter_map(|p| resolve(p, module, &children, &known))
            .filter(|target| target != module)
            .collect();
        graph.insert(module.clone(), edges);
    }
    graph
}

/// One cycle through `start`, if there is one.
fn cycle_through(graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>, start: &ModulePath) -> Option<Vec<ModulePath>> {
    let mut stack = vec![(start.clone(), vec![start.clone()])];
    let mut seen = BTreeSet::new();
    while let Some((node, trail)) = stack.pop() {
        for next in graph.get(&node).into_iter().flatten() {
            if next == start {
                return Some(trail.clone());
            }
            if seen.insert(next.clone()) {
                let mut longer = trail.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

fn crate_sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../services");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn name(module: &ModulePath) -> String {
    if module.is_empty() {
        "(root)".to_owned()
    } else {
        module.join("::")
    }
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut cycles = Vec::new();
    for src in crate_sources() {
        let graph = graph_of(&src);
        let mut reported = BTreeSet::new();
        for module in graph.keys() {
            if let Some(cycle) = cycle_through(&graph, module) {
                let members: BTreeSet<_> = cycle.iter().cloned().collect();
                if reported.insert(members) {
                    let crate_name = src
                        .parent()
                        .unwrap()
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    let trail: Vec<String> = cycle.iter().chain([module]).map(name).collect();
                    cycles.push(format!("{crate_name}: {}", trail.join(" -> ")));
                }
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_graph_sees_grouped_super_and_child_paths() {
    let code = production_code(
        "mod slot;\nuse crate::{engine::Config, pool::{slot::Ticket, Pool}};\nuse super::limits;\nfn f() { slot::take(); }\n#[cfg(test)]\nmod tests { use crate::actor::X; }\n",
    );
    let known: BTreeSet<ModulePath> = [
        vec![],
        vec!["engine"],
        vec!["pool"],
        vec!["pool", "slot"],
        vec!["actor"],
        vec!["limits"],
        vec!["pool", "x", "slot"],
    ]
    .into_iter()
    .map(|m| m.into_iter().map(String::from).collect())
    .collect();
    let from: ModulePath = vec!["pool".into(), "x".into()];
    let children = declared_children(&code);
    let targets: BTreeSet<String> = named_paths(&code)
        .iter()
        .filter_map(|p| resolve(p, &from, &children, &known))
        .map(|m| name(&m))
        .collect();
    let expected: BTreeSet<String> = ["engine", "pool", "pool::slot", "pool::x::slot"]
        .map(String::from)
        .into();
    assert_eq!(targets, expected);
}
