//! Tests of the workspace's shape rather than its behaviour: properties of the source tree a
//! reviewer would otherwise have to check by hand.

mod domain;
mod file_size;
mod machine;
mod module_graph;

use std::path::{Path, PathBuf};

/// Every `.rs` file under `src` with its text, in path order.
pub(crate) fn production_sources(src: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                files.push((path, text));
            }
        }
    }
    files.sort();
    files
}
